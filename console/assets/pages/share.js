// A share group's internals, below its group page's sections: each
// share-partition's records by state, by delivery count and by the minute
// they come due, the records locked now and by whom, and the group's dead
// letters with a redrive (a dry run first, then the group's name typed).
// Shown only for a share group; refreshed with the page's poll (5 s). The
// forms are made once and never redrawn while someone types in them.

import { actionForm } from "/ui/assets/actions.js";
import { enc, post } from "/ui/assets/api.js";
import { showValue } from "/ui/assets/decode.js";
import { facts, h, int, isoTime, offset, table } from "/ui/assets/dom.js";

// Acquired records shown at most (the server lists at most 50 a partition).
const ACQUIRED_SHOWN = 200;
// Redrive calls one click makes at most (each redrives up to 10,000 records).
const REDRIVE_ROUNDS = 50;

const byPartition = (a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition;
const count = (n) => int(n ?? 0);
const delayed = (x) => (x.parked ?? 0) + (x.timer_pending ?? 0);
const plural = (n, one, many) => `${int(n)} ${n === 1 ? one : many}`;

// A minute (ms since the epoch) as local "YYYY-MM-DD HH:MM".
function localMinute(ms) {
  const d = new Date(ms);
  if (Number.isNaN(d.getTime())) return "—";
  const two = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}`;
}

// How long a record's lock still runs, as seen from this browser's clock.
function lockLeft(untilMs, now) {
  if (untilMs === null || untilMs === undefined) return "—";
  const s = Math.ceil((untilMs - now) / 1000);
  return s > 0 ? `in ${int(s)} s` : "expired";
}

function totals(t) {
  const fact = (id, label, value) => [label, h("span", { id: `share-total-${id}` }, count(value))];
  const dl = facts([
    fact("in-flight", "In flight", t.in_flight),
    fact("available", "Available", t.available),
    fact("acquired", "Acquired", t.acquired),
    fact("backing-off", "Backing off", t.backing_off),
    fact("delayed", "Delayed", delayed(t)),
    fact("dead-lettering", "Waiting for the dead-letter topic", t.dead_lettering),
    fact("acknowledged", "Acknowledged", t.acknowledged),
    fact("archived", "Archived", t.archived),
  ], "Share-partition totals");
  dl.id = "share-totals";
  return dl;
}

function partitionsTable(id, parts) {
  return table({
    caption: `Share-partitions of ${id}`,
    id: "share-partitions",
    rowHeader: false,
    columns: [{ label: "Topic" }, { label: "Partition", numeric: true }, { label: "Start", numeric: true },
      { label: "End", numeric: true }, { label: "Available", numeric: true }, { label: "Acquired", numeric: true },
      { label: "Backing off", numeric: true }, { label: "Delayed", numeric: true },
      { label: "Dead-lettering", numeric: true }, { label: "Read" }, { label: "Error" }],
    rows: parts.map((p) => {
      const s = p.state;
      const n = (v) => (s ? count(v) : "—");
      return [h("a", { href: `#/topics/${enc(p.topic)}` }, p.topic), String(p.partition), offset(p.start_offset),
        offset(s ? s.end : null), n(s && s.available), n(s && s.acquired), n(s && s.backing_off),
        s ? count(delayed(s)) : "—", n(s && s.dead_lettering),
        !s ? h("span", { class: "null" }, "no state") : s.in_memory ? "from memory" : "as last written",
        p.error ? h("span", { class: "error-text" }, p.error) : "—"];
    }),
    empty: "The group has no share-partitions yet.",
  });
}

function deliveriesTable(t) {
  const list = [...(t.deliveries || [])].sort((a, b) => a.deliveries - b.deliveries);
  return table({
    caption: "Records in flight by delivery count",
    id: "share-deliveries",
    columns: [{ label: "Deliveries", numeric: true }, { label: "Records", numeric: true }],
    rows: list.map((d) => [int(d.deliveries), count(d.records)]),
    empty: "No record delivered yet.",
  });
}

