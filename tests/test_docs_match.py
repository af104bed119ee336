"""The docs (README.md, docs/*.md, the chart's comments) against the code:

- every `floe` / `floe-dev` command line the docs show names commands and
  flags that `--help` lists (docs/cli.md is generated from the same clap
  definitions), README's run the `floe` it built, architecture.md lists
  every command, and each configuration table's flag has the environment
  variable clap gives it;
- every FLOE_* variable the docs name is read by the code (or the test
  harness), and every variable of a role is in docs/configuration.md;
- the metric types of docs/configuration.md are what /metrics renders:
  every timing is a histogram with `le` buckets (checked on a running
  `floe standalone`, and statically against the buckets src/admin_http.rs
  configures: for every histogram, or for the metrics it names);
- every relative link `page.md#anchor` points at a heading that exists
  (GitHub's anchor rules), and the chart's "see docs/X.md ("Section")"
  comments at a section that exists;
- the object names docs/kubernetes.md gives are the ones the chart renders;
- README counts the failure scenarios docs/operations.md has.

Each check reads text and `--help` output; the one process started is the
standalone for the metric types. The whole file takes a few seconds.
"""

import collections
import concurrent.futures
import pathlib
import re
import subprocess
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
# Chart files whose comments point at the docs.
CHART = ROOT / "helm" / "floe"
CHART_FILES = [*sorted(CHART.rglob("*.yaml")), *sorted(CHART.rglob("*.tpl")), CHART / "templates" / "NOTES.txt"]
# The roles: their flags and variables are docs/configuration.md's tables.
ROLES = ("standalone", "meta", "broker", "proxy", "indexer")


def rel(path):
    return path.relative_to(ROOT)


# ---------------------------------------------------------------------------
# The commands and flags, from --help


class Command:
    def __init__(self, path, text):
        self.path = path
        self.subcommands = []
        block = re.search(r"^Commands:\n(.*?)(?:\n\n|\Z)", text, re.S | re.M)
        if block:
            self.subcommands = [line.split()[0] for line in block.group(1).splitlines()
                                if line.split() and line.split()[0] != "help"]
        self.flags = {}  # --flag: its env var, or None
        for entry in re.split(r"\n(?=\s+(?:-\w, )?--)", text):
            flag = re.match(r"\s+(?:-\w, )?(--[a-z0-9-]+)", entry)
            if flag:
                # `[env: NAME=value]`, or `[env: NAME]` where clap hides the value.
                env = re.search(r"\[env: (\w+)[=\]]", entry)
                self.flags[flag.group(1)] = env.group(1) if env else None
        usage = re.search(r"^Usage:.*?(?:\n\n|\Z)", text, re.S | re.M).group(0)
        usage = re.findall(r"^(?:Usage:)?\s+\S+(?: [a-z][a-z0-9-]*)* (.*)$", usage, re.M)
        # A positional argument other than the subcommand: <NAME>, [NAME].
        self.takes_positional = any(re.search(r"[<\[](?!COMMAND|OPTIONS)[A-Z_]+", u) for u in usage)


