// Record keys, values and header values arrive as base64: decoded here to
// bytes, then shown as text (when they are UTF-8), JSON or hex.

import { h } from "/ui/assets/dom.js";

const utf8 = new TextDecoder("utf-8", { fatal: true });

export function base64Bytes(b64) {
  const binary = atob(b64);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

// The bytes as text, or null when they are not valid UTF-8.
export function utf8Text(bytes) {
  try {
    return utf8.decode(bytes);
  } catch {
    return null;
  }
}

export function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" ");
}

function hexView(bytes, note) {
  return h("span", { class: "hex" }, h("code", {}, hex(bytes) || "(empty)"),
    note ? h("span", { class: "tag" }, note) : null);
}

// One value (base64 or null) in a mode: "text", "json" or "hex".
export function showValue(b64, mode, label) {
  if (b64 === null || b64 === undefined) return h("span", { class: "null" }, "null");
  let bytes;
  try {
    bytes = base64Bytes(b64);
  } catch {
    return h("span", { class: "tag" }, "not valid base64");
  }
  if (mode === "hex") return hexView(bytes);
  const text = utf8Text(bytes);
  if (text === null) return hexView(bytes, "not UTF-8: hex");
  if (mode === "json") {
    let parsed;
    try {
      parsed = JSON.parse(text);
    } catch {
      return h("span", {}, h("span", { class: "text" }, text), h("span", { class: "tag" }, "not JSON"));
    }
    return h("details", { class: "json", open: true },
      h("summary", {}, `${label} as JSON`),
      h("pre", {}, JSON.stringify(parsed, null, 2)));
  }
  return h("span", { class: "text" }, text === "" ? h("span", { class: "null" }, "(empty)") : text);
}
