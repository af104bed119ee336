// One topic's Parquet export: per partition, how far the indexer has
// exported, what is left (the lag) and its latest file; a live chart of the
// total lag (polled every 5 s while the page is open, as the group page).
// A topic that is an Iceberg table (table.format=iceberg) also shows its
// table: schema with field ids, partitioning, snapshots and their offsets.

import { actionForm } from "/ui/assets/actions.js";
import { enc, post } from "/ui/assets/api.js";
import { chartFigure, drawChart } from "/ui/assets/charts.js";
import { bytes, facts, h, int, isoTime, offset, table } from "/ui/assets/dom.js";

const POLL_MS = 5000;
const KEEP_MS = 5 * 60 * 1000;

function sum(partitions, field) {
  return partitions.reduce((total, p) => total + (p[field] ?? 0), 0);
}

// The latest file's key (where to find it) and the offsets it holds.
function latestFile(latest) {
  if (!latest) return h("span", { class: "null" }, "none yet");
  return [h("code", { class: "file-key" }, latest.key), ` (offsets ${offset(latest.first_offset)}–${offset(latest.last_offset)})`];
}

// What to do to export the topic: the setting, and where to set it.
function notExported(name) {
  return h("div", { id: "export-off", class: "notice" },
    h("p", {}, `${name} is not exported to Parquet.`),
    h("p", {}, "Its export is turned on by the setting ", h("code", {}, "export.enabled=true"), ": under Change a setting on ",
      h("a", { href: `#/topics/${enc(name)}`, id: "export-topic-link" }, `the page of ${name}`), ", or with ",
      h("code", {}, `floe topic alter ${name} --config export.enabled=true`),
      ". This page shows the export's progress once it is on."));
}

function details(name, e) {
  const parts = [...e.partitions].sort((a, b) => a.partition - b.partition);
  return h("div", { id: "export-details" },
    h("p", {}, h("a", { href: `#/topics/${enc(name)}` }, `Topic ${name}`)),
    facts([["Files", h("span", { id: "export-files" }, int(sum(parts, "files")))],
      ["Rows", h("span", { id: "export-rows" }, int(sum(parts, "rows")))],
      ["Bytes", h("span", { id: "export-bytes" }, bytes(sum(parts, "bytes")))],
      ["Lag", h("span", { id: "export-lag" }, `${int(sum(parts, "lag"))} records`)],
      ["Generation", h("span", { id: "export-generation" }, e.generation === null || e.generation === undefined
        ? "—" : String(e.generation))]], "Export"),
    table({
      caption: `Export of ${name} by partition`,
      id: "export-partitions",
      columns: [{ label: "Partition", numeric: true }, { label: "Exported up to", numeric: true },
        { label: "High watermark", numeric: true }, { label: "Lag", numeric: true }, { label: "Files", numeric: true },
        { label: "Rows", numeric: true }, { label: "Bytes", numeric: true }, { label: "Pending" },
        { label: "Latest file" }],
      rows: parts.map((p) => [String(p.partition), offset(p.next_offset), offset(p.high_watermark), int(p.lag),
        int(p.files), int(p.rows), bytes(p.bytes), p.pending ? "yes" : "no", latestFile(p.latest)]),
      empty: "No partitions.",
    }));
}

// Per partition, the first offset a snapshot does not hold.
function offsetsText(offsets) {
  if (!offsets) return "—";
  return Object.entries(offsets).sort((a, b) => a[0] - b[0]).map(([p, o]) => `${p}: ${int(o)}`).join(", ");
}

