// Farebox cost explorer: reads /v1/explorer/* and /v1/tasks/{id} with the tab's key.
// Every value from the server is set as text (never as HTML). Each panel reports how
// many rows it drew in data-rows, and <body data-ready="true"> once all have loaded,
// so a headless browser can check the page (tests/e2e/test_explorer_page.py).
"use strict";

const KEY_SLOT = "farebox.key";
const RANGES = { "1h": 1, "24h": 24, "7d": 24 * 7, "30d": 24 * 30 };
const COMPONENTS = [
  ["input", "Input", "prompt_tokens"],
  ["cached", "Cached input", "cached_tokens"],
  ["cache_write", "Cache writes", "cache_write_tokens"],
  ["output", "Output", "completion_tokens"],
  ["reasoning", "Reasoning", "reasoning_tokens"],
];
const COLORS = ["#2a6df4", "#e8590c", "#2f9e44", "#ae3ec9", "#f08c00", "#0c8599", "#c92a2a", "#5c7cfa"];

const params = new URLSearchParams(location.search);
const FORM_FIELDS = ["range", "from", "to", "team", "project", "model", "by"];
const state = {
  view: ["overview", "tasks", "task"].includes(params.get("view")) ? params.get("view") : "overview",
  range: params.get("range") in RANGES || params.get("range") === "all" ? params.get("range") : "24h",
  team: params.get("team") || "",
  project: params.get("project") || "",
  model: params.get("model") || "",
  by: params.get("by") || "team",
  task: params.get("task") || "",
  // From/to dates (UTC, both days included) override the range.
  from: /^\d{4}-\d{2}-\d{2}$/.test(params.get("from") || "") ? params.get("from") : "",
  to: /^\d{4}-\d{2}-\d{2}$/.test(params.get("to") || "") ? params.get("to") : "",
};
const DAY_MS = 24 * 3600e3;

// A key in the fragment (#key=...) is moved to sessionStorage and out of the address bar.
function takeKeyFromFragment() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("key")) {
    sessionStorage.setItem(KEY_SLOT, fragment.get("key"));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "className") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}

function money(value) {
  if (value === null || value === undefined) return "–";
  const amount = Number(value);
  if (amount === 0) return "$0";
  const digits = Math.abs(amount) >= 1 ? 2 : Math.abs(amount) >= 0.01 ? 4 : 6;
  return "$" + amount.toFixed(digits);
}

function percent(share) {
  return (Number(share) * 100).toFixed(1) + " %";
}

function count(value) {
  return value === null || value === undefined ? "–" : Number(value).toLocaleString("en-US");
}

// The window in ms since the epoch: [since or null, until or null].
function window_() {
  if (state.from || state.to) {
    return [state.from ? Date.parse(state.from + "T00:00:00Z") : null,
      state.to ? Date.parse(state.to + "T00:00:00Z") + DAY_MS : null];
  }
  return [state.range === "all" ? null : Date.now() - RANGES[state.range] * 3600e3, null];
}

function filters() {
  const query = {};
  const [since, until] = window_();
  if (since !== null) query.since = new Date(since).toISOString();
  if (until !== null) query.until = new Date(until).toISOString();
  for (const name of ["team", "project", "model"]) if (state[name]) query[name] = state[name];
  return query;
}

class ApiError extends Error {}

async function api(path, query) {
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(query || {})) url.searchParams.set(name, value);
  const headers = { Accept: "application/json" };
  const key = sessionStorage.getItem(KEY_SLOT);
  if (key) headers.Authorization = "Bearer " + key;
  const response = await fetch(url, { headers });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (body.error && body.error.message) || response.statusText;
    if (response.status === 401) notice("This gateway takes a key: enter one above.");
    throw new ApiError(`${response.status}: ${message}`);
  }
  return body;
}

function notice(text) {
  const node = document.getElementById("notice");
  node.textContent = text;
  node.hidden = false;
}

function panel(name) {
  return document.querySelector(`[data-panel="${name}"]`);
}

function done(section, rows) {
  section.dataset.rows = String(rows);
  if (rows === 0) {
    section.querySelector(".rows").replaceChildren(
      el("tr", {}, el("td", { className: "empty" }, "No data for these filters."))
    );
  }
}

