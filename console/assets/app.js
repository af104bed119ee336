// The console's shell: hash routing, sign-in, the alert region, and the life
// of each page (its requests are aborted and its timers stopped when the
// route changes).

import { ApiError, clearToken, get, getToken, setToken } from "/ui/assets/api.js";
import { clear, h } from "/ui/assets/dom.js";
import overview from "/ui/assets/pages/overview.js";
import topics from "/ui/assets/pages/topics.js";
import topic from "/ui/assets/pages/topic.js";
import records from "/ui/assets/pages/records.js";
import groups from "/ui/assets/pages/groups.js";
import group from "/ui/assets/pages/group.js";
import transactions from "/ui/assets/pages/transactions.js";
import exports from "/ui/assets/pages/exports.js";
import exportPage from "/ui/assets/pages/export.js";

// [pattern on the path after "#", page, nav entry marked as current]
const ROUTES = [
  [/^\/$/, overview, "overview"],
  [/^\/topics$/, topics, "topics"],
  [/^\/topics\/([^/]+)$/, topic, "topics"],
  [/^\/topics\/([^/]+)\/records$/, records, "topics"],
  [/^\/topics\/([^/]+)\/export$/, exportPage, "exports"],
  [/^\/groups$/, groups, "groups"],
  [/^\/groups\/([^/]+)$/, group, "groups"],
  [/^\/transactions$/, transactions, "transactions"],
  [/^\/exports$/, exports, "exports"],
];

const view = document.getElementById("view");
const alertBox = document.getElementById("alert");
const statusLine = document.getElementById("status");
const principalLabel = document.getElementById("principal");
const signOutButton = document.getElementById("sign-out");

let current = null; // {controller, cleanups} of the page on screen
let signingIn = false;
// The first page of a load leaves the focus where the browser put it (the top,
// so that Tab reaches the skip link first); later route changes move it.
let routedOnce = false;

export function showAlert(message) {
  if (alertBox.textContent === message) return; // a poll failing again says nothing new
  clear(alertBox).append(h("p", {}, message));
}

function clearAlert() {
  clear(alertBox);
}

// What a page shows while it waits; counts overlapping waits.
let busy = 0;
function setBusy(delta, label) {
  busy = Math.max(0, busy + delta);
  document.getElementById("main").setAttribute("aria-busy", busy > 0 ? "true" : "false");
  statusLine.textContent = busy > 0 ? label || "Loading…" : "";
}

// Every failure of a page ends here: 401 asks for a token, 403 says so, the
// rest shows the server's words. Aborted requests (the page was left) are quiet.
function fail(error, signal) {
  if ((signal && signal.aborted) || (error && error.name === "AbortError")) return;
  if (error instanceof ApiError) {
    if (error.status === 401) {
      showSignIn(getToken() ? "That token was not accepted; enter another." : null, error.message);
    } else if (error.status === 403) {
      showAlert(`Not allowed: ${error.message}`);
    } else if (error.status === 404) {
      showAlert(`Not found: ${error.message}`);
    } else if (error.status === 0) {
      showAlert(error.message);
    } else {
      showAlert(`Error (${error.status}, ${error.kind}): ${error.message}`);
    }
  } else {
    showAlert(`Something went wrong in the page: ${error && error.message ? error.message : error}`);
  }
}

function leavePage() {
  if (!current) return;
  current.controller.abort();
  for (const fn of current.cleanups) fn();
  current = null;
  busy = 0;
  setBusy(0);
}

// The page's main heading: sets the document title and takes the focus, so
// that screen reader and keyboard users land on the new page.
function heading(text, focus = routedOnce) {
  document.title = `${text} — Floe console`;
  const h1 = h("h1", { tabindex: "-1", id: "page-title" }, text);
  view.append(h1);
  if (focus) h1.focus();
  return h1;
}

