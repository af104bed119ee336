"""The results of bench/compare.py as a Markdown table (results.md) and
PNG charts (matplotlib) in its output folder."""

import pathlib

COLUMNS = [
    ("workload", "workload", None),
    ("target", "target", None),
    ("records", "records", "{:,.0f}"),
    ("errors", "errors", "{:,.0f}"),
    ("mb_s", "MB/s", "{:,.1f}"),
    ("stream_mb_s", "MB/s from the first record", "{:,.1f}"),
    ("rec_s", "records/s", "{:,.0f}"),
    ("produce_ms", "produce p50 / p99 / p99.9 ms", None),
    ("e2e_ms", "end-to-end p50 / p99 / p99.9 ms", None),
    ("generator_lag_p99_ms", "generator late p99 ms", "{:,.1f}"),
    ("failover_s", "kill -9 to writes, s", "{:,.2f}"),
    ("cpu_s_per_gib", "server CPU-s / GiB", "{:,.2f}"),
    ("store_cpu_s_per_gib", "S3 server CPU-s / GiB", "{:,.2f}"),
    ("gen_cpu_s_per_gib", "generator CPU-s / GiB", "{:,.2f}"),
    ("peak_rss_mib", "peak RSS MiB", "{:,.0f}"),
    ("puts_per_gib", "PUTs / GiB", "{:,.0f}"),
    ("gets_per_gib", "GETs / GiB", "{:,.0f}"),
    ("note", "note", None),
]


def _ms(r, kind):
    vals = [r.get(f"{kind}_{q}_ms") for q in ("p50", "p99", "p999")]
    if all(v is None for v in vals):
        return ""
    return " / ".join("–" if v is None else f"{v:,.1f}" for v in vals)


def cell(r, key, fmt):
    if key in ("produce_ms", "e2e_ms"):
        return _ms(r, key[:-3])
    v = r.get(key)
    if v is None or v == "":
        return ""
    return fmt.format(v) if fmt else str(v).replace("|", "/")


def table(rows):
    used = [c for c in COLUMNS if any(cell(r, c[0], c[2]) for r in rows)]
    out = ["| " + " | ".join(h for _, h, _ in used) + " |", "|" + "---|" * len(used)]
    for r in sorted(rows, key=lambda r: (r["workload"], r["target"])):
        out.append("| " + " | ".join(cell(r, k, f) for k, _, f in used) + " |")
    return "\n".join(out)


def pivot(rows):
    """The headline: one line per workload, one column per target."""
    targets = list(dict.fromkeys(r["target"] for r in rows))
    lines = ["| workload | " + " | ".join(targets) + " |", "|---|" + "---|" * len(targets)]

    def headline(r):
        if r.get("errors") and not r.get("records"):
            return "failed"
        if r["workload"].startswith("W3"):
            p50, p99 = r.get("produce_p50_ms"), r.get("produce_p99_ms")
            e50, e99 = r.get("e2e_p50_ms"), r.get("e2e_p99_ms")
            return (f"{p50:,.1f} / {p99:,.1f} ms (e2e {e50:,.1f} / {e99:,.1f})"
                    if None not in (p50, p99, e50, e99) else "")
        if r["workload"].startswith("W6"):
            return f"{r['failover_s']:.1f} s" if r.get("failover_s") is not None else "not back"
        if r["workload"].startswith("W2"):
            return f"{r.get('rec_s', 0):,.0f} rec/s"
        if r["workload"].startswith("W4") and r.get("puts_per_gib") is not None:
            return f"{r.get('mb_s', 0):,.1f} MB/s, {r['puts_per_gib']:,.0f} PUT/GiB"
        if r.get("mb_s") and r.get("stream_mb_s"):
            return f"{r['mb_s']:,.1f} MB/s ({r['stream_mb_s']:,.1f} from the first record)"
        return f"{r.get('mb_s', 0):,.1f} MB/s" if r.get("mb_s") else ""

    wls = list(dict.fromkeys(r["workload"] for r in rows if r["workload"] != "start"))
    for w in wls:
        cells = []
        for t in targets:
            rs = [r for r in rows if r["workload"] == w and r["target"] == t]
            failed_start = any(r["workload"] == "start" and r["target"] == t for r in rows)
            cells.append(headline(rs[-1]) if rs else ("did not start" if failed_start else ""))
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def charts(out, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []

    def bars(name, title, ylabel, series):
        """series: {label: {target: value}}"""
        targets = list(dict.fromkeys(t for s in series.values() for t in s))
        if not targets:
            return
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(targets) * max(1, len(series)) / 2), 4))
        width = 0.8 / max(1, len(series))
        for i, (label, vals) in enumerate(series.items()):
            xs = [j + i * width for j in range(len(targets))]
            ax.bar(xs, [vals.get(t) or 0 for t in targets], width, label=label)
        ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(targets))])
        ax.set_xticklabels(targets, rotation=15, fontsize=8)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if len(series) > 1:
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / f"{name}.png", dpi=90)
        plt.close(fig)
        made.append(f"{name}.png")

    def by(workload, key):
        return {r["target"]: r.get(key) for r in rows if r["workload"] == workload and r.get(key) is not None}

    bars("throughput", "Throughput, 1 KiB records, 16 partitions", "MB/s",
         {w: by(w, "mb_s") for w in ("W1", "W1-read", "W5-read") if by(w, "mb_s")})
    bars("records", "100-byte records", "records/s",
         {w: by(w, "rec_s") for w in ("W2-p1", "W2-p100") if by(w, "rec_s")})
    for w in ("W3-1k", "W3-50MB"):
        series = {f"{k} {q}": by(w, f"{k}_{q}_ms") for k in ("produce", "e2e") for q in ("p50", "p99")}
        series = {k: v for k, v in series.items() if v}
        if series:
            bars(f"latency-{w.lower()}", f"{w}: latency from the scheduled send time", "ms", series)
    bars("cpu", "Server CPU-seconds per GiB", "CPU-s / GiB",
         {w: by(w, "cpu_s_per_gib") for w in ("W1", "W1-read", "W2-p100") if by(w, "cpu_s_per_gib")})
    store = {w: by(w, "puts_per_gib") for w in ("W1", "W4-1MB/s", "W4-max") if by(w, "puts_per_gib")}
    if store:
        bars("store-requests", "Store writes (PUT) per GiB", "PUTs / GiB", store)
    return made


def write(out, info, rows):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    made = charts(out, rows)
    m = info["machine"]
    text = [
        "# Side-by-side benchmark results",
        "",
        f"Run {info['started']}, {info['minutes']} min{' (quick mode: tiny counts, not figures)' if info['quick'] else ''}.",
        f"Machine: {m['nproc']} cores ({m['cpu']}), {m['mem_gib']} GiB memory, disk {m['disk']}, "
        f"Linux {m['kernel']}.",
        f"Load generator: {info['generator']}; W3 and W6 use a generator on confluent-kafka "
        "(W3 stamps each record with the time it was due).",
        f"Command: `{info['command']}`",
        "",
        "## Headline",
        "",
        pivot(rows),
        "",
        "## Every run",
        "",
        table(rows),
        "",
    ]
    text += [f"![{c}]({c})" for c in made]
    (out / "results.md").write_text("\n".join(text) + "\n")
