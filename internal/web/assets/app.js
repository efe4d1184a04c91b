// hostqos web view (docs/web.md): plain JavaScript over hostqosd's API.
// Every call goes to /api/… on this origin, where the daemon answers as
// the user of the login cookie; a change is refused with the API's own
// message when that user may not make it.
"use strict";

const $ = (sel, el) => (el || document).querySelector(sel);
const $$ = (sel, el) => Array.from((el || document).querySelectorAll(sel));

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const k of kids) e.append(k);
  return e;
}

// ---- formatting ----

function fmtRate(bps) {
  if (!bps) return "0";
  const u = [["Gbit/s", 1e9], ["Mbit/s", 1e6], ["kbit/s", 1e3]];
  for (const [name, f] of u) if (bps >= f) return (bps / f).toFixed(2) + " " + name;
  return bps.toFixed(0) + " bit/s";
}

function fmtCount(n) {
  return n ? String(n) : "0";
}

// ---- API ----

async function apiError(r) {
  let body;
  try { body = await r.json(); } catch (e) { return r.status + " " + r.statusText; }
  let s = body.error || (r.status + " " + r.statusText);
  // Each field error as the CLI prints it: object: field F = "V": reason; fix.
  for (const f of body.fields || []) {
    let line = f.Object ? f.Object + ": " : "";
    if (f.Field) line += "field " + f.Field + (f.Value ? " = " + (f.Literal ? f.Value : JSON.stringify(f.Value)) : "") + ": ";
    line += f.Reason || "";
    if (f.Fix) line += "; " + f.Fix;
    s += "\n" + line;
  }
  return s;
}

async function get(path) {
  const r = await fetch("/api" + path, { credentials: "same-origin" });
  if (!r.ok) throw new Error(await apiError(r));
  return r.json();
}

