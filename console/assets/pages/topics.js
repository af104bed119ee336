// The topics list.

import { enc } from "/ui/assets/api.js";
import { duration, h, int } from "/ui/assets/dom.js";
import { pagedList } from "/ui/assets/pages/list.js";

async function render(ctx) {
  ctx.heading("Topics");
  await pagedList(ctx, {
    what: "topics",
    path: "topics",
    key: "topics",
    caption: "Topics",
    searchLabel: "Filter topics by name",
    columns: [{ label: "Name" }, { label: "Partitions", numeric: true }, { label: "Records", numeric: true },
      { label: "Cleanup policy" }, { label: "Retention" }],
    row: (t) => [
      h("a", { href: `#/topics/${enc(t.name)}` }, t.name, t.internal ? h("span", { class: "tag" }, "internal") : null),
      int(t.partitions), int(t.records), t.cleanup_policy ?? "—", duration(t.retention_ms),
    ],
  });
}

export default { render };