function dueTable(t) {
  const list = [...(t.due || [])].sort((a, b) => a.minute_ms - b.minute_ms);
  return table({
    caption: "Delayed and backing-off records by the minute they come due (your local time)",
    id: "share-due",
    columns: [{ label: "Minute" }, { label: "Records", numeric: true }],
    rows: list.map((d) => [localMinute(d.minute_ms), count(d.records)]),
    empty: "No record is delayed or backing off.",
  });
}

// Delayed records in the object store's timer buckets: only each bucket's
// first due time is known. Shown only when there are any.
function timerBuckets(parts) {
  const rows = [];
  for (const p of parts) {
    for (const b of (p.state && p.state.timer_buckets) || []) rows.push([p, b]);
  }
  if (!rows.length) return null;
  rows.sort(([p, a], [q, b]) => byPartition(p, q) || a.next_due_ms - b.next_due_ms);
  return table({
    caption: "Timer buckets in the object store (only each bucket's first due time is known; your local time)",
    id: "share-timer-buckets",
    rowHeader: false,
    columns: [{ label: "Topic" }, { label: "Partition", numeric: true }, { label: "First due" },
      { label: "Records", numeric: true }],
    rows: rows.map(([p, b]) => [p.topic, String(p.partition), localMinute(b.next_due_ms), count(b.pending)]),
  });
}

function acquiredTable(parts, now) {
  const all = [];
  let acquired = 0;
  for (const p of parts) {
    if (!p.state) continue;
    acquired += p.state.acquired ?? 0;
    for (const r of p.state.acquired_records || []) all.push({ ...r, topic: p.topic, partition: p.partition });
  }
  all.sort((a, b) => byPartition(a, b) || a.offset - b.offset);
  const shown = all.slice(0, ACQUIRED_SHOWN);
  const note = shown.length < acquired
    ? h("p", { class: "hint", id: "share-acquired-note" },
      `Showing ${int(shown.length)} of ${int(acquired)} acquired records: the server lists at most 50 a partition`
      + `${all.length > ACQUIRED_SHOWN ? `, this page at most ${int(ACQUIRED_SHOWN)}` : ""}.`)
    : null;
  return [table({
    caption: "Acquired records (locked to a member until acknowledged or their lock expires)",
    id: "share-acquired",
    rowHeader: false,
    columns: [{ label: "Topic" }, { label: "Partition", numeric: true }, { label: "Offset", numeric: true },
      { label: "Member" }, { label: "Deliveries", numeric: true }, { label: "Lock expires" }],
    rows: shown.map((r) => [r.topic, String(r.partition), offset(r.offset), h("code", {}, r.member_id),
      int(r.deliveries), lockLeft(r.lock_until_ms, now)]),
    empty: "No record is acquired now.",
  }), note];
}

function configsTable(id, s) {
  const entries = Object.entries(s.configs || {}).sort(([a], [b]) => a.localeCompare(b));
  return [
    s.configs_error ? h("p", { class: "notice" }, `Configs not available: ${s.configs_error}`) : null,
    table({
      caption: `Configs of ${id}`,
      id: "share-configs",
      columns: [{ label: "Name" }, { label: "Value" }],
      rows: entries.map(([k, v]) => [h("code", {}, k), v === "" ? h("span", { class: "null" }, "(empty)") : h("code", {}, v)]),
      empty: "No configs.",
    }),
  ];
}

// The share-partitions section's contents (redrawn when the answer changed,
// or every poll while records are locked: their locks count down). The
// configs are apart, in a <details> kept open across redraws.
function internals(id, s, now) {
  const parts = [...(s.partitions || [])].sort(byPartition);
  const t = s.totals || {};
  return [
    h("p", { class: "hint" }, "In flight: the records between each share-partition's start and end. ",
      "Delayed: records parked in memory or waiting in timer buckets in the object store. ",
      "“As last written”: the partition's owner does not hold it in memory, so its last written state is shown ",
      "(nothing shows as acquired then)."),
    totals(t),
    partitionsTable(id, parts),
    h("div", { class: "share-tables" }, deliveriesTable(t), dueTable(t)),
    timerBuckets(parts),
    acquiredTable(parts, now),
  ];
}

