// runwright drill timelines (drill/page.py): one chart per fault, drawn from the JSON in
// <script id="drill-data">. Rank 0's healthy steps, one trace per generation, against seconds
// since the run was submitted; the run's states as coloured bands; the injection, the
// detection, the restore and the first step past it as labelled lines; every event of the
// fault's timeline as a hoverable point under the steps. Values reach the page as plotly data
// (drawn as SVG text), never as HTML.
"use strict";

(() => {
  const CONFIG = { responsive: true, displaylogo: false };
  const STATE_COLOURS = {
    QUEUED: "#adb5bd", ALLOCATING: "#ced4da", STARTING: "#74c0fc", RUNNING: "#40c057",
    CHECKPOINTING: "#fab005", RECOVERING: "#fa5252", SUCCEEDED: "#2b8a3e", FAILED: "#c92a2a",
    CANCELLED: "#868e96", PAUSED: "#9775fa",
  };
  // The marks drawn as lines, with their colour; the rest are points to hover.
  const LINES = {
    injected: "#c92a2a", detected: "#e67700", fallback: "#862e9c", restored: "#1971c2",
    first_step: "#2b8a3e", adopted: "#1971c2", rejected: "#1971c2",
  };
  const GENERATION_COLOURS = ["#343a40", "#1c7ed6", "#f76707", "#0ca678", "#ae3ec9"];

  function stateBands(marks, end) {
    // Each STATE_CHANGED mark opens a band that the next one closes.
    const states = marks.filter((m) => m.kind === "state");
    return states.map((m, i) => {
      const to = m.label.split(" -> ")[1] || "";
      const next = i + 1 < states.length ? states[i + 1].seconds : end;
      return {
        type: "rect", xref: "x", yref: "paper", x0: m.seconds, x1: next, y0: 0, y1: 1,
        fillcolor: STATE_COLOURS[to] || "#dee2e6", opacity: 0.12, line: { width: 0 },
        layer: "below",
      };
    });
  }

  function draw(box, fault) {
    const steps = fault.steps;
    const marks = fault.marks;
    const end = Math.max(0, ...marks.map((m) => m.seconds), ...steps.map((s) => s.seconds));
    const generations = [...new Set(steps.map((s) => s.generation))].sort((a, b) => a - b);
    const traces = generations.map((g, i) => {
      const mine = steps.filter((s) => s.generation === g);
      return {
        x: mine.map((s) => s.seconds), y: mine.map((s) => s.step), name: `generation ${g}`,
        mode: "lines+markers", marker: { size: 4 },
        line: { color: GENERATION_COLOURS[i % GENERATION_COLOURS.length] },
        hovertemplate: `gen ${g}: step %{y} at %{x:.1f} s<extra></extra>`,
      };
    });
    traces.push({
      x: marks.map((m) => m.seconds), y: marks.map(() => 0), name: "events",
      mode: "markers", marker: { symbol: "line-ns-open", size: 10, color: "#495057" },
      text: marks.map((m) => `${m.kind}: ${m.label}`),
      hovertemplate: "%{text}<br>%{x:.2f} s<extra></extra>",
    });
    const lined = marks.filter((m) => LINES[m.kind]);
    const shapes = stateBands(marks, end).concat(lined.map((m) => ({
      type: "line", xref: "x", yref: "paper", x0: m.seconds, x1: m.seconds, y0: 0, y1: 1,
      line: { color: LINES[m.kind], width: 1.5, dash: "dot" },
    })));
    const annotations = lined.map((m, i) => ({
      x: m.seconds, xref: "x", y: 1 - (i % 4) * 0.08, yref: "paper", text: m.kind,
      showarrow: false, xanchor: "left", font: { size: 10, color: LINES[m.kind] },
    }));
    Plotly.newPlot(box, traces, {
      margin: { l: 50, r: 20, t: 20, b: 40 }, shapes, annotations, hovermode: "closest",
      xaxis: { title: { text: "seconds since submit" } }, yaxis: { title: { text: "step" } },
      legend: { orientation: "h", y: -0.25 },
    }, CONFIG);
  }

  const data = JSON.parse(document.getElementById("drill-data").textContent);
  data.faults.forEach((fault, i) => {
    const box = document.getElementById(`timeline-${i}`);
    if (box) draw(box, fault);
  });
})();
