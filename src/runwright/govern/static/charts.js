// runwright run charts: the four signal layers of seed 004 (loss, throughput, system, data) and
// the state timeline on one time axis, with incidents, restores, checkpoints and interventions
// marked on every time chart; then the mixture and the cost split. One script for the
// dashboard's run page (dashboard.js redraws at every poll) and report.html (drawn once from
// the JSON in its <script id="run-charts-data">), both fed by govern/dashboard.py `chart_data`,
// so the two show the same numbers. Values reach the page as plotly data (drawn as SVG text) or
// as textContent, never as HTML.
"use strict";

window.RunCharts = (() => {
  const CONFIG = { responsive: true, displaylogo: false };
  const MARKER_COLOURS = {
    checkpoint: "#2b8a3e", incident: "#c92a2a", restore: "#1971c2", intervention: "#e67700",
    stage: "#7048e8",
  };
  const STATE_COLOURS = {
    QUEUED: "#adb5bd", ALLOCATING: "#ced4da", STARTING: "#74c0fc", RUNNING: "#40c057",
    CHECKPOINTING: "#fab005", RECOVERING: "#fa5252", SUCCEEDED: "#2b8a3e", FAILED: "#c92a2a",
    CANCELLED: "#868e96", PAUSED: "#9775fa",
  };
  // Marker lines get their label written along them on the first chart of the loss layer, up
  // to this many and this long; beyond, labels would overlap (hover the state timeline for each
  // marker's whole label).
  const MAX_LABELLED_MARKERS = 40;
  const LABEL_CHARS = 24;
  const LAYERS = [
    ["State timeline", ["chart-states"]],
    ["Loss layer", ["chart-loss", "chart-source-loss", "chart-length-loss", "chart-grad-norm"]],
    ["Throughput layer", ["chart-tokens"]],
    ["System layer", ["chart-ranks", "chart-straggler", "chart-checkpoints", "chart-nodes"]],
    ["Data layer", ["chart-wait", "chart-token-kinds", "chart-drift"]],
  ];
  const TIME_CHARTS = LAYERS.flatMap(([, ids]) => ids);
  // One time axis: a zoom or pan on any time chart is applied to all of them, and kept while new
  // points arrive (a double-click gives every chart back its full window). The range lives here;
  // bumping the axis' uirevision makes each chart take it over its own last zoom.
  const zoom = { range: null, revision: 0 };
  let shown = null;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function fmt(value) {
    if (value === null || value === undefined) return "-";
    return Number.isInteger(value) ? String(value) : value.toPrecision(4);
  }

  // Unix seconds as plotly's date value: milliseconds, read as UTC (the tables' clock too).
  function ms(unixS) {
    return unixS === null || unixS === undefined ? null : unixS * 1000;
  }

  // The chart containers, in the page's `box`: a heading per layer, the marker key, the pair of
  // charts without a time axis.
  function mount(box) {
    box.replaceChildren();
    const key = el("p", "time in UTC; markers on every time chart: ", "marker-key");
    Object.entries(MARKER_COLOURS).forEach(([kind, colour]) => {
      const item = el("span", kind);
      item.style.color = colour;
      key.appendChild(item);
    });
    box.appendChild(key);
    LAYERS.forEach(([name, ids]) => {
      const layer = el("div", null, "layer");
      layer.appendChild(el("h3", name));
      ids.forEach((id) => {
        const chart = el("div", null, "chart");
        chart.id = id;
        layer.appendChild(chart);
      });
      box.appendChild(layer);
    });
    const pair = el("div", null, "pair");
    ["chart-mixture", "chart-cost"].forEach((id) => {
      const chart = el("div", null, "chart");
      chart.id = id;
      pair.appendChild(chart);
    });
    box.appendChild(pair);
  }

  function markerShapes(markers, labelled) {
    const label = labelled && markers.length <= MAX_LABELLED_MARKERS;
    return markers.map((m) => {
      const colour = MARKER_COLOURS[m.kind] || "#495057";
      const shape = {
        type: "line", xref: "x", yref: "paper", x0: ms(m.time_unix_s), x1: ms(m.time_unix_s),
        y0: 0, y1: 1, line: { color: colour, width: 1, dash: "dot" },
      };
      if (label) {
        const text = m.label.length > LABEL_CHARS ? m.label.slice(0, LABEL_CHARS - 1) + "\u2026"
          : m.label;
        shape.label = { text: text, textangle: -90, textposition: "end",
          font: { size: 10, color: colour } };
      }
      return shape;
    });
  }

  function timeAxis() {
    const axis = { type: "date", uirevision: zoom.revision };
    return zoom.range ? Object.assign(axis, { range: zoom.range, autorange: false })
      : Object.assign(axis, { autorange: true });
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
        if (shown) draw(shown);
      });
    });
  }

  // A chart with nothing to draw says what the run must report to fill it.
  function hasData(traces) {
    return traces.some((t) => (t.y || []).some((v) => v !== null && v !== undefined));
  }

  function layout(title, yTitle, extra, traces, hint) {
    const out = Object.assign({
      title: { text: title, font: { size: 14 } }, height: 250,
      margin: { l: 64, r: 20, t: 36, b: 40 }, yaxis: { title: { text: yTitle } },
      hovermode: "closest", legend: { orientation: "h", y: -0.28 }, uirevision: "keep",
    }, extra || {});
    if (hint && !hasData(traces)) {
      out.annotations = [{ text: `no data: ${hint}`, xref: "paper", yref: "paper", x: 0.5,
        y: 0.5, showarrow: false, font: { size: 12, color: "#495057" } }];
    }
    return out;
  }

  function timeChart(id, traces, title, yTitle, shapes, span, hint, extra) {
    const all = traces.concat(span);
    Plotly.react(id, all, layout(title, yTitle, Object.assign({ xaxis: timeAxis(),
      shapes: shapes }, extra || {}), traces, hint), CONFIG);
  }

  // Every time chart spans the same window (the run's first state change to its end, or now
  // while it runs), so a stall, a checkpoint and a loss jump line up: an invisible trace at both
  // ends widens each autorange and leaves zoom to the user.
  function spanTrace(d) {
    const times = d.states.map((s) => s.start_unix_s).concat(d.states.map((s) => s.end_unix_s))
      .concat(d.steps.time_unix_s);
    if (!times.length) return [];
    return [{ type: "scatter", mode: "markers", x: [Math.min(...times), Math.max(...times)]
      .map(ms), y: [null, null], showlegend: false, hoverinfo: "skip",
      marker: { opacity: 0 } }];
  }

  // A step signal as a line over time that breaks where a new generation starts: the gap is the
  // failure and the recovery, not a trend.
  function stepLine(steps, values, name, extra) {
    const x = [], y = [], text = [];
    steps.time_unix_s.forEach((t, i) => {
      if (i > 0 && steps.generation[i] !== steps.generation[i - 1]) {
        x.push(ms(t));
        y.push(null);
        text.push("");
      }
      x.push(ms(t));
      y.push(values[i]);
      text.push(`step ${steps.step[i]} (gen ${steps.generation[i]})` +
        (steps.replay[i] ? " replay" : ""));
    });
    return Object.assign({ type: "scatter", mode: "lines+markers", name: name, x: x, y: y,
      text: text, marker: { size: 4 } }, extra || {});
  }

  function draw(d) {
    const box = document.getElementById("run-charts");
    if (!document.getElementById("chart-loss")) mount(box);
    shown = d;
    const steps = d.steps;
    const shapes = markerShapes(d.markers, false);
    const span = spanTrace(d);

    const states = d.states.map((s) => ({
      type: "bar", orientation: "h", y: ["state"], base: [ms(s.start_unix_s)],
      x: [(s.end_unix_s - s.start_unix_s) * 1000], name: s.state, showlegend: false,
      marker: { color: STATE_COLOURS[s.state] || "#868e96" },
      hovertemplate: `${s.state} (gen ${s.generation})<extra></extra>`,
    }));
    const marks = d.markers.map((m) => ({
      type: "scatter", mode: "markers", x: [ms(m.time_unix_s)], y: ["state"], name: m.kind,
      showlegend: false, marker: { symbol: "line-ns-open", size: 18,
        color: MARKER_COLOURS[m.kind] || "#495057" }, hovertemplate: `${m.label}<extra></extra>`,
    }));
    Plotly.react("chart-states", states.concat(marks, span), layout(
      "States (hover a mark for its checkpoint, incident, restore or intervention)", "",
      { height: 150, barmode: "overlay", xaxis: timeAxis(), shapes: shapes,
        yaxis: { showticklabels: false, fixedrange: true } }), CONFIG);

    const evals = d.evaluations;
    const loss = [stepLine(steps, steps.loss, "train loss")];
    if (evals.length) {
      loss.push({ type: "scatter", mode: "markers", name: "eval loss",
        x: evals.map((e) => ms(e.time_unix_s)), y: evals.map((e) => e.eval_loss),
        text: evals.map((e) => `eval @${e.step}`), marker: { size: 9, symbol: "diamond" } });
    }
    timeChart("chart-loss", loss, evals.length ? "Training loss and eval loss" : "Training loss",
      "loss", markerShapes(d.markers, true), span,
      "report it with ctx.step_healthy(step, loss=...)");
    // The loss by mixture source and by document length bucket (govern/loss_breakdown.py).
    const lines = (byName) => Object.keys(byName || {}).map((name) =>
      stepLine(steps, byName[name], name));
    timeChart("chart-source-loss", lines(steps.source_loss),
      "Loss by source (per-token mean over every rank)", "loss", shapes, span,
      "report it with runwright.runtime.SourceLoss (the reference trainer does)");
    timeChart("chart-length-loss", lines(steps.length_loss),
      "Loss by document length (tokens per document)", "loss", shapes, span,
      "report it with runwright.runtime.SourceLoss (the reference trainer does)");
    timeChart("chart-grad-norm", [stepLine(steps, steps.grad_norm, "grad norm")],
      "Gradient norm (largest over ranks)", "grad norm", shapes, span,
      "report it with ctx.step_healthy(step, grad_norm=...)");

    timeChart("chart-tokens", [
      stepLine(steps, steps.tokens_per_second, "device tokens/s"),
      stepLine(steps, steps.loss_tokens_per_second, "loss tokens/s"),
    ], "Throughput: tokens of the step (all ranks) / its slowest rank's step time", "tokens/s",
    shapes, span, "report device_tokens and loss_tokens per step (runwright.data.DataLoader " +
      "does) and step_seconds (the step loop does)", { yaxis: { title: { text: "tokens/s" },
      rangemode: "tozero" } });

    const rankIds = Object.keys(steps.rank_step_seconds);
    const ranks = rankIds.length
      ? rankIds.map((rank) => stepLine(steps, steps.rank_step_seconds[rank], `rank ${rank}`))
      : [stepLine(steps, steps.step_seconds, "slowest rank")];
    timeChart("chart-ranks", ranks, "Step time per rank", "seconds", shapes, span,
      "report step_seconds (ctx.step_loop does)");
    timeChart("chart-straggler", [stepLine(steps, steps.straggler_score, "straggler score")],
      "Straggler score: the busiest rank's busy time / the median rank's (busy = step time " +
      "less gradient sync)", "score", shapes, span,
      "needs step_seconds from two ranks or more");
    const ck = d.checkpoints;
    timeChart("chart-checkpoints", [
      { type: "bar", name: "stall s", x: ck.map((c) => ms(c.committed_unix_s)),
        y: ck.map((c) => c.stall_seconds), text: ck.map((c) => `step ${c.step}`) },
      { type: "scatter", mode: "markers", name: "durability lag s",
        x: ck.map((c) => ms(c.committed_unix_s)), y: ck.map((c) => c.durability_lag_seconds),
        text: ck.map((c) => `step ${c.step}`), marker: { size: 9 } },
    ], "Checkpoint saves: stall and durability lag", "seconds", shapes, span,
    "no checkpoint committed");

    // The nodes' own samples (SYSTEM_SAMPLE), on the same time axis as the steps above them.
    const nodes = Object.entries(d.system_series || {}).flatMap(([node, n]) => {
      const text = n.step.map((s) => `${node} at step ${s}`);
      const x = n.time_unix_s.map(ms);
      const lines = [{ type: "scatter", mode: "lines+markers", name: `${node} CPU`, x: x,
        y: n.cpu_percent, text: text, marker: { size: 4 } }];
      if (n.gpu_percent.some((v) => v !== null)) {
        lines.push({ type: "scatter", mode: "lines+markers", name: `${node} GPU`, x: x,
          y: n.gpu_percent, text: text, marker: { size: 4 }, line: { dash: "dash" } });
      }
      return lines;
    });
    timeChart("chart-nodes", nodes, "Nodes: CPU busy share and mean GPU utilisation", "percent",
      shapes, span, "set observability.system_sample_seconds (on by default: 10 s)",
      { yaxis: { title: { text: "percent" }, range: [0, 105] } });

    timeChart("chart-wait", [stepLine(steps, steps.input_wait_share, "input-wait share")],
      "Input-wait share (data wait / step time, summed over ranks)", "share of step time",
      shapes, span, "report data_wait_seconds and step_seconds (runwright.data.DataLoader " +
      "and ctx.step_loop do)", { yaxis: { tickformat: ".0%", rangemode: "tozero" } });
    timeChart("chart-token-kinds", [
      stepLine(steps, steps.device_tokens, "device"),
      stepLine(steps, steps.loss_tokens, "loss"),
      stepLine(steps, steps.padded_tokens, "padded", { line: { dash: "dash" } }),
    ], "Tokens per step by kind (all ranks)", "tokens", shapes, span,
    "runwright.data.DataLoader reports the tokens of each step",
    { yaxis: { title: { text: "tokens" }, rangemode: "tozero" } });
    const drift = d.drift;
    const sources = [...new Set(drift.flatMap((w) => Object.keys(w.targets || {})))];
    const driftLines = sources.flatMap((src) => [
      { type: "scatter", mode: "lines+markers", name: `${src} share`,
        x: drift.map((w) => ms(w.time_unix_s)), y: drift.map((w) => (w.shares || {})[src]),
        text: drift.map((w) => `steps ${w.first_step}-${w.last_step}`) },
      { type: "scatter", mode: "lines", name: `${src} target`, line: { dash: "dot" },
        x: drift.map((w) => ms(w.time_unix_s)), y: drift.map((w) => (w.targets || {})[src]) },
    ]);
    if (drift.length) {
      driftLines.push({ type: "scatter", mode: "lines", name: "loss-token share",
        x: drift.map((w) => ms(w.time_unix_s)), y: drift.map((w) => w.loss_token_share) });
    }
    timeChart("chart-drift", driftLines, "Data drift per window: source shares against targets",
      "share", shapes, span, "runwright.data.DataLoader reports each window of steps " +
      "(MIXTURE_WINDOW, every 50 steps by default)");

    const mix = d.mixture;
    const mixture = [
      { type: "bar", name: "target", x: mix.map((r) => r.source),
        y: mix.map((r) => r.target_share) },
      { type: "bar", name: "actual", x: mix.map((r) => r.source),
        y: mix.map((r) => r.actual_share) },
    ];
    Plotly.react("chart-mixture", mixture, layout("Mixture: actual vs target", "share",
      { height: 260, yaxis: { tickformat: ".0%" } }, mixture, "the run declared no mixture"),
    CONFIG);
    const split = d.cost_split.wall_seconds;
    const categories = ["productive", "checkpoint", "replay", "recovery", "idle"];
    Plotly.react("chart-cost", [
      { type: "bar", x: categories, y: categories.map((c) => split[c]), name: "wall seconds",
        text: categories.map((c) => `cost ${fmt(d.cost_split.cost[c])}`), textposition: "none" },
    ], layout("Cost split (wall seconds)", "seconds", { height: 260 }), CONFIG);
    linkTimeCharts();
  }

  // report.html: the data is in the page.
  document.addEventListener("DOMContentLoaded", () => {
    const embedded = document.getElementById("run-charts-data");
    if (embedded) {
      draw(JSON.parse(embedded.textContent));
      document.body.dataset.charts = "drawn";
    }
  });

  return { CONFIG: CONFIG, draw: draw };
})();
