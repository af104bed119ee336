// The topics exported to Parquet (export.enabled=true) and how far each
// export has come: files, rows, bytes, and the records not exported yet.

import { enc } from "/ui/assets/api.js";
import { bytes, h, int, isoTime, table } from "/ui/assets/dom.js";

async function render(ctx) {
  ctx.heading("Exports");
  const answer = await ctx.load("Loading the exports…", ctx.get("exports"));
  const topics = [...(answer.topics || [])].sort((a, b) => a.topic.localeCompare(b.topic));
  ctx.view.append(
    h("p", { class: "hint" }, "The indexer writes each exported topic's committed records to Parquet files; "
      + "the lag is the records committed and not written to a file yet."),
    table({
      caption: "Exported topics",
      id: "exports-list",
      columns: [{ label: "Topic" }, { label: "Partitions", numeric: true }, { label: "Files", numeric: true },
        { label: "Rows", numeric: true }, { label: "Bytes", numeric: true }, { label: "Lag (records)", numeric: true },
        { label: "Latest record exported" }],
      rows: topics.map((t) => [
        h("a", { href: `#/topics/${enc(t.topic)}/export` }, t.topic), int(t.partitions), int(t.files), int(t.rows),
        bytes(t.bytes), int(t.lag), isoTime(t.latest_max_timestamp)]),
      empty: "No topic is exported (a topic's export.enabled setting turns its Parquet export on).",
    }));
}

export default { render };