def command_tree(binary):
    """{"topic create": Command, …} of a binary, "" its root, from `--help`."""
    tree = {}

    def helptext(path):
        out = subprocess.run([str(binary), *path, "--help"], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, f"{binary} {' '.join(path)} --help: {out.stderr}"
        return out.stdout

    level = [[]]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        while level:
            texts = list(pool.map(helptext, level))
            nxt = []
            for path, text in zip(level, texts):
                c = tree[" ".join(path)] = Command(path, text)
                nxt += [[*path, s] for s in c.subcommands]
            level = nxt
    return tree


class Binary:
    def __init__(self, name, exe):
        self.name = name
        self.exe = exe
        self.tree = command_tree(exe)
        self.hidden = {}

    def has_hidden(self, path):
        """Whether `name path…` is a command `--help` does not list (`floe kafka-tool`)."""
        key = tuple(path)
        if key not in self.hidden:
            out = subprocess.run([str(self.exe), *path, "--help"], capture_output=True, text=True, timeout=30)
            self.hidden[key] = f"Usage: {self.name} {' '.join(path)}" in out.stdout + out.stderr
        return self.hidden[key]


@pytest.fixture(scope="module")
def binaries(floe_bin, floe_dev_bin):
    return {"floe": Binary("floe", floe_bin), "floe-dev": Binary("floe-dev", floe_dev_bin)}


# A fenced code block, also one indented in a list item.
FENCED = r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```"


def code_texts(text, expand=True):
    """(inline, text) for each code span and each line of a fenced block;
    `expand`: `$B` stands for the floe binary where the block sets B."""
    out = []
    fenced = re.compile(FENCED, re.S | re.M)
    for block in fenced.finditer(text):
        body = block.group(1)
        # README's `B=target/release/floe` then `$B meta …`.
        if expand and re.search(r"\bB=\S*floe\b", body):
            body = body.replace("$B ", "floe ")
        # A shell or TOML comment is prose.
        out += [(False, re.split(r"(?:^|\s)#\s", line)[0]) for line in body.splitlines()]
    prose = fenced.sub("", text)
    out += [(True, span) for span in re.findall(r"`([^`\n]+)`", prose)]
    return out


# `floe`, `target/release/floe`, … before a subcommand or a flag; not a
# path given to another program (`FLOE_BIN=…/floe python`, `helm install floe ./helm/floe`).
INVOCATION = re.compile(r"(?:^|(?<=[\s(`'\"]))(?:[\w./-]*/)?(floe(?:-dev)?) +(?=[a-z][a-z0-9-]*(?:\s|$)|--)")


def invocations(text):
    """(binary, [tokens]) of every `floe …` / `floe-dev …` in the code of a page."""
    for inline, code in code_texts(text):
        for m in INVOCATION.finditer(code):
            if re.search(r"\bhelm\b", code[:m.start()]):
                continue
            rest = code[m.end():]
            # A shell line: the command ends at a pipe, a list or a comment.
            rest = re.split(r"\s(?:&&|\|\||;|#|&)(?:\s|$)|\s\|\s" if not inline else r"\s(?:&&|;|#)\s", rest)[0]
            if inline:
                # `floe group list | describe | …`: alternatives.
                alternatives = [a.split() for a in rest.split(" | ")]
                head = alternatives[0]
                yield m.group(1), head
                for alt in alternatives[1:]:
                    if alt and head:
                        yield m.group(1), head[:-1] + alt[:1] + alt[1:]
            else:
                yield m.group(1), rest.split()


def check_invocation(binary, tokens):
    """What is wrong with `binary tokens…`, or None."""
    tree = binary.tree
    cmd = tree[""]
    descending = True
    for tok in tokens:
        tok = tok.strip("[](),.;:'\"")
        if tok.startswith("--"):
            flag = tok.split("=")[0]
            if not re.fullmatch(r"--[a-z0-9-]+", flag):
                continue
            descending = False
            if flag not in cmd.flags:
                return f"`{binary.name} {' '.join(cmd.path)}` has no flag {flag}"
        elif descending and re.fullmatch(r"[a-z][a-z0-9-]*", tok):
            if tok in cmd.subcommands:
                cmd = tree[" ".join([*cmd.path, tok])]
            elif binary.has_hidden([*cmd.path, tok]):
                return None
            elif cmd.subcommands and not cmd.takes_positional:
                return f"`{binary.name} {' '.join(cmd.path)}` has no subcommand {tok!r}"
            else:
                descending = False
        else:
            descending = False
    return None


def test_every_command_and_flag_the_docs_show_exists(binaries):
    wrong = []
    for page in PAGES:
        for binary, tokens in invocations(page.read_text()):
            problem = check_invocation(binaries[binary], tokens)
            if problem:
                wrong.append(f"{rel(page)}: `{binary} {' '.join(tokens)}`: {problem}")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_architecture_md_lists_every_floe_command(binaries):
    row = re.search(r"^\| `src/` \| `floe` \(bin\) \| (.*?) \|", (ROOT / "docs" / "architecture.md").read_text(), re.M)
    assert row, "docs/architecture.md has no row for src/"
    listed = set(re.findall(r"`([a-z-]+)`", row.group(1)))
    assert listed == set(binaries["floe"].tree[""].subcommands), (
        f"missing {sorted(set(binaries['floe'].tree[''].subcommands) - listed)}, "
        f"not commands {sorted(listed - set(binaries['floe'].tree[''].subcommands))}")


def test_readme_runs_the_floe_it_built():
    """README installs no `floe` on the PATH: its command lines run
    `target/release/floe` (or `$B`, or `cargo run`)."""
    bare = [line for inline, line in code_texts((ROOT / "README.md").read_text(), expand=False)
            if not inline and re.match(r"\s*floe(?:-dev)? ", line)]
    assert not bare, "README.md runs a bare floe:\n" + "\n".join(bare)


NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve".split()


def test_readme_counts_the_failure_scenarios_operations_md_has():
    readme = (ROOT / "README.md").read_text()
    said = re.search(r"the (\w+) failure scenarios and their figures are in \[docs/operations.md\]", readme)
    assert said, "README.md no longer points at the failure scenarios"
    section = (ROOT / "docs" / "operations.md").read_text().split("## A cluster on S3", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in table_rows(section) if re.fullmatch(r"\d+", r.get("#", ""))]
    assert rows and said.group(1) == NUMBERS[len(rows)], (
        f"README.md says {said.group(1)} failure scenarios, docs/operations.md has {len(rows)}")


def sections(text):
    """(heading path, body) of each section of a page."""
    parts = re.split(r"^(#{1,4} .*)$", text, flags=re.M)
    path = []
    out = [([], parts[0])]
    for heading, body in zip(parts[1::2], parts[2::2]):
        level = len(heading) - len(heading.lstrip("#"))
        path = path[:level - 1] + [heading]
        out.append((list(path), body))
    return out


def table_rows(body):
    """Each table's rows as {column name: cell}."""
    for table in re.findall(r"((?:^\|.*\|\n)+)", body, re.M):
        lines = table.splitlines()
        if len(lines) < 3:
            continue
        cells = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
        for row in cells[2:]:
            yield dict(zip(cells[0], row))


def test_configuration_tables_give_each_flag_its_variable(binaries):
    """docs/configuration.md: a table's flag exists in a command its section
    names (any floe command when it names none), with the variable clap
    gives it; a flag without a variable in the table has none in clap."""
    floe = binaries["floe"].tree
    wrong = []
    for path, body in sections((ROOT / "docs" / "configuration.md").read_text()):
        named = []
        for heading in reversed(path):
            named = [n for n in re.findall(r"`floe ([a-z -]+)`", heading) if n.strip() in floe]
            if named:
                break
        commands = [floe[n.strip()] for n in named] or list(floe.values())
        for row in table_rows(body):
            flag_cell = row.get("flag", "")
            flags = re.findall(r"`(--[a-z0-9-]+)`", flag_cell)
            if not flags:
                continue
            if "command" in row:
                m = re.search(r"`floe ([a-z -]+)`", row["command"])
                commands_here = [floe[m.group(1).strip()]] if m and m.group(1).strip() in floe else commands
            else:
                commands_here = commands
            env_cell = row.get("env")
            envs = re.findall(r"`(FLOE_\w+)`", env_cell or "")
            for i, flag in enumerate(flags):
                having = [c for c in commands_here if flag in c.flags]
                if not having:
                    wrong.append(f"{path[-1]}: {flag} is not a flag of "
                                 + ", ".join(f"`floe {' '.join(c.path)}`" for c in commands_here[:5]))
                    continue
                if env_cell is None:
                    continue
                clap_envs = {c.flags[flag] for c in having}
                if envs:
                    want = envs[i] if len(envs) == len(flags) else None
                    if want and want not in clap_envs:
                        wrong.append(f"{path[-1]}: {flag} is read from {sorted(e or '(none)' for e in clap_envs)}, "
                                     f"the table says {want}")
                elif not env_cell.strip() and clap_envs != {None}:
                    wrong.append(f"{path[-1]}: {flag} has no variable in the table, clap reads "
                                 f"{sorted(e for e in clap_envs if e)}")
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------------------
# Environment variables


def code_variables():
    """FLOE_* names the code reads: literals in the Rust sources and the
    harness (tests, bench, CI scripts, the image and compose files)."""
    names = set()
    roots = [p for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
             and p.name not in ("docs", "target", "helm")]
    for top in roots:
        for path in top.rglob("*"):
            if path.suffix in (".rs", ".py", ".sh", ".js", ".toml", ".yaml", ".yml") or path.name in (
                    "Dockerfile", "run"):
                if "node_modules" in path.parts or "target" in path.parts:
                    continue
                names |= set(re.findall(r"\bFLOE_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")))
    ci = ROOT / ".ci"
    if ci.exists():
        for path in ci.rglob("*"):
            if path.is_file():
                names |= set(re.findall(r"\bFLOE_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")))
    return names


def role_variables(floe):
    """{role: its variables}: clap's, and FLOE_<ROLE>_<NAME> for each (src/role_env.rs)."""
    out = {}
    for role in ROLES:
        shared = {e for e in floe[role].flags.values() if e}
        out[role] = shared | {f"FLOE_{role.upper()}_{e[len('FLOE_'):]}" for e in shared}
    return out


def test_every_variable_the_docs_name_is_read_by_the_code(binaries):
    known = code_variables()
    for command in binaries["floe"].tree.values():
        known |= {e for e in command.flags.values() if e}
    for names in role_variables(binaries["floe"].tree).values():
        known |= names
    wrong = []
    for page in [*PAGES, *CHART_FILES]:
        for name in sorted(set(re.findall(r"\bFLOE_[A-Z0-9_]*[A-Z0-9]\b(?![_<*])", page.read_text()))):
            if name not in known:
                wrong.append(f"{rel(page)}: {name}")
    assert not wrong, "variables no code reads:\n" + "\n".join(wrong)


def test_every_variable_of_a_role_is_in_configuration_md(binaries):
    doc = (ROOT / "docs" / "configuration.md").read_text()
    missing = set()
    for role in ROLES:
        for flag, env in binaries["floe"].tree[role].flags.items():
            if env and f"`{env}`" not in doc:
                missing.add(f"{env} (`floe {role} {flag}`)")
    assert not missing, "not in docs/configuration.md:\n" + "\n".join(sorted(missing))


# ---------------------------------------------------------------------------
# Metric types


def documented_metric_types():
    """{metric: (type, labels cell)} of docs/configuration.md's metrics table."""
    out = {}
    for _, body in sections((ROOT / "docs" / "configuration.md").read_text()):
        for row in table_rows(body):
            name = re.fullmatch(r"`(floe_\w+)`", row.get("name", ""))
            if name and "type" in row:
                out[name.group(1)] = (row["type"], row.get("labels", ""))
    return out


def bucketed(name):
    """Whether src/admin_http.rs gives `name` buckets: the exporter renders
    those as histograms and every other `histogram!` as a summary. A
    `set_buckets(` call gives every histogram buckets."""
    text = (ROOT / "src" / "admin_http.rs").read_text()
    if re.search(r"\.set_buckets\(", text):
        return True
    return name in set(re.findall(r"set_buckets_for_metric\(\s*Matcher::Full\(\"(floe_\w+)\"", text))


def test_metric_types_in_the_docs_follow_the_exporters_buckets():
    documented = documented_metric_types()
    assert len(documented) > 50, documented
    wrong = []
    for name, (kind, labels) in documented.items():
        if kind not in ("histogram", "summary"):
            continue
        want = "histogram" if bucketed(name) else "summary"
        if kind != want:
            wrong.append(f"{name}: the table says {kind}, /metrics renders a {want}")
        if ("`le`" in labels) != (want == "histogram"):
            wrong.append(f"{name}: `le` in its labels only if it is a histogram")
    assert not wrong, "\n".join(wrong)


def test_metric_types_in_the_docs_are_what_metrics_renders(standalone):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    # A produce records the flush, request and metadata timings.
    producer = confluent_kafka.Producer({"bootstrap.servers": standalone.bootstrap, "acks": "all"})
    for i in range(3):
        producer.produce("docs-metrics", key=str(i), value=b"x")
    assert producer.flush(30) == 0
    del producer
    documented = documented_metric_types()
    want = {"floe_broker_flush_duration_seconds", "floe_proxy_request_seconds", "floe_meta_command_seconds"}
    deadline = time.monotonic() + 20
    while True:
        text = urllib.request.urlopen(f"{standalone.admin_url}/metrics", timeout=10).read().decode()
        rendered = dict(re.findall(r"^# TYPE (floe_\w+) (\w+)$", text, re.M))
        if want <= rendered.keys() or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert want <= rendered.keys(), sorted(rendered)
    wrong = [f"{name}: the table says {documented[name][0]}, /metrics renders a {kind}"
             for name, kind in sorted(rendered.items())
             if name in documented and documented[name][0] != kind]
    undocumented = sorted(set(rendered) - set(documented))
    assert not wrong and not undocumented, "\n".join(wrong + [f"{n}: not in the table" for n in undocumented])


def test_metrics_name_the_version_that_runs(standalone):
    import tomllib
    version = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]
    text = urllib.request.urlopen(f"{standalone.admin_url}/metrics", timeout=10).read().decode()
    assert f'floe_build_info{{version="{version}"}} 1' in text, \
        [line for line in text.splitlines() if "build_info" in line]


