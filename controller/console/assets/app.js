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
  providers: "/api/v1/providers",
  images: "/api/v1/images",
  users: "/api/v1/users",
  audit: "/api/v1/audit",
  ldap: "/api/v1/ldap",
  operations: "/api/v1/operations",
  leftovers: "/api/v1/leftovers",
};

const isAdmin = () => state.who && state.who.role === "admin";
const clusterPath = (name, rest = "") => `${api.clusters}/${encodeURIComponent(name)}${rest}`;

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

// present is what a page's parts put on it: lists flattened, and null or
// undefined (a part the user may not see) left out.
const present = (nodes) => nodes.flat().filter((n) => n !== null && n !== undefined);

function show(...nodes) {
  clearTimeout(state.timer);
  state.shown = null;
  main().replaceChildren(...present(nodes));
}

// refresh shows a page that follows changing data, but only when what it
// shows has changed: a page redrawn under the user would lose their
// focus and their click.
function refresh(key, build) {
  clearTimeout(state.timer);
  if (state.shown === key) return;
  show(...build());
  state.shown = key;
}

// refreshParts is refresh for a page of parts: [name, data, build]. The
// page is laid out once; after that a part is rebuilt only when its data
// changed, and the others keep their elements (and the user's focus and
// click).
function refreshParts(page, header, parts) {
  clearTimeout(state.timer);
  if (state.shown !== page) {
    show(header, parts.map(([name]) => el("div", { class: "part", "data-part": name })));
    state.shown = page;
    state.parts = {};
  }
  for (const [name, data, build] of parts) {
    const key = JSON.stringify(data);
    if (state.parts[name] === key) continue;
    main().querySelector(`div[data-part="${name}"]`).replaceChildren(...present([build()]));
    state.parts[name] = key;
  }
}

function showMessage(text) {
  const m = document.getElementById("message");
  m.textContent = text;
  m.hidden = !text;
}

// serverMessage says what a failure of the controller (5xx) was, with its
// status and code, so that it reads as the controller's, not the user's.
const serverMessage = (e) => `The controller could not do this (HTTP ${e.status}${e.code ? ", " + e.code : ""}): ${e.message}`;

// reason is what a failure says where it is shown in place: the
// controller's own failures with their status and code.
const reason = (e) => (e instanceof APIError && e.status >= 500 ? serverMessage(e) : e.message);

// failed reports an error the page cannot place next to a field.
function failed(e) {
  if (e instanceof APIError && e.status === 401) {
    showMessage("");
  } else if (e instanceof TypeError) {
    // fetch's own failure: no answer at all.
    showMessage(`The controller does not answer (${e.message}); the page tries again on its next refresh.`);
  } else {
    showMessage(reason(e) || String(e));
  }
}

// op is the operation this page started and follows (the API's watch:
// each answer comes as soon as the operation has a new event).
const state = { who: null, timer: 0, op: null, shown: null, parts: {} };

async function follow(op) {
  if (!op || !op.id) return;
  state.op = op;
  route();
  while (state.op && state.op.id === op.id && state.op.state === "Running") {
    try {
      state.op = await call("GET", `${api.operations}/${encodeURIComponent(op.id)}?watch=true&revision=${state.op.revision}&timeout=25s`);
    } catch (e) {
      if (e instanceof APIError && e.status < 500) { state.op = null; break; } // gone, or not ours to see
      failed(e);
      await new Promise((r) => setTimeout(r, 2000));
      continue;
    }
    route();
  }
}

// operationPanel shows the followed operation of cluster name, step by
// step: its state and its events.
// upgradePanel shows the cluster's newest upgrade while it runs or when
// it stopped short, with the abort a cluster admin may ask for.
function upgradePanel(c) {
  const u = c.status.upgrade;
  if (!u || u.state === "Succeeded") return null;
  const abort = u.state === "Running" && c.access === "admin"
    ? el("button", { type: "button", id: "abort-upgrade", class: "danger", onclick: () => abortUpgrade(c.spec.name) }, "Abort upgrade…") : null;
  return el("section", { class: "upgrade", "aria-label": "Upgrade", "data-state": u.state },
    el("h2", {}, `Upgrade: ${u.state}`),
    el("p", {}, `${u.fromImage} → ${u.image} · Kubernetes ${u.fromKubernetesVersion} → ${u.kubernetesVersion} · ${u.upgraded} of ${u.nodes} nodes upgraded`),
    u.message ? el("p", { class: "muted" }, u.message) : null,
    abort);
}

async function abortUpgrade(name) {
  follow(await dialog(`Abort the upgrade of ${name}?`, [],
    () => call("POST", clusterPath(name, "/upgrade"), { abort: true }), "Abort"));
}

function operationPanel(name) {
  const op = state.op;
  if (!op || op.cluster !== name) return null;
  return el("section", { class: "operation", "aria-label": "Operation", "data-state": op.state },
    el("h2", {}, `${op.kind}: ${op.state}`, op.message ? ` · ${op.message}` : ""),
    el("ol", { class: "events", reversed: true }, (op.events || []).slice(-10).reverse().map((e) => el("li", { class: e.type },
      `${when(e.time)} ${e.node ? e.node + ": " : ""}${e.reason}: ${e.message}`))));
}

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

