"""The release machinery, checked without GitHub, a registry or a Docker
engine (a few seconds, no Floe binary):

- both workflows (.github/workflows/release.yml, ci.yml) pass actionlint
  (with shellcheck on the `run:` scripts where it is installed) and
  yamllint; actionlint is shown to catch a broken workflow;
- the version is the same everywhere: Cargo.toml's `[workspace.package]
  version`, Cargo.lock's workspace crates, the chart's `version` and
  `appVersion`, the image of
  docker/compose.yaml, and CHANGELOG.md's newest released section
  (.github/scripts/release_version.py, which the release workflow runs on
  its tag);
- the image repository of the chart's values.yaml and of compose is the one
  the workflow pushes, the chart goes where the docs install it from, the
  tag pattern and the image tags are the ones docs/kubernetes.md and
  docs/upgrading.md tell users about;
- the workflows' permissions are least privilege and every action is
  pinned to a version;
- kubernetes.md's two ways in, rendered with Helm's library: the published
  chart runs the release's image, the build-it-yourself lines run the
  image they build, never pulled.

Every check is a function returning what is wrong, run on the real files
(nothing wrong) and on a copy with one value broken (that value named).
The Dockerfile's hadolint run is tests/test_helm_chart.py's
(`test_dockerfile_passes_hadolint`).
"""

import fnmatch
import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
CI = WORKFLOWS / "ci.yml"
CHART = ROOT / "helm" / "floe"
KUBERNETES_MD = ROOT / "docs" / "kubernetes.md"
UPGRADING_MD = ROOT / "docs" / "upgrading.md"
BIN = pathlib.Path(sys.executable).parent

_spec = importlib.util.spec_from_file_location("release_version", ROOT / ".github" / "scripts" / "release_version.py")
release_version = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(release_version)


def tool(name):
    """A tool from tests/requirements.txt: beside this Python, else on PATH."""
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (pip install -r tests/requirements.txt)")
    return found


def load(path):
    return yaml.safe_load(pathlib.Path(path).read_text())


def triggers(workflow):
    """A workflow's `on:` (PyYAML reads the bare key `on` as True)."""
    return workflow.get("on", workflow.get(True))


# ---------------------------------------------------------------------------
# Linters


def actionlint(*files, cwd=ROOT):
    r = subprocess.run([tool("actionlint"), "-oneline", "-no-color", *map(str, files)],
                       capture_output=True, text=True, timeout=60, cwd=cwd)
    return r.returncode, (r.stdout + r.stderr).strip()


def test_workflows_pass_actionlint():
    code, out = actionlint(RELEASE, CI)
    assert code == 0 and not out, out


def test_actionlint_catches_a_broken_workflow(tmp_path):
    """The linter is really run: a job that needs a missing job, and an
    expression naming a step output that does not exist, are findings."""
    text = RELEASE.read_text()
    broken = text.replace("needs: [check, image, chart]", "needs: [check, image, charts]")
    broken = broken.replace("steps.manifest.outputs.digest", "steps.manifests.outputs.digest", 1)
    assert broken != text
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    path = tmp_path / ".github" / "workflows" / "release.yml"
    path.write_text(broken)
    code, out = actionlint(path, cwd=tmp_path)
    assert code != 0, out
    assert '"charts"' in out and "manifests" in out, out


def test_workflows_pass_yamllint():
    r = subprocess.run([tool("yamllint"), "--strict", "-c", ROOT / "tests" / "yamllint.yaml", RELEASE, CI],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# ---------------------------------------------------------------------------
# One version everywhere


VERSIONED = ["Cargo.toml", "Cargo.lock", "CHANGELOG.md", "helm/floe/Chart.yaml", "docker/compose.yaml"]


def copy_tree(tmp_path):
    for rel in VERSIONED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def edit(path, old, new, count=1):
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, count))


def date_the_newest_section(root):
    version = release_version.workspace_version(root)
    edit(root / "CHANGELOG.md", f"## [{version}]\n", f"## [{version}] - 2026-12-06\n")


