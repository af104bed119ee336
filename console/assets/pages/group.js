// One group: its members and their assignments, its committed offsets with
// the lag behind each partition's end, and a live chart of the total lag
// (polled every 5 s while the page is open).

import { enc } from "/ui/assets/api.js";
import { chartFigure, drawChart } from "/ui/assets/charts.js";
import { facts, h, int, offset, stateBadge, table } from "/ui/assets/dom.js";

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

async function render(ctx) {
  const [id] = ctx.params;
  ctx.heading(`Group ${id}`);
  const holder = h("div", {});
  const figure = chartFigure("chart-lag", "Total lag");
  ctx.view.append(holder, h("section", { "aria-labelledby": "h-lag" },
    h("h2", { id: "h-lag" }, "Lag over time"),
    h("p", { class: "hint" }, "Sampled every 5 seconds while this page is open."),
    figure));

  const points = [];
  let shown = null; // the answer on screen, to redraw the tables only when it changed
  let first = true;
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
    const t0 = Math.min(now - 60000, points[0][0]);
    drawChart(figure, { series: [{ name: "total lag", points }], window: [t0, now],
      format: (v) => int(Math.round(v)), unit: "records" });
  });
}

export default { render };