# ---------------------------------------------------------------------------
# Links and section names


def github_anchor(heading):
    """The anchor GitHub gives a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page):
    seen = collections.Counter()
    out = set()
    text = re.sub(FENCED, "", page.read_text(), flags=re.S | re.M)
    for heading in re.findall(r"^#{1,6} (.*)$", text, re.M):
        a = github_anchor(heading)
        out.add(a if not seen[a] else f"{a}-{seen[a]}")
        seen[a] += 1
    return out


def headings(page):
    text = re.sub(FENCED, "", page.read_text(), flags=re.S | re.M)
    return {h.strip().strip("`") for h in re.findall(r"^#{1,6} (.*)$", text, re.M)}


def test_every_relative_link_points_at_a_heading():
    wrong = []
    for page in PAGES:
        text = re.sub(FENCED, "", page.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                wrong.append(f"{rel(page)}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                wrong.append(f"{rel(page)}: {target}: no such heading in {rel(dest)}")
    assert not wrong, "\n".join(wrong)


def test_the_charts_pointers_into_the_docs_name_real_sections():
    wrong = []
    for path in CHART_FILES:
        text = path.read_text()
        for page, section in re.findall(r"(docs/[a-z-]+\.md)\s*(?:#\s*)?\(\"([^\"]+)\"\)", text):
            if section not in headings(ROOT / page):
                wrong.append(f"{rel(path)}: {page} (\"{section}\"): no such section")
        for page, anchor in re.findall(r"(docs/[a-z-]+\.md)#([\w-]+)", text):
            if anchor not in anchors(ROOT / page):
                wrong.append(f"{rel(path)}: {page}#{anchor}: no such heading")
        for page in re.findall(r"(docs/[a-z-]+\.md)", text):
            if not (ROOT / page).exists():
                wrong.append(f"{rel(path)}: {page}: no such file")
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------------------
# Object names from the rendered chart


def rendered_names(release):
    """{(kind, name)} of every object the chart renders for `release` with
    every optional object on (internal TLS from Secrets, the ServiceMonitor,
    the dashboards' ConfigMap)."""
    helm = pytest.importorskip("helm_python")
    yaml = pytest.importorskip("yaml")
    values = {"security": {"internalTls": {"enabled": True}},
              "metrics": {"serviceMonitor": {"enabled": True}, "dashboards": {"enabled": True}},
              "broker": {"autoscaling": {"enabled": True}}}
    out = helm.Chart.load(str(CHART)).render(
        values, name=release, namespace="streaming", revision=1, is_install=True)
    objects = [o for k, t in out.items() if k.endswith(".yaml") and t.strip() for o in yaml.safe_load_all(t) if o]
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    # The Secrets internal TLS mounts (made by `floe certs` or cert-manager).
    for o in objects:
        for v in o.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []):
            for source in [v.get("secret"), *[s.get("secret") for s in v.get("projected", {}).get("sources", [])]]:
                if source:
                    names.add(("Secret", source.get("secretName") or source["name"]))
    # A StatefulSet's pods: <name>-N.
    for kind, name in list(names):
        if kind == "StatefulSet":
            names |= {("Pod", f"{name}-{n}") for n in range(0, 6)}
    return names