def test_the_version_is_the_same_everywhere():
    assert release_version.problems(ROOT) == []
    version = release_version.workspace_version()
    assert release_version.SEMVER.fullmatch(version), version
    for chart in release_version.charts():
        meta = load(chart)
        assert (meta["version"], meta["appVersion"]) == (version, version), chart
    assert release_version.changelog_notes(version), "CHANGELOG.md has no notes for the version"


def test_every_crate_takes_the_workspace_version():
    """The version is written once: each member's Cargo.toml says
    `version.workspace = true`."""
    import tomllib
    members = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
    wrong = [m for m in members
             if tomllib.loads((ROOT / m / "Cargo.toml").read_text())["package"].get("version") != {"workspace": True}]
    assert not wrong, f"crates with a version of their own: {wrong}"


BREAKS = {
    "chart version": ("helm/floe/Chart.yaml", "\nversion: {v}\n", "\nversion: 9.9.9\n",
                      "Chart.yaml: version is '9.9.9'"),
    "chart appVersion": ("helm/floe/Chart.yaml", 'appVersion: "{v}"', 'appVersion: "9.9.9"',
                         "Chart.yaml: appVersion is '9.9.9'"),
    "workspace version": ("Cargo.toml", 'version = "{v}"', 'version = "9.9.9"',
                          "the workspace version is '9.9.9'"),
    "cargo lock": ("Cargo.lock", 'name = "floe-proxy"\nversion = "{v}"', 'name = "floe-proxy"\nversion = "9.9.9"',
                   "Cargo.lock: floe-proxy 9.9.9"),
    "not a semantic version": ("Cargo.toml", 'version = "{v}"', 'version = "9.9"', "is not X.Y.Z"),
    "compose image": ("docker/compose.yaml", "floe-mq/floe:{v}", "floe-mq/floe:9.9.9",
                      "docker/compose.yaml: image 'ghcr.io/floe-mq/floe:9.9.9'"),
    "changelog newest section": ("CHANGELOG.md", "## [{v}]", "## [9.9.9]",
                                 "the newest released section is '9.9.9'"),
    "changelog section empty": ("CHANGELOG.md", "## [{v}]\n", "## [{v}]\n\n## [0.0.1]\n",
                                "section '{v}' is empty"),
    "unreleased below a release": ("CHANGELOG.md", "## [Unreleased]\n", "## [Unreleased]\n", None),
    "no changelog section": ("CHANGELOG.md", "## [{v}]", "## {v}", "released section"),  # none left, or an older one is the newest
}


@pytest.mark.parametrize("case", BREAKS, ids=list(BREAKS))
def test_a_version_out_of_step_is_named(tmp_path, case):
    root = copy_tree(tmp_path)
    v = release_version.workspace_version()
    rel, old, new, named = BREAKS[case]
    edit(root / rel, old.format(v=v), new.format(v=v))
    if case == "unreleased below a release":
        # Unreleased (whatever it holds) moved under the release section.
        text = (root / "CHANGELOG.md").read_text()
        start = text.index("## [Unreleased]\n")
        end = text.index("\n## [", start + 1) + 1
        text = text[:start] + text[end:]
        (root / "CHANGELOG.md").write_text(text + "\n## [Unreleased]\n\nMore.\n")
        named = "Unreleased must be one section, the first"
    found = release_version.problems(root)
    assert any(named.format(v=v) in p for p in found), found


def test_a_release_tag_is_v_and_the_version_with_a_dated_section(tmp_path):
    root = copy_tree(tmp_path)
    v = release_version.workspace_version(root)
    undated = release_version.problems(root, tag=f"v{v}")
    if release_version.changelog_sections(root)[1][1] is None:
        assert any("has no release date" in p for p in undated), undated
        date_the_newest_section(root)
    assert release_version.problems(root, tag=f"v{v}") == []
    for tag in (v, f"v{v}.1", "v9.9.9", f"release-{v}"):
        found = release_version.problems(root, tag=tag)
        assert any(f"tag {tag!r} is not v + the workspace version" in p for p in found), (tag, found)


