"""The broker crate's layering, read from its sources' `crate::` paths.

The partition owner (`broker/src/partitions/`) is the core: it and the
coordinator runtime (`broker/src/coordinator/`), with the crate's leaves
(settings, errors, metrics), name no coordinator (groups, share groups,
transactions), no RPC and not the broker that puts them together; and no
import circle spans two concerns' folders. Arrows point
one way: coordinators -> runtime -> core (docs/architecture.md).
"""

import collections
import pathlib
import re

SRC = pathlib.Path(__file__).resolve().parent.parent / "broker" / "src"

# Modules of the coordinators and of what wires them: the core must not
# name them.
ABOVE_CORE = {
    "broker", "owner", "rpc", "group", "group_rpc", "group_commit",
    "group_store", "share", "txn",
}
CORE_DIRS = ("partitions", "coordinator")
LEAVES = ("config", "error", "metrics")

PATH = re.compile(r"crate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)")
USE_GROUP = re.compile(r"use crate::\{([^;]*)\};", re.S)
SUPER = re.compile(r"super::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)")


def modules():
    out = {}
    for p in SRC.rglob("*.rs"):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "mod":
            parts = parts[:-1]
        if parts == ["lib"]:
            continue
        if p.name == "tests.rs" or "tests" in parts[:-1] or p.name.endswith("_tests.rs"):
            continue
        out[tuple(parts)] = p
    return out


def code_of(path):
    """The source without comments and without its `#[cfg(test)]` module."""
    src = path.read_text()
    cut = src.find("#[cfg(test)]\nmod tests")
    if cut >= 0:
        src = src[:cut]
    return "\n".join(line.split("//", 1)[0] for line in src.splitlines())


def imports(mods):
    def resolve(path):
        for n in range(len(path), 0, -1):
            if tuple(path[:n]) in mods:
                return tuple(path[:n])
        return None

    edges = collections.defaultdict(set)
    for m, p in mods.items():
        src = code_of(p)
        targets = [t.split("::") for t in PATH.findall(src)]
        for group in USE_GROUP.findall(src):
            depth, cur, items = 0, "", []
            for ch in group:
                depth += ch == "{"
                depth -= ch == "}"
                if ch == "," and depth == 0:
                    items.append(cur)
                    cur = ""
                else:
                    cur += ch
            items.append(cur)
            for it in items:
                head = it.split("{")[0].strip().rstrip(":")
                if head:
                    targets.append([x for x in head.split("::") if x])
        parent = list(m[:-1])
        targets += [parent + t.split("::") for t in SUPER.findall(src)]
        for t in targets:
            r = resolve(t)
            if r is not None and r != m:
                edges[m].add(r)
    return edges


def cycles(mods, edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in mods:
        if v not in index:
            visit(v)
    return out


def is_core(m):
    return m[0] in CORE_DIRS or (len(m) == 1 and m[0] in LEAVES)


def test_the_core_names_no_coordinator():
    mods = modules()
    assert ("partitions",) in mods and ("coordinator",) in mods
    edges = imports(mods)
    wrong = sorted(
        ("/".join(m), "/".join(t))
        for m, ts in edges.items()
        if is_core(m)
        for t in ts
        if t[0] in ABOVE_CORE
    )
    assert wrong == [], f"arrows from the core up to a coordinator: {wrong}"


def test_no_import_circle_spans_more_than_one_concern():
    """A circle of imports stays inside one folder (one concern: the core,
    the runtime, a coordinator); a top-level file is a concern of its own."""
    mods = modules()
    bad = []
    for comp in cycles(mods, imports(mods)):
        if len({m[0] for m in comp}) > 1:
            bad.append(sorted("/".join(m) for m in comp))
    assert bad == [], f"import circles across concerns: {bad}"


def test_the_parser_sees_a_planted_arrow(tmp_path):
    """The checks can fail: a `crate::share` path in a core file is found."""
    mods = {("partitions", "x"): tmp_path / "x.rs", ("share",): tmp_path / "s.rs"}
    (tmp_path / "x.rs").write_text("use crate::share::ShareService;\n")
    (tmp_path / "s.rs").write_text("use crate::partitions::x::Y;\n")
    edges = imports(mods)
    assert edges[("partitions", "x")] == {("share",)}
    assert cycles(mods, edges) != []