// table renders rows of objects; columns are [heading, value of a row].
function table(label, columns, rows, rowAttrs = () => ({})) {
  return el("table", { "aria-label": label },
    el("thead", {}, el("tr", {}, columns.map(([h]) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows.map((r) => el("tr", rowAttrs(r), columns.map(([, v]) => el("td", {}, v(r)))))));
}

const when = (t) => (t ? new Date(t).toLocaleString() : "");

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
  const create = isAdmin() ? el("p", {}, el("a", { href: "#/create", class: "button", id: "create" }, "Create a cluster")) : null;
  refresh(JSON.stringify(["clusters", items]), () => [el("h1", {}, "Clusters"), create, body]);
  state.timer = setTimeout(() => route(), 5000);
}

// components lists what a node's agent said of each part it configures:
// healthy or not, its phase, and why.
function components(list) {
  if (!list || list.length === 0) return null;
  return el("ul", { class: "components" }, list.map((c) => el("li", { class: c.healthy ? "ok" : "bad", "data-component": c.name },
    `${c.name}${c.phase ? " " + c.phase : ""}${c.healthy ? "" : " (unhealthy)"}`, c.message ? el("div", { class: "muted" }, c.message) : null)));
}

async function showCluster(name) {
  const c = await call("GET", `${api.clusters}/${encodeURIComponent(name)}`);
  const s = c.status;
  const nodes = el("table", { "aria-label": "Nodes" },
    el("thead", {}, el("tr", {}, ["Name", "Role", "Address", "Phase", "Step", "Agent", "Kubernetes", "Kubelet", "Image", "Replacement", ""].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, (s.nodes || []).map((n) => el("tr", { "data-node": n.name },
      el("td", {}, n.name), el("td", {}, n.role), el("td", {}, n.ip || n.guestIP || ""),
      el("td", { class: `phase-${n.phase}` }, n.phase, n.lastError ? el("div", { class: "muted" }, n.lastError) : null),
      el("td", {}, n.step || ""), el("td", {}, n.agentPhase || "", n.lastReport ? el("div", { class: "muted" }, `reported ${new Date(n.lastReport).toLocaleTimeString()}`) : null, components(n.components)), el("td", {}, n.kubernetes || ""), el("td", {}, n.kubeletVersion || ""),
      el("td", {}, n.image || ""), el("td", {}, n.upgrade || ""),
      el("td", {}, nodeAction(c, n))))));
  const conditions = el("table", { "aria-label": "Conditions" },
    el("thead", {}, el("tr", {}, ["Type", "Status", "Reason", "Message"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, (s.conditions || []).map((k) => el("tr", {}, el("td", {}, k.type), el("td", {}, k.status), el("td", {}, k.reason || ""), el("td", {}, k.message || "")))));
  const events = el("ol", { class: "events", "aria-label": "Events", reversed: true },
    (s.events || []).slice(-30).reverse().map((e) => el("li", { class: e.type },
      `${new Date(e.time).toLocaleTimeString()} ${e.node ? e.node + ": " : ""}${e.reason}: ${e.message}`)));
  let grants = [];
  try { grants = (await call("GET", clusterPath(c.spec.name, "/grants"))).items || []; } catch (e) { if (!(e instanceof APIError) || e.status !== 403) throw e; }
  const grantRows = table("Grants", [
    ["Kind", (g) => g.kind], ["Subject", (g) => g.subject], ["Role", (g) => g.role], ["By", (g) => g.by], ["Since", (g) => when(g.createdAt)],
    ["", (g) => (c.access === "admin"
      ? el("button", { type: "button", class: "secondary", "data-revoke": `${g.kind}/${g.subject}`, onclick: () => revoke(c.spec.name, g) }, "Revoke")
      : "")],
  ], grants, (g) => ({ "data-grant": `${g.kind}/${g.subject}` }));
  // Each part is redrawn only when its own data changed: the actions stay
  // the same elements while events come in, so a click is not lost to a
  // redraw.
  refreshParts(JSON.stringify(["cluster", c.spec.name]), el("h1", {}, `Cluster ${c.spec.name}`), [
    ["actions", [c.access, isAdmin()], () => clusterActions(c)],
    ["operation", [state.op], () => operationPanel(c.spec.name)],
    ["upgrade", [s.upgrade, c.access], () => upgradePanel(c)],
    ["summary", [s.phase, c.spec], () => el("p", {}, el("span", { class: `phase-${s.phase}` }, s.phase), ` · Kubernetes ${c.spec.kubernetesVersion || ""} · VIP ${c.spec.vip} · image ${c.spec.image}`)],
    ["nodes", [s.nodes, c.access], () => [el("h2", {}, "Nodes"), nodes]],
    ["etcd", [(s.nodes || []).map((n) => [n.name, n.etcdSnapshots]), s.etcdSnapshotCopies, s.etcdSnapshotRequest, c.access], () => etcdPanel(c)],
    ["conditions", [s.conditions], () => [el("h2", {}, "Conditions"), conditions]],
    ["events", [s.events], () => [el("h2", {}, "Events"), events]],
    ["access", [grants, c.access], () => [el("h2", {}, "Access"),
      c.access === "admin" ? el("div", { class: "actions" }, el("button", { type: "button", id: "grant", onclick: () => grant(c.spec.name) }, "Grant access…")) : null,
      grants.length ? grantRows : el("p", { class: "empty" }, "No grants: only the controller's admins have access.")]],
  ]);
  // The page follows the cluster while it is shown.
  state.timer = setTimeout(() => route(), 2000);
}

// etcdPanel shows the cluster's etcd snapshots: each master's, as its
// agent reports them, the controller's copies, and the newest one asked
// for by hand; a cluster admin takes one now or restores one.
function etcdPanel(c) {
  const s = c.status;
  const masters = (s.nodes || []).filter((n) => n.role === "master");
  const copies = s.etcdSnapshotCopies || [];
  const rows = masters.map((n) => ({ where: n.name, list: n.etcdSnapshots || [] }));
  rows.push({ where: "the controller (copies)", list: copies.map((k) => k.takenAt), copies: true });
  const r = s.etcdSnapshotRequest;
  let asked = null;
  if (r) {
    const what = !r.finishedAt ? "the masters are taking it"
      : r.error ? `failed: ${r.error}`
        : `taken by ${r.master || "a master"} at ${r.takenAt}${r.copied ? ", copied to the controller" : ""}`;
    asked = el("p", { id: "etcd-snapshot-asked", "data-state": !r.finishedAt ? "Running" : r.error ? "Failed" : "Succeeded" },
      `Asked by ${r.by} at ${when(r.askedAt)}: ${what}`);
  }
  const actions = c.access === "admin" ? el("div", { class: "actions" },
    el("button", { type: "button", id: "etcd-snapshot", onclick: () => snapshotEtcd(c.spec.name) }, "Take a snapshot now…"),
    el("button", { type: "button", id: "restore", class: "danger", onclick: () => restoreEtcd(c, rows) }, "Restore…")) : null;
  return [el("h2", {}, "Etcd snapshots"), actions, asked,
    table("Etcd snapshots", [
      ["Where", (x) => x.where], ["Snapshots", (x) => String(x.list.length)], ["Newest", (x) => (x.list.length ? x.list[x.list.length - 1] : "none")],
    ], rows, (x) => ({ "data-snapshots": x.where }))];
}

async function snapshotEtcd(name) {
  follow(await dialog(`Take an etcd snapshot of ${name} now? Every master takes one; the controller keeps a copy of the first.`, [],
    () => call("POST", clusterPath(name, "/etcd-snapshot")), "Take"));
}

// restoreEtcd asks which snapshot to restore (the newest a master has, one
// of a master's, or one of the controller's copies) and for the cluster's
// name, as the keyspace goes back to that snapshot.
async function restoreEtcd(c, rows) {
  const name = c.spec.name;
  const newest = "the newest a master has";
  const choices = new Map([[newest, {}]]);
  for (const x of rows) {
    for (const t of [...x.list].reverse()) {
      choices.set(x.copies ? `controller copy · ${t}` : `${x.where} · ${t}`,
        x.copies ? { fromController: true, snapshotTakenAt: t } : { source: x.where, snapshotTakenAt: t });
    }
  }
  follow(await dialog(`Restore etcd of ${name}? Its keyspace goes back to the snapshot; what was written since is lost.`, [
    ["Snapshot", { name: "snapshot", options: [...choices.keys()], value: newest }],
    ["Type the cluster's name to confirm", { name: "confirmName", autocomplete: "off" }],
  ], (v) => {
    if (v.confirmName !== name) throw fieldError("confirmName", `Type ${name} to restore it.`);
    return call("POST", clusterPath(name, "/restore"), choices.get(v.snapshot) || {});
  }, "Restore"));
}

// clusterActions offers what the caller's access allows: everyone with
// access takes their own kubeconfig (harmonyctl makes its credential); a
// cluster admin scales, retries, upgrades, removes workers and takes the
// admin kubeconfig; only the controller's admins delete.
function clusterActions(c) {
  const name = c.spec.name;
  const buttons = [];
  if (c.access === "admin") {
    buttons.push(
      el("button", { type: "button", id: "scale", onclick: () => scaleCluster(c) }, "Scale…"),
      el("button", { type: "button", id: "upgrade", onclick: () => upgradeCluster(c) }, "Upgrade…"),
      el("button", { type: "button", id: "retry", onclick: () => act(async () => follow(await call("POST", clusterPath(name, "/retry")))) }, "Retry failed nodes"),
      el("button", { type: "button", id: "admin-kubeconfig", class: "secondary", onclick: () => downloadKubeconfig(name, true) }, "Download admin kubeconfig"));
  }
  buttons.push(el("button", { type: "button", id: "kubeconfig", class: "secondary", onclick: () => downloadKubeconfig(name, false) }, "Download kubeconfig"));
  if (isAdmin()) buttons.push(el("button", { type: "button", id: "delete", class: "danger", onclick: () => deleteCluster(name) }, "Delete…"));
  return buttons.length ? el("div", { class: "actions" }, buttons) : null;
}

// act runs a change and shows the page again; the page follows the
// operation it started.
async function act(change) {
  showMessage("");
  try {
    await change();
  } catch (e) {
    failed(e);
  }
  await route();
}

// formField is one labelled input (a select when attrs has options), with
// the span its error goes into, which it records in errors by name.
// A name may be an API field's path (userSearch.baseDN); its ids use
// dashes. attrs.rows makes a textarea.
function formField(errors, label, attrs) {
  const id = attrs.name.replace(/[^A-Za-z0-9]/g, "-");
  const error = el("span", { class: "field-error", id: `${id}-error` });
  errors[attrs.name] = error;
  const described = { id: `f-${id}`, "aria-describedby": `${id}-error` };
  const { options, value, ...rest } = attrs;
  let input;
  if (options) {
    input = el("select", { name: attrs.name, ...described }, options.map((o) => el("option", { value: o, selected: o === value }, o)));
  } else if (attrs.rows) {
    input = el("textarea", { ...described, ...rest });
    input.value = value || "";
  } else {
    input = el("input", { ...described, ...attrs });
  }
  return attrs.type === "checkbox"
    ? el("label", { class: "check" }, input, label, error)
    : el("label", {}, label, input, error);
}

// dialog shows a modal form; fields are [label, input attributes]. It
// resolves with the form's values, or null when cancelled. A refusal from
// the API that names one of its fields is shown next to it and the
// dialog stays open.
function dialog(title, fields, submit, confirmText) {
  return new Promise((resolve) => {
    clearTimeout(state.timer);
    const errors = {};
    const form = el("form", { method: "dialog", novalidate: true },
      el("h2", {}, title),
      fields.map(([label, attrs]) => formField(errors, label, attrs)),
      el("p", { class: "form-error field-error", id: "form-error" }),
      el("div", { class: "actions" },
        el("button", { type: "submit", id: "confirm" }, confirmText || "OK"),
        el("button", { type: "button", class: "secondary", id: "cancel", onclick: () => { d.close(); } }, "Cancel")));
    const d = el("dialog", { "aria-label": title }, form);
    let result = null;
    // Closed either way (done, Cancel, Escape), the page carries on.
    d.addEventListener("close", () => { d.remove(); resolve(result); route(); });
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      for (const e of Object.values(errors)) e.textContent = "";
      form.querySelector("#form-error").textContent = "";
      const values = {};
      for (const [, attrs] of fields) {
        const input = form.elements[attrs.name];
        values[attrs.name] = attrs.type === "checkbox" ? input.checked : input.value.trim();
      }
      try {
        result = await submit(values);
        d.close();
      } catch (e) {
        const at = e instanceof APIError && errorFor(errors, e.field);
        if (at) at.textContent = e.message;
        else form.querySelector("#form-error").textContent = reason(e);
      }
    });
    document.body.append(d);
    d.showModal();
  });
}

// errorFor is the error span for an API field: its own, or the one of the
// field it is part of (groupRoles[1].role goes to groupRoles).
function errorFor(errors, field) {
  if (!field) return null;
  return errors[field] || errors[field.split(/[.[]/)[0]] || null;
}

// formFailed shows why a page's form was refused: next to the field the
// refusal names (and the focus there), under the form, or, for the
// controller's own failure, in the page's message.
function formFailed(form, errors, e) {
  const at = e instanceof APIError && errorFor(errors, e.field);
  if (at) {
    at.textContent = e.message;
    (form.elements[e.field] || form.elements[e.field.split(/[.[]/)[0]]).focus();
  } else if (e instanceof APIError && e.status < 500) {
    form.querySelector("#form-error").textContent = e.message;
  } else {
    failed(e);
  }
}

// fieldError is a refusal the page makes itself, before the API.
function fieldError(field, message) {
  return new APIError(400, { error: { code: "bad_request", field, message } });
}

function count(value, field) {
  if (!/^[0-9]+$/.test(value)) throw fieldError(field, "Enter a whole number.");
  return Number(value);
}

async function scaleCluster(c) {
  const s = c.status.nodes || [];
  follow(await dialog(`Scale ${c.spec.name}`, [
    ["Masters", { name: "masters", type: "number", min: 1, step: 2, value: s.filter((n) => n.role === "master").length }],
    ["Workers", { name: "workers", type: "number", min: 0, value: s.filter((n) => n.role === "worker").length }],
  ], (v) => call("POST", clusterPath(c.spec.name, "/scale"), { masters: count(v.masters, "masters"), workers: count(v.workers, "workers") }), "Scale"));
}

async function upgradeCluster(c) {
  let images = [];
  try { images = (await call("GET", `${api.images}?provider=${encodeURIComponent(c.spec.provider)}`)).items || []; } catch { /* typed by hand then */ }
  const names = images.filter((i) => i.state === "Ready" && i.role === "node").map((i) => i.name);
  follow(await dialog(`Upgrade ${c.spec.name}`, [
    ["Image", names.length ? { name: "image", options: names } : { name: "image", required: true }],
    ["Kubernetes version (empty: the cluster's)", { name: "kubernetesVersion", placeholder: c.spec.kubernetesVersion || "" }],
  ], (v) => call("POST", clusterPath(c.spec.name, "/upgrade"), { image: v.image, kubernetesVersion: v.kubernetesVersion || undefined }), "Upgrade"));
}

// nodeAction is what a cluster admin may do to one node: remove a
// worker, or replace a master by a new VM (a worker is replaced by
// removing it and scaling back up).
function nodeAction(c, n) {
  if (c.access !== "admin") return null;
  if (n.role === "worker") {
    return el("button", { type: "button", class: "secondary", "data-remove": n.name, onclick: () => removeNode(c.spec.name, n.name) }, "Remove…");
  }
  return el("button", { type: "button", class: "secondary", "data-replace": n.name, onclick: () => replaceNode(c.spec.name, n.name) }, "Replace…");
}

async function replaceNode(cluster, node) {
  follow(await dialog(`Replace ${node} of ${cluster} by a new VM?`, [
    ["Give the new VM a new, empty data disk, as a new etcd member (for a lost or damaged disk; the old disk's file is kept)", { name: "freshDisk", type: "checkbox" }],
  ], (v) => call("POST", clusterPath(cluster, `/nodes/${encodeURIComponent(node)}/replace`), { freshDisk: v.freshDisk }), "Replace"));
}

async function removeNode(cluster, node) {
  follow(await dialog(`Remove ${node} from ${cluster}?`, [
    ["Keep the VM, powered off, for troubleshooting", { name: "keepVM", type: "checkbox" }],
  ], (v) => call("DELETE", clusterPath(cluster, `/nodes/${encodeURIComponent(node)}${v.keepVM ? "?keepVM=true" : ""}`)), "Remove"));
}

async function deleteCluster(name) {
  const done = await dialog(`Delete cluster ${name}?`, [
    ["Type the cluster's name to confirm", { name: "confirmName", autocomplete: "off" }],
    ["Also delete the masters' data disks (purge): etcd's data is lost", { name: "purge", type: "checkbox" }],
  ], async (v) => {
    if (v.confirmName !== name) throw fieldError("confirmName", `Type ${name} to delete it.`);
    return call("DELETE", clusterPath(name, v.purge ? "?purge=true" : ""));
  }, "Delete");
  if (done) location.hash = "#/clusters";
}

// downloadKubeconfig saves the user's own kubeconfig (its credential
// from harmonyctl, under their grant) or, for a cluster admin, an admin
// one with a certificate of its own.
async function downloadKubeconfig(name, admin) {
  try {
    const kc = admin ? await call("POST", clusterPath(name, "/kubeconfig"), {}) : await call("GET", clusterPath(name, "/kubeconfig"));
    const a = el("a", { href: URL.createObjectURL(new Blob([kc.kubeconfig], { type: "application/yaml" })), download: `${name}${admin ? "-admin" : ""}.kubeconfig` });
    document.body.append(a);
    a.click();
    a.remove();
    showMessage("");
  } catch (e) {
    failed(e);
  }
}

async function grant(cluster) {
  await dialog(`Grant access to ${cluster}`, [
    ["User or group", { name: "kind", options: ["user", "group"] }],
    ["Name", { name: "subject", required: true, autocomplete: "off" }],
    ["Role", { name: "role", options: ["view", "edit", "admin"] }],
  ], (v) => {
    if (!v.subject) throw fieldError("subject", "Enter a user or group name.");
    return call("POST", clusterPath(cluster, "/grants"), { [v.kind]: v.subject, role: v.role });
  }, "Grant");
}

async function revoke(cluster, g) {
  await dialog(`Revoke ${g.kind} ${g.subject}'s ${g.role} access to ${cluster}?`, [],
    () => call("DELETE", clusterPath(cluster, `/grants/${encodeURIComponent(g.kind)}/${encodeURIComponent(g.subject)}`)), "Revoke");
}

// The admins' pages.

async function showProviders() {
  const items = (await call("GET", api.providers)).items || [];
  // The vCenter password never comes back from the API, and has no column.
  show(el("h1", {}, "Providers"), items.length === 0 ? el("p", { class: "empty" }, "No providers: add one with harmonyctl provider apply.")
    : table("Providers", [["Name", (p) => p.name], ["vCenter", (p) => p.vcenter.url], ["User", (p) => p.vcenter.username],
      ["Datacenter", (p) => p.datacenter], ["Folder", (p) => p.folder]], items, (p) => ({ "data-provider": p.name })));
}

async function showImages() {
  const providers = (await call("GET", api.providers)).items || [];
  const sections = [];
  for (const p of providers) {
    const images = (await call("GET", `${api.images}?provider=${encodeURIComponent(p.name)}`)).items || [];
    sections.push(el("h2", {}, `On ${p.name}`), images.length === 0 ? el("p", { class: "empty" }, "No images.")
      : table(`Images on ${p.name}`, [["Name", (i) => i.name], ["Role", (i) => i.role], ["Version", (i) => i.version], ["State", (i) => i.state],
        ["Kubernetes", (i) => (i.kubernetesVersions || []).join(", ")],
        ["Components", (i) => Object.entries(i.versions || {}).sort().map(([k, v]) => `${k} ${v}`).join(", ")],
        ["Imported", (i) => when(i.importedAt)]], images, (i) => ({ "data-image": i.name })));
  }
  show(el("h1", {}, "Images"), sections.length ? sections : el("p", { class: "empty" }, "No providers."));
}

// showLeftovers lists what clusters deleted without purge left, and
// purges one once its id is typed: the data disks hold etcd's data.
async function showLeftovers() {
  const items = (await call("GET", api.leftovers)).items || [];
  show(el("h1", {}, "Leftovers of deleted clusters"),
    el("p", { class: "muted" }, "A cluster deleted without purge keeps its masters' data disks, with its etcd data, and the controller's copies of its etcd snapshots. Nothing uses them; purge them when they are no longer needed."),
    items.length === 0 ? el("p", { class: "empty" }, "Nothing left.")
      : table("Leftovers", [["ID", (l) => l.id], ["Cluster", (l) => l.cluster], ["Provider", (l) => l.provider], ["Deleted", (l) => when(l.deletedAt)],
        ["Data disk folders", (l) => (l.dataDiskFolders || []).join(", ")], ["Snapshot copies", (l) => String(l.etcdSnapshotCopies)],
        ["", (l) => el("button", { type: "button", class: "danger", "data-purge": l.id, onclick: () => purgeLeftovers(l) }, "Purge…")]],
      items, (l) => ({ "data-leftovers": l.id })));
}

async function purgeLeftovers(l) {
  await dialog(`Purge what cluster ${l.cluster} left? Its data disks and etcd snapshot copies are deleted for good.`, [
    ["Type the id to confirm", { name: "confirmName", autocomplete: "off" }],
  ], async (v) => {
    if (v.confirmName !== l.id) throw fieldError("confirmName", `Type ${l.id} to purge it.`);
    return call("DELETE", `${api.leftovers}/${encodeURIComponent(l.id)}`);
  }, "Purge");
}

async function showUsers() {
  const users = (await call("GET", api.users)).users || [];
  show(el("h1", {}, "Users"),
    el("div", { class: "actions" }, el("button", { type: "button", id: "add-user", onclick: addUser }, "Add a local user…")),
    table("Users", [["Name", (u) => u.name], ["Role", (u) => u.role], ["Source", (u) => u.source], ["Groups", (u) => (u.groups || []).join(", ")],
      ["Disabled", (u) => (u.disabled ? "yes" : "")], ["Created", (u) => when(u.createdAt)],
      ["", (u) => el("span", { class: "actions" },
        el("button", { type: "button", class: "secondary", "data-edit-user": u.name, onclick: () => editUser(u) }, "Edit…"),
        el("button", { type: "button", class: "secondary", "data-end-sessions": u.name, onclick: () => endSessions(u.name) }, "End sessions…"),
        el("button", { type: "button", class: "danger", "data-delete-user": u.name, onclick: () => deleteUser(u.name) }, "Delete…"))]],
    users, (u) => ({ "data-user": u.name })));
}

const userPath = (name) => `${api.users}/${encodeURIComponent(name)}`;

// editUser changes a user's role, disables or enables them, and for a
// local user sets a new password; each change ends their sessions.
async function editUser(u) {
  const fields = [
    ["Role", { name: "role", options: ["user", "admin"], value: u.role }],
    ["Disabled: no sign-in, sessions ended", { name: "disabled", type: "checkbox", checked: u.disabled }],
  ];
  if (u.source === "local") fields.push(["New password (empty: unchanged)", { name: "password", type: "password", autocomplete: "new-password" }]);
  await dialog(`Change ${u.name}`, fields, (v) => {
    const change = {};
    if (v.role !== u.role) change.role = v.role;
    if (v.disabled !== Boolean(u.disabled)) change.disabled = v.disabled;
    if (v.password) change.password = v.password;
    return call("PATCH", userPath(u.name), change);
  }, "Save");
}

async function endSessions(name) {
  await dialog(`End every session of ${name}? They sign in again.`, [], () => call("POST", `${userPath(name)}/end-sessions`), "End sessions");
}

async function deleteUser(name) {
  await dialog(`Delete the user ${name}? Their grants and sessions go with them.`, [], () => call("DELETE", userPath(name)), "Delete");
}

async function addUser() {
  await dialog("Add a local user", [
    ["Name", { name: "name", required: true, autocomplete: "off" }],
    ["Role", { name: "role", options: ["user", "admin"] }],
    ["Password", { name: "password", type: "password", autocomplete: "new-password", required: true }],
  ], (v) => call("POST", api.users, { name: v.name, role: v.role, password: v.password }), "Add");
}

// showLDAP is the directory users sign in with: the settings (the bind
// password never shown; empty keeps the stored one), applied only once
// the controller reached the directory with them, and a lookup that says
// what a user would sign in as.
async function showLDAP() {
  let l = null;
  try { l = await call("GET", api.ldap); } catch (e) { if (!(e instanceof APIError) || e.status !== 404) throw e; }
  const cur = l || { userSearch: {}, groupSearch: {} };
  const errors = {};
  const field = (label, attrs) => formField(errors, label, attrs);
  const form = el("form", { class: "create ldap", novalidate: true, "aria-labelledby": "ldap-title" },
    el("h1", { id: "ldap-title" }, "LDAP directory"),
    el("p", { class: "muted" }, l ? `Applied ${when(l.updatedAt)}.` : "None: only local users sign in."),
    field("URL (ldaps://, or ldap:// with StartTLS)", { name: "url", required: true, value: cur.url || "", placeholder: "ldaps://ad.example.com:636", autocomplete: "off" }),
    field("StartTLS", { name: "startTLS", type: "checkbox", checked: cur.startTLS }),
    field("CA certificates, PEM (empty: the system's)", { name: "ca", rows: 4, value: cur.ca || "" }),
    field("Bind DN", { name: "bindDN", value: cur.bindDN || "", autocomplete: "off" }),
    field(l ? "Bind password (empty: keep the stored one)" : "Bind password", { name: "bindPassword", type: "password", autocomplete: "new-password" }),
    field("User search base DN", { name: "userSearch.baseDN", value: cur.userSearch.baseDN || "" }),
    field("User filter, with {username}", { name: "userSearch.filter", value: cur.userSearch.filter || "", placeholder: "(uid={username})" }),
    field("Group search base DN", { name: "groupSearch.baseDN", value: cur.groupSearch.baseDN || "" }),
    field("Group filter, with {dn}", { name: "groupSearch.filter", value: cur.groupSearch.filter || "", placeholder: "(member={dn})" }),
    field("Group name attribute", { name: "groupSearch.nameAttribute", value: cur.groupSearch.nameAttribute || "", placeholder: "cn" }),
    field("Group roles, one group=role a line (admin or user)", { name: "groupRoles", rows: 3, value: (cur.groupRoles || []).map((g) => `${g.group}=${g.role}`).join("\n") }),
    field("Timeout of each directory operation, seconds", { name: "timeoutSeconds", type: "number", min: 1, value: cur.timeoutSeconds || "" }),
    el("p", { class: "field-error", id: "form-error" }),
    el("div", { class: "actions" }, el("button", { type: "submit", id: "ldap-apply" }, "Apply"),
      l ? el("button", { type: "button", id: "ldap-remove", class: "danger", onclick: removeLDAP }, "Remove…") : null));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    for (const e of Object.values(errors)) e.textContent = "";
    form.querySelector("#form-error").textContent = "";
    showMessage("");
    const v = (k) => form.elements[k].value.trim();
    try {
      const roles = v("groupRoles").split("\n").map((line) => line.trim()).filter(Boolean).map((line) => {
        const at = line.lastIndexOf("=");
        if (at <= 0) throw fieldError("groupRoles", `"${line}" is not group=role.`);
        return { group: line.slice(0, at).trim(), role: line.slice(at + 1).trim() };
      });
      const settings = {
        apiVersion: "harmony.dev/v1", kind: "LDAP", url: v("url"), startTLS: form.elements.startTLS.checked || undefined,
        ca: v("ca") || undefined, bindDN: v("bindDN"), bindPassword: form.elements.bindPassword.value || undefined,
        userSearch: { baseDN: v("userSearch.baseDN"), filter: v("userSearch.filter") },
        groupSearch: { baseDN: v("groupSearch.baseDN"), filter: v("groupSearch.filter") || undefined, nameAttribute: v("groupSearch.nameAttribute") || undefined },
        groupRoles: roles.length ? roles : undefined,
        timeoutSeconds: v("timeoutSeconds") ? count(v("timeoutSeconds"), "timeoutSeconds") : undefined,
      };
      await call("PUT", api.ldap, settings);
      showMessage("");
      await showLDAP();
    } catch (e) {
      formFailed(form, errors, e);
    }
  });
  const lookupForm = el("form", { class: "create lookup", novalidate: true, "aria-labelledby": "lookup-title" },
    el("h2", { id: "lookup-title" }, "Look a user up"),
    el("label", {}, "User name", el("input", { name: "username", id: "f-lookup", autocomplete: "off" })),
    el("div", { class: "actions" }, el("button", { type: "submit", id: "lookup" }, "Look up")),
    el("p", { id: "lookup-result", role: "status" }));
  lookupForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = lookupForm.querySelector("#lookup-result");
    out.textContent = "";
    try {
      const u = await call("POST", `${api.ldap}/lookup`, { username: lookupForm.elements.username.value.trim() });
      out.textContent = `${u.dn} · groups: ${(u.groups || []).join(", ") || "none"} · ${u.role ? "signs in as " + u.role : "may not sign in"}`;
    } catch (e) {
      out.textContent = reason(e);
    }
  });
  show(form, l ? lookupForm : null);
}

