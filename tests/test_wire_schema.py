"""The protobuf messages Floe's processes send each other (the metadata
API, the broker RPC and the coordinators' routes) and store (a group's
membership), held to what every release sent: each release's schema is
kept in `tests/formats/<version>/wire-schema.json`, and this tree's
messages must keep every field of every release at its tag, with its
type and its label (`repeated`, `optional`). A field may be added (a new
tag); none may be removed, renumbered or retyped within a major version
(docs/upgrading.md, "What a version promises"). The byte-for-byte samples
of the most used messages are in `tests/formats/` too; this check covers
all of them.

The schema is read from the Rust sources: every `#[derive(... prost::Message)]`
struct of the crates that define wire messages, and its `#[prost(...)]`
fields. `FLOE_BLESS_FORMATS=1` writes the schema of this tree as the
current version's (only for a version that is not released yet, like the
format samples).
"""

import json
import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORMATS = ROOT / "tests" / "formats"
PROTO = "metadata/src/api/proto.rs"
REGISTER = f"{PROTO}::RegisterRequest"
COMMIT = f"{PROTO}::CommitRequest"
CRATES = ("metadata", "broker", "proxy", "indexer", "storage", "src", "client", "devtools", "types")

STRUCT = re.compile(r"#\[derive\([^\]]*prost::Message[^\]]*\)\]\s*(?:#\[[^\]]*\]\s*)*pub struct (\w+)\s*\{")
FIELD = re.compile(r"#\[prost\(([^\]]*)\)\]\s*(?:#\[[^\]]*\]\s*)*pub (\w+)\s*:")


def workspace_version(root=ROOT):
    text = (root / "Cargo.toml").read_text()
    section = text.index("[workspace.package]")
    return re.search(r'^version = "([^"]+)"$', text[section:], re.M).group(1)


def field_of(args):
    """(tag, what) of one `#[prost(...)]`: what = "label type", the wire
    meaning (the Rust representation of bytes, `vec` or `bytes`, is not)."""
    parts = [p.strip() for p in re.split(r",(?=(?:[^\"]*\"[^\"]*\")*[^\"]*$)", args)]
    tag = None
    kind, label = None, ""
    for p in parts:
        if p.startswith("tag ="):
            tag = p.split('"')[1]
        elif p in ("repeated", "optional", "required"):
            label = p
        elif p.startswith("packed"):
            continue  # an encoding choice both ends read either way
        elif p.startswith("bytes"):
            kind = "bytes"
        elif p.startswith("map ="):
            kind = "map<" + p.split('"')[1].replace(" ", "") + ">"
        elif p.startswith(("enumeration", "oneof")):
            raise ValueError(f"#[prost({args})]: enumerations and oneofs are not read yet; teach field_of")
        elif kind is None and re.fullmatch(r"\w+", p):
            kind = p
    if tag is None or kind is None:
        raise ValueError(f"#[prost({args})]: no tag or type")
    return tag, f"{label} {kind}".strip()


def struct_body(text, start):
    """The text between the `{` before `start` and its matching `}`."""
    depth, i = 1, start
    while depth:
        c = text[i]
        depth += c == "{"
        depth -= c == "}"
        i += 1
    return text[start:i - 1]


def schema(root=ROOT):
    """{"path/to/file.rs::Message": {tag: {"name": field, "type": "label kind"}}} of the
    sources under `root` (by file: two modules of a crate may name a message alike)."""
    out = {}
    for crate in CRATES:
        for path in sorted((root / crate).rglob("*.rs")):
            if "target" in path.relative_to(root).parts:
                continue
            text = path.read_text()
            for m in STRUCT.finditer(text):
                key = f"{path.relative_to(root)}::{m.group(1)}"
                fields = {}
                for f in FIELD.finditer(struct_body(text, m.end())):
                    tag, what = field_of(f.group(1))
                    assert tag not in fields, f"{path}: {key} has tag {tag} twice"
                    fields[tag] = {"name": f.group(2), "type": what}
                out[key] = fields
    return out


def breaks(old, new):
    """What `new` breaks of `old`: messages or fields gone, fields retyped."""
    found = []
    for msg, fields in old.items():
        if msg not in new:
            found.append(f"{msg}: message gone (renamed, or moved to another file?)")
            continue
        for tag, f in fields.items():
            now = new[msg].get(tag)
            if now is None:
                found.append(f"{msg}.{f['name']} (tag {tag}): field gone")
            elif now["type"] != f["type"]:
                found.append(f"{msg}.{f['name']} (tag {tag}): {f['type']} became {now['type']}")
    return found


def test_the_sources_have_the_wire_messages():
    s = schema()
    # A few known ones, so that a parser that finds nothing fails.
    assert s[REGISTER]["3"] == {"name": "addr", "type": "string"}
    assert s[COMMIT]["3"]["type"] == "repeated message"
    assert any(k.startswith("broker/src/share/") for k in s)
    assert len(s) > 150, len(s)


def test_every_releases_messages_are_kept():
    current = schema()
    version = workspace_version()
    if os.environ.get("FLOE_BLESS_FORMATS") == "1":
        path = FORMATS / version / "wire-schema.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    releases = sorted(FORMATS.glob("*/wire-schema.json"))
    assert releases, "no release's wire schema under tests/formats"
    for path in releases:
        found = breaks(json.loads(path.read_text()), current)
        assert not found, f"this tree breaks the messages of {path.parent.name}:\n" + "\n".join(found)


def test_a_broken_message_is_caught():
    stored = json.loads(next(iter(sorted(FORMATS.glob("*/wire-schema.json")))).read_text())
    current = schema()
    assert not breaks(stored, current)
    renumbered = json.loads(json.dumps(current))
    f = renumbered[REGISTER]
    f["9"] = f.pop("3")
    retyped = json.loads(json.dumps(current))
    retyped[COMMIT]["3"]["type"] = "message"
    gone = {k: v for k, v in current.items() if k != f"{PROTO}::HeartbeatRequest"}
    for broken, says in ((renumbered, "addr (tag 3): field gone"), (retyped, "became message"),
                         (gone, "HeartbeatRequest: message gone")):
        assert any(says in b for b in breaks(stored, broken)), breaks(stored, broken)
    added = json.loads(json.dumps(current))
    added[REGISTER]["99"] = {"name": "later", "type": "string"}
    assert not breaks(stored, added), "an added field is allowed"
