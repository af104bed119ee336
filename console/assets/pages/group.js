// One group: its members and their assignments, its committed offsets with
// the lag behind each partition's end, and a live chart of the total lag
// (polled every 5 s while the page is open). A share group's internals and
// dead letters follow (pages/share.js), refreshed with the same poll.

import { actionForm } from "/ui/assets/actions.js";
import { enc, post } from "/ui/assets/api.js";
import { chartFigure, drawChart } from "/ui/assets/charts.js";
import { facts, h, int, offset, stateBadge, table } from "/ui/assets/dom.js";
import { shareView } from "/ui/assets/pages/share.js";

const POLL_MS = 5000;
const KEEP_MS = 5 * 60 * 1000;

function assignment(list) {
  if (!list || !list.length) return "none";
  return list.map((a) => `${a.topic}: ${a.partitions.join(", ")}`).join("; ");
}

function details(g) {
  const sorted = [...g.offsets].sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  return h("div", { id: "group-details" },
    facts([["State", stateBadge(g.state)], ["Type", g.type],
      ["Total lag", h("span", { id: "total-lag" }, int(g.total_lag))]], "Group"),
    h("section", { "aria-labelledby": "h-members" },
      h("h2", { id: "h-members" }, "Members"),
      table({
        caption: `Members of ${g.id}`,
        id: "members",
        columns: [{ label: "Member id" }, { label: "Client id" }, { label: "Host" }, { label: "Assignment" }],
        rows: g.members.map((m) => [h("code", {}, m.member_id), m.client_id, m.host, assignment(m.assignment)]),
        empty: "No members (nobody is consuming now).",
      })),
    h("section", { "aria-labelledby": "h-offsets" },
      h("h2", { id: "h-offsets" }, "Offsets"),
      table({
        caption: g.type === "share" ? `Share-partition start offsets of ${g.id}` : `Committed offsets of ${g.id}`,
        id: "offsets",
        rowHeader: false,
        columns: [{ label: "Topic" }, { label: "Partition", numeric: true },
          { label: g.type === "share" ? "Start offset" : "Committed", numeric: true },
          { label: "End offset", numeric: true }, { label: "Lag", numeric: true }],
        rows: sorted.map((o) => [h("a", { href: `#/topics/${enc(o.topic)}` }, o.topic), String(o.partition),
          offset(o.committed), offset(o.end_offset), int(o.lag)]),
        empty: "No offsets committed.",
      })));
}

// The reset's request from the form's values.
function resetBody(v, execute) {
  const body = { to: v.to, execute };
  if (v.topic.trim()) body.topic = v.topic.trim();
  if (["offset", "shift", "time"].includes(v.to)) {
    const raw = v.to === "time" ? Date.parse(v.value) : Number(v.value);
    if (v.value === "" || Number.isNaN(raw)) {
      throw new Error(v.to === "time" ? "Give a time, e.g. 2026-12-01T12:00:00Z." : "Give a number.");
    }
    body.value = raw;
  }
  return body;
}

function planTable(answer, share) {
  const what = share ? "start offsets" : "offsets";
  return table({
    caption: answer.executed ? `${share ? "Start offsets" : "Offsets"} committed`
      : `Where the ${what} would move (nothing committed yet)`,
    id: "reset-plan",
    rowHeader: false,
    columns: [{ label: "Topic" }, { label: "Partition", numeric: true },
      { label: share ? "Current start" : "Current", numeric: true }, { label: "New", numeric: true }],
    rows: answer.offsets.map((o) => [o.topic, String(o.partition), offset(o.current), offset(o.target)]),
  });
}

