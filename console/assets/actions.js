// The forms of the console's actions. Each sends one POST, says how it went
// in its own status line (role="status", so screen readers hear it), and
// calls `done` once it worked. A form that deletes is a danger form: its
// button stays disabled until the name it deletes is typed again.

import { h } from "/ui/assets/dom.js";

// One labelled control: a select when `options` is given, else an input.
function control(formId, f) {
  const id = `${formId}-${f.name}`;
  const el = f.options
    ? h("select", { id, name: f.name }, f.options.map(([value, label]) => h("option", { value }, label)))
    : f.type === "textarea"
      ? h("textarea", { id, name: f.name, rows: 3, placeholder: f.placeholder })
      : h("input", {
      id, name: f.name, type: f.type || "text", required: f.required || false, min: f.min,
      placeholder: f.placeholder, autocomplete: "off", value: f.value,
    });
  const hintId = f.hint ? `${id}-hint` : null;
  if (hintId) el.setAttribute("aria-describedby", hintId);
  const wrap = h("div", { class: "field" }, h("label", { for: id }, f.label), el,
    f.hint ? h("span", { class: "hint", id: hintId }, f.hint) : null);
  return [wrap, el];
}

// fields: [{name, label, type, required, min, placeholder, value, hint, options: [[value, label]]}];
// run(values) -> a sentence saying what was done (or throws an ApiError);
// confirm: the name to type before the button works; extra: nodes put
// before the button (a dry-run's plan, …); wide: the form takes a whole row
// of the grid (its result is a table).
export function actionForm({ id, title, fields, submit, run, done, confirm, extra, wide }) {
  const status = h("p", { class: "action-status", role: "status", id: `${id}-status` });
  const inputs = {};
  const controls = [];
  for (const f of fields) {
    const [wrap, el] = control(id, f);
    inputs[f.name] = el;
    controls.push(wrap);
  }
  const button = h("button", { type: "submit", id: `${id}-submit`, class: confirm ? "danger" : null }, submit);
  let typed = null;
  if (confirm) {
    const [wrap, el] = control(id, { name: "confirm", label: `Type ${confirm} to confirm` });
    typed = el;
    controls.push(wrap);
    button.disabled = true;
    typed.addEventListener("input", () => { button.disabled = typed.value !== confirm; });
  }
  const form = h("form", { class: `action${confirm ? " danger-zone" : ""}${wide ? " wide" : ""}`, id,
    "aria-labelledby": `${id}-title` },
    h("h3", { id: `${id}-title` }, title), h("div", { class: "action-fields" }, controls), extra || null,
    h("div", { class: "action-buttons" }, button), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = {};
    for (const [name, el] of Object.entries(inputs)) values[name] = el.value;
    button.disabled = true;
    status.className = "action-status";
    status.textContent = "Working…";
    try {
      status.textContent = await run(values);
      status.classList.add("ok");
      if (typed) typed.value = "";
      if (done) await done();
    } catch (error) {
      status.textContent = error.message;
      status.classList.add("error");
    } finally {
      button.disabled = typed ? typed.value !== confirm : false;
    }
  });
  return form;
}

// "key=value" lines (blank lines ignored) as an object; a line without "="
// is refused with its number.
export function keyValues(text) {
  const out = {};
  String(text || "").split("\n").forEach((line, i) => {
    const t = line.trim();
    if (!t) return;
    const at = t.indexOf("=");
    if (at <= 0) throw new Error(`Line ${i + 1} is not key=value: ${t}`);
    out[t.slice(0, at).trim()] = t.slice(at + 1).trim();
  });
  return out;
}
