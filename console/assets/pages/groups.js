// The consumer and share groups list.

import { enc } from "/ui/assets/api.js";
import { h, stateBadge } from "/ui/assets/dom.js";
import { pagedList } from "/ui/assets/pages/list.js";

async function render(ctx) {
  ctx.heading("Consumer groups");
  await pagedList(ctx, {
    what: "groups",
    path: "groups",
    key: "groups",
    caption: "Groups",
    searchLabel: "Filter groups by id",
    columns: [{ label: "Group" }, { label: "Type" }, { label: "State" }, { label: "Protocol type" }],
    row: (g) => [h("a", { href: `#/groups/${enc(g.id)}` }, g.id), g.type, stateBadge(g.state),
      g.protocol_type || "—"],
  });
}

export default { render };
