// The overview: the cluster's members and counts, the object-store
// endpoints this process writes to, and live charts of this process's
// request counters (polled every 2 s, 5 minutes kept).

import { chartFigure, drawChart } from "/ui/assets/charts.js";
import { bytes, dec, facts, h, int, stateBadge, table } from "/ui/assets/dom.js";

const POLL_MS = 2000;
const KEEP_MS = 5 * 60 * 1000;

// Raw samples of /ui/api/metrics. Kept at module level so that leaving the
// overview and coming back does not lose the last minutes.
const samples = [];

function addSample(m) {
  const last = samples[samples.length - 1];
  if (last && m.t_ms <= last.t_ms) return;
  samples.push(m);
  while (samples.length && samples[0].t_ms < m.t_ms - KEEP_MS) samples.shift();
}

// Rate of a counter between consecutive samples, per second, at the later
// sample's time; a counter that went down (a restart) gives no point.
function rates(field) {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1];
    const b = samples[i];
    const dt = (b.t_ms - a.t_ms) / 1000;
    const d = b[field] - a[field];
    out.push([b.t_ms, dt > 0 && d >= 0 ? d / dt : null]);
  }
  return out;
}

function latency(field) {
  return samples.map((s) => [s.t_ms, s.latency ? s.latency[field] : null]);
}

function drawCharts(figures) {
  if (!samples.length) return;
  // The window grows with the samples up to 5 minutes, so that the first
  // minutes of a visit fill the chart instead of a sliver at its right edge.
  const t1 = samples[samples.length - 1].t_ms;
  const window = [Math.min(t1 - 20000, Math.max(t1 - KEEP_MS, samples[0].t_ms)), t1];
  drawChart(figures.requests, {
    series: [{ name: "requests/s", points: rates("requests") }],
    window, unit: "req/s", format: (v) => dec(v),
  });
  drawChart(figures.bytes, {
    series: [{ name: "in", points: rates("bytes_in") }, { name: "out", points: rates("bytes_out") }],
    window, unit: "bytes/s", format: (v) => `${bytes(Math.round(v))}/s`,
  });
  drawChart(figures.latency, {
    series: [{ name: "p50", points: latency("p50_ms") }, { name: "p99", points: latency("p99_ms") }],
    window, unit: "ms", format: (v) => `${dec(v)} ms`,
  });
}

function metadataSection(o) {
  const section = h("section", { "aria-labelledby": "h-meta" }, h("h2", { id: "h-meta" }, "Metadata service"));
  if (!o.metadata) {
    section.append(h("p", { class: "notice" }, `Not available: ${o.metadata_error || "no answer"}`));
    return section;
  }
  const m = o.metadata;
  section.append(
    facts([["Leader", m.leader_id === null ? "none" : String(m.leader_id)], ["Term", int(m.term)],
      ["Last applied", int(m.last_applied)]], "Metadata service"),
    table({
      caption: "Metadata nodes",
      id: "metadata-nodes",
      columns: [{ label: "Node", numeric: true }, { label: "Address" }, { label: "Role" }],
      rows: m.members.map((n) => [String(n.id), n.addr,
        n.leader ? h("strong", { class: "leader" }, "Leader") : "Follower"]),
    }),
  );
  return section;
}

// The store endpoints this process writes to, from its own metrics. A
// refusal (no DESCRIBE on the cluster) stays in the section.
async function storesSection(ctx) {
  const section = h("section", { "aria-labelledby": "h-stores", id: "stores-section" },
    h("h2", { id: "h-stores" }, "Store endpoints: this process"));
  let s;
  try {
    s = await ctx.get("stores");
  } catch (error) {
    if (error && error.name === "AbortError") throw error;
    section.append(h("p", { class: "notice", id: "stores-error" },
      `Not available: ${error && error.message ? error.message : error}`));
    return section;
  }
  const caption = "Store endpoints of this process";
  const wrap = table({
    caption,
    id: "store-endpoints",
    columns: [{ label: "Endpoint" }, { label: "State" }, { label: "Writes", numeric: true },
      { label: "Abandoned", numeric: true }, { label: "Errors", numeric: true }, { label: "Hedged writes", numeric: true },
      { label: "Hedged reads", numeric: true }, { label: "Failovers", numeric: true },
      { label: "Deadline", numeric: true }],
    rows: s.endpoints.map((e) => [h("code", {}, e.endpoint),
      stateBadge(e.benched ? "benched" : "healthy"), int(e.writes), int(e.abandoned),
      int(e.errors), int(e.hedged_writes), int(e.hedged_reads), int(e.failovers),
      e.write_deadline_ms === null || e.write_deadline_ms === undefined ? "—" : `${dec(e.write_deadline_ms)} ms`]),
    empty: "No store endpoints in this process.",
  });
  // On a narrow window it scrolls sideways: the keyboard reaches it too.
  wrap.setAttribute("tabindex", "0");
  wrap.setAttribute("role", "region");
  wrap.setAttribute("aria-label", caption);
  section.append(
    h("p", { class: "hint" }, s.broker_here
      ? "The object-store endpoints the broker of this process writes to, since it started. "
        + "A benched endpoint gets no new writes until a probe passes: a failed write goes to a new object elsewhere at once."
      : "This process runs no broker, so it writes to no store: each broker's figures are on its own /metrics "
        + "(floe_store_* by endpoint)."),
    h("p", { class: "hint" }, "Deadline: the adaptive deadline of a small write there now. "
      + "Failovers: writes that landed there after an attempt elsewhere was abandoned."),
    wrap);
  section.append(brokerStores(s.brokers || []));
  return section;
}

