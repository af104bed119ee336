#!/usr/bin/env python3
"""Floe's version in every place that names it, checked against one source.

The version lives in one place, `[workspace.package] version` of the
top-level Cargo.toml (every crate takes `version.workspace = true`). The
other places must follow it: Cargo.lock's entries of the workspace's
crates, the chart's `version` and `appVersion`
(helm/*/Chart.yaml), the image docker/compose.yaml runs, and the newest
released section of CHANGELOG.md (an `Unreleased` section may stand above
it). A release tag is `v` and that version, and its section is dated.

    release_version.py check [--tag vX.Y.Z] [--released "vA.B.C …"]
                                              problems, one a line; exit 1 if any
    release_version.py notes X.Y.Z            CHANGELOG.md's section of X.Y.Z

`check` with GITHUB_OUTPUT set (in the release workflow) also writes
`version`, `prerelease` and `tags` (the image tags to push, given the
earlier releases' tags) there.
.github/workflows/release.yml runs it; tests/test_release.py imports it.
Standard library only (it runs on a bare runner).
"""

import argparse
import os
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]

# X.Y.Z or X.Y.Z-PRE (semver without build metadata: `+` is not allowed in
# an image tag).
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?")
# `## [0.1.0] - 2026-12-06` or `## [Unreleased]`.
HEADING = re.compile(r"^## \[([^\]]+)\](?: - (\d{4}-\d\d-\d\d))?\s*$", re.M)


def workspace_version(root=ROOT):
    cargo = tomllib.loads((root / "Cargo.toml").read_text())
    return cargo["workspace"]["package"]["version"]


def top_level_key(text, key):
    """A top-level scalar of a YAML file (`key: value`, quoted or not)."""
    m = re.search(rf"^{key}:[ \t]*(?:\"([^\"\n]*)\"|'([^'\n]*)'|([^\s#]+))", text, re.M)
    return None if m is None else next(g for g in m.groups() if g is not None)


def charts(root=ROOT):
    return sorted(root.glob("helm/*/Chart.yaml"))


def compose_image(root=ROOT):
    """The image docker/compose.yaml runs (its `x-floe` anchor)."""
    m = re.search(r"^\s+image:\s*(\S*floe-mq/floe\S*)\s*$", (root / "docker" / "compose.yaml").read_text(), re.M)
    return m.group(1) if m else None


def changelog_sections(root=ROOT):
    """[(name, date or None)] of CHANGELOG.md's `## [...]` headings, in order."""
    return [(name, date or None) for name, date in HEADING.findall((root / "CHANGELOG.md").read_text())]


def changelog_notes(version, root=ROOT):
    """The body of CHANGELOG.md's section of `version` (without its heading), or None."""
    text = (root / "CHANGELOG.md").read_text()
    parts = HEADING.split(text)
    # parts: preamble, then (name, date, body) triples.
    for i in range(1, len(parts) - 2, 3):
        if parts[i] == version:
            body = parts[i + 2]
            # Keep a Changelog's link references at the end are not notes.
            body = re.sub(r"^\[[^\]]+\]: \S+\s*$", "", body, flags=re.M)
            return body.strip()
    return None


def image_tags(version, released=()):
    """The tags a release of `version` pushes: X.Y.Z, X.Y and latest; a
    pre-release (X.Y.Z-PRE) only its own tag. `released`: the versions
    already released (pre-releases and other strings ignored): X.Y is not
    moved back to an older patch release, nor latest to an older release
    (a fix released on an older line)."""
    m = SEMVER.fullmatch(version)
    if not m:
        raise ValueError(f"not a release version: {version!r}")
    major, minor, patch, pre = m.groups()
    if pre:
        return [version]
    this = (int(major), int(minor), int(patch))
    others = [tuple(int(x) for x in o.groups()[:3]) for o in map(SEMVER.fullmatch, released)
              if o and not o.group(4)]
    tags = [version]
    if not any(o[:2] == this[:2] and o > this for o in others):
        tags.append(f"{major}.{minor}")
    if not any(o > this for o in others):
        tags.append("latest")
    return tags


def problems(root=ROOT, tag=None):
    """What disagrees with the workspace version, one sentence each."""
    out = []
    version = workspace_version(root)
    if not SEMVER.fullmatch(version):
        out.append(f"Cargo.toml: [workspace.package] version {version!r} is not X.Y.Z or X.Y.Z-PRE")
    if tag is not None and tag != f"v{version}":
        out.append(f"tag {tag!r} is not v + the workspace version (v{version})")
    # Cargo.lock names the workspace's crates (the packages without a
    # source) with the version; `--locked` builds refuse a stale one.
    lock = root / "Cargo.lock"
    if lock.exists():
        stale = sorted(f"{p['name']} {p['version']}" for p in tomllib.loads(lock.read_text())["package"]
                       if "source" not in p and p["version"] != version)
        if stale:
            out.append(f"Cargo.lock: {', '.join(stale)} (run cargo update -w)")
    found = charts(root)
    if not found:
        out.append("no helm/*/Chart.yaml")
    for chart in found:
        text = chart.read_text()
        for key in ("version", "appVersion"):
            value = top_level_key(text, key)
            if value != version:
                out.append(f"{chart.relative_to(root)}: {key} is {value!r}, the workspace version is {version!r}")
    image = compose_image(root)
    if image is None or image.rpartition(":")[2] != version:
        out.append(f"docker/compose.yaml: image {image!r} is not tagged {version!r}")
    sections = changelog_sections(root)
    released = [(name, date) for name, date in sections if name.lower() != "unreleased"]
    unreleased = [i for i, (name, _) in enumerate(sections) if name.lower() == "unreleased"]
    if unreleased not in ([], [0]):
        out.append("CHANGELOG.md: Unreleased must be one section, the first")
    if not released:
        out.append("CHANGELOG.md: no released section (## [X.Y.Z] - YYYY-MM-DD)")
    else:
        newest, date = released[0]
        if newest != version:
            out.append(f"CHANGELOG.md: the newest released section is {newest!r}, the workspace version is {version!r}")
        if tag is not None and not date:
            out.append(f"CHANGELOG.md: section {newest!r} has no release date (## [{newest}] - YYYY-MM-DD)")
        if not changelog_notes(newest, root):
            out.append(f"CHANGELOG.md: section {newest!r} is empty")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="the version in every place agrees (and with --tag)")
    check.add_argument("--tag", help="the release tag, vX.Y.Z")
    check.add_argument("--released", default="",
                       help="the tags of earlier releases (vX.Y.Z, whitespace-separated): which image tags move")
    notes = sub.add_parser("notes", help="CHANGELOG.md's section of a version")
    notes.add_argument("version")
    args = parser.parse_args(argv)
    if args.command == "notes":
        text = changelog_notes(args.version)
        if not text:
            print(f"CHANGELOG.md has no notes for {args.version}", file=sys.stderr)
            return 1
        print(text)
        return 0
    found = problems(tag=args.tag)
    for p in found:
        print(p, file=sys.stderr)
    if found:
        return 1
    version = workspace_version()
    print(f"version {version}: Cargo.toml, Cargo.lock, the chart, docker/compose.yaml and CHANGELOG.md agree")
    if os.environ.get("GITHUB_OUTPUT"):
        pre = "-" in version
        with open(os.environ["GITHUB_OUTPUT"], "a") as f:
            released = [t.removeprefix("v") for t in args.released.split() if t != args.tag]
            tags = " ".join(image_tags(version, released))
            f.write(f"version={version}\nprerelease={str(pre).lower()}\ntags={tags}\n")
            print(f"image tags: {tags}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
