// A partition's records: from an offset or a time, a page at a time, each
// record shown as text, JSON or hex (chosen per record); and, where this
// process runs an indexer, the topic's records searched by key.

import { enc } from "/ui/assets/api.js";
import { h, int, isoTime, offset as showOffset, table } from "/ui/assets/dom.js";
import { showValue } from "/ui/assets/decode.js";

const MODES = [["text", "Text"], ["json", "JSON"], ["hex", "Hex"]];

function field(id, label, input) {
  input.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), input);
}

// The cells of one record that depend on the view mode.
function recordCells(r, mode) {
  const headers = (r.headers || []).length
    ? h("ul", { class: "headers" }, r.headers.map((hd) =>
        h("li", {}, h("span", { class: "header-key" }, hd.key), ": ", showValue(hd.value, mode === "json" ? "text" : mode, hd.key))))
    : h("span", { class: "null" }, "none");
  return [showValue(r.key, mode, "Key"), showValue(r.value, mode, "Value"), headers];
}

// A record's row; with `withPartition`, its partition first (a search's
// records come from every partition).
function recordRow(r, withPartition = false) {
  let mode = "text";
  const row = h("tr", { "data-offset": String(r.offset) });
  if (withPartition) {
    row.dataset.partition = String(r.partition);
    row.append(h("td", { class: "num" }, String(r.partition)));
  }
  const buttons = MODES.map(([value, label]) => h("button", {
    type: "button", class: "mode", "data-mode": value, "aria-pressed": value === mode ? "true" : "false",
  }, label));
  const what = withPartition ? `record ${r.partition}/${r.offset}` : `record ${r.offset}`;
  const group = h("div", { class: "modes", role: "group", "aria-label": `View of ${what}` }, buttons);
  const cells = recordCells(r, mode).map((c, i) => h("td", { class: ["key", "value", "hdrs"][i] }, c));
  row.append(h("th", { scope: "row", class: "num" }, showOffset(r.offset)), h("td", { class: "ts" }, isoTime(r.timestamp)),
    ...cells, h("td", {}, group));
  for (const button of buttons) {
    button.addEventListener("click", () => {
      mode = button.dataset.mode;
      for (const b of buttons) b.setAttribute("aria-pressed", b === button ? "true" : "false");
      recordCells(r, mode).forEach((c, i) => cells[i].replaceChildren(c));
    });
  }
  return row;
}

// The search by key: a form, and the records found in a table. `who` is
// whoami's answer: without an indexer here the section says where to ask.
function searchSection(ctx, name, who) {
  const section = h("section", { "aria-labelledby": "h-search", id: "search-section" },
    h("h2", { id: "h-search" }, "Search by key"));
  if (!who.search) {
    section.append(h("p", { class: "notice", id: "search-unavailable" },
      "This console reaches no indexer, so it cannot search by key here (a proxy of a cluster searches with ",
      h("code", {}, "--console-indexer http://HOST:PORT"), "). Ask the indexer with ",
      h("code", {}, `floe query --indexer URL ${name} --key KEY`), "."));
    return section;
  }
  const key = h("input", { type: "text", required: true, spellcheck: "false", autocomplete: "off" });
  const from = h("input", { type: "datetime-local", step: 1 });
  const to = h("input", { type: "datetime-local", step: 1 });
  const limit = h("input", { type: "number", min: 1, max: 500, step: 1, value: "100", required: true });
  const form = h("form", { class: "records-form", id: "search-form" },
    field("search-key", "Key (text)", key),
    field("search-from", "From (your local time, optional)", from),
    field("search-to", "To (your local time, optional)", to),
    field("search-limit", "Limit", limit),
    h("button", { type: "submit" }, "Search"));
  const summary = h("p", { id: "search-summary", "aria-live": "polite" });
  const holder = h("div", { id: "search-table" });
  section.append(h("p", { class: "hint" },
    "Through the indexer: the topic's Parquet exports and the log not exported yet (export.enabled=true)."),
  form, summary, holder);

  const time = (input, label) => {
    if (!input.value) return undefined;
    const ms = new Date(input.value).getTime(); // datetime-local is read as local time
    if (Number.isNaN(ms)) throw new Error(`${label}: not a time.`);
    return ms;
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    let q;
    try {
      q = { key: key.value, limit: limit.value, from: time(from, "From"), to: time(to, "To") };
    } catch (error) {
      ctx.alert(error.message);
      return;
    }
    ctx.load("Searching…", ctx.get(`topics/${enc(name)}/search`, q)).then((answer) => {
      ctx.clearAlert();
      const n = answer.records.length;
      summary.textContent = `${int(n)} record${n === 1 ? "" : "s"} with key ${JSON.stringify(key.value)}`
        + (n >= answer.limit ? ` (the first ${int(answer.limit)}; there may be more).` : ".");
      const t = table({
        caption: `Records of ${name} with key ${key.value}`,
        id: "search-results",
        rowHeader: false,
        columns: [{ label: "Partition", numeric: true }, { label: "Offset", numeric: true }, { label: "Timestamp" },
          { label: "Key" }, { label: "Value" }, { label: "Headers" }, { label: "View" }],
        rows: [],
        empty: "No records with this key.",
      });
      if (n) t.querySelector("tbody").replaceChildren(...answer.records.map((r) => recordRow(r, true)));
      holder.replaceChildren(t);
    }).catch(ctx.fail);
  });
  return section;
}

