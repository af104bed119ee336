// One topic: its partitions' offsets and owners, the producers that wrote to
// it recently, the store objects that hold each partition's log, its
// configs, its size.

import { actionForm } from "/ui/assets/actions.js";
import { enc, post } from "/ui/assets/api.js";
import { bytes, facts, h, int, isoTime, offset, table } from "/ui/assets/dom.js";

// Configs set on the topic first (they are what someone chose), then by name.
function sortConfigs(configs) {
  return [...configs].sort((a, b) => (a.default === b.default ? a.name.localeCompare(b.name) : a.default ? 1 : -1));
}

// The topic's facts, partitions and settings; `producers` and `objects` are
// the sections the producers and the store objects are shown in once loaded.
function details(name, t, producers, objects) {
  return [
    h("p", { class: "links" },
      h("a", { href: `#/topics/${enc(name)}/records`, id: "records-link" }, `Read the records of ${name}`),
      h("a", { href: `#/topics/${enc(name)}/export`, id: "export-link" }, `Export of ${name}`)),
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
    producers,
    objects,
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
  ];
}

// The producers each partition knows (idempotent and transactional ones that
// wrote recently), one row per partition and producer.
function producersTable(name, answer) {
  const partitions = [...(answer.partitions || [])].sort((a, b) => a.partition - b.partition);
  const rows = [];
  for (const p of partitions) {
    for (const pr of [...(p.producers || [])].sort((a, b) => a.producer_id - b.producer_id)) {
      // Producer ids, epochs and sequences are names and positions: no separators.
      rows.push([String(p.partition), String(pr.producer_id), String(pr.producer_epoch), offset(pr.last_sequence),
        isoTime(pr.last_timestamp),
        pr.current_txn_start_offset === null || pr.current_txn_start_offset < 0 ? "—"
          : offset(pr.current_txn_start_offset)]);
    }
  }
  const failed = partitions.filter((p) => p.error);
  return [
    failed.length
      ? h("p", { class: "notice", id: "producers-partition-errors" }, "Producers not available for ",
        failed.map((p) => `partition ${p.partition} (${p.error})`).join(", "), ".")
      : null,
    table({
      caption: `Producers that wrote to ${name} recently`,
      id: "producers",
      rowHeader: false,
      columns: [{ label: "Partition", numeric: true }, { label: "Producer id", numeric: true },
        { label: "Epoch", numeric: true }, { label: "Last sequence", numeric: true }, { label: "Last write" },
        { label: "Open transaction from", numeric: true }],
      rows,
      empty: "No producers have written recently.",
    }),
  ];
}

// Loads the producers into their section. A failure stays in the section (a
// principal may read the topic and not its producers): the rest of the page
// holds.
async function loadProducers(ctx, name, section) {
  const body = section.querySelector(".producers-body");
  try {
    const answer = await ctx.load("Loading the producers…", ctx.get(`topics/${enc(name)}/producers`));
    body.replaceChildren(...producersTable(name, answer).filter(Boolean));
  } catch (error) {
    if (error && error.name === "AbortError") return; // the page was left
    body.replaceChildren(h("p", { class: "notice", id: "producers-error" },
      `Producers not available: ${error && error.message ? error.message : error}`));
  }
}

// A partition's objects: WAL objects not compacted yet and segments, the
// last 100 of them.
function objectsTable(name, answer) {
  const shown = answer.objects.length;
  const caption = `Store objects of ${name}, partition ${answer.partition}`;
  const wrap = table({
    caption,
    id: `objects-${answer.partition}`,
    rowHeader: false,
    columns: [{ label: "Kind" }, { label: "Object key" }, { label: "First offset", numeric: true },
      { label: "Last offset", numeric: true }, { label: "Bytes of the partition", numeric: true },
      { label: "Object bytes", numeric: true }, { label: "Endpoint" }],
    rows: answer.objects.map((o) => [o.kind === "wal" ? "WAL" : o.kind, h("code", {}, o.key), offset(o.first_offset),
      offset(o.last_offset), bytes(o.bytes), bytes(o.object_bytes), h("code", {}, o.endpoint)]),
    empty: "No objects: nothing is stored for this partition yet.",
  });
  // Long keys may make it scroll sideways: the keyboard reaches it too.
  wrap.setAttribute("tabindex", "0");
  wrap.setAttribute("role", "region");
  wrap.setAttribute("aria-label", caption);
  return [
    h("p", { class: "hint", id: `objects-summary-${answer.partition}` },
      `Partition ${answer.partition}: ${int(answer.total)} object${answer.total === 1 ? "" : "s"} `
        + `(${int(answer.segments)} segment${answer.segments === 1 ? "" : "s"}, `
        + `${int(answer.wal_objects)} WAL object${answer.wal_objects === 1 ? "" : "s"}), `
        + `log from ${answer.log_start_offset} to ${answer.high_watermark}`
        + (shown < answer.total ? `; the last ${int(shown)} shown.` : ".")),
    wrap,
  ];
}