function markNav(name) {
  for (const link of document.querySelectorAll("nav a[data-nav]")) {
    if (link.dataset.nav === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function route() {
  if (signingIn) return;
  const path = (window.location.hash || "#/").slice(1) || "/";
  if (!path.startsWith("/")) return; // "#main" and other in-page anchors are not routes
  leavePage();
  clearAlert();
  clear(view);
  const focus = routedOnce;
  routedOnce = true;
  const match = ROUTES.map(([re, page, nav]) => [path.match(re), page, nav]).find(([m]) => m);
  if (!match) {
    markNav(null);
    heading("Page not found", focus);
    view.append(h("p", {}, "There is no such page. ", h("a", { href: "#/" }, "Go to the overview.")));
    return;
  }
  const [m, page, nav] = match;
  markNav(nav);
  let params;
  try {
    params = m.slice(1).map(decodeURIComponent);
  } catch {
    heading("Page not found", focus);
    return;
  }
  const controller = new AbortController();
  const entry = { controller, cleanups: [] };
  current = entry;
  const ctx = {
    view,
    params,
    heading: (text) => heading(text, focus),
    get: (path, query) => get(path, query, controller.signal),
    // Runs a request with the loading line shown.
    load: async (label, promise) => {
      setBusy(1, label);
      try {
        return await promise;
      } finally {
        if (current === entry) setBusy(-1);
      }
    },
    fail: (error) => fail(error, controller.signal),
    clearAlert,
    alert: showAlert,
    // Calls fn now and then every `ms` until the page is left; a failed call
    // is shown and the polling goes on (its alert goes once a call works
    // again), except when a token is needed.
    poll: (ms, fn) => {
      let timer = null;
      let failed = false;
      const tick = async () => {
        try {
          await fn();
          if (failed) clearAlert();
          failed = false;
        } catch (error) {
          fail(error, controller.signal);
          failed = true;
          if (error instanceof ApiError && error.status === 401) return;
        }
        if (!controller.signal.aborted) timer = setTimeout(tick, ms);
      };
      entry.cleanups.push(() => clearTimeout(timer));
      tick();
    },
  };
  Promise.resolve()
    .then(() => page.render(ctx))
    .catch((error) => fail(error, controller.signal));
}

function showPrincipal(who) {
  principalLabel.textContent = who ? `Principal: ${who.principal}` : "";
  signOutButton.hidden = !getToken();
}

// The sign-in form, in place of the page, until a token is accepted.
// `message` is an error to announce; `said` is the server's reason for the 401.
function showSignIn(message, said = null) {
  leavePage();
  signingIn = true;
  clearAlert();
  clear(view);
  showPrincipal(null);
  markNav(null);
  heading("Sign in");
  if (message) showAlert(message);
  const input = h("input", { id: "token-input", name: "token", type: "password", autocomplete: "off", required: true,
    spellcheck: "false" });
  const form = h("form", { class: "sign-in", id: "sign-in-form" },
    h("p", {}, "This cluster needs a token. Ask an operator for one of the tokens of --admin-token-file."),
    said ? h("p", { class: "hint" }, `The server said: ${said}`) : null,
    h("div", { class: "field" }, h("label", { for: "token-input" }, "Bearer token"), input),
    h("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    setToken(token);
    signIn().catch((error) => fail(error));
  });
  view.append(form);
}

// Asks who we are with the token at hand; on success shows the page asked for.
async function signIn() {
  try {
    const who = await get("whoami");
    signingIn = false;
    showPrincipal(who);
    route();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      const hadToken = Boolean(getToken());
      clearToken();
      showSignIn(hadToken ? "That token was not accepted; enter another." : null, error.message);
    } else {
      signingIn = false;
      fail(error);
      route();
    }
  }
}

signOutButton.addEventListener("click", () => {
  clearToken();
  clearAlert(); // what the signed-in page reported is no longer to the point
  signOutButton.hidden = true;
  signIn().catch((error) => fail(error));
});

// The skip link moves the focus without changing the hash (the hash is the route).
document.getElementById("skip-link").addEventListener("click", (event) => {
  event.preventDefault();
  const target = document.getElementById("page-title") || document.getElementById("main");
  target.focus();
});

window.addEventListener("hashchange", route);
// A promise failing unseen would leave the page silently stale: say so.
window.addEventListener("unhandledrejection", (event) => fail(event.reason));

signIn().catch((error) => fail(error));