// Each broker's pool as the broker answered: its writes since it started,
// whether new writes skip an endpoint (benched), the deadline now.
function brokerStores(brokers) {
  const caption = "Store endpoints of each broker";
  const rows = [];
  for (const b of brokers) {
    if (b.error) {
      rows.push([h("code", {}, String(b.broker)), "—", stateBadge("unreachable"), "—", "—", "—", b.error]);
      continue;
    }
    for (const e of b.endpoints) {
      rows.push([h("code", {}, String(b.broker)), h("code", {}, e.endpoint),
        stateBadge(e.benched ? "benched" : "healthy"), int(e.written), int(e.abandoned), int(e.hedged),
        e.write_deadline_ms === null || e.write_deadline_ms === undefined ? "—" : `${int(e.write_deadline_ms)} ms`]);
    }
  }
  const wrap = table({
    caption,
    id: "broker-store-endpoints",
    columns: [{ label: "Broker" }, { label: "Endpoint" }, { label: "State" }, { label: "Writes", numeric: true },
      { label: "Abandoned", numeric: true }, { label: "Hedged", numeric: true }, { label: "Deadline" }],
    rows,
    empty: "No broker is registered.",
  });
  wrap.setAttribute("tabindex", "0");
  wrap.setAttribute("role", "region");
  wrap.setAttribute("aria-label", caption);
  return h("div", {},
    h("h3", { id: "h-broker-stores" }, "Store endpoints: every broker"),
    h("p", { class: "hint" }, "Each broker's store pool, as the broker answers now."),
    wrap);
}

function epochs(e) {
  if (!e) return "—";
  return e.min === e.max ? String(e.min) : `${e.min}–${e.max}`;
}

async function render(ctx) {
  ctx.heading("Overview");
  const o = await ctx.load("Loading the cluster…", ctx.get("overview"));

  ctx.view.append(
    h("section", { "aria-labelledby": "h-cluster" },
      h("h2", { id: "h-cluster" }, "Cluster"),
      facts([
        ["Cluster id", h("code", { id: "cluster-id" }, o.cluster_id)],
        ["Topics", h("span", { id: "topic-count" }, int(o.topics))],
        ["Partitions", h("span", { id: "partition-count" }, int(o.partitions))],
        ["Unowned partitions", int(o.unowned_partitions)],
      ], "Cluster")),
    metadataSection(o),
    h("section", { "aria-labelledby": "h-brokers" },
      h("h2", { id: "h-brokers" }, "Brokers"),
      table({
        caption: "Brokers",
        id: "brokers",
        columns: [{ label: "Broker", numeric: true }, { label: "Address" }, { label: "State" },
          { label: "Partitions", numeric: true }, { label: "Shards", numeric: true }, { label: "Epochs", numeric: true }],
        rows: o.brokers.map((b) => [String(b.id), b.addr, stateBadge(b.state), int(b.partitions), int(b.shards),
          epochs(b.epochs)]),
        empty: "No brokers known.",
      })),
    h("section", { "aria-labelledby": "h-proxies" },
      h("h2", { id: "h-proxies" }, "Proxies"),
      table({
        caption: "Proxies",
        id: "proxies",
        columns: [{ label: "Proxy", numeric: true }, { label: "Address" }, { label: "State" }],
        rows: o.proxies.map((p) => [String(p.id), p.addr, stateBadge(p.state)]),
        empty: "No proxies known.",
      })),
  );

  ctx.view.append(await storesSection(ctx));

  const figures = {
    requests: chartFigure("chart-requests", "Requests per second"),
    bytes: chartFigure("chart-bytes", "Bytes in and out per second"),
    latency: chartFigure("chart-latency", "Produce latency (p50, p99)"),
  };
  ctx.view.append(h("section", { "aria-labelledby": "h-live" },
    h("h2", { id: "h-live" }, "Live: this process"),
    h("p", { class: "hint" }, "Sampled every 2 seconds; the last 5 minutes are kept while the console is open."),
    h("div", { class: "charts" }, Object.values(figures))));
  drawCharts(figures);

  ctx.poll(POLL_MS, async () => {
    addSample(await ctx.get("metrics"));
    drawCharts(figures);
  });
}

export default { render };
