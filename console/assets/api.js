// Talks to the console's JSON API (/ui/api/...): adds the bearer token kept
// for this browser tab and turns every failure into an ApiError, so that the
// pages have one kind of error to show.

const TOKEN_KEY = "floe.console.token";

export class ApiError extends Error {
  constructor(status, kind, message) {
    super(message);
    this.name = "ApiError";
    this.status = status; // 0 when the server could not be reached
    this.kind = kind;
  }
}

// sessionStorage: the token lives as long as the tab, never on disk for long.
export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

// GET /ui/api/<path>?<params>; params with an empty value are left out.
export async function get(path, params = {}, signal = undefined) {
  const url = new URL(`/ui/api/${path}`, window.location.origin);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  return send(url, { method: "GET", signal });
}

// POST /ui/api/<path> with a JSON body: the console's actions. The server
// takes JSON only, which a form of another site cannot send.
export async function post(path, body, signal = undefined) {
  const url = new URL(`/ui/api/${path}`, window.location.origin);
  return send(url, { method: "POST", signal, body: JSON.stringify(body), json: true });
}

async function send(url, { method, signal, body, json }) {
  const headers = { Accept: "application/json" };
  if (json) headers["Content-Type"] = "application/json";
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;

  let response;
  try {
    response = await fetch(url, { method, headers, body, signal, cache: "no-store" });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, "network", `Could not reach the server (${e.message}).`);
  }
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) {
    const message = parsed && typeof parsed.error === "string" ? parsed.error : `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, parsed && parsed.kind ? parsed.kind : "http", message);
  }
  if (parsed === null) throw new ApiError(response.status, "bad_response", `The answer to ${url.pathname} is not JSON.`);
  return parsed;
}

// Path segments of names are encoded: topic and group names may hold any character.
export const enc = encodeURIComponent;
