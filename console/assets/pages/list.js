// A filtered, paged list (topics and groups): a search box whose text the
// server filters by (debounced), Previous/Next, and "showing x–y of total".

import { debounce, h, int, table } from "/ui/assets/dom.js";

const PAGE = 50;

// spec: {what: "topics", path, key: field of the answer holding the rows,
//        caption, columns, row: item -> cells, searchLabel,
//        expose: receives the list's reload function (after an action)}
export function pagedList(ctx, spec) {
  let query = "";
  let offset = 0;
  let generation = 0; // answers to an older request are dropped

  const input = h("input", { id: `${spec.what}-filter`, type: "search", autocomplete: "off", spellcheck: "false" });
  const summary = h("p", { class: "summary", id: `${spec.what}-summary`, "aria-live": "polite" });
  const prev = h("button", { type: "button", id: `${spec.what}-prev`, disabled: true }, "Previous");
  const next = h("button", { type: "button", id: `${spec.what}-next`, disabled: true }, "Next");
  const holder = h("div", { id: `${spec.what}-table` });

  ctx.view.append(
    h("form", { class: "filter", role: "search", onsubmit: (e) => e.preventDefault() },
      h("label", { for: input.id }, spec.searchLabel), input),
    h("div", { class: "pager" }, prev, summary, next),
    holder,
  );

  async function load() {
    const mine = ++generation;
    const answer = await ctx.load(`Loading ${spec.what}…`,
      ctx.get(spec.path, { q: query, offset, limit: PAGE }));
    if (mine !== generation) return;
    ctx.clearAlert();
    const items = answer[spec.key] || [];
    const total = answer.total ?? items.length;
    const first = items.length ? answer.offset + 1 : 0;
    const last = answer.offset + items.length;
    summary.textContent = items.length ? `Showing ${int(first)}–${int(last)} of ${int(total)}`
      : `Showing 0 of ${int(total)}`;
    prev.disabled = answer.offset <= 0;
    next.disabled = last >= total;
    holder.replaceChildren(table({
      caption: spec.caption,
      id: `${spec.what}-list`,
      columns: spec.columns,
      rows: items.map(spec.row),
      empty: query ? `No ${spec.what} match “${query}”.` : `No ${spec.what}.`,
    }));
  }

  const reload = () => load().catch(ctx.fail);
  if (spec.expose) spec.expose(reload);
  input.addEventListener("input", debounce(() => {
    query = input.value.trim();
    offset = 0;
    reload();
  }, 300));
  prev.addEventListener("click", () => {
    offset = Math.max(0, offset - PAGE);
    reload();
  });
  next.addEventListener("click", () => {
    offset += PAGE;
    reload();
  });
  return load();
}