def test_kubernetes_md_names_the_objects_the_chart_renders():
    """The page installs release `floe`: every name it gives, written out
    (`floe-meta-1`), as a pattern (`<release>-…`, `RELEASE-…`, checked for
    the releases `floe` and `events`) or as a suffix in the table of what
    the chart creates (`-broker`), is an object the chart renders."""
    page = ROOT / "docs" / "kubernetes.md"
    text = page.read_text()
    rendered = {r: rendered_names(r) for r in ("floe", "events")}
    fullname = {"floe": "floe", "events": "events-floe"}
    all_names = {r: {n for _, n in names} for r, names in rendered.items()}
    wrong = []

    def check(name, release, where):
        name = re.sub(r"\.[a-z0-9.<>-]*(:\d+)?$", "", name)  # a DNS name's first label
        name = name.replace("<revision>", "1").replace("$id", "broker").replace("ID", "broker")
        name = re.sub(r"-N$", "-1", name)
        if name not in all_names[release]:
            wrong.append(f"{where}: {name!r} (release {release}) is not rendered")

    # The table of what the chart creates: "Kind `-suffix`".
    created = text.split("## What the chart creates", 1)[1].split("\n## ", 1)[0]
    for row in table_rows(created):
        for kind, suffix in re.findall(r"(StatefulSet|Deployment|Service|Secret|Job|Pod|ConfigMap|ServiceMonitor)"
                                       r"s? `(-[a-z<>-]+)`", row.get("object", "") + " " + row.get("why", "")):
            kinds = ("Service", "StatefulSet") if kind == "Service" and suffix == "-meta-headless" else (kind,)
            for release in rendered:
                name = fullname[release] + suffix.replace("<revision>", "1")
                if not any((k, name) in rendered[release] for k in kinds) and (
                        "Pod", name) not in rendered[release]:
                    wrong.append(f"what the chart creates: {kind} `{suffix}` (release {release}: {name}) "
                                 "is not rendered")
    # Patterns with the release's name in them.
    for pattern in set(re.findall(r"(?:<release>|RELEASE)-[a-zA-Z<>$.-]*[a-zA-Z>$]", text)):
        if pattern.startswith("RELEASE.2"):  # MinIO's image tag
            continue
        for release in rendered:
            check(pattern.replace("<release>", release).replace("RELEASE", release).replace(
                "<namespace>", "streaming"), release, pattern)
    # Names written out for `helm install floe`.
    for inline, code in code_texts(text):
        for name in re.findall(r"(?<![\w/-])floe-[a-z0-9$-]*[a-z0-9](?:-ID\b|-N\b)?", code):
            if name in ("floe-s3", "floe-ca", "floe-test-client", "floe-cluster-secret"):
                continue  # the user's own Secrets and Issuers in the examples
            check(name, "floe", name)
    assert not wrong, "\n".join(sorted(set(wrong)))