async function send(method, path, body) {
  const r = await fetch("/api" + path, {
    method, credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!r.ok) throw new Error(await apiError(r));
  return r.status === 204 ? null : r.json();
}

let msgTimer = null;

// showMsg shows a message under the header; a success goes after 5 s.
function showMsg(text, ok) {
  const m = $("#msg");
  m.textContent = text;
  m.className = ok ? "msg ok" : "msg";
  m.hidden = !text;
  clearTimeout(msgTimer);
  if (ok) msgTimer = setTimeout(() => { m.hidden = true; }, 5000);
}

// ---- state ----

const state = {
  apps: [], rules: {}, classes: {}, sort: { key: "out", asc: false }, filter: "",
  current: null, range: 3600, chart: null, view: "apps",
};

function appKey(a) {
  if (a.container) return "container:" + (a.runtime || "") + "/" + a.container;
  return a.exe || a.comm;
}

function appName(a) {
  if (a.container) return a.container;
  if (a.exe) return a.exe.split("/").pop();
  return a.comm;
}

// appKind: a process, a container, or a container of a Kubernetes pod
// (the node agent's rule k8s/NAMESPACE/NAME selects it).
function appKind(a) {
  if (!a.container) return a.exited ? "process (exited)" : "process";
  const pod = (a.rules || []).map((n) => state.rules[n]).find((r) => r && r.source === "kubernetes");
  if (pod) return "pod " + pod.rule.name.replace(/^k8s\//, "");
  return "container (" + (a.runtime || "?") + ")";
}

function ruleOf(a) {
  return (a.rules || []).map((n) => state.rules[n]).find(Boolean);
}

function classOf(a) {
  const r = ruleOf(a);
  return r ? r.rule.class || "default" : "default";
}

function markOf(a) {
  const r = ruleOf(a);
  if (r && r.rule.dscp) return r.rule.dscp;
  const c = state.classes[classOf(a)];
  return c && c.class.dscp ? c.class.dscp : "-";
}

function field(a, k) {
  const r = ruleOf(a);
  switch (k) {
    case "name": return appName(a).toLowerCase();
    case "kind": return appKind(a);
    case "pid": return a.pid;
    case "uid": return a.uid;
    case "flows": return a.flows;
    case "rule": return r ? r.rule.name : "";
    case "class": return classOf(a);
    case "mark": return markOf(a);
    case "limit": return r && r.rule.maxbw ? r.rule.maxbw : "";
    case "guarantee": return r && r.rule.minbw ? r.rule.minbw : "";
    case "out": return a.rate_bps || 0;
    case "in": return (a.in && a.in.rate_bps) || 0;
    case "drops": return (a.drops || 0) + ((a.in && a.in.drops) || 0);
  }
  return "";
}

// ---- apps view ----

function renderApps() {
  const f = state.filter.toLowerCase();
  let rows = state.apps.filter((a) => !f || [appName(a), a.comm, a.exe, a.container, a.image, String(a.uid),
    field(a, "rule"), classOf(a)].some((s) => s && String(s).toLowerCase().includes(f)));
  const { key, asc } = state.sort;
  rows.sort((x, y) => {
    const a = field(x, key), b = field(y, key);
    const c = typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b));
    return asc ? c : -c;
  });
  const tb = $("#apps tbody");
  tb.replaceChildren(...rows.map((a) => {
    const out = field(a, "out"), inb = field(a, "in");
    const tr = el("tr", { "data-app": appKey(a), "data-name": appName(a) },
      el("td", { text: appName(a) }), el("td", { text: appKind(a) }), el("td", { text: a.pid ? String(a.pid) : "-" }),
      el("td", { text: a.container ? "-" : String(a.uid) }), el("td", { text: String(a.flows) }), el("td", { text: field(a, "rule") || "-" }),
      el("td", { text: classOf(a) }), el("td", { text: markOf(a) }), el("td", { text: field(a, "limit") || "-" }),
      el("td", { text: field(a, "guarantee") || "-" }),
      el("td", { className: "num out", text: fmtRate(out), "data-bps": String(out) }),
      el("td", { className: "num in", text: fmtRate(inb), "data-bps": String(inb) }),
      el("td", { className: "num", text: fmtCount(field(a, "drops")) }));
    tr.addEventListener("click", () => { location.hash = "#app/" + encodeURIComponent(appKey(a)); });
    return tr;
  }));
  $$("#apps th").forEach((th) => {
    th.classList.toggle("sorted", th.dataset.sort === key);
    th.classList.toggle("asc", th.dataset.sort === key && asc);
  });
  $("#apps-status").textContent = rows.length + " of " + state.apps.length + " apps, updated " + new Date().toLocaleTimeString();
  if (state.view === "app") renderAppSummary();
}

function startLive() {
  const es = new EventSource("/api/live?kind=apps");
  es.onmessage = (ev) => {
    const st = JSON.parse(ev.data);
    state.apps = st.apps || [];
    renderApps();
  };
  es.addEventListener("failed", (ev) => {
    try { showMsg(JSON.parse(ev.data).error); } catch (e) { showMsg("the live view failed"); }
  });
}

async function loadPolicy() {
  try {
    const [rules, classes] = await Promise.all([get("/v1/rules"), get("/v1/classes")]);
    state.rules = Object.fromEntries((rules || []).map((r) => [r.rule.name, r]));
    state.classes = Object.fromEntries((classes || []).map((c) => [c.class.name, c]));
    renderApps();
  } catch (e) {
    showMsg("read rules: " + e.message);
  }
}

// ---- one app ----

function currentApp() {
  return state.apps.find((a) => appKey(a) === state.current);
}

function renderAppSummary() {
  const a = currentApp();
  $("#app-title").textContent = state.current;
  const tb = $("#app-summary tbody");
  if (!a) { tb.replaceChildren(el("tr", {}, el("td", { text: "not sending now" }))); return; }
  const kv = [["Kind", appKind(a)], ["PID", a.pid ? String(a.pid) : "-"], ["User", a.container ? "-" : String(a.uid)], ["Image", a.image || "-"],
    ["Rules", (a.rules || []).join(", ") || "-"], ["Class", classOf(a)], ["Mark", markOf(a)],
    ["Limit", field(a, "limit") || "-"], ["Guarantee", field(a, "guarantee") || "-"],
    ["Out", fmtRate(field(a, "out"))], ["In", fmtRate(field(a, "in"))], ["Drops", fmtCount(field(a, "drops"))]];
  tb.replaceChildren(...kv.map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { text: v }))));
}