// The dead-letter topic's partitions and how much is not redriven yet.
function deadLetterSummary(d) {
  const topic = h("a", { href: `#/topics/${enc(d.topic)}`, id: "dead-letters-topic" }, d.topic);
  if (d.error) {
    return [facts([["Dead-letter topic", topic]], "Dead letters"),
      h("p", { class: "notice", id: "dead-letters-error" }, `The dead-letter topic could not be read: ${d.error}`)];
  }
  const parts = [...(d.partitions || [])].sort((a, b) => a.partition - b.partition);
  return [
    facts([["Dead-letter topic", topic],
      ["Not redriven", h("span", { id: "dead-letters-not-redriven" }, count(d.not_redriven))],
      ["Redrive mark kept by", h("code", {}, d.mark_group)]], "Dead letters"),
    d.marks_error ? h("p", { class: "notice" }, `The redrive mark could not be read: ${d.marks_error}`) : null,
    table({
      caption: `Partitions of the dead-letter topic ${d.topic}`,
      id: "dead-letters",
      columns: [{ label: "Partition", numeric: true }, { label: "First offset", numeric: true },
        { label: "End offset", numeric: true }, { label: "Redrive mark", numeric: true },
        { label: "Not redriven", numeric: true }],
      rows: parts.map((p) => [String(p.partition), offset(p.first_offset), offset(p.end_offset),
        p.redrive_mark === null || p.redrive_mark === undefined ? h("span", { class: "null" }, "none") : offset(p.redrive_mark),
        count(p.not_redriven)]),
      empty: "The dead-letter topic has no partitions.",
    }),
  ];
}

function field(id, label, input) {
  input.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), input);
}

function deadLetterRow(r) {
  const o = r.origin;
  const group = !o ? "—" : r.of_this_group ? o.group : [o.group, h("span", { class: "tag" }, "another group")];
  return [offset(r.offset),
    o ? h("a", { href: `#/topics/${enc(o.topic)}` }, o.topic) : h("span", { class: "null" }, "no floe-dlq headers"),
    o ? String(o.partition) : "—", o ? offset(o.offset) : "—", o && o.reason ? o.reason : "—",
    o && o.deliveries !== null && o.deliveries !== undefined ? int(o.deliveries) : "—", group,
    showValue(r.key, "text", "Key"), showValue(r.value, "text", "Value")];
}

// A page of the dead-letter topic's records with where each came from;
// from the redrive mark unless an offset is given. Made once.
function deadLetterRecords(ctx, id) {
  const partition = h("input", { type: "number", min: 0, step: 1, value: "0", required: true });
  const from = h("input", { type: "number", min: 0, step: 1 });
  const limit = h("input", { type: "number", min: 1, max: 200, step: 1, value: "20", required: true });
  const form = h("form", { class: "records-form", id: "dead-letter-form", "aria-label": "Dead letters to show" },
    field("dl-partition", "Partition", partition),
    field("dl-offset", "From offset", from),
    field("dl-limit", "Limit", limit),
    h("button", { type: "submit" }, "Show dead letters"));
  from.setAttribute("aria-describedby", "dl-offset-hint");
  const hint = h("p", { class: "hint", id: "dl-offset-hint" },
    "From offset empty: from the redrive mark, the dead letters not redriven yet.");
  const summary = h("p", { id: "dead-letter-summary", "aria-live": "polite" });
  const holder = h("div", { id: "dead-letter-records-holder" });
  const nextButton = h("button", { type: "button", id: "dead-letter-next", disabled: true }, "Next page");
  let next = null;

  async function load() {
    const answer = await ctx.get(`groups/${enc(id)}/dead-letters`,
      { partition: partition.value, offset: from.value, limit: limit.value });
    const list = answer.records || [];
    next = answer.next_offset;
    nextButton.disabled = next === null || next === undefined || answer.end_offset === null
      || answer.end_offset === undefined || next >= answer.end_offset;
    summary.textContent = list.length
      ? `Partition ${answer.partition} of ${answer.topic}: offsets ${list[0].offset}–${list[list.length - 1].offset}, `
        + `${plural(list.length, "record", "records")}; the partition ends at ${answer.end_offset}.`
      : `Partition ${answer.partition} of ${answer.topic}: no records from ${answer.from}; `
        + `the partition ends at ${answer.end_offset}.`;
    holder.replaceChildren(table({
      caption: `Dead letters in ${answer.topic}, partition ${answer.partition}, and where they came from`,
      id: "dead-letter-records",
      columns: [{ label: "Offset", numeric: true }, { label: "Origin topic" }, { label: "Partition", numeric: true },
        { label: "Origin offset", numeric: true }, { label: "Reason" }, { label: "Deliveries", numeric: true },
        { label: "Group" }, { label: "Key" }, { label: "Value" }],
      rows: list.map(deadLetterRow),
      empty: "No dead letters here.",
    }));
  }
  const show = () => load().catch((error) => {
    if (error && error.name === "AbortError") return;
    summary.textContent = "";
    holder.replaceChildren(h("p", { class: "notice", id: "dead-letter-records-error" },
      `Dead letters not available: ${error && error.message ? error.message : error}`));
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    show();
  });
  nextButton.addEventListener("click", () => {
    from.value = String(next);
    show();
  });
  return { node: h("div", {}, h("h3", {}, "Records"), form, hint, summary, holder, h("div", { class: "pager" }, nextButton)),
    show };
}

