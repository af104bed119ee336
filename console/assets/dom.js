// Small helpers to build the page's elements and to show numbers and times.

// h("a", {href: "#/", class: "x", onclick: fn}, "text", child, [more]) -> element.
// Attributes set to null, undefined or false are left out; true sets an empty one.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "value" && "value" in el) {
      el.value = value;
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

// A table with a caption, column headers (th scope=col) and, when rowHeader
// is set, the first cell of each row as its header (th scope=row).
// columns: [{label, numeric}]; rows: arrays of cells (text or nodes).
export function table({ caption, columns, rows, empty = "Nothing to show.", rowHeader = true, id }) {
  const head = h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.numeric ? "num" : null }, c.label)));
  const body = rows.length
    ? rows.map((cells) =>
        h("tr", {}, cells.map((cell, i) => {
          const cls = columns[i] && columns[i].numeric ? "num" : null;
          return i === 0 && rowHeader ? h("th", { scope: "row", class: cls }, cell) : h("td", { class: cls }, cell);
        })))
    : [h("tr", {}, h("td", { colspan: columns.length, class: "empty" }, empty))];
  return h("div", { class: "table-wrap" },
    h("table", { id }, h("caption", {}, caption), h("thead", {}, head), h("tbody", {}, body)));
}

// A definition list from [[term, value], ...].
export function facts(pairs, label) {
  return h("dl", { class: "facts", "aria-label": label }, pairs.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

const intFormat = new Intl.NumberFormat("en-US");
const decFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 2 });

// Counts with thousands separators; "—" for a value the server could not give.
export function int(n) {
  return n === null || n === undefined ? "—" : intFormat.format(n);
}

export function dec(n) {
  return n === null || n === undefined || Number.isNaN(n) ? "—" : decFormat.format(n);
}

// Offsets are positions, not amounts: shown as they are, without separators.
export function offset(n) {
  return n === null || n === undefined ? "—" : String(n);
}

export function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let value = n;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${n} B` : `${decFormat.format(value)} ${units[unit]}`;
}

// A retention or other duration in ms, in the largest unit that divides it.
export function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 0) return "unlimited";
  const units = [["d", 86400000], ["h", 3600000], ["min", 60000], ["s", 1000]];
  for (const [name, size] of units) {
    if (ms >= size && ms % size === 0) return `${intFormat.format(ms / size)} ${name}`;
  }
  return `${intFormat.format(ms)} ms`;
}

// A Kafka timestamp (ms since the epoch) as ISO 8601; Kafka's -1 means none.
export function isoTime(ms) {
  if (ms === null || ms === undefined || ms < 0) return "—";
  const d = new Date(ms);
  return Number.isNaN(d.getTime()) ? "—" : d.toISOString();
}

export function stateBadge(state) {
  return h("span", { class: `badge state-${String(state).toLowerCase()}` }, state);
}

// Runs fn once `wait` ms have passed without another call (the search boxes).
export function debounce(fn, wait) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), wait);
  };
}
