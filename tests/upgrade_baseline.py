"""The previous build of Floe for the rolling-upgrade test: the commit named
in `tests/upgrade-baseline`, built once and kept under
`<target>/upgrade-baseline/<commit>/floe`.

It is built in the same target folder as this tree (`CARGO_TARGET_DIR`), so
the dependencies compiled for this tree serve it too and only Floe's own
crates are compiled again, with tokio and the crates above it, which the
tests compile with other features (100 s after a `cargo build --workspace
--tests` from nothing, instead of about 15 minutes for a build from
nothing). Cargo names a workspace crate's build by its name, its
version and its path inside the workspace, which are the same in both
trees: left so, the two builds would overwrite each other's crates, and a
build of one could link the other's as up to date. So the baseline's
workspace version is marked with build metadata (`0.1.0+baseline.<commit>`,
which semver ignores in comparisons), and its crates get names of their
own. Cargo still leaves the baseline's binaries in `<target>/debug/`; the
next `cargo build` of this tree puts this tree's back (cargo copies them
there even when nothing changed), so `tests/run.sh` builds the baseline
just before the end-to-end tests' binaries, and a build started from a
test puts this tree's back itself (`restore`).

    python tests/upgrade_baseline.py      # builds it if missing, prints its path
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tests" / "upgrade-baseline"


def baseline():
    """(commit, version) named in tests/upgrade-baseline."""
    for line in BASELINE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            commit, version = line.split()
            return commit, version
    raise ValueError(f"{BASELINE} names no commit")


def target_dir():
    return pathlib.Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target").resolve()


def cached_bin():
    commit, _ = baseline()
    return target_dir() / "upgrade-baseline" / commit / "floe"


def mark(src, commit, version):
    """Gives the baseline's workspace crates a version of their own,
    `version+baseline.<commit>`, in its Cargo.toml and Cargo.lock (see above)."""
    marked = f"{version}+baseline.{commit[:12]}"
    toml = src / "Cargo.toml"
    text = toml.read_text()
    section = text.index("[workspace.package]")
    field = re.compile(rf'^version = "{re.escape(version)}"$', re.M)
    m = field.search(text, section)
    if m is None:
        raise RuntimeError(f"{toml}: no version {version} under [workspace.package]")
    toml.write_text(text[:m.start()] + f'version = "{marked}"' + text[m.end():])
    lock = src / "Cargo.lock"
    # The workspace's own packages: no `source` line after the version.
    entry = re.compile(rf'(\nname = "floe[^"]*"\nversion = )"{re.escape(version)}"\n(?!source)')
    text, n = entry.subn(rf'\1"{marked}"\n', lock.read_text())
    if n == 0:
        raise RuntimeError(f"{lock}: no workspace package at {version}")
    lock.write_text(text)


def build(restore=()):
    """The baseline's `floe`, built if it is not cached yet. `restore`: the
    (package, binary) pairs of this tree to build again afterwards, so that
    `<target>/debug/` holds this tree's binaries again."""
    path = cached_bin()
    if path.exists():
        return path
    commit, version = baseline()
    have = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
    if have.returncode != 0:
        raise RuntimeError(f"the upgrade baseline {commit} ({version}) is not in this clone "
                           f"(a shallow clone? `git fetch --unshallow`)")
    src = target_dir() / "upgrade-baseline" / f"src-{commit[:12]}"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    # tar(1) rather than tarfile: the extraction filters tarfile wants are
    # missing from some Python 3.11 builds.
    archive = subprocess.Popen(["git", "archive", "--format=tar", commit], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(src)], stdin=archive.stdout, check=True)
    archive.stdout.close()
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {commit} failed")
    mark(src, commit, version)
    env = dict(os.environ, CARGO_TARGET_DIR=str(target_dir()))
    print(f"building the upgrade baseline {commit[:12]} ({version}) in {src}", file=sys.stderr, flush=True)
    subprocess.run(["cargo", "build", "--workspace", "--bins", "--locked"], cwd=src, env=env, check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    shutil.copy2(target_dir() / "debug" / "floe", partial)
    partial.rename(path)
    for package, name in restore:
        subprocess.run(["cargo", "build", "--quiet", "-p", package, "--bin", name], cwd=ROOT, check=True)
    return path


if __name__ == "__main__":
    print(build())
