// One topic: its partitions' offsets and owners, its configs, its size.

import { enc } from "/ui/assets/api.js";
import { bytes, facts, h, int, offset, table } from "/ui/assets/dom.js";

// Configs set on the topic first (they are what someone chose), then by name.
function sortConfigs(configs) {
  return [...configs].sort((a, b) => (a.default === b.default ? a.name.localeCompare(b.name) : a.default ? 1 : -1));
}

async function render(ctx) {
  const [name] = ctx.params;
  ctx.heading(`Topic ${name}`);
  const t = await ctx.load("Loading the topic…", ctx.get(`topics/${enc(name)}`));

  ctx.view.append(
    h("p", {}, h("a", { href: `#/topics/${enc(name)}/records`, id: "records-link" }, `Read the records of ${name}`)),
    facts([["Topic id", h("code", {}, t.id ?? "—")], ["Partitions", int(t.partitions.length)],
      ["Stored bytes", h("span", { id: "stored-bytes" }, bytes(t.stored_bytes))]], "Topic"),
    h("section", { "aria-labelledby": "h-partitions" },
      h("h2", { id: "h-partitions" }, "Partitions"),
      table({
        caption: `Partitions of ${name}`,
        id: "partitions",
        columns: [{ label: "Partition", numeric: true }, { label: "First offset", numeric: true },
          { label: "End offset", numeric: true }, { label: "LSO", numeric: true }, { label: "Records", numeric: true },
          { label: "Owner broker", numeric: true }, { label: "Epoch", numeric: true }, { label: "Hand-over to" }],
        rows: t.partitions.map((p) => [String(p.partition), offset(p.first_offset), offset(p.end_offset),
          offset(p.lso), int(p.records), p.owner === null ? "unowned" : String(p.owner), offset(p.epoch),
          p.handover_to === null || p.handover_to === undefined ? "—" : `broker ${p.handover_to}`]),
        empty: "No partitions.",
      })),
    h("section", { "aria-labelledby": "h-configs" },
      h("h2", { id: "h-configs" }, "Configs"),
      t.configs_error ? h("p", { class: "notice" }, `Configs not available: ${t.configs_error}`) : null,
      table({
        caption: `Configs of ${name} (set ones first)`,
        id: "configs",
        columns: [{ label: "Name" }, { label: "Value" }, { label: "Source" }],
        rows: sortConfigs(t.configs || []).map((c) => [
          h("code", {}, c.name),
          c.sensitive ? h("em", {}, "(hidden)") : c.value === null || c.value === undefined ? "—"
            : c.value === "" ? h("span", { class: "null" }, "(empty)") : h("code", {}, c.value),
          c.default ? "default" : h("strong", {}, "set on topic"),
        ]),
        empty: "No configs.",
      })),
  );
}

export default { render };