async function loadFlows() {
  const a = currentApp();
  const t = $("#app-flows");
  if (!a) { genericTable(t, []); return; }
  try {
    const st = await get("/v1/stats/flows");
    const mine = (st.flows || []).filter((f) => (a.container ? f.container === a.container : (f.pid === a.pid || (f.exe && f.exe === a.exe))));
    genericTable(t, mine.map((f) => ({ proto: f.proto, local: f.local, remote: f.remote, rule: f.rule || "-",
      out: fmtRate(f.rate_bps), in: fmtRate(f.in && f.in.rate_bps), drops: (f.drops || 0) + ((f.in && f.in.drops) || 0), age_s: Math.round(f.age_s) })));
  } catch (e) {
    showMsg("read flows: " + e.message);
  }
}

async function loadHistory() {
  const key = state.current;
  // A few seconds short of the range: a range just past the raw rows' retention
  // would be answered from the coarser rows.
  const since = new Date(Date.now() - state.range * 1000 + 10000).toISOString();
  $$(".range").forEach((b) => b.classList.toggle("on", Number(b.dataset.range) === state.range));
  const status = $("#chart-status");
  status.textContent = "loading…";
  let h;
  try {
    h = await get("/v1/history/apps?name=" + encodeURIComponent(key) + "&since=" + encodeURIComponent(since));
  } catch (e) {
    status.textContent = "history: " + e.message;
    return;
  }
  const pts = new Map();
  for (const s of h.series || []) {
    for (const p of s.points || []) {
      const t = Date.parse(p.t) / 1000;
      const q = pts.get(t) || { out: 0, in: 0, peak: 0 };
      q.out += (p.bytes_out * 8) / h.step_s;
      q.in += (p.bytes_in * 8) / h.step_s;
      q.peak += p.peak_bytes_out * 8;
      pts.set(t, q);
    }
  }
  const ts = Array.from(pts.keys()).sort((a, b) => a - b);
  const data = [ts, ts.map((t) => pts.get(t).out), ts.map((t) => pts.get(t).in), ts.map((t) => pts.get(t).peak)];
  const box = $("#chart");
  box.dataset.points = String(ts.length);
  status.textContent = ts.length + " points, " + h.step_s + " s each (" + (h.resolution || "-") + " rows)";
  if (state.chart) { state.chart.destroy(); state.chart = null; }
  box.replaceChildren();
  if (!window.uPlot) { status.textContent += "; the chart library did not load"; return; }
  state.chart = new window.uPlot({
    width: Math.max(400, box.clientWidth - 20), height: 300,
    series: [{}, { label: "out", stroke: "#2463c6", value: (u, v) => (v == null ? "-" : fmtRate(v)) },
      { label: "in", stroke: "#2e7d32", value: (u, v) => (v == null ? "-" : fmtRate(v)) },
      { label: "peak out (busiest second)", stroke: "#b3261e", dash: [4, 4], value: (u, v) => (v == null ? "-" : fmtRate(v)) }],
    axes: [{}, { values: (u, vals) => vals.map((v) => fmtRate(v)), size: 90 }],
  }, data, box);
}

// ---- actions ----

const namePart = /[^a-z0-9_.-]+/g;

function webRuleName(a) {
  let n = appName(a).toLowerCase().replace(namePart, "-").replace(/^[-.]+|[-.]+$/g, "");
  if (!n) n = "pid" + a.pid;
  if (a.container) n = "ctr-" + n;
  return ("web-" + n).slice(0, 63);
}

