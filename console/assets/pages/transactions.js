// The transactional ids and the transaction each has open (or last ended).
// Not polled: a transaction's state moves in milliseconds, so a snapshot
// taken when asked for (the Refresh button) says as much as a live one.

import { duration, h, stateBadge } from "/ui/assets/dom.js";
import { pagedList } from "/ui/assets/pages/list.js";

// "orders: 0, 2; payments: 1": the partitions the transaction wrote to.
function partitions(list) {
  if (!list || !list.length) return "—";
  return list.map((t) => `${t.topic}: ${t.partitions.join(", ")}`).join("; ");
}

// An age to the second: the milliseconds of a transaction still running
// change at every refresh and say nothing.
function age(ms) {
  if (ms === null || ms === undefined) return "—";
  return ms < 1000 ? duration(ms) : duration(Math.round(ms / 1000) * 1000);
}

async function render(ctx) {
  ctx.heading("Transactions");
  let reload = () => {};
  ctx.view.append(h("div", { class: "toolbar" },
    h("button", { type: "button", id: "transactions-refresh", onclick: () => reload() }, "Refresh"),
    h("span", { class: "hint" }, "The states as the coordinators answered when the list was loaded.")));
  await pagedList(ctx, {
    expose: (r) => { reload = r; },
    what: "transactions",
    path: "transactions",
    key: "transactions",
    caption: "Transactional ids",
    searchLabel: "Filter transactions by transactional id",
    columns: [{ label: "Transactional id" }, { label: "State" }, { label: "Producer id", numeric: true },
      { label: "Epoch", numeric: true }, { label: "Timeout" }, { label: "Age" }, { label: "Partitions" }],
    // Producer ids and epochs are names, not amounts: no thousands separators.
    row: (t) => [t.id, stateBadge(t.state), String(t.producer_id), String(t.producer_epoch),
      duration(t.timeout_ms), age(t.age_ms), partitions(t.partitions)],
  });
}

export default { render };