// Per dead-letter partition: what a redrive would do, or did.
function redrivePlan(answer) {
  const parts = [...(answer.partitions || [])].sort((a, b) => a.partition - b.partition);
  return table({
    caption: answer.executed ? "Redriven, per dead-letter partition (skipped: other groups' dead letters)"
      : "What a redrive would produce, per dead-letter partition (nothing produced yet; skipped: other groups' dead letters)",
    id: "redrive-plan",
    columns: [{ label: "Partition", numeric: true }, { label: "From", numeric: true }, { label: "To", numeric: true },
      { label: answer.executed ? "Redriven" : "To redrive", numeric: true },
      { label: "Skipped", numeric: true }, { label: "Back to" }, { label: "Error" }],
    rows: parts.map((p) => [String(p.partition), offset(p.from), offset(p.to), count(p.redriven), count(p.skipped),
      (p.targets || []).length
        ? (p.targets || []).map((t) => `${t.topic} partition ${t.partition}: ${int(t.records)}`).join("; ") : "—",
      p.error || "—"]),
    empty: "The dead-letter topic has no partitions.",
  });
}

// Rounds of one redrive added up (each call redrives at most 10,000 records).
function mergeRounds(rounds) {
  const last = rounds[rounds.length - 1];
  const byId = new Map();
  for (const round of rounds) {
    for (const p of round.partitions || []) {
      const seen = byId.get(p.partition);
      if (!seen) {
        byId.set(p.partition, { ...p, targets: (p.targets || []).map((t) => ({ ...t })) });
        continue;
      }
      seen.to = p.to;
      seen.redriven += p.redriven;
      seen.skipped += p.skipped;
      seen.error = p.error || seen.error;
      for (const t of p.targets || []) {
        const same = seen.targets.find((x) => x.topic === t.topic && x.partition === t.partition);
        if (same) same.records += t.records;
        else seen.targets.push({ ...t });
      }
    }
  }
  return { ...last, redriven: rounds.reduce((n, r) => n + r.redriven, 0),
    skipped: rounds.reduce((n, r) => n + r.skipped, 0), partitions: [...byId.values()] };
}

function dryRunText(a) {
  let text = `Dry run: ${plural(a.redriven, "record", "records")} to redrive`;
  if (a.skipped) text += `, ${plural(a.skipped, "dead letter", "dead letters")} of other groups skipped`;
  if (a.remaining) text += `, ${int(a.remaining)} more after these`;
  return `${text}; nothing produced.`;
}

function doneText(a) {
  let text = `Redriven ${plural(a.redriven, "record", "records")}.`;
  if (a.skipped) text += ` ${plural(a.skipped, "dead letter", "dead letters")} of other groups skipped.`;
  if (a.remaining) text += ` ${int(a.remaining)} not redriven yet: run it again.`;
  return text;
}

