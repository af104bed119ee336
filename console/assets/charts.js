// Line charts drawn as inline SVG: one figure per chart, its caption giving
// the latest values in words (the chart itself is hidden from screen readers,
// the caption is its text alternative).

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 520;
const HEIGHT = 200;
const PAD = { left: 84, right: 16, top: 24, bottom: 30 };
export const COLORS = ["#0b5cad", "#b3261e", "#1b6e20", "#6a3fb5"];

function svg(tag, attrs = {}, text = null) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== null) el.textContent = text;
  return el;
}

// The smallest "round" number (1, 2 or 5 times a power of ten) >= v.
function niceCeil(v) {
  // Nothing above 0 yet: 0, 1 and 2 on the axis (a top of 1 would show its
  // half, 0.5, as "1" where the figures are whole numbers).
  if (!(v > 0)) return 2;
  const power = 10 ** Math.floor(Math.log10(v));
  for (const step of [1, 2, 5, 10]) {
    if (step * power >= v) return step * power;
  }
  return 10 * power;
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString("en-GB", { hour12: false });
}

// Creates an empty chart figure; update it with drawChart.
export function chartFigure(id, title) {
  const caption = document.createElement("figcaption");
  caption.id = `${id}-caption`;
  const figure = document.createElement("figure");
  figure.className = "chart";
  figure.id = id;
  const heading = document.createElement("span");
  heading.className = "chart-title";
  heading.textContent = title;
  const text = document.createElement("span");
  text.className = "chart-latest";
  text.textContent = "Waiting for data…";
  caption.append(heading, text);
  const picture = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, "aria-hidden": "true", focusable: "false" });
  figure.append(picture, caption);
  return figure;
}

// series: [{name, points: [[t_ms, value or null], ...]}]; window: [t0, t1] in ms;
// format: value -> text for the y axis and the caption; unit: the y axis title.
export function drawChart(figure, { series, window: [t0, t1], format, unit }) {
  const picture = figure.querySelector("svg");
  picture.replaceChildren();
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  let max = 0;
  for (const s of series) for (const [, v] of s.points) if (v !== null && v > max) max = v;
  const top = niceCeil(max);
  const x = (t) => PAD.left + ((t - t0) / Math.max(1, t1 - t0)) * plotW;
  const y = (v) => PAD.top + plotH - (v / top) * plotH;

  // Grid lines and y labels at 0, half and the top.
  for (const v of [0, top / 2, top]) {
    picture.append(svg("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(v), y2: y(v), class: "grid" }));
    picture.append(svg("text", { x: PAD.left - 6, y: y(v) + 4, "text-anchor": "end", class: "tick" }, format(v)));
  }
  // The x axis: the window's start, middle and end as clock times.
  picture.append(svg("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(0), y2: y(0), class: "axis" }));
  picture.append(svg("line", { x1: PAD.left, x2: PAD.left, y1: PAD.top, y2: y(0), class: "axis" }));
  [[t0, "start"], [(t0 + t1) / 2, "middle"], [t1, "end"]].forEach(([t, anchor]) => {
    picture.append(svg("text", { x: x(t), y: HEIGHT - 8, "text-anchor": anchor, class: "tick" }, clock(t)));
  });
  picture.append(svg("text", { x: PAD.left, y: PAD.top - 10, "text-anchor": "middle", class: "unit" }, unit));

  // One polyline per run of known values: a null (no sample) breaks the line.
  series.forEach((s, i) => {
    let run = [];
    const flush = () => {
      if (run.length === 1) {
        picture.append(svg("circle", { cx: run[0][0], cy: run[0][1], r: 2.5, fill: COLORS[i % COLORS.length] }));
      } else if (run.length > 1) {
        picture.append(svg("polyline", {
          points: run.map((p) => p.join(",")).join(" "),
          fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 2, "stroke-linejoin": "round",
        }));
      }
      run = [];
    };
    for (const [t, v] of s.points) {
      if (v === null || t < t0) flush();
      else run.push([x(t).toFixed(1), y(v).toFixed(1)]);
    }
    flush();
  });

  // Caption: the latest value of each series, with its line's colour as a key.
  const latest = figure.querySelector(".chart-latest");
  latest.replaceChildren();
  const parts = series.map((s, i) => {
    const last = [...s.points].reverse().find(([, v]) => v !== null);
    const item = document.createElement("span");
    item.className = "legend";
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = COLORS[i % COLORS.length];
    item.append(swatch, `${s.name}: ${last ? format(last[1]) : "no data yet"}`);
    return item;
  });
  latest.append("Latest — ", ...parts);
}
