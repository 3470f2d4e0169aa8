// runwright dashboard: the run page polls /ui/api/runs/{id} while the run trains and redraws
// its charts (charts.js, shared with report.html) and tables; the compare view overlays runs
// from /ui/api/compare. Every value from the server is put into the page as text
// (textContent), never as markup.
"use strict";

const POLL_MS = 1500;

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

function drawRun(d) {
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

  RunCharts.draw(d);

  table("alerts", ["since", "alert", "severity", "owner", "summary", "action"],
    d.alerts.map((a) => [when(a.time_unix_s).toISOString(), a.alert_id, a.severity, a.owner,
      a.summary, a.action]));
  table("checkpoints", ["step", "checkpoint", "generation", "health", "parent", "stall s",
    "durability lag s", "bytes"], d.checkpoints.map((c) => [c.step, c.checkpoint_id,
    c.generation, c.status, c.parent, c.stall_seconds, c.durability_lag_seconds, c.bytes]));
  table("system", ["node", "sampled", "at step", "CPU", "memory used", "run disk used",
    "ckpt write B/s", "net out B/s", "net in B/s", "GPUs", "hottest GPU C", "ECC uncorrected",
    "Xids"], (d.system || []).map((n) => [n.node, when(n.time_unix_s).toISOString(), n.step,
    n.cpu_percent === null ? null : n.cpu_percent / 100, n.memory_used_bytes,
    n.run_disk_used_bytes, n.checkpoint_write_bytes_per_second, n.net_sent_bytes_per_second,
    n.net_recv_bytes_per_second, n.gpus, n.gpu_max_temperature_celsius,
    n.ecc_uncorrected_errors, n.xid_events]).map((r) => { r[3] = pct(r[3]); return r; }));
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
    marker: { size: 4 } })), layout("Loss", "loss"), RunCharts.CONFIG);
  Plotly.react("chart-compare-tokens", d.runs.map((r) => ({
    type: "scatter", mode: "lines+markers", name: label(r), x: xOf(r), y: r.tokens_per_second,
    marker: { size: 4 } })), layout("Throughput", "device tokens/s"), RunCharts.CONFIG);
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