async function removeLDAP() {
  await dialog("Remove the LDAP directory? Its users' sessions end and they can no longer sign in.", [], () => call("DELETE", api.ldap), "Remove");
}

async function showAudit() {
  const items = ((await call("GET", `${api.audit}?since=24h`)).items || []).slice(-200).reverse();
  show(el("h1", {}, "Audit log (the last 24 hours, newest first)"),
    items.length === 0 ? el("p", { class: "empty" }, "Nothing recorded.")
      : table("Audit log", [["Time", (a) => when(a.time)], ["Who", (a) => a.user || a.actor], ["Request", (a) => `${a.method} ${a.path}`],
        ["Status", (a) => `${a.status}${a.code ? " " + a.code : ""}${a.suppressed ? ` (+${a.suppressed} left out)` : ""}`], ["From", (a) => a.remote]], items));
}

async function showCreate() {
  const providers = (await call("GET", api.providers)).items || [];
  const provider = providers.length ? providers[0].name : "";
  const images = provider ? ((await call("GET", `${api.images}?provider=${encodeURIComponent(provider)}`)).items || []).filter((i) => i.state === "Ready" && i.role === "node") : [];
  const errors = {};
  const field = (label, attrs) => formField(errors, label, attrs);
  const form = el("form", { class: "create", novalidate: true, "aria-labelledby": "create-title" },
    el("h1", { id: "create-title" }, "Create a cluster"),
    field("Name", { name: "name", required: true, autocomplete: "off" }),
    field("Provider", { name: "provider", options: providers.map((p) => p.name) }),
    field("Node image", images.length ? { name: "image", options: images.map((i) => i.name) } : { name: "image", required: true }),
    field("Kubernetes version (empty: the image's)", { name: "kubernetesVersion", placeholder: "v1.34.2" }),
    field("Masters", { name: "masters", type: "number", min: 1, step: 2, value: 3 }),
    field("Workers", { name: "workers", type: "number", min: 0, value: 2 }),
    field("API VIP (an address of the provider's pool)", { name: "vip", required: true, inputmode: "decimal" }),
    el("p", { class: "field-error", id: "form-error" }),
    el("div", { class: "actions" }, el("button", { type: "submit", id: "create-submit" }, "Create"), el("a", { href: "#/clusters" }, "Cancel")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    for (const e of Object.values(errors)) e.textContent = "";
    form.querySelector("#form-error").textContent = "";
    const v = (k) => form.elements[k].value.trim();
    try {
      if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(v("name"))) throw fieldError("name", "Use lowercase letters, digits and dashes.");
      if (!/^[0-9]{1,3}(\.[0-9]{1,3}){3}$/.test(v("vip"))) throw fieldError("vip", "Enter an IPv4 address, such as 198.18.0.10.");
      const spec = {
        apiVersion: "harmony.dev/v1", kind: "Cluster", name: v("name"), provider: v("provider"), image: v("image"),
        kubernetesVersion: v("kubernetesVersion") || undefined,
        masters: count(v("masters"), "masters"), workers: count(v("workers"), "workers"), vip: v("vip"),
      };
      const op = await call("POST", api.clusters, spec);
      location.hash = `#/clusters/${encodeURIComponent(spec.name)}`;
      follow(op);
    } catch (e) {
      formFailed(form, errors, e);
    }
  });
  show(form);
  form.elements.name.focus();
}

async function route() {
  const hash = location.hash || "#/clusters";
  try {
    const m = hash.match(/^#\/clusters\/([^/]+)$/);
    if (m) await showCluster(decodeURIComponent(m[1]));
    else if (hash === "#/create" && isAdmin()) await showCreate();
    else if (hash === "#/providers" && isAdmin()) await showProviders();
    else if (hash === "#/images" && isAdmin()) await showImages();
    else if (hash === "#/leftovers" && isAdmin()) await showLeftovers();
    else if (hash === "#/users" && isAdmin()) await showUsers();
    else if (hash === "#/ldap" && isAdmin()) await showLDAP();
    else if (hash === "#/audit" && isAdmin()) await showAudit();
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
  document.getElementById("admin-links").hidden = !isAdmin();
  document.getElementById("nav").hidden = false;
  await route();
}

document.getElementById("logout").addEventListener("click", async () => {
  try { await send("POST", api.logout, { browser: true }); } catch { /* the session may be gone already */ }
  showLogin();
});
window.addEventListener("hashchange", () => { if (state.who) route(); });
start();