async function render(ctx) {
  const [name] = ctx.params;
  ctx.heading(`Records of ${name}`);
  // The topic's partitions give the form its bounds and where partition 0 starts.
  const topic = await ctx.load("Loading the topic…", ctx.get(`topics/${enc(name)}`));
  const partitions = topic.partitions.map((p) => p.partition);
  const firstOf = (p) => {
    const part = topic.partitions.find((x) => x.partition === p);
    return part ? part.first_offset : 0;
  };

  const partition = h("input", { type: "number", min: 0, max: Math.max(0, partitions.length - 1), step: 1, value: "0", required: true });
  const fromOffset = h("input", { type: "radio", name: "from", value: "offset", id: "from-offset", checked: true });
  const fromTime = h("input", { type: "radio", name: "from", value: "time", id: "from-time" });
  const offsetInput = h("input", { type: "number", min: 0, step: 1, value: String(firstOf(0) ?? 0) });
  const timeInput = h("input", { type: "datetime-local", step: 1 });
  const limit = h("input", { type: "number", min: 1, max: 200, step: 1, value: "20", required: true });
  // Every partition at once: merged by timestamp, from a time or the start.
  const across = h("input", { type: "checkbox", id: "rec-all" });
  const form = h("form", { class: "records-form", id: "records-form" },
    field("rec-partition", "Partition", partition),
    h("div", { class: "choice" }, across, h("label", { for: "rec-all" }, "All partitions, by time")),
    h("fieldset", {}, h("legend", {}, "Start"),
      h("div", { class: "choice" }, fromOffset, h("label", { for: "from-offset" }, "From offset")),
      field("rec-offset", "Offset", offsetInput),
      h("div", { class: "choice" }, fromTime, h("label", { for: "from-time" }, "From time")),
      field("rec-time", "Time (your local time)", timeInput)),
    field("rec-limit", "Limit", limit),
    h("button", { type: "submit" }, "Show records"));
  const summary = h("p", { id: "records-summary", "aria-live": "polite" });
  const holder = h("div", { id: "records-table" });
  const nextButton = h("button", { type: "button", id: "records-next", disabled: true }, "Next page");

  const who = await ctx.get("whoami");
  ctx.view.append(h("p", {}, h("a", { href: `#/topics/${enc(name)}` }, `Back to topic ${name}`)), form, summary, holder,
    h("div", { class: "pager" }, nextButton), searchSection(ctx, name, who));

  let next = null;
  let cursor = null;
  across.addEventListener("change", () => {
    partition.disabled = across.checked;
    fromOffset.disabled = across.checked;
    offsetInput.disabled = across.checked;
    if (across.checked && fromOffset.checked) fromTime.checked = false;
  });

  // A page of every partition merged by time; the next one from its cursor.
  async function loadAll(query) {
    const answer = await ctx.load("Loading records…", ctx.get(`topics/${enc(name)}/records/all`, query));
    ctx.clearAlert();
    cursor = answer.more ? answer.cursor : null;
    next = null;
    nextButton.disabled = !answer.more;
    summary.textContent = answer.records.length
      ? `All ${answer.partitions.length} partitions by time: ${int(answer.records.length)} records`
        + `${answer.more ? "; more follow." : "; the end of every partition."}`
      : "All partitions: no records from there.";
    const t = table({
      caption: `Records of ${name}, every partition by time`,
      id: "records",
      columns: [{ label: "Partition", numeric: true }, { label: "Offset", numeric: true }, { label: "Timestamp" },
        { label: "Key" }, { label: "Value" }, { label: "Headers" }, { label: "View" }],
      rows: [],
      empty: "No records.",
    });
    if (answer.records.length) t.querySelector("tbody").replaceChildren(...answer.records.map((r) => recordRow(r, true)));
    holder.replaceChildren(t);
  }

  async function load(query) {
    cursor = null;
    const answer = await ctx.load("Loading records…", ctx.get(`topics/${enc(name)}/records`, query));
    ctx.clearAlert();
    next = answer.next_offset;
    nextButton.disabled = next === null || next === undefined || next >= answer.end_offset;
    summary.textContent = answer.records.length
      ? `Partition ${answer.partition}: offsets ${answer.records[0].offset}–${answer.records[answer.records.length - 1].offset}, `
        + `${int(answer.records.length)} records; the partition ends at ${answer.end_offset}.`
      : `Partition ${answer.partition}: no records from ${answer.from}; the partition ends at ${answer.end_offset}.`;
    const t = table({
      caption: `Records of ${name}, partition ${answer.partition}`,
      id: "records",
      columns: [{ label: "Offset", numeric: true }, { label: "Timestamp" }, { label: "Key" }, { label: "Value" },
        { label: "Headers" }, { label: "View" }],
      rows: [],
      empty: "No records.",
    });
    if (answer.records.length) t.querySelector("tbody").replaceChildren(...answer.records.map((r) => recordRow(r)));
    holder.replaceChildren(t);
  }

  const query = () => {
    const q = { partition: partition.value, limit: limit.value };
    if (fromTime.checked) {
      const ms = new Date(timeInput.value).getTime(); // datetime-local is read as local time
      if (Number.isNaN(ms)) throw new Error("Choose a time to start from.");
      q.timestamp = ms;
    } else {
      q.offset = offsetInput.value;
    }
    return q;
  };

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (across.checked) {
      const q = { limit: limit.value };
      if (fromTime.checked && timeInput.value) {
        const ms = new Date(timeInput.value).getTime();
        if (Number.isNaN(ms)) {
          ctx.alert("Choose a time to start from.");
          return;
        }
        q.timestamp = ms;
      }
      loadAll(q).catch(ctx.fail);
      return;
    }
    let q;
    try {
      q = query();
    } catch (error) {
      ctx.alert(error.message);
      return;
    }
    load(q).catch(ctx.fail);
  });
  nextButton.addEventListener("click", () => {
    if (cursor) {
      loadAll({ limit: limit.value, cursor }).catch(ctx.fail);
      return;
    }
    fromOffset.checked = true;
    offsetInput.value = String(next);
    load({ partition: partition.value, limit: limit.value, offset: next }).catch(ctx.fail);
  });

  await load({ partition: 0, offset: firstOf(0) ?? 0, limit: limit.value });
}

export default { render };