function tableDetails(t) {
  if (!t.table) return h("span", {});
  if (!t.current && !(t.snapshots || []).length) {
    return h("section", { id: "table-section", "aria-labelledby": "h-table" },
      h("h2", { id: "h-table" }, "Iceberg table"),
      h("p", { id: "table-pending" }, "The table has no snapshot yet: its first commit comes with its first exported file."));
  }
  const cur = t.current || {};
  return h("section", { id: "table-section", "aria-labelledby": "h-table" },
    h("h2", { id: "h-table" }, `Iceberg table ${t.name}`),
    h("p", { class: "hint" }, "Served by the indexer's REST catalog under /iceberg; attach pyiceberg, DuckDB, Spark or Trino "
      + "to it (docs/tables.md)."),
    facts([["Records", h("span", { id: "table-records" }, int(cur.records ?? 0))],
      ["Mode", h("span", { id: "table-mode" }, cur.mode === "upsert"
        ? `upsert: ${int(cur.rows ?? 0)} rows, one per key (${int(cur.position_deletes ?? 0)} records superseded)`
        : "append: every record a row")],
      ["Data files", h("span", { id: "table-files" }, int(cur.files ?? 0))],
      ["Bytes", h("span", { id: "table-bytes" }, bytes(cur.bytes ?? 0))],
      ["Snapshots", h("span", { id: "table-snapshot-count" }, int(t.snapshot_count ?? 0))],
      ["Partitioned by", h("span", { id: "table-partitioning" },
        (t.partitioning || []).map((f) => `${f.transform}(timestamp)`).join(", ") || "nothing")],
      ["Metadata", h("code", { class: "file-key", id: "table-metadata" }, t.metadata_location || "—")]], "Table"),
    table({
      caption: `Schema of ${t.name}`,
      id: "table-schema",
      columns: [{ label: "Field id", numeric: true }, { label: "Column" }, { label: "Type" }, { label: "Required" }],
      rows: (t.schema || []).map((f) => [String(f.id), f.name, f.type, f.required ? "yes" : "no"]),
      empty: "No columns.",
    }),
    table({
      caption: `Latest snapshots of ${t.name}, newest first`,
      id: "table-snapshots",
      columns: [{ label: "Snapshot" }, { label: "Committed" }, { label: "Operation" },
        { label: "Records added", numeric: true }, { label: "Files added", numeric: true },
        { label: "Next offset by partition" }],
      rows: (t.snapshots || []).map((s) => [String(s.snapshot_id), isoTime(s.timestamp_ms), s.operation ?? "—",
        int(s.added_records ?? 0), int(s.added_files ?? 0), offsetsText(s.offsets)]),
      empty: "No snapshot yet.",
    }));
}

async function render(ctx) {
  const [name] = ctx.params;
  ctx.heading(`Export of ${name}`);
  const holder = h("div", {});
  const figure = chartFigure("chart-export-lag", "Export lag");
  // Hidden while the topic is not exported: a chart of nothing says nothing.
  const chart = h("section", { "aria-labelledby": "h-export-lag", hidden: true },
    h("h2", { id: "h-export-lag" }, "Lag over time"),
    h("p", { class: "hint" }, "Sampled every 5 seconds while this page is open."),
    figure);
  // Built once (not redrawn by the poll, so that typing is kept): the
  // backfill's progress is the lag above, going up to the whole log and
  // back down as the new generation is written.
  const backfill = h("section", { "aria-labelledby": "h-backfill", hidden: true, id: "backfill-section" },
    h("h2", { id: "h-backfill" }, "Backfill"),
    h("p", { class: "hint" }, "Rebuilds the export from the log: a new generation is written from the log's start, "
      + "and the old generation's files are deleted once it caught up. Follow it by the lag above. "
      + "Records the topic's retention removed are gone from the export after it."),
    actionForm({
      id: "backfill",
      title: `Backfill the export of ${name}`,
      submit: "Backfill",
      confirm: name,
      fields: [],
      run: async () => {
        const r = await post(`topics/${enc(name)}/export/backfill`, { confirm: name });
        return `Backfill started: generation ${r.generation}.`;
      },
    }));
  ctx.view.append(holder, chart, backfill);

  const tableHolder = h("div", { id: "table-holder" });
  ctx.view.append(tableHolder);
  let tableShown = null;

  const points = [];
  let shown = null; // the answer on screen, to redraw only when it changed
  let first = true;
  // Polled even when not exported: the page turns on once export.enabled is set.
  ctx.poll(POLL_MS, async () => {
    const request = ctx.get(`topics/${enc(name)}/export`);
    const e = await (first ? ctx.load("Loading the export…", request) : request);
    first = false;
    const text = JSON.stringify(e);
    if (text !== shown) {
      shown = text;
      holder.replaceChildren(e.enabled ? details(name, e) : notExported(name));
    }
    chart.hidden = !e.enabled;
    backfill.hidden = !(e.enabled && e.backfill);
    if (e.table) {
      const t = await ctx.get(`topics/${enc(name)}/table`);
      const tText = JSON.stringify(t);
      if (tText !== tableShown) {
        tableShown = tText;
        tableHolder.replaceChildren(tableDetails(t));
      }
    }
    if (!e.enabled) return;
    const now = Date.now();
    points.push([now, sum(e.partitions, "lag")]);
    while (points.length && points[0][0] < now - KEEP_MS) points.shift();
    const t0 = Math.min(now - 60000, points[0][0]);
    drawChart(figure, { series: [{ name: "lag", points }], window: [t0, now],
      format: (v) => int(Math.round(v)), unit: "records" });
  });
}

export default { render };