// The redrive: a dry run (counts only) enables the redrive button; the
// redrive sends the name typed, which the server checks.
function redriveForm(id, after) {
  const path = `groups/${enc(id)}/redrive`;
  const plan = h("div", { id: "redrive-plan-holder", "aria-live": "polite" });
  const execute = h("button", { type: "button", id: "redrive-execute", disabled: true, class: "danger" }, "Redrive");
  const form = actionForm({
    id: "redrive",
    title: "Redrive the dead letters",
    wide: true,
    submit: "Dry run",
    fields: [{ name: "confirm", label: `Type ${id} to redrive`,
      hint: "Not needed for the dry run, which only counts." }],
    extra: [
      h("p", { class: "hint" }, "Produces each of this group's dead letters back to the topic and partition it came from ",
        "(without its floe-dlq headers, with a floe-redriven-from header), then moves the redrive mark past it. ",
        "At least once: a failure between the two may produce a record twice."),
      plan,
    ],
    run: async () => {
      const answer = await post(path, { execute: false });
      plan.replaceChildren(redrivePlan(answer));
      execute.disabled = !(answer.redriven > 0);
      return dryRunText(answer);
    },
  });
  form.classList.add("danger-zone");
  form.querySelector("#redrive-submit").id = "redrive-dry-run";
  const status = form.querySelector("#redrive-status");
  const typed = form.elements.confirm;
  execute.addEventListener("click", async () => {
    execute.disabled = true;
    status.className = "action-status";
    status.textContent = "Working…";
    const rounds = [];
    try {
      for (let i = 0; i < REDRIVE_ROUNDS; i++) {
        const answer = await post(path, { execute: true, confirm: typed.value });
        rounds.push(answer);
        if (answer.error || !(answer.remaining > 0) || answer.redriven + answer.skipped === 0) break;
        status.textContent = `Working… ${plural(rounds.reduce((n, r) => n + r.redriven, 0), "record", "records")} redriven so far.`;
      }
    } catch (error) {
      if (!rounds.length) {
        // Refused (the name not typed, …): nothing was produced; the dry run stands.
        status.textContent = error.message;
        status.classList.add("error");
        execute.disabled = false;
        return;
      }
      rounds.push({ ...rounds[rounds.length - 1], partitions: [], redriven: 0, skipped: 0, error: error.message });
    }
    const all = mergeRounds(rounds);
    plan.replaceChildren(redrivePlan(all));
    typed.value = "";
    if (all.error) {
      status.textContent = `${doneText(all)} Then stopped: ${all.error}`;
      status.classList.add("error");
    } else {
      status.textContent = doneText(all);
      status.classList.add("ok");
    }
    await after();
  });
  form.querySelector(".action-buttons").append(execute);
  return form;
}

// The share sections, put in `holder`; update(answer) redraws what changed.
export function shareView(ctx, id, holder) {
  const body = h("div", { id: "share-internals" });
  const configs = h("div", {});
  holder.append(h("section", { "aria-labelledby": "h-share" },
    h("h2", { id: "h-share" }, "Share-partitions"), body,
    h("details", { class: "share-configs" }, h("summary", {}, "The group's configs"), configs)));
  let shown = null;
  let configsShown = null;
  let dead = null; // {section, summary, records} once the group names a dead-letter topic

  const refresh = async () => update(await ctx.get(`groups/${enc(id)}/share`));

  function update(s) {
    const text = JSON.stringify(s);
    const locked = (s.partitions || []).some((p) => p.state && (p.state.acquired_records || []).length);
    if (text !== shown || locked) body.replaceChildren(...internals(id, s, Date.now()).flat().filter(Boolean));
    if (text === shown) return;
    shown = text;
    const configsText = JSON.stringify([s.configs, s.configs_error]);
    if (configsText !== configsShown) {
      configsShown = configsText;
      configs.replaceChildren(...configsTable(id, s).filter(Boolean));
    }
    const d = s.dead_letters;
    if (!d) {
      if (dead) dead.section.hidden = true;
      return;
    }
    if (!dead) {
      const summary = h("div", { id: "dead-letters-summary" });
      const records = deadLetterRecords(ctx, id);
      const form = redriveForm(id, async () => {
        await refresh();
        records.show();
      });
      const section = h("section", { "aria-labelledby": "h-dead-letters" },
        h("h2", { id: "h-dead-letters" }, "Dead letters"), summary, records.node, form);
      dead = { section, summary, records };
      holder.append(section);
      records.show();
    }
    dead.section.hidden = false;
    dead.summary.replaceChildren(...deadLetterSummary(d).filter(Boolean));
  }

  return { update, refresh };
}