// Resetting offsets (a share group's start offsets): a dry run first,
// always; the reset itself is enabled once a dry run of the same values was
// shown. Deleting: the id typed again.
function actions(g, refresh) {
  const path = `groups/${enc(g.id)}`;
  const share = g.type === "share";
  const plan = h("div", { id: "reset-plan-holder", "aria-live": "polite" });
  let previewed = null; // the values the plan on screen was made with
  const execute = h("button", { type: "button", id: "reset-execute", disabled: true, class: "danger" },
    share ? "Reset start offsets as shown" : "Reset offsets as shown");
  const resetForm = actionForm({
    id: "reset-offsets",
    title: share ? "Reset start offsets" : "Reset offsets",
    wide: true,
    submit: "Show the plan (dry run)",
    fields: [
      { name: "topic", label: "Topic", hint: "Empty: every topic the group has offsets in." },
      { name: "to", label: "To", options: [["earliest", "the earliest offset"], ["latest", "the latest offset"],
        ["offset", "an offset"], ["shift", "shift by"], ["time", "a time"]] },
      { name: "value", label: "Offset, shift or time", hint: "For an offset or a shift a number; for a time ISO 8601." },
    ],
    extra: plan,
    run: async (v) => {
      const body = resetBody(v, false);
      const answer = await post(`${path}/reset-offsets`, body);
      plan.replaceChildren(planTable(answer, share), answer.warning ? h("p", { class: "notice" }, answer.warning) : "");
      previewed = JSON.stringify(body);
      execute.disabled = Boolean(answer.warning);
      return answer.warning ? "Dry run shown; the group must be inactive to reset." : "Dry run shown: nothing committed.";
    },
  });
  // Any change to the values asks for a new dry run.
  resetForm.addEventListener("input", () => { execute.disabled = true; });
  execute.addEventListener("click", async () => {
    const status = resetForm.querySelector(".action-status");
    const values = Object.fromEntries(["topic", "to", "value"].map((n) => [n, resetForm.elements[n].value]));
    let body;
    try {
      body = resetBody(values, true);
    } catch (e) {
      status.textContent = e.message;
      return;
    }
    if (JSON.stringify({ ...body, execute: false }) !== previewed) {
      status.textContent = "The values changed since the dry run: show the plan again first.";
      execute.disabled = true;
      return;
    }
    execute.disabled = true;
    status.className = "action-status";
    status.textContent = "Working…";
    try {
      const answer = await post(`${path}/reset-offsets`, body);
      plan.replaceChildren(planTable(answer, share));
      status.textContent = `${share ? "Start offsets" : "Offsets"} of ${answer.offsets.length} partition(s) reset.`;
      status.classList.add("ok");
      await refresh();
    } catch (e) {
      status.textContent = e.message;
      status.classList.add("error");
    }
  });
  resetForm.querySelector(".action-buttons").append(execute);
  return h("section", { "aria-labelledby": "h-actions" },
    h("h2", { id: "h-actions" }, "Actions"),
    h("div", { class: "action-grid" },
      resetForm,
      actionForm({
        id: "delete-group",
        title: "Delete this group",
        submit: "Delete group",
        confirm: g.id,
        fields: [],
        run: async () => {
          await post(`${path}/delete`, { confirm: g.id });
          return `Group ${g.id} deleted.`;
        },
        done: () => { window.location.hash = "#/groups"; },
      })));
}

async function render(ctx) {
  const [id] = ctx.params;
  ctx.heading(`Group ${id}`);
  const holder = h("div", {});
  const figure = chartFigure("chart-lag", "Total lag");
  const shareError = h("p", { class: "notice", id: "share-error", hidden: true });
  const shareHolder = h("div", { id: "share" }, shareError);
  ctx.view.append(holder, h("section", { "aria-labelledby": "h-lag" },
    h("h2", { id: "h-lag" }, "Lag over time"),
    h("p", { class: "hint" }, "Sampled every 5 seconds while this page is open."),
    figure), shareHolder);

  const points = [];
  let shown = null; // the answer on screen, to redraw the tables only when it changed
  let first = true;
  let actionsShown = null;
  let share = null; // a share group's sections, once its first answer came
  // The share sections from a fresh answer; a failure stays in them, and the
  // group's own figures hold.
  const showShare = async () => {
    try {
      const request = ctx.get(`groups/${enc(id)}/share`);
      const s = await (share ? request : ctx.load("Loading the share-partitions…", request));
      if (!share) share = shareView(ctx, id, shareHolder);
      share.update(s);
      shareError.hidden = true;
    } catch (error) {
      if (error.name === "AbortError" || error.status === 401) throw error;
      shareError.textContent = `Share-partitions not available: ${error.message}`;
      shareError.hidden = false;
    }
  };
  ctx.poll(POLL_MS, async () => {
    const request = ctx.get(`groups/${enc(id)}`);
    const g = await (first ? ctx.load("Loading the group…", request) : request);
    first = false;
    const now = Date.now();
    points.push([now, g.total_lag]);
    while (points.length && points[0][0] < now - KEEP_MS) points.shift();
    const text = JSON.stringify(g);
    if (text !== shown) {
      shown = text;
      holder.replaceChildren(details(g));
    }
    if (!actionsShown) {
      actionsShown = actions(g, async () => {
        const fresh = await ctx.get(`groups/${enc(id)}`);
        shown = JSON.stringify(fresh);
        holder.replaceChildren(details(fresh));
        // A reset moves a share group's start offsets: its sections too.
        if (fresh.type === "share") await showShare();
      });
      ctx.view.append(actionsShown);
    }
    const t0 = Math.min(now - 60000, points[0][0]);
    drawChart(figure, { series: [{ name: "total lag", points }], window: [t0, now],
      format: (v) => int(Math.round(v)), unit: "records" });
    if (g.type === "share") await showShare();
  });
}

export default { render };
