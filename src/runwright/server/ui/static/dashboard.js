// runwright dashboard: the run page polls /ui/api/runs/{id} while the run trains and redraws
// its plotly charts; the compare view overlays runs from /ui/api/compare. Every value from the
// server is put into the page as text (textContent), never as markup.
"use strict";

const POLL_MS = 1500;
const CONFIG = { responsive: true, displaylogo: false };
const MARKER_COLOURS = {
  checkpoint: "#2b8a3e", incident: "#c92a2a", restore: "#1971c2", intervention: "#e67700",
};
const STATE_COLOURS = {
  QUEUED: "#adb5bd", ALLOCATING: "#ced4da", STARTING: "#74c0fc", RUNNING: "#40c057",
  CHECKPOINTING: "#fab005", RECOVERING: "#fa5252", SUCCEEDED: "#2b8a3e", FAILED: "#c92a2a",
  CANCELLED: "#868e96",
};

window.dashboard = { updates: 0, data: null, error: null };

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function fmt(value, digits) {
  if (value === null || value === undefined) return "-";
  if (typeof value === "number") {
    if (Number.isInteger(value)) return value.toLocaleString("en");
    return value.toPrecision(digits || 4);
  }
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function pct(value) {
  return value === null || value === undefined ? "-" : (value * 100).toFixed(1) + "%";
}

function when(unixS) {
  return new Date(unixS * 1000);
}

function table(target, headers, rows) {
  const box = document.getElementById(target);
  box.replaceChildren();
  if (!rows.length) {
    box.appendChild(el("p", "none", "muted"));
    return;
  }
  const t = el("table");
  const head = el("tr");
  headers.forEach((h) => head.appendChild(el("th", h)));
  t.appendChild(el("thead")).appendChild(head);
  const body = el("tbody");
  rows.forEach((row) => {
    const tr = el("tr");
    row.forEach((cell) => tr.appendChild(el("td", fmt(cell))));
    body.appendChild(tr);
  });
  t.appendChild(body);
  box.appendChild(t);
}

function cards(target, items) {
  const box = document.getElementById(target);
  box.replaceChildren();
  items.forEach(([label, value]) => {
    const card = el("div", null, "card");
    card.appendChild(el("b", value));
    card.appendChild(el("span", label));
    box.appendChild(card);
  });
}

// Vertical lines for checkpoints, incidents, restores and interventions on every time chart.
function markerShapes(markers) {
  return markers.map((m) => ({
    type: "line", xref: "x", yref: "paper", x0: when(m.time_unix_s), x1: when(m.time_unix_s),
    y0: 0, y1: 1, line: { color: MARKER_COLOURS[m.kind] || "#495057", width: 1, dash: "dot" },
  }));
}

// One time axis: a zoom or pan on any time chart is applied to all of them, and kept while new
// points arrive (a double-click gives every chart back its full window). The range lives here;
// bumping the axis' uirevision makes each chart take it over its own last zoom.
const TIME_CHARTS = ["chart-states", "chart-loss", "chart-tokens", "chart-wait", "chart-ranks",
  "chart-checkpoints", "chart-drift"];
const zoom = { range: null, revision: 0 };

function timeAxis() {
  return zoom.range ? { type: "date", range: zoom.range, autorange: false,
    uirevision: zoom.revision } : { type: "date", autorange: true, uirevision: zoom.revision };
}

function linkTimeCharts() {
  TIME_CHARTS.forEach((id) => {
    const chart = document.getElementById(id);
    if (chart.dataset.linked) return;
    chart.dataset.linked = "1";
    chart.on("plotly_relayout", (change) => {
      let range = null;
      if (change["xaxis.range[0]"] !== undefined) {
        range = [change["xaxis.range[0]"], change["xaxis.range[1]"]];
      } else if (Array.isArray(change["xaxis.range"])) {
        range = change["xaxis.range"];
      } else if (!change["xaxis.autorange"]) {
        return; // a y zoom or a legend click: this chart's own
      }
      zoom.range = range;
      zoom.revision += 1;
      if (window.dashboard.data) drawRun(window.dashboard.data);
    });
  });
}

function timeLayout(title, yTitle, shapes, extra) {
  return Object.assign({
    title: { text: title, font: { size: 14 } }, height: 260,
    margin: { l: 60, r: 20, t: 36, b: 36 }, xaxis: timeAxis(),
    yaxis: { title: { text: yTitle } }, shapes: shapes, hovermode: "closest",
    legend: { orientation: "h", y: -0.2 }, uirevision: "keep",
  }, extra || {});
}

// Every time chart spans the same window (the run's first state change to now), so a stall, a
// checkpoint and a loss jump line up: an invisible trace at both ends widens each autorange and
// leaves zoom to the user.
function spanTrace(d) {
  const times = d.states.map((s) => s.start_unix_s).concat(d.states.map((s) => s.end_unix_s));
  if (!times.length) return [];
  return [{ type: "scatter", mode: "markers", x: [Math.min(...times), Math.max(...times)]
    .map(when), y: [null, null], showlegend: false, hoverinfo: "skip",
    marker: { opacity: 0 } }];
}

function stepText(steps) {
  return steps.step.map((s, i) => `step ${s} (gen ${steps.generation[i]})` +
    (steps.replay[i] ? " replay" : ""));
}

function drawRun(d) {
  const steps = d.steps;
  const x = steps.time_unix_s.map(when);
  const text = stepText(steps);
  const shapes = markerShapes(d.markers);
  const span = spanTrace(d);
  const m = d.final_metrics;
  document.getElementById("state").textContent = d.run.state;
  document.getElementById("state").className = "state s-" + d.run.state;
  document.getElementById("summary").textContent =
    `step ${fmt(m.last_step)}, generation ${d.run.generation}, owner ${fmt(d.owner)}` +
    (d.run.terminal_reason ? `, ${d.run.terminal_reason}` : "");
  cards("cards", [
    ["last loss", fmt(m.last_loss)], ["steps", fmt(m.steps)],
    ["device tokens/s", fmt(m.device_tokens_per_second)],
    ["input-wait share", pct(m.input_wait_share)], ["ETTR", pct(m.ettr)],
    ["checkpoint exposure", pct(m.checkpoint_exposure)], ["cost", fmt(m.total_cost)],
    ["open alerts", String(d.alerts.length)],
  ]);

  const states = d.states.map((s) => ({
    type: "bar", orientation: "h", y: ["state"], base: [when(s.start_unix_s)],
    x: [(s.end_unix_s - s.start_unix_s) * 1000], name: s.state, showlegend: false,
    marker: { color: STATE_COLOURS[s.state] || "#868e96" },
    hovertemplate: `${s.state} (gen ${s.generation})<extra></extra>`,
  }));
  const marks = d.markers.map((m) => ({
    type: "scatter", mode: "markers", x: [when(m.time_unix_s)], y: ["state"], name: m.kind,
    showlegend: false, marker: { symbol: "line-ns-open", size: 18,
      color: MARKER_COLOURS[m.kind] || "#495057" }, hovertemplate: `${m.label}<extra></extra>`,
  }));
  Plotly.react("chart-states", states.concat(marks, span), timeLayout(
    "State timeline (incidents red, restores blue, checkpoints green)", "", shapes,
    { height: 140, barmode: "overlay", yaxis: { showticklabels: false, fixedrange: true } }),
  CONFIG);

  const evals = d.evaluations;
  Plotly.react("chart-loss", [
    { type: "scatter", mode: "lines+markers", name: "train loss", x: x, y: steps.loss,
      text: text, marker: { size: 4 } },
    { type: "scatter", mode: "markers", name: "eval loss", x: evals.map((e) => when(e.time_unix_s)),
      y: evals.map((e) => e.eval_loss), text: evals.map((e) => `eval @${e.step}`),
      marker: { size: 9, symbol: "diamond" } },
  ].concat(span), timeLayout("Loss", "loss", shapes), CONFIG);
  Plotly.react("chart-tokens", [
    { type: "scatter", mode: "lines+markers", name: "device tokens/s", x: x,
      y: steps.tokens_per_second, text: text, marker: { size: 4 } },
  ].concat(span), timeLayout("Throughput", "tokens/s", shapes), CONFIG);
  Plotly.react("chart-wait", [
    { type: "scatter", mode: "lines+markers", name: "input-wait share", x: x,
      y: steps.input_wait_share, text: text, marker: { size: 4 } },
  ].concat(span), timeLayout("Input-wait share", "share of step time", shapes,
    { yaxis: { tickformat: ".0%", rangemode: "tozero" } }), CONFIG);
  const ranks = Object.keys(steps.rank_step_seconds).map((rank) => ({
    type: "scatter", mode: "lines+markers", name: `rank ${rank}`, x: x,
    y: steps.rank_step_seconds[rank], text: text, marker: { size: 4 },
  }));
  Plotly.react("chart-ranks", ranks.concat(span), timeLayout(
    "Step time per rank (a straggler stands above the others)", "seconds", shapes), CONFIG);
  const ck = d.checkpoints;
  Plotly.react("chart-checkpoints", [
    { type: "bar", name: "stall s", x: ck.map((c) => when(c.committed_unix_s)),
      y: ck.map((c) => c.stall_seconds), text: ck.map((c) => `step ${c.step}`) },
    { type: "scatter", mode: "markers", name: "durability lag s",
      x: ck.map((c) => when(c.committed_unix_s)), y: ck.map((c) => c.durability_lag_seconds),
      text: ck.map((c) => `step ${c.step}`), marker: { size: 9 } },
  ].concat(span), timeLayout("Checkpoint saves: stall and durability lag", "seconds", shapes), CONFIG);
  const drift = d.drift;
  const sources = [...new Set(drift.flatMap((w) => Object.keys(w.targets || {})))];
  const driftLines = sources.flatMap((src) => [
    { type: "scatter", mode: "lines+markers", name: `${src} share`,
      x: drift.map((w) => when(w.time_unix_s)), y: drift.map((w) => (w.shares || {})[src]),
      text: drift.map((w) => `steps ${w.first_step}-${w.last_step}`) },
    { type: "scatter", mode: "lines", name: `${src} target`, line: { dash: "dot" },
      x: drift.map((w) => when(w.time_unix_s)), y: drift.map((w) => (w.targets || {})[src]) },
  ]);
  driftLines.push({ type: "scatter", mode: "lines", name: "loss-token share",
    x: drift.map((w) => when(w.time_unix_s)), y: drift.map((w) => w.loss_token_share) });
  Plotly.react("chart-drift", driftLines.concat(span), timeLayout(
    "Data drift per window: source shares against targets", "share", shapes), CONFIG);
  const mix = d.mixture;
  Plotly.react("chart-mixture", [
    { type: "bar", name: "target", x: mix.map((r) => r.source), y: mix.map((r) => r.target_share) },
    { type: "bar", name: "actual", x: mix.map((r) => r.source), y: mix.map((r) => r.actual_share) },
  ], { title: { text: "Mixture: actual vs target", font: { size: 14 } }, height: 260,
    margin: { l: 50, r: 20, t: 36, b: 40 }, yaxis: { tickformat: ".0%" }, uirevision: "keep" },
  CONFIG);
  const split = d.cost_split.wall_seconds;
  const categories = ["productive", "checkpoint", "replay", "recovery", "idle"];
  Plotly.react("chart-cost", [
    { type: "bar", x: categories, y: categories.map((c) => split[c]), name: "wall seconds",
      text: categories.map((c) => `cost ${fmt(d.cost_split.cost[c])}`) },
  ], { title: { text: "Cost split (wall seconds)", font: { size: 14 } }, height: 260,
    margin: { l: 50, r: 20, t: 36, b: 40 }, uirevision: "keep" }, CONFIG);

  table("alerts", ["since", "alert", "severity", "owner", "summary", "action"],
    d.alerts.map((a) => [when(a.time_unix_s).toISOString(), a.alert_id, a.severity, a.owner,
      a.summary, a.action]));
  table("checkpoints", ["step", "checkpoint", "generation", "health", "parent", "stall s",
    "durability lag s", "bytes"], ck.map((c) => [c.step, c.checkpoint_id, c.generation, c.status,
    c.parent, c.stall_seconds, c.durability_lag_seconds, c.bytes]));
  table("incidents", ["detected", "class", "rank", "message", "recovered", "restored step",
    "lost steps"], d.incidents.map((i) => [when(i.detected_unix_s).toISOString(),
    i.failure_class, i.rank, i.message, i.recovered, i.restored_step, i.lost_steps]));
  table("events", ["seq", "time", "type", "gen", "step", "attributes"],
    d.events.map((e) => [e.seq, when(e.time_unix_s).toISOString(), e.type, e.generation,
      e.step, e.attributes]));
}

async function fetchJson(url) {
  const response = await fetch(url, { credentials: "same-origin" });
  if (response.status === 401) {
    window.location.href = "/ui/login?next=" + encodeURIComponent(window.location.pathname +
      window.location.search);
    throw new Error("logged out");
  }
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || `${url}: ${response.status}`);
  document.getElementById("problem").textContent = "";
  return body;
}