function table(section, selector, head, rows) {
  const numeric = head.map((title) => title.startsWith("#"));
  const header = el("tr", {}, ...head.map((title, i) =>
    el("th", numeric[i] ? { className: "num" } : {}, title.replace(/^#/, ""))));
  const body = rows.map((cells) => {
    const tr = el("tr", cells.attrs || {});
    cells.forEach((cell, i) => {
      const td = cell instanceof Node ? el("td", {}, cell) : el("td", {}, cell);
      if (numeric[i]) td.className = "num";
      tr.append(td);
    });
    return tr;
  });
  section.querySelector(selector).replaceChildren(el("thead", {}, header), el("tbody", {}, ...body));
}

function valued(text, field, value) {
  return el("span", { "data-field": field, "data-value": String(value ?? "") }, text);
}

function bar(share) {
  const node = el("div", { className: "bar" });
  node.style.width = Math.max(0, Math.min(100, Number(share) * 100)) + "%";
  return node;
}

// xs: bucket starts in Unix seconds; step: the bucket's length, which pads the x range so
// that a single bucket is drawn as a point inside the chart, not at an edge of a year.
function chart(section, title, xs, series, step) {
  const holder = section.querySelector(".chart");
  holder.replaceChildren();
  if (!xs.length || typeof uPlot === "undefined") return;
  const width = Math.max(320, holder.clientWidth || section.clientWidth - 32);
  const options = {
    title, width, height: 220,
    scales: { x: { time: true, range: () => [xs[0] - step / 2, xs[xs.length - 1] + step / 2] } },
    series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], width: 2,
      points: { show: true, size: 7 }, value: (u, v) => (v === null ? "–" : money(v)) }))],
    axes: [{}, { values: (u, ticks) => ticks.map(money), size: 80 }],
  };
  new uPlot(options, [xs, ...series.map((s) => s.values)], holder);
}

async function loadSpend() {
  const section = panel("spend");
  const [since, until] = window_();
  const bucket = since !== null && (until ?? Date.now()) - since <= 2 * DAY_MS ? "hour" : "day";
  const doc = await api("/v1/explorer/spend", { ...filters(), by: state.by, bucket });
  const starts = [...new Set(doc.data.map((p) => p.start))].sort();
  const shown = doc.groups.slice(0, COLORS.length).map((g) => g.group);
  const series = shown.map((group) => ({
    label: group ?? "(none)",
    values: starts.map((start) => {
      const point = doc.data.find((p) => p.start === start && p.group === group);
      return point ? Number(point.cost_total) : 0;
    }),
  }));
  const step = bucket === "hour" ? 3600 : 86400;
  chart(section, `Cost per ${bucket} by ${state.by}`, starts.map((s) => Date.parse(s) / 1000), series, step);
  const total = doc.groups.reduce((sum, g) => sum + Number(g.cost_total), 0);
  table(section, ".rows", [state.by, "#requests", "#cost", "share"], doc.groups.map((g) => Object.assign([
    g.group ?? "(none)", count(g.request_count),
    valued(money(g.cost_total), "cost_total", g.cost_total), bar(total ? Number(g.cost_total) / total : 0),
  ], { attrs: { "data-group": g.group ?? "" } })));
  done(section, doc.groups.length);
}

async function loadBreakdown() {
  const section = panel("breakdown");
  const doc = await api("/v1/explorer/breakdown", filters());
  const total = Number(doc.cost.total);
  section.querySelector(".headline").replaceChildren(
    "Output and thinking: ", el("strong", {}, valued(percent(doc.output_and_reasoning_share),
      "output_and_reasoning_share", doc.output_and_reasoning_share)),
    ` of ${money(doc.cost.total)} over ${count(doc.request_count)} calls`);
  const rows = COMPONENTS.map(([name, title, tokens]) => Object.assign([
    title, count(doc.tokens[tokens]), valued(money(doc.cost[name]), `cost_${name}`, doc.cost[name]),
    total ? percent(Number(doc.cost[name]) / total) : "–", bar(total ? Number(doc.cost[name]) / total : 0),
  ], { attrs: { "data-component": name, className: name === "output" || name === "reasoning" ? "hot" : "" } }));
  table(section, ".rows", ["kind", "#tokens", "#cost", "#share", ""], rows);
  done(section, doc.request_count ? rows.length : 0);
}