def test_the_release_notes_are_the_changelog_section(tmp_path):
    v = release_version.workspace_version()
    notes = release_version.changelog_notes(v)
    assert notes and not notes.startswith("## "), notes
    assert "## [" not in notes, "the notes run into the next section"
    text = (ROOT / "CHANGELOG.md").read_text()
    assert notes.splitlines()[0] in text.split(f"## [{v}]", 1)[1]
    assert release_version.changelog_notes("9.9.9") is None


def test_the_changelogs_links_point_at_headings():
    """CHANGELOG.md links into docs/ (tests/test_docs_match.py checks
    README.md and docs/ the same way)."""
    from test_docs_match import anchors
    wrong = []
    for target in re.findall(r"\]\(([^)\s]+)\)", (ROOT / "CHANGELOG.md").read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = ROOT / file
        if not dest.exists():
            wrong.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(dest):
            wrong.append(f"{target}: no such heading")
    assert not wrong, wrong


# ---------------------------------------------------------------------------
# What the workflow publishes, against the chart and the docs


def published(workflow):
    """(image repository, chart reference) the release workflow pushes."""
    env = workflow["env"]
    chart_name = load(ROOT / env["CHART_DIR"] / "Chart.yaml")["name"]
    return env["IMAGE"], f"{env['CHART_REPO']}/{chart_name}"


def repository_problems(workflow, values, compose):
    image, _ = published(workflow)
    out = []
    if values["image"]["repository"] != image:
        out.append(f"values.yaml image.repository {values['image']['repository']!r}, the release pushes {image!r}")
    compose_image = compose["x-floe"]["image"].rpartition(":")[0]
    if compose_image != image:
        out.append(f"docker/compose.yaml runs {compose_image!r}, the release pushes {image!r}")
    if not (ROOT / workflow["env"]["CHART_DIR"] / "Chart.yaml").exists():
        out.append(f"CHART_DIR {workflow['env']['CHART_DIR']!r} has no Chart.yaml")
    return out


def test_the_chart_and_compose_run_the_image_the_release_pushes():
    workflow, values, compose = load(RELEASE), load(CHART / "values.yaml"), load(ROOT / "docker" / "compose.yaml")
    assert repository_problems(workflow, values, compose) == []
    values["image"]["repository"] = "ghcr.io/someone-else/floe"
    assert any("values.yaml image.repository" in p for p in repository_problems(workflow, values, compose))
    values, compose["x-floe"]["image"] = load(CHART / "values.yaml"), "floe:0.1.0"
    assert any("docker/compose.yaml runs 'floe'" in p for p in repository_problems(workflow, values, compose))


# The versions the docs use as examples of a release and of a pre-release.
DOC_TAGS = re.compile(r"The image's tags are (.*?);", re.S)


def docs_problems(workflow, kubernetes_md, upgrading_md):
    """What docs/kubernetes.md and docs/upgrading.md tell users to pull or
    install that the release workflow does not publish."""
    image, chart = published(workflow)
    out = []
    # The two ways in, exactly.
    for line in (f"`{image}:<version>`", f"helm install floe {chart} --version <version>"):
        if line not in re.sub(r"\s+", " ", kubernetes_md):
            out.append(f"kubernetes.md does not say {line}")
    # Every image or chart of ours the docs name is the published one.
    for page, text in (("kubernetes.md", kubernetes_md), ("upgrading.md", upgrading_md)):
        for ref in set(re.findall(r"(?<![\w/.])((?:oci://)?ghcr\.io/[\w.-]+/[\w./-]*[\w-])", text)):
            if ref not in (image, chart, chart.removeprefix("oci://")):
                out.append(f"{page} names {ref}, the release publishes {image} and {chart}")
    # The tags kubernetes.md lists are those a release of its example version pushes.
    said = DOC_TAGS.search(kubernetes_md)
    if not said:
        out.append("kubernetes.md no longer lists the image's tags")
    else:
        # `<version>` (`0.1.0`), `<major>.<minor>` (`0.1`, …) and `latest`:
        # the tags of the example release, besides their placeholders.
        tags = [t for t in re.findall(r"`([^`]+)`", said.group(1)) if "<" not in t]
        version = next((t for t in tags if release_version.SEMVER.fullmatch(t)), None)
        pushed = release_version.image_tags(version) if version else []
        if sorted(tags) != sorted(pushed):
            out.append(f"kubernetes.md lists the tags {tags}, a release of {version} pushes {pushed}")
        pre = re.search(r"a pre-release\s+\(`([\w.-]+)`\)\s+has only its own tag", kubernetes_md)
        if not pre or release_version.image_tags(pre.group(1)) != [pre.group(1)]:
            out.append("kubernetes.md's pre-release has tags other than its own")
    # The tag pattern: a tag vX.Y.Z of the docs starts the workflow, nothing else does.
    patterns = triggers(workflow)["push"]["tags"]
    examples = [f"v{release_version.workspace_version()}", "v0.2.0-rc.1"]
    if "A release is a pushed tag `vX.Y.Z`" not in re.sub(r"\s+", " ", upgrading_md):
        out.append("upgrading.md no longer says a release is a pushed tag vX.Y.Z")
    for tag in examples:
        if not any(fnmatch.fnmatchcase(tag, p) for p in patterns):
            out.append(f"the workflow's tags {patterns} do not match {tag}")
    for tag in ("0.1.0", "latest", "v1", "nightly"):
        if any(fnmatch.fnmatchcase(tag, p) for p in patterns):
            out.append(f"the workflow's tags {patterns} match {tag!r}, which is not a release")
    return out


def test_the_docs_pull_what_the_release_publishes():
    workflow = load(RELEASE)
    k8s, upg = KUBERNETES_MD.read_text(), UPGRADING_MD.read_text()
    assert docs_problems(workflow, k8s, upg) == []
    # Each part can fail.
    moved = load(RELEASE)
    moved["env"]["IMAGE"] = "ghcr.io/floe-mq/floe-server"
    assert any("does not say `ghcr.io/floe-mq/floe-server:<version>`" in p for p in docs_problems(moved, k8s, upg))
    assert any("kubernetes.md names ghcr.io/floe-mq/floe," in p for p in docs_problems(moved, k8s, upg))
    moved = load(RELEASE)
    moved["env"]["CHART_REPO"] = "oci://ghcr.io/floe-mq/helm"
    assert any("helm install floe oci://ghcr.io/floe-mq/helm/floe" in p for p in docs_problems(moved, k8s, upg))
    retagged = k8s.replace("`<major>.<minor>` (`0.1`, which", "`<major>` (`0`, which")
    assert retagged != k8s
    assert any("lists the tags" in p for p in docs_problems(workflow, retagged, upg))
    retagged = k8s.replace("and `latest`; a pre-release", "and `stable`; a pre-release")
    assert any("lists the tags" in p for p in docs_problems(workflow, retagged, upg))
    other = load(RELEASE)
    triggers(other)["push"]["tags"] = ["release-*"]
    assert any("do not match v" in p for p in docs_problems(other, k8s, upg))
    triggers(other)["push"]["tags"] = ["*"]
    assert any("match 'latest'" in p for p in docs_problems(other, k8s, upg))


def test_image_tags_of_a_release_and_a_pre_release():
    assert release_version.image_tags("1.4.2") == ["1.4.2", "1.4", "latest"]
    assert release_version.image_tags("1.4.2-rc.1") == ["1.4.2-rc.1"]
    # An older line's fix moves neither X.Y nor latest back.
    released = ["1.3.0", "1.4.1", "1.5.0-rc.1", "junk"]
    assert release_version.image_tags("1.4.2", released) == ["1.4.2", "1.4", "latest"]
    assert release_version.image_tags("1.4.2", [*released, "1.5.0"]) == ["1.4.2", "1.4"]
    assert release_version.image_tags("1.4.2", [*released, "1.4.3"]) == ["1.4.2"]
    assert release_version.image_tags("2.0.0-rc.1", ["1.4.2"]) == ["2.0.0-rc.1"]
    for bad in ("1.4", "v1.4.2", "1.4.2+build.5", "01.4.2"):
        with pytest.raises(ValueError):
            release_version.image_tags(bad)


def step_runs(job):
    return "\n".join(s.get("run", "") for s in job.get("steps", []))


def test_the_release_workflow_checks_its_tag_and_publishes_each_platform():
    workflow = load(RELEASE)
    jobs = workflow["jobs"]
    check = step_runs(jobs["check"])
    assert 'release_version.py check --tag "$GITHUB_REF_NAME"' in check, check
    assert "--released \"$(git tag --list 'v*.*.*')\"" in check, check
    checkout = jobs["check"]["steps"][0]
    assert checkout["uses"].startswith("actions/checkout@") and checkout["with"]["fetch-depth"] == 0, checkout
    # The image: docker/Dockerfile, for amd64 and arm64, tagged with the check's tags.
    platforms = {i["platform"] for i in jobs["image-platform"]["strategy"]["matrix"]["include"]}
    assert platforms == {"linux/amd64", "linux/arm64"}, platforms
    build = next(s for s in jobs["image-platform"]["steps"] if s.get("uses", "").startswith("docker/build-push-action@"))
    assert build["with"]["file"] == "docker/Dockerfile" and (ROOT / build["with"]["file"]).exists()
    manifest = next(s for s in jobs["image"]["steps"] if s.get("id") == "manifest")
    assert manifest["env"]["TAGS"] == "${{ needs.check.outputs.tags }}", manifest["env"]
    # Signed: the image by its digest, the chart by its digest.
    assert 'cosign sign --yes --recursive "$IMAGE@$DIGEST"' in step_runs(jobs["image"])
    assert "cosign sign --yes" in step_runs(jobs["chart"]) and "helm push" in step_runs(jobs["chart"])
    # The release's notes are the CHANGELOG's section; a pre-release is marked so.
    release = step_runs(jobs["release"])
    assert 'release_version.py notes "$VERSION"' in release and "--prerelease" in release, release


# ---------------------------------------------------------------------------
# Permissions and pins


PINNED = re.compile(r"[\w.-]+/[\w./-]+@(?:v\d+(?:\.\d+){0,2}|[0-9a-f]{40})")


def permission_problems(workflow):
    """Least privilege: nothing at the top; each job asks for what its steps
    use: id-token to sign with cosign, packages to push to ghcr.io,
    contents: write to create the release."""
    out = []
    top = workflow.get("permissions")
    if top not in ({}, {"contents": "read"}):
        out.append(f"top-level permissions {top!r}: at most contents: read")
    for name, job in workflow["jobs"].items():
        perms = job.get("permissions", top)
        if perms is None or perms in ("write-all", "read-all"):
            out.append(f"{name}: permissions {perms!r}")
            continue
        runs = step_runs(job)
        uses = [s.get("uses", "") for s in job.get("steps", [])]
        need = {
            "id-token": "cosign sign" in runs,
            "packages": any(u.startswith("docker/login-action@") for u in uses) or "helm push" in runs,
        }
        for scope, needed in need.items():
            if (perms.get(scope) == "write") != needed:
                out.append(f"{name}: {scope}: {perms.get(scope)!r}, its steps {'do' if needed else 'do not'} need write")
        if (perms.get("contents") == "write") != ("gh release create" in runs):
            out.append(f"{name}: contents: {perms.get('contents')!r}")
        extra = set(perms) - {"contents", "packages", "id-token"}
        if extra:
            out.append(f"{name}: permissions it does not use: {sorted(extra)}")
        for step in job.get("steps", []):
            if "uses" in step and not PINNED.fullmatch(step["uses"]):
                out.append(f"{name}: {step['uses']} is not pinned to a version tag or a commit")
    return out


@pytest.mark.parametrize("path", [RELEASE, CI], ids=["release", "ci"])
def test_workflows_ask_for_least_privilege_and_pin_their_actions(path):
    assert permission_problems(load(path)) == []


def test_a_needless_permission_or_an_unpinned_action_is_named():
    wf = load(RELEASE)
    wf["jobs"]["check"]["permissions"]["id-token"] = "write"
    assert any(p.startswith("check: id-token") for p in permission_problems(wf))
    wf = load(RELEASE)
    wf["jobs"]["image"]["permissions"].pop("id-token")
    assert any(p.startswith("image: id-token") for p in permission_problems(wf))
    wf = load(RELEASE)
    wf["permissions"] = "write-all"
    assert any("top-level" in p for p in permission_problems(wf))
    wf = load(RELEASE)
    wf["jobs"]["chart"]["permissions"]["contents"] = "write"
    assert any(p.startswith("chart: contents") for p in permission_problems(wf))
    wf = load(RELEASE)
    wf["jobs"]["check"]["steps"][0]["uses"] = "actions/checkout@main"
    assert any("actions/checkout@main is not pinned" in p for p in permission_problems(wf))


def test_ci_runs_the_projects_own_command():
    wf = load(CI)
    on = triggers(wf)
    assert "push" in on and "pull_request" in on, on
    (job,) = wf["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest" and job["timeout-minutes"] == 90, job
    assert "bash .ci/run" in step_runs(job).splitlines(), step_runs(job)
    assert (ROOT / ".ci" / "run").exists()


# ---------------------------------------------------------------------------
# kubernetes.md's two ways in, rendered


def set_flags(command):
    """{"image.tag": "dev", …} of a `helm install … --set a=b` line."""
    return dict(kv.split("=", 1) for kv in re.findall(r"--set\s+(\S+=\S+)", command))


def nested(flags):
    out = {}
    for key, value in flags.items():
        *path, last = key.split(".")
        d = out
        for p in path:
            d = d.setdefault(p, {})
        d[last] = value
    return out


def floe_images(values):
    """{(image, pullPolicy)} of every container the chart runs from the Floe image."""
    helm = pytest.importorskip("helm_python")
    out = helm.Chart.load(str(CHART)).render(values, name="floe", namespace="streaming", revision=1,
                                             is_install=True)
    found = set()
    for name, text in out.items():
        if not name.endswith(".yaml") or not text.strip():
            continue
        for o in yaml.safe_load_all(text):
            spec = (o or {}).get("spec", {})
            pod = spec.get("template", {}).get("spec", spec)
            for c in [*pod.get("containers", []), *pod.get("initContainers", [])]:
                if "minio" not in c["image"]:
                    found.add((c["image"], c.get("imagePullPolicy")))
    return found


def test_kubernetes_md_install_lines_run_the_image_they_name():
    """The published chart runs the release's image; the lines for an image
    built yourself make every Floe container run `floe:dev`, never pulled."""
    text = KUBERNETES_MD.read_text()
    version = release_version.workspace_version()
    image, _ = published(load(RELEASE))
    assert floe_images({}) == {(f"{image}:{version}", "IfNotPresent")}
    block = re.search(r"```sh\n(docker build -f docker/Dockerfile -t (\S+) \.\n.*?)```", text, re.S)
    assert block, "kubernetes.md has no build-it-yourself block"
    built = block.group(2)
    assert f"kind load docker-image {built}" in block.group(1) and f"minikube image load {built}" in block.group(1)
    install = re.search(r"helm install floe \./helm/floe.*?(?=\n(?!\s))", block.group(1).replace("\\\n", " "), re.S)
    flags = set_flags(install.group(0))
    assert floe_images(nested(flags)) == {(built, "Never")}, flags
    # A value name the chart does not have is refused by its schema.
    with pytest.raises(ValueError, match="additional properties 'pullpolicy' not allowed"):
        floe_images(nested({**flags, "image.pullpolicy": "Never"}))
