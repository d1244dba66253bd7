// The Harmony console: a page over the REST API, nothing else. The
// session is in HttpOnly cookies; this script sees only the CSRF token,
// which it sends back with every change. Every value from the API goes
// into the page as text (textContent), never as markup.

const csrfCookie = "__Host-harmony-csrf";
const csrfHeader = "X-Harmony-CSRF";
const api = {
  login: "/api/v1/login",
  refresh: "/api/v1/refresh",
  logout: "/api/v1/logout",
  whoami: "/api/v1/whoami",
  clusters: "/api/v1/clusters",
};

class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || "";
    this.field = e.field || "";
  }
}

function csrfToken() {
  for (const part of document.cookie.split("; ")) {
    const [k, v] = part.split("=");
    if (k === csrfCookie) return v;
  }
  return "";
}

async function send(method, path, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers[csrfHeader] = csrfToken() || "login";
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

// call is send with one refresh of an expired session, then the login
// page if the session is gone.
async function call(method, path, body) {
  try {
    return await send(method, path, body);
  } catch (e) {
    if (!(e instanceof APIError) || e.status !== 401) throw e;
  }
  try {
    await send("POST", api.refresh, { browser: true });
  } catch {
    showLogin();
    throw new APIError(401, { error: { code: "session_invalid", message: "Your session has ended; log in again." } });
  }
  return send(method, path, body);
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const main = () => document.getElementById("main");

function show(...nodes) {
  clearTimeout(state.timer);
  main().replaceChildren(...nodes);
}

function showMessage(text) {
  const m = document.getElementById("message");
  m.textContent = text;
  m.hidden = !text;
}

// failed reports an error the page cannot place next to a field.
function failed(e) {
  if (e instanceof APIError && e.status >= 500) {
    showMessage(`The controller could not do this (HTTP ${e.status}${e.code ? ", " + e.code : ""}): ${e.message}`);
  } else if (e instanceof APIError && e.status === 401) {
    showMessage("");
  } else {
    showMessage(e.message || String(e));
  }
}

const state = { who: null, timer: 0 };

function showLogin() {
  state.who = null;
  document.getElementById("nav").hidden = true;
  const errors = { username: el("span", { class: "field-error", id: "username-error" }), password: el("span", { class: "field-error", id: "password-error" }) };
  const form = el("form", { class: "login", "aria-labelledby": "login-title", novalidate: true },
    el("h1", { id: "login-title" }, "Log in to Harmony"),
    el("label", {}, "User name", el("input", { name: "username", autocomplete: "username", required: true, "aria-describedby": "username-error" }), errors.username),
    el("label", {}, "Password", el("input", { name: "password", type: "password", autocomplete: "current-password", required: true, "aria-describedby": "password-error" }), errors.password),
    el("button", { type: "submit" }, "Log in"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    for (const e of Object.values(errors)) e.textContent = "";
    showMessage("");
    const username = form.elements.username.value, password = form.elements.password.value;
    if (!username) { errors.username.textContent = "Enter your user name."; form.elements.username.focus(); return; }
    if (!password) { errors.password.textContent = "Enter your password."; form.elements.password.focus(); return; }
    try {
      await send("POST", api.login, { username, password, browser: true });
      await start();
    } catch (e) {
      if (e instanceof APIError && errors[e.field]) errors[e.field].textContent = e.message;
      else if (e instanceof APIError && e.status < 500) errors.password.textContent = e.message;
      else failed(e);
    }
  });
  show(form);
  form.elements.username.focus();
}

function readyCount(nodes) {
  const ready = nodes.filter((n) => n.phase === "Ready").length;
  return `${ready}/${nodes.length}`;
}

function lastEvent(events) {
  if (!events || events.length === 0) return "";
  const e = events[events.length - 1];
  return `${e.reason}: ${e.message}`;
}

async function showClusters() {
  const list = await call("GET", api.clusters);
  const items = (list && list.items) || [];
  const body = items.length === 0
    ? el("p", { class: "empty" }, "No clusters to show.")
    : el("table", { "aria-label": "Clusters" },
      el("thead", {}, el("tr", {}, ["Name", "Phase", "Kubernetes", "Nodes ready", "VIP", "Last event"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, items.map((c) => el("tr", { "data-cluster": c.spec.name },
        el("td", {}, el("a", { href: `#/clusters/${encodeURIComponent(c.spec.name)}` }, c.spec.name)),
        el("td", { class: `phase-${c.status.phase}` }, c.status.phase),
        el("td", {}, c.spec.kubernetesVersion || ""),
        el("td", {}, readyCount(c.status.nodes || [])),
        el("td", {}, c.spec.vip),
        el("td", {}, lastEvent(c.status.events))))));
  show(el("h1", {}, "Clusters"), body);
  state.timer = setTimeout(() => route(), 5000);
}

async function showCluster(name) {
  const c = await call("GET", `${api.clusters}/${encodeURIComponent(name)}`);
  const s = c.status;
  const nodes = el("table", { "aria-label": "Nodes" },
    el("thead", {}, el("tr", {}, ["Name", "Role", "Address", "Phase", "Agent", "Kubernetes", "Kubelet", "Image", "Upgrade"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, (s.nodes || []).map((n) => el("tr", { "data-node": n.name },
      el("td", {}, n.name), el("td", {}, n.role), el("td", {}, n.ip || n.guestIP || ""),
      el("td", { class: `phase-${n.phase}` }, n.phase, n.lastError ? el("div", { class: "muted" }, n.lastError) : null),
      el("td", {}, n.agentPhase || ""), el("td", {}, n.kubernetes || ""), el("td", {}, n.kubeletVersion || ""),
      el("td", {}, n.image || ""), el("td", {}, n.upgrade || "")))));
  const conditions = el("table", { "aria-label": "Conditions" },
    el("thead", {}, el("tr", {}, ["Type", "Status", "Reason", "Message"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, (s.conditions || []).map((k) => el("tr", {}, el("td", {}, k.type), el("td", {}, k.status), el("td", {}, k.reason || ""), el("td", {}, k.message || "")))));
  const events = el("ol", { class: "events", "aria-label": "Events", reversed: true },
    (s.events || []).slice(-30).reverse().map((e) => el("li", { class: e.type },
      `${new Date(e.time).toLocaleTimeString()} ${e.node ? e.node + ": " : ""}${e.reason}: ${e.message}`)));
  show(
    el("h1", {}, `Cluster ${c.spec.name}`),
    el("p", {}, el("span", { class: `phase-${s.phase}` }, s.phase), ` · Kubernetes ${c.spec.kubernetesVersion || ""} · VIP ${c.spec.vip} · image ${c.spec.image}`),
    el("h2", {}, "Nodes"), nodes,
    el("h2", {}, "Conditions"), conditions,
    el("h2", {}, "Events"), events);
  // The page follows the cluster while it is shown.
  state.timer = setTimeout(() => route(), 2000);
}

async function route() {
  const hash = location.hash || "#/clusters";
  try {
    const m = hash.match(/^#\/clusters\/([^/]+)$/);
    if (m) await showCluster(decodeURIComponent(m[1]));
    else await showClusters();
  } catch (e) {
    if (e instanceof APIError && e.status === 404) show(el("h1", {}, "Not found"), el("p", {}, e.message));
    else failed(e);
  }
}

async function start() {
  try {
    state.who = await call("GET", api.whoami);
  } catch (e) {
    if (!(e instanceof APIError) || e.status !== 401) failed(e);
    return;
  }
  document.getElementById("who").textContent = `${state.who.name} (${state.who.role || state.who.kind})`;
  document.getElementById("nav").hidden = false;
  await route();
}

document.getElementById("logout").addEventListener("click", async () => {
  try { await send("POST", api.logout, { browser: true }); } catch { /* the session may be gone already */ }
  showLogin();
});
window.addEventListener("hashchange", () => { if (state.who) route(); });
start();