// Loads the chosen partition's objects into their section; a refusal (no
// DESCRIBE) stays in the section.
function objectsSection(ctx, name, t) {
  const partition = h("select", { id: "objects-partition" },
    t.partitions.map((p) => h("option", { value: String(p.partition) }, `Partition ${p.partition}`)));
  const body = h("div", { class: "objects-body" }, h("p", { class: "status" }, "Loading the objects…"));
  const load = async () => {
    try {
      const answer = await ctx.load("Loading the objects…",
        ctx.get(`topics/${enc(name)}/objects`, { partition: partition.value }));
      body.replaceChildren(...objectsTable(name, answer));
    } catch (error) {
      if (error && error.name === "AbortError") return; // the page was left
      body.replaceChildren(h("p", { class: "notice", id: "objects-error" },
        `Objects not available: ${error && error.message ? error.message : error}`));
    }
  };
  partition.addEventListener("change", () => { load(); });
  const section = h("section", { "aria-labelledby": "h-objects", id: "objects-section" },
    h("h2", { id: "h-objects" }, "Store objects"),
    h("p", { class: "hint" }, "The objects that hold a partition's log, as the metadata service's index records them: "
      + "WAL objects not compacted into segments yet, and segments."),
    h("div", { class: "field" }, h("label", { for: "objects-partition" }, "Partition"), partition),
    body);
  return { section, load };
}

// The topic's actions: grow it, change a setting, produce a record (to
// test a consumer), delete it (its name typed again first).
function actions(name, t, refresh) {
  const path = `topics/${enc(name)}`;
  return h("section", { "aria-labelledby": "h-actions" },
    h("h2", { id: "h-actions" }, "Actions"),
    h("div", { class: "action-grid" },
      actionForm({
        id: "add-partitions",
        title: "Add partitions",
        submit: "Add partitions",
        fields: [{ name: "count", label: "Partitions after", type: "number", min: t.partitions.length + 1,
          required: true, value: String(t.partitions.length + 1),
          hint: `It has ${t.partitions.length}; a topic's partitions can only grow.` }],
        run: async (v) => {
          await post(`${path}/partitions`, { count: Number(v.count) });
          return `${name} has ${v.count} partitions now.`;
        },
        done: refresh,
      }),
      actionForm({
        id: "alter-config",
        title: "Change a setting",
        submit: "Apply",
        fields: [
          { name: "key", label: "Setting", required: true, placeholder: "retention.ms" },
          { name: "value", label: "Value", hint: "Empty: back to its default." },
        ],
        run: async (v) => {
          const key = v.key.trim();
          const body = v.value === "" ? { delete: [key] } : { set: { [key]: v.value } };
          await post(`${path}/configs`, body);
          return v.value === "" ? `${key} is back to its default.` : `${key} is ${v.value} now.`;
        },
        done: refresh,
      }),
      actionForm({
        id: "produce",
        title: "Produce a record",
        submit: "Produce",
        fields: [
          { name: "partition", label: "Partition", type: "number", min: 0, hint: "Empty: by the key's hash." },
          { name: "key", label: "Key", hint: "Empty: no key." },
          { name: "value", label: "Value", type: "textarea" },
        ],
        run: async (v) => {
          const body = { key: v.key === "" ? null : v.key, value: v.value };
          if (v.partition !== "") body.partition = Number(v.partition);
          const r = await post(`${path}/produce`, body);
          return `Written to partition ${r.partition} at offset ${r.offset}.`;
        },
        done: refresh,
      }),
      actionForm({
        id: "delete-topic",
        title: "Delete this topic",
        submit: "Delete topic",
        confirm: name,
        fields: [],
        run: async () => {
          await post(`${path}/delete`, { confirm: name });
          return `Topic ${name} deleted.`;
        },
        done: () => { window.location.hash = "#/topics"; },
      })));
}

async function render(ctx) {
  const [name] = ctx.params;
  ctx.heading(`Topic ${name}`);
  const holder = h("div", {});
  ctx.view.append(holder);
  let actionsShown = null;
  const refresh = async () => {
    const t = await ctx.get(`topics/${enc(name)}`);
    const producers = h("section", { "aria-labelledby": "h-producers", id: "producers-section" },
      h("h2", { id: "h-producers" }, "Producers"),
      h("div", { class: "producers-body" }, h("p", { class: "status" }, "Loading the producers…")));
    const objects = objectsSection(ctx, name, t);
    holder.replaceChildren(...details(name, t, producers, objects.section));
    if (!actionsShown) {
      actionsShown = actions(name, t, () => refresh().catch(ctx.fail));
      ctx.view.append(actionsShown);
    }
    // After the topic: its page is useful before the producers and objects
    // are known.
    await Promise.all([loadProducers(ctx, name, producers), objects.load()]);
  };
  await ctx.load("Loading the topic…", refresh());
}

export default { render };