function globQuote(s) {
  return s.replace(/[*?[\\]/g, (c) => "\\" + c);
}

// plan is the change an action makes for app a: fields set on the app's
// own rule (web-NAME, or a rule that selects only this app), or a new
// rule web-NAME one precedence above the rules deciding the app now,
// keeping their class, mark and limit.
function plan(a, fields) {
  const own = webRuleName(a);
  const mine = (a.rules || []).map((n) => state.rules[n]).find((r) => r && (r.rule.name === own || selectsOnly(r.rule, a)));
  if (mine) return { method: "PATCH", path: "/v1/rules/" + encodeURIComponent(mine.rule.name), body: fields, text: "change rule " + mine.rule.name };
  const body = { name: own };
  const deciding = ruleOf(a);
  if (deciding && (deciding.rule.action || "pass") === "pass" && fields.action !== "drop") {
    for (const k of ["class", "dscp", "maxbw", "police", "burst"]) if (deciding.rule[k]) body[k] = deciding.rule[k];
  }
  for (const [k, v] of Object.entries(fields)) { if (v === null) delete body[k]; else body[k] = v; }
  if (a.container) body.container = globQuote(a.container);
  else if (a.exe) body.exe = a.exe;
  else body.comm = a.comm;
  let prec = 0;
  for (const n of a.rules || []) if (state.rules[n]) prec = Math.max(prec, state.rules[n].rule.precedence || 0);
  body.precedence = Math.min(prec + 1, 65535);
  return { method: "POST", path: "/v1/rules", body, text: "add rule " + own };
}

function selectsOnly(r, a) {
  const flowSel = r.proto || r.local || r.remote || r.lport || r.rport || r.dscp_in || r.user || r.unit || r.cgroup;
  if (flowSel) return false;
  if (a.container) return r.container === a.container || r.container === globQuote(a.container);
  return (a.exe && r.exe === a.exe && !r.comm) || (!r.exe && r.comm === a.comm);
}

// confirm shows the dialog: text, an input (or none), and applies
// make(value) → plan after the user confirms. The API's refusal stays in
// the dialog.
function confirmAction(text, input, make) {
  const d = $("#confirm");
  $("#confirm-text").textContent = text;
  $("#confirm-input").replaceChildren(...(input ? [input] : []));
  $("#confirm-error").textContent = "";
  const update = () => {
    try { const p = make(input && input.value); $("#confirm-plan").textContent = p.text + ": " + JSON.stringify(p.body || {}); } catch (e) { $("#confirm-plan").textContent = e.message; }
  };
  if (input) input.addEventListener("input", () => { $("#confirm-error").textContent = ""; update(); });
  update();
  const ok = $("#confirm-ok");
  const onOK = async (ev) => {
    ev.preventDefault();
    let p;
    try { p = make(input && input.value); } catch (e) { $("#confirm-error").textContent = e.message; return; }
    ok.disabled = true;
    try {
      await send(p.method, p.path, p.body);
      d.close();
      showMsg(p.text + ": done", true);
      await loadPolicy();
    } catch (e) {
      $("#confirm-error").textContent = e.message;
    } finally {
      ok.disabled = false;
    }
  };
  ok.onclick = onOK;
  $("#confirm-form").onsubmit = onOK;
  $("#confirm-cancel").onclick = () => d.close();
  d.showModal();
  if (input) input.focus();
}

function withApp(fn) {
  return () => {
    const a = currentApp();
    if (!a) { showMsg(state.current + " is not sending now: no process to make a rule for"); return; }
    fn(a);
  };
}

function setupActions() {
  $("#act-class").onclick = withApp((a) => {
    const s = el("select", { id: "confirm-value" }, ...Object.keys(state.classes).map((c) => el("option", { value: c, text: c })));
    s.value = classOf(a);
    confirmAction("Class for " + appName(a) + ":", s, (v) => plan(a, { class: v, action: null }));
  });
  $("#act-limit").onclick = withApp((a) => {
    const i = el("input", { id: "confirm-value", placeholder: "e.g. 2mbit; empty removes the limit", value: field(a, "limit") });
    confirmAction("Limit (maxbw) for " + appName(a) + ":", i, (v) => plan(a, { maxbw: v ? v.trim() : null, action: null }));
  });
  $("#act-block").onclick = withApp((a) => {
    confirmAction("Block " + appName(a) + "? All its traffic is dropped.", null,
      () => plan(a, { action: "drop", class: null, dscp: null, maxbw: null, minbw: null, police: null, burst: null }));
  });
  $("#act-quota").onclick = withApp((a) => {
    const i = el("input", { id: "confirm-value", placeholder: "e.g. 5GiB per day; then: block or limit 1mbit" });
    confirmAction("Quota for " + appName(a) + " (VOLUME [per day|week|month] [then block|limit RATE]):", i, (v) => plan(a, parseQuota(v)));
  });
  $("#act-schedule").onclick = withApp((a) => {
    const i = el("input", { id: "confirm-value", placeholder: "e.g. Mon-Fri 09:00-18:00" });
    confirmAction("Schedule for " + appName(a) + " (the rule is on only then):", i, (v) => plan(a, { schedule: (v || "").trim() }));
  });
  $("#act-remove").onclick = withApp((a) => {
    const r = ruleOf(a);
    if (!r) { showMsg("no rule decides " + appName(a)); return; }
    confirmAction("Remove rule " + r.rule.name + "? It decides " + appName(a) + (selectsOnly(r.rule, a) ? "." : " and may decide other apps."), null,
      () => ({ method: "DELETE", path: "/v1/rules/" + encodeURIComponent(r.rule.name), text: "remove rule " + r.rule.name }));
  });
}

function parseQuota(v) {
  const m = /^\s*(\S+)(?:\s+per\s+(day|week|month))?(?:\s+then\s+(block|limit\s+\S+))?\s*$/.exec(v || "");
  if (!m) throw new Error("write VOLUME [per day|week|month] [then block|limit RATE], e.g. 5GiB per day then block");
  const f = { quota: m[1] };
  if (m[2]) f.quota_period = m[2];
  if (m[3]) f.quota_action = m[3].replace(/\s+/, " ");
  return f;
}

// ---- the other views ----

function cell(v) {
  if (v === null || v === undefined || v === "") return "-";
  if (Array.isArray(v)) return v.map(cell).join(", ");
  if (typeof v === "object") {
    if ("name" in v && Object.keys(v).length <= 3) return Object.values(v).map(cell).join(" ");
    return JSON.stringify(v);
  }
  return String(v);
}

function genericTable(t, rows, cols) {
  cols = cols || Array.from(rows.reduce((s, r) => { Object.keys(r).forEach((k) => s.add(k)); return s; }, new Set()));
  $("thead", t).replaceChildren(el("tr", {}, ...cols.map((c) => el("th", { text: c }))));
  $("tbody", t).replaceChildren(...(rows.length ? rows.map((r) => el("tr", {}, ...cols.map((c) => el("td", { text: cell(r[c]) }))))
    : [el("tr", {}, el("td", { text: "none", className: "muted" }))]));
}

async function loadLinks() {
  try {
    const [links, st] = await Promise.all([get("/v1/links"), get("/v1/stats/links")]);
    const rate = Object.fromEntries((st.links || []).map((l) => [l.link || l.name, l]));
    genericTable($("#links"), (links || []).map((l) => {
      const s = rate[l.name] || {};
      return { link: l.name, egress_rate: l.egress_rate, ingress_rate: l.ingress_rate, shaping: l.shaping,
        reservable: l.reservable_capacity, admitted: l.reserved, guarantees: (l.guarantees || []).map((g) => (g.kind || "") + " " + (g.name || "") + " " + (g.rate || "")).join(", "),
        out: fmtRate(s.rate_bps), in: fmtRate(s.in && s.in.rate_bps), drops: s.drops || 0, error: l.error };
    }));
  } catch (e) { showMsg("read links: " + e.message); }
}

async function loadList(path, table, pick) {
  try {
    const v = await get(path);
    let rows = Array.isArray(v) ? v : (v && (v.sockets || v.channels || v.items)) || [];
    genericTable($(table), rows.map(pick || ((r) => r)));
  } catch (e) { genericTable($(table), [{ error: e.message }]); }
}

// reservationRow is what the reservations table shows of one (hostqos
// resv list's columns and its counters).
function reservationRow(r) {
  const v = r.reservation || {}, c = r.counters || {};
  return {
    name: v.name, service: v.service, source: r.source,
    selects: [v.proto, v.local && "local " + v.local, v.remote && "remote " + v.remote, v.lport && "lport " + v.lport,
      v.rport && "rport " + v.rport, v.exe, v.comm, v.container && "container " + v.container].filter(Boolean).join(" ") || "-",
    rate: v.rate, burst: v.burst, reserved: r.admission && r.admission.reserved, sockets: (r.sockets || []).length,
    conformant_packets: c.conformant_packets, nonconformant_packets: c.nonconformant_packets,
    problems: [r.error].concat(r.broken || []).filter(Boolean).join("; "),
  };
}

let eventsSource = null;

function startEvents() {
  if (eventsSource) return;
  eventsSource = new EventSource("/api/events");
  eventsSource.onmessage = (ev) => {
    let e;
    try { e = JSON.parse(ev.data); } catch (x) { return; }
    const tb = $("#events tbody");
    tb.prepend(el("tr", {}, el("td", { text: new Date(e.time).toLocaleTimeString() }), el("td", { text: e.kind || "" }),
      el("td", { text: e.subject || "" }), el("td", { text: e.message || "" })));
    while (tb.rows.length > 500) tb.deleteRow(-1);
  };
}

function setupExplain() {
  $("#explain-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(ev.target)) if (v) q.set(k, v);
    try { $("#explain-out").textContent = JSON.stringify(await get("/v1/explain?" + q), null, 2); } catch (e) { $("#explain-out").textContent = e.message; }
  });
}