async function pollRun(runId) {
  try {
    const d = await fetchJson(`/ui/api/runs/${encodeURIComponent(runId)}`);
    drawRun(d);
    linkTimeCharts();
    document.getElementById("updated").textContent = d.finished ? "" :
      `(live, updated ${new Date().toLocaleTimeString()})`;
    window.dashboard.data = d;
    window.dashboard.updates += 1;
    if (d.finished) return;
  } catch (err) {
    window.dashboard.error = String(err);
    document.getElementById("problem").textContent = String(err.message || err);
  }
  setTimeout(() => pollRun(runId), POLL_MS);
}

function drawCompare(d) {
  const axis = document.querySelector("input[name=axis]:checked").value;
  const xOf = (r) => (axis === "tokens" ? r.tokens : r.step);
  const xTitle = axis === "tokens" ? "device tokens" : "step";
  const label = (r) => `${r.run.name} ${r.run.run_id.slice(0, 12)}`;
  const layout = (title, y) => ({ title: { text: title, font: { size: 14 } }, height: 300,
    margin: { l: 60, r: 20, t: 36, b: 40 }, xaxis: { title: { text: xTitle } },
    yaxis: { title: { text: y } }, hovermode: "x unified", legend: { orientation: "h", y: -0.25 } });
  Plotly.react("chart-compare-loss", d.runs.map((r) => ({
    type: "scatter", mode: "lines+markers", name: label(r), x: xOf(r), y: r.loss,
    marker: { size: 4 } })), layout("Loss", "loss"), CONFIG);
  Plotly.react("chart-compare-tokens", d.runs.map((r) => ({
    type: "scatter", mode: "lines+markers", name: label(r), x: xOf(r), y: r.tokens_per_second,
    marker: { size: 4 } })), layout("Throughput", "device tokens/s"), CONFIG);
  table("compare-cards", ["run", "name", "state", "last step", "last loss", "tokens/s",
    "input wait", "ETTR", "cost"], d.runs.map((r) => [r.run.run_id, r.run.name, r.run.state,
    r.final_metrics.last_step, r.final_metrics.last_loss,
    r.final_metrics.device_tokens_per_second, pct(r.final_metrics.input_wait_share),
    pct(r.final_metrics.ettr), r.final_metrics.total_cost]));
  const diff = document.getElementById("spec-diff");
  diff.replaceChildren();
  d.spec_diff.forEach((s, i) => {
    const id = `spec-diff-${i}`;
    diff.appendChild(el("h3", `${s.run_id} against ${s.against}`));
    diff.appendChild(el("div")).id = id;
    table(id, ["field", s.against.slice(0, 16), s.run_id.slice(0, 16), "changes the numbers"],
      s.differences.map((x) => [x.field, x.earlier, x.now, x.breaks_reproducibility]));
  });
}

async function pollCompare(runIds) {
  try {
    const query = runIds.map((r) => "run=" + encodeURIComponent(r)).join("&");
    const d = await fetchJson(`/ui/api/compare?${query}`);
    window.dashboard.data = d;
    drawCompare(d);
    window.dashboard.updates += 1;
    const finished = ["SUCCEEDED", "FAILED", "CANCELLED"];
    if (d.runs.every((r) => finished.includes(r.run.state))) return;
  } catch (err) {
    window.dashboard.error = String(err);
    document.getElementById("problem").textContent = String(err.message || err);
  }
  setTimeout(() => pollCompare(runIds), POLL_MS * 2);
}

document.addEventListener("DOMContentLoaded", () => {
  const runPage = document.getElementById("run-page");
  if (runPage) pollRun(runPage.dataset.run);
  const comparePage = document.getElementById("compare-page");
  if (comparePage) {
    const runIds = comparePage.dataset.runs.split(",");
    document.querySelectorAll("input[name=axis]").forEach((input) =>
      input.addEventListener("change", () => {
        if (window.dashboard.data) drawCompare(window.dashboard.data);
      }));
    pollCompare(runIds);
  }
});
