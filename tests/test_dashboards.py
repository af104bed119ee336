"""The Grafana dashboards of helm/floe/dashboards/ against the metrics Floe
exports (docs/configuration.md's table, which tests/test_docs_match.py holds
equal to what a running process renders):

- each file is a dashboard: JSON with a stable `floe-` uid, a "Floe –"
  title, a `datasource` variable of type datasource, unique uids;
- every query names only metrics of the table (a histogram by its
  `_bucket`, `_sum` or `_count` series, never bare) or Prometheus' `up`,
  and groups or matches only on labels those metrics have (or the scrape
  target's `job` and `instance`);
- every counter and every histogram series is read through rate() or
  increase() (a raw counter restarts at 0 with its process);
- every panel with queries reads from `${datasource}`.

No Grafana runs here: the checks are on the text, not on a rendered panel.
"""

import json
import pathlib
import re

import pytest

from test_docs_match import documented_metric_types

ROOT = pathlib.Path(__file__).resolve().parent.parent
DASHBOARDS = sorted((ROOT / "helm" / "floe" / "dashboards").glob("*.json"))
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
# Labels every scraped series has (the target's), and Prometheus' own metric.
TARGET_LABELS = {"job", "instance"}
PROMETHEUS_METRICS = {"up": set()}
# PromQL words that are neither metrics nor labels.
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
            "inf", "nan"}
GROUPING = r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)"


def load(path):
    return json.loads(path.read_text())


def panels(board):
    for p in board["panels"]:
        yield p
        yield from p.get("panels", [])  # a collapsed row holds its panels


def metric_labels():
    """{metric or series name: its labels} from the table: a histogram's
    `_bucket` series has `le`, its `_sum` and `_count` do not."""
    out = dict(PROMETHEUS_METRICS)
    for name, (kind, cell) in documented_metric_types().items():
        # The labels are the backticked names outside the parentheses that list values.
        labels = set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", cell)))
        if kind == "histogram":
            out[name + "_bucket"] = labels | {"le"}
            out[name + "_sum"] = out[name + "_count"] = labels - {"le"}
        else:
            out[name] = labels
    return out


def strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def names_in(expr):
    """The metric names a PromQL expression reads: identifiers left once
    strings, label matchers, ranges, grouping clauses and function calls
    are taken out."""
    e = strip_strings(expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(GROUPING, " ", e)
    names = []
    for m in re.finditer(r"(?<![\w.$])([A-Za-z_:][\w:]*)(\s*\()?", e):
        if m.group(2) or m.group(1).lower() in KEYWORDS:
            continue  # a function call, an operator or a number's word
        names.append(m.group(1))
    return names


def labels_in(expr):
    """Labels the expression groups by or matches on."""
    e = strip_strings(expr)
    out = set()
    for _, inside in re.findall(GROUPING, e):
        out |= {x.strip() for x in inside.split(",") if x.strip()}
    for inside in re.findall(r"\{([^}]*)\}", e):
        out |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", inside))
    return out


def problems(expr, known):
    """What is wrong with one query, given {series name: labels}."""
    wrong = []
    names = names_in(expr)
    if not names:
        wrong.append("names no metric")
    for name in names:
        if name not in known:
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            hint = " (a histogram: read its _bucket, _sum or _count)" if base + "_bucket" in known else ""
            wrong.append(f"{name}: not a metric Floe exports{hint}")
    s = strip_strings(expr)
    for m in re.finditer(r"\b(floe_\w+)", s):
        if m.group(1).endswith(("_total", *HISTOGRAM_SERIES)) and \
                not re.search(r"\b(rate|increase|irate)\(\s*$", s[:m.start()]):
            wrong.append(f"{m.group(1)}: a counter or histogram series outside rate() or increase()")
    allowed = TARGET_LABELS.union(*(known.get(n, set()) for n in names))
    for label in labels_in(expr) - allowed:
        wrong.append(f"label {label}: none of {sorted(set(names))} has it")
    return wrong


def queries(board):
    for p in panels(board):
        for t in p.get("targets", []):
            yield p, t["expr"]
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            # label_values(metric{...}, label): the metric must exist and have the label.
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
            assert m, f"variable {v['name']}: {q}"
            yield {"title": f"variable {v['name']}"}, f"count by ({m.group(2)}) ({m.group(1)})"


def test_there_are_the_five_dashboards():
    assert [p.name for p in DASHBOARDS] == ["floe-cluster.json", "floe-groups.json", "floe-metadata.json",
                                            "floe-store.json", "floe-topics.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_well_formed(path):
    board = load(path)
    assert board["uid"] == path.stem, "the uid is the file's name: stable, prefixed floe-"
    assert board["title"].startswith("Floe – ")
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for p in panels(board):
        assert p["type"] in ("timeseries", "stat", "table", "text", "row"), f"{p['title']}: {p['type']}"
        if p["type"] in ("row", "text"):
            continue
        where = f"{path.name}: {p['title']}"
        assert p["targets"], where
        assert p.get("description"), f"{where}: no description"
        assert p["datasource"]["uid"] == "${datasource}", where
        assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"]), where
        assert p["fieldConfig"]["defaults"].get("unit"), f"{where}: no unit"
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"]["uid"] == "${datasource}", v["name"]


def test_uids_and_titles_are_unique():
    boards = [load(p) for p in DASHBOARDS]
    assert len({b["uid"] for b in boards}) == len(boards)
    assert len({b["title"] for b in boards}) == len(boards)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_names_exported_metrics_and_their_labels(path):
    known = metric_labels()
    wrong = [f"{p['title']}: {expr}: {w}" for p, expr in queries(load(path)) for w in problems(expr, known)]
    assert not wrong, "\n".join(wrong)


def test_the_dashboards_cover_most_of_the_table():
    """A metric added to the table and left off every dashboard fails here,
    so that someone decides where it goes. floe_broker_owned_shard (one
    series per shard, 1 or 0) is left out: floe_broker_owned_shards counts
    the same per broker."""
    used = {re.sub(r"_(bucket|sum|count)$", "", n) for path in DASHBOARDS
            for _, expr in queries(load(path)) for n in names_in(expr)}
    missing = sorted(set(documented_metric_types()) - used - {"floe_broker_owned_shard"})
    assert not missing, missing


def test_the_checks_catch_wrong_queries():
    known = metric_labels()
    good = 'histogram_quantile(0.99, sum by (le, api) (rate(floe_proxy_request_seconds_bucket{job=~"$job"}[5m])))'
    assert problems(good, known) == []
    assert problems('sum(rate(floe_proxy_requests_total[5m])) / sum(up{job="x"})', known) == []
    assert any("floe_proxy_lag: not a metric" in w for w in problems("sum(floe_proxy_lag{topic=\"t\"})", known))
    assert any("floe_group_lag: not a metric" in w for w in problems("max(floe_group_lag)", known))
    assert any("a histogram" in w for w in problems("rate(floe_proxy_request_seconds[5m])", known))
    assert any("outside rate()" in w for w in problems("sum(floe_proxy_requests_total)", known))
    assert any("label topic" in w for w in problems("sum by (topic) (rate(floe_proxy_requests_total[5m]))", known))
    assert any("label le" in w for w in problems(
        "sum by (le) (rate(floe_proxy_request_seconds_count[5m]))", known))
    assert problems("vector(1)", known) == ["names no metric"]
    # Words in strings, ranges and grouping are not metric names.
    assert names_in('sum by (api) (rate(floe_proxy_api_requests_total{api="Produce"}[$__rate_interval])) or vector(0)') \
        == ["floe_proxy_api_requests_total"]


def test_the_configmap_stays_small():
    """A ConfigMap holds at most 1 MiB."""
    assert sum(p.stat().st_size for p in DASHBOARDS) < 900 * 1024