// ---- routing ----

let pageTimer = null;

function route() {
  const h = location.hash || "#apps";
  let view = h.slice(1).split("/")[0];
  if (!$("#view-" + view)) view = "apps";
  state.view = view;
  $$(".view").forEach((s) => { s.hidden = s.id !== "view-" + view; });
  $$("nav a").forEach((a) => a.classList.toggle("on", a.id === "nav-" + view || (view === "app" && a.id === "nav-apps")));
  clearInterval(pageTimer);
  pageTimer = null;
  const every = (fn, ms) => { fn(); pageTimer = setInterval(fn, ms); };
  switch (view) {
    case "app":
      state.current = decodeURIComponent(h.slice("#app/".length));
      renderAppSummary();
      loadHistory();
      every(loadFlows, 2000);
      break;
    case "links": every(loadLinks, 2000); break;
    case "reservations": every(() => loadList("/v1/reservations", "#reservations", reservationRow), 2000); break;
    case "sockets":
      every(() => { loadList("/v1/qsockets", "#qsockets"); loadList("/v1/rtchannels", "#rtchannels"); }, 2000);
      break;
    case "events": startEvents(); break;
  }
}

async function start() {
  try {
    const w = await get("/whoami");
    $("#who").textContent = "uid " + w.uid + (w.privileged ? " (may change policy)" : " (read only)");
  } catch (e) {
    showMsg(e.message);
  }
  $("#filter").addEventListener("input", (ev) => { state.filter = ev.target.value; renderApps(); });
  $$("#apps th").forEach((th) => th.addEventListener("click", () => {
    const k = th.dataset.sort;
    state.sort = { key: k, asc: state.sort.key === k ? !state.sort.asc : ["name", "kind", "rule", "class", "mark"].includes(k) };
    renderApps();
  }));
  $$(".range").forEach((b) => b.addEventListener("click", () => { state.range = Number(b.dataset.range); loadHistory(); }));
  setupActions();
  setupExplain();
  window.addEventListener("hashchange", route);
  await loadPolicy();
  setInterval(loadPolicy, 5000);
  startLive();
  route();
}

document.addEventListener("DOMContentLoaded", start);