async function loadCache() {
  const section = panel("cache");
  const doc = await api("/v1/explorer/cache", filters());
  section.querySelector(".headline").replaceChildren(
    "Saved by cache reads ", el("strong", {}, valued(money(doc.saved_usd), "saved_usd", doc.saved_usd)),
    " · lost to prefix breaks ", el("strong", {}, valued(money(doc.lost_usd), "lost_usd", doc.lost_usd)));
  table(section, ".rows", ["model", "tier", "#calls", "#cached tokens", "#cached share", "#saved"],
    doc.by_model.map((m) => Object.assign([
      m.model, m.tier || "–", count(m.requests), count(m.cached_tokens),
      m.prompt_tokens ? percent(m.cached_tokens / m.prompt_tokens) : "–",
      valued(m.saved_usd === null ? "unpriced" : money(m.saved_usd), "saved_usd", m.saved_usd),
    ], { attrs: { "data-model": m.model } })));
  const breaks = doc.breaks.length ? doc.breaks.map((b) => Object.assign([
    b.reason, count(b.requests), count(b.expected_cached_tokens), count(b.cached_tokens),
    valued(money(b.lost_usd), "lost_usd", b.lost_usd),
  ], { attrs: { "data-reason": b.reason } })) : [[el("span", { className: "empty" }, "No prefix breaks."), "", "", "", ""]];
  table(section, ".breaks", ["reason", "#calls", "#expected cached", "#cached", "#lost"], breaks);
  done(section, doc.by_model.length);
}

async function loadGpu() {
  const section = panel("gpu");
  const query = filters();
  const end = query.until ? Date.parse(query.until) - 1 : Date.now();
  if (!query.since || end - Date.parse(query.since) > 167 * 3600e3) {
    query.since = new Date(end - 167 * 3600e3).toISOString(); // the panel's limit: 168 hours
  }
  const doc = await api("/v1/explorer/gpu", query);
  const xs = doc.data.length ? doc.data[0].hours.map((h) => Date.parse(h.start) / 1000) : [];
  chart(section, "Effective USD per million tokens, by hour", xs, doc.data.map((m) => ({
    label: m.model,
    values: m.hours.map((h) => (h.effective_per_million === null ? null : Number(h.effective_per_million))),
  })), 3600);
  table(section, ".rows",
    ["model", "#GPU $/hour", "#planned in $/M", "#planned out $/M", "#tokens", "#utilisation", "#effective $/M, window"],
    doc.data.map((m) => Object.assign([
      m.model, money(m.gpu_cost_per_hour), money(m.planned_input_per_million),
      money(m.planned_output_per_million),
      valued(count(m.span.input_tokens + m.span.output_tokens), "tokens", m.span.input_tokens + m.span.output_tokens),
      percent(m.span.utilisation),
      valued(money(m.span.effective_per_million), "effective_per_million", m.span.effective_per_million),
    ], { attrs: { "data-model": m.model } })));
  done(section, doc.data.length);
}

function taskLink(taskId) {
  const query = new URLSearchParams(location.search);
  query.set("view", "task");
  query.set("task", taskId);
  return el("a", { href: "?" + query.toString(), "data-task": taskId }, taskId);
}

async function loadTasks() {
  const doc = await api("/v1/explorer/tasks", { ...filters(), limit: "20" });
  const outcomes = panel("outcomes");
  table(outcomes, ".rows", ["team", "outcome", "#tasks", "#p50", "#p95", "#max", "#total"],
    doc.outcomes.map((o) => Object.assign([
      o.team ?? "(none)", o.outcome, count(o.tasks),
      valued(money(o.cost_p50), "cost_p50", o.cost_p50), valued(money(o.cost_p95), "cost_p95", o.cost_p95),
      valued(money(o.cost_max), "cost_max", o.cost_max), valued(money(o.cost_total), "cost_total", o.cost_total),
    ], { attrs: { "data-team": o.team ?? "", "data-outcome": o.outcome } })));
  done(outcomes, doc.outcomes.length);
  const top = panel("top-tasks");
  table(top, ".rows", ["task", "team", "project", "status", "#calls", "#cost", "#output + thinking"],
    doc.top.map((t) => Object.assign([
      taskLink(t.task_id), t.team ?? "", t.project ?? "", t.status, count(t.request_count),
      valued(money(t.cost_total), "cost_total", t.cost_total),
      Number(t.cost_total) ? percent((Number(t.cost_output) + Number(t.cost_reasoning)) / Number(t.cost_total)) : "–",
    ], { attrs: { "data-task-id": t.task_id } })));
  done(top, doc.top.length);
}

