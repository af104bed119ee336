// The topics list.

import { actionForm, keyValues } from "/ui/assets/actions.js";
import { enc, post } from "/ui/assets/api.js";
import { duration, h, int } from "/ui/assets/dom.js";
import { pagedList } from "/ui/assets/pages/list.js";

// Creating a topic: its name, partitions (the cluster's default when left
// empty) and settings, as CreateTopics takes them.
function createForm(reload) {
  return h("details", { class: "actions" }, h("summary", {}, "Create a topic"),
    actionForm({
      id: "create-topic",
      title: "New topic",
      submit: "Create topic",
      fields: [
        { name: "name", label: "Name", required: true },
        { name: "partitions", label: "Partitions", type: "number", min: 1, hint: "Empty: the cluster's default." },
        { name: "configs", label: "Settings", type: "textarea", placeholder: "retention.ms=86400000",
          hint: "One key=value a line; empty: the defaults." },
      ],
      run: async (v) => {
        const body = { name: v.name.trim(), configs: keyValues(v.configs) };
        if (v.partitions) body.partitions = Number(v.partitions);
        await post("topics", body);
        return `Topic ${body.name} created.`;
      },
      done: reload,
    }));
}

async function render(ctx) {
  ctx.heading("Topics");
  let reload = () => {};
  ctx.view.append(createForm(() => reload()));
  await pagedList(ctx, {
    expose: (r) => { reload = r; },
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