async function loadTask() {
  const summary = panel("task-summary");
  const calls = panel("task-calls");
  summary.querySelector(".task-id").textContent = state.task;
  if (!state.task) throw new ApiError("no task chosen: pick one on the Tasks view");
  const doc = await api("/v1/tasks/" + encodeURIComponent(state.task));
  const cost = doc.cost;
  table(summary, ".rows", ["team", "project", "status", "ended", "#calls", "#input", "#cached",
    "#cache writes", "#output", "#reasoning", "#total"], [Object.assign([
    doc.team ?? "", doc.project ?? "", doc.status, doc.ended, count(doc.request_count),
    valued(money(cost.input), "cost_input", cost.input), valued(money(cost.cached), "cost_cached", cost.cached),
    valued(money(cost.cache_write), "cost_cache_write", cost.cache_write),
    valued(money(cost.output), "cost_output", cost.output),
    valued(money(cost.reasoning), "cost_reasoning", cost.reasoning),
    valued(money(cost.total), "cost_total", cost.total),
  ], { attrs: { "data-task-id": doc.task_id } })]);
  done(summary, 1);
  table(calls, ".rows", ["#", "step", "step kind", "model", "tier", "status", "#input tokens",
    "#cached", "#cache writes", "#output", "#reasoning", "#cached share", "#TTFT ms", "#cost"],
  doc.requests.map((r, i) => Object.assign([
    String(i + 1), r.task_step ?? "–", r.step_kind ?? "–", r.model_alias, r.tier_served || "–", r.status_code,
    valued(count(r.prompt_tokens), "prompt_tokens", r.prompt_tokens),
    valued(count(r.cached_tokens), "cached_tokens", r.cached_tokens),
    valued(count(r.cache_write_tokens), "cache_write_tokens", r.cache_write_tokens),
    valued(count(r.completion_tokens), "completion_tokens", r.completion_tokens),
    valued(count(r.reasoning_tokens), "reasoning_tokens", r.reasoning_tokens),
    valued(r.prompt_tokens ? percent(r.cached_tokens / r.prompt_tokens) : "–", "cached_share",
      r.prompt_tokens ? (r.cached_tokens / r.prompt_tokens).toFixed(3) : ""),
    valued(r.ttft_ms ?? "–", "ttft_ms", r.ttft_ms), valued(money(r.cost_total), "cost_total", r.cost_total),
  ], { attrs: { "data-request-id": r.request_id, "data-attempt": String(r.attempt) } })));
  done(calls, doc.requests.length);
}

const LOADERS = {
  overview: { spend: loadSpend, breakdown: loadBreakdown, cache: loadCache, gpu: loadGpu },
  tasks: { outcomes: loadTasks },
  task: { "task-summary": loadTask },
};

function fail(names, error) {
  for (const name of names) {
    const section = panel(name);
    section.dataset.error = error.message;
    section.dataset.rows = "0";
    section.querySelector(".rows").replaceChildren(el("tr", {}, el("td", { className: "error" }, error.message)));
  }
}

function setUpForms() {
  const form = document.getElementById("filters");
  for (const name of FORM_FIELDS) form.elements[name].value = state[name];
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = new URLSearchParams({ view: state.view === "task" ? "tasks" : state.view });
    for (const name of FORM_FIELDS) {
      if (form.elements[name].value) query.set(name, form.elements[name].value);
    }
    location.search = query.toString();
  });
  document.getElementById("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = document.getElementById("key").value.trim();
    if (key) sessionStorage.setItem(KEY_SLOT, key);
    location.reload();
  });
  document.getElementById("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_SLOT);
    location.reload();
  });
  for (const link of document.querySelectorAll("[data-view-link]")) {
    const query = new URLSearchParams(location.search);
    query.set("view", link.dataset.viewLink);
    query.delete("task");
    link.href = "?" + query.toString();
    if (link.dataset.viewLink === state.view || (state.view === "task" && link.dataset.viewLink === "tasks")) {
      link.classList.add("current");
    }
  }
}

async function main() {
  takeKeyFromFragment();
  setUpForms();
  document.querySelector(`[data-view="${state.view}"]`).hidden = false;
  const loaders = LOADERS[state.view];
  const sections = { outcomes: ["outcomes", "top-tasks"], "task-summary": ["task-summary", "task-calls"] };
  await Promise.all(Object.entries(loaders).map(([name, load]) =>
    load().catch((error) => fail(sections[name] || [name], error))));
  document.body.dataset.ready = "true";
}

main();
