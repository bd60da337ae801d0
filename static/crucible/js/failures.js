// Failures page: stacked bars of failure buckets, drawn from the page's json_script blocks.
//
// A chart is a <div data-failures-chart="ID"> whose data is <script type="application/json" id="ID">:
//   steps (a run's training):  {buckets, bars: [{step, step_max, counts}], list, queries}
//   compare (A against B):     {buckets, groups: [{category, link, label, a, b}], a: {label, list}, b: {...},
//                               queries}; a group without `link` (no category) opens nothing
// `list` is the trajectory list's URL already filtered by run (and split, step); `queries` maps a
// bucket to the list's parameters that select it (passed=yes, bucket=wrong_tool, ...). A click on a
// segment opens that list; an empty `list` (no trajectory page yet) draws the bars without links.
// The radio buttons name="show" switch counts and shares (Plotly's barnorm), kept in the URL.
// Bucket names, run names and categories are text for Plotly, escaped by plotlyText.

import { plotlyText } from "./charts.js";

const COLOURS = {
  invalid_json: "#dc2626", unknown_tool: "#9333ea", wrong_tool: "#ea580c", wrong_arguments: "#ca8a04",
  missing_call: "#0891b2", extra_write: "#db2777", unsafe_action: "#7f1d1d", truncated: "#64748b",
  no_tool_call: "#2563eb", verifier_error: "#a3a3a3", unbucketed: "#78716c",
};
const FALLBACK = ["#4b5563", "#65a30d", "#0f766e", "#be185d"];

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function colourFor(bucket, index) {
  if (bucket === "passed") return cssVar("--ok") || "#15803d";
  return COLOURS[bucket] || FALLBACK[index % FALLBACK.length];
}

function label(bucket) {
  return plotlyText(String(bucket).replace(/_/g, " "));
}

function showShares() {
  const checked = document.querySelector("input[name=show]:checked");
  return checked ? checked.value === "share" : false;
}

/** The trajectory list URL for one segment, or "" when there is no list to open. */
export function segmentUrl(list, query, extra) {
  if (!list) return "";
  const url = new URL(list, window.location.origin);
  for (const [name, value] of Object.entries({ ...(query || {}), ...(extra || {}) })) {
    url.searchParams.set(name, String(value));
  }
  return url.pathname + url.search;
}

function stepParams(bar) {
  return bar.step === bar.step_max ? { step: bar.step } : { step_min: bar.step, step_max: bar.step_max };
}

function stepsTraces(data) {
  return data.buckets.map((bucket, i) => ({
    type: "bar", name: label(bucket), marker: { color: colourFor(bucket, i) },
    x: data.bars.map((bar) => bar.step),
    y: data.bars.map((bar) => bar.counts[bucket] || 0),
    customdata: data.bars.map((bar) => segmentUrl(data.list, data.queries[bucket], stepParams(bar))),
    hovertemplate: `step %{x}: %{y} ${label(bucket)}<extra></extra>`,
    meta: { bucket },
  }));
}

function compareTraces(data) {
  const groups = data.groups;
  const x = [groups.flatMap((g) => [plotlyText(g.label), plotlyText(g.label)]), groups.flatMap(() => ["A", "B"])];
  return data.buckets.map((bucket, i) => ({
    type: "bar", name: label(bucket), marker: { color: colourFor(bucket, i) }, x,
    y: groups.flatMap((g) => [g.a[bucket] || 0, g.b[bucket] || 0]),
    customdata: groups.flatMap((g) => ["a", "b"].map((side) => (g.link
      ? segmentUrl(data[side].list, data.queries[bucket], g.category ? { category: g.category } : {}) : ""))),
    hovertemplate: `%{x}: %{y} ${label(bucket)}<extra></extra>`,
    meta: { bucket },
  }));
}

function layout(el, shares) {
  const fg = cssVar("--fg") || "#1d2330";
  const line = cssVar("--line") || "#e3e6eb";
  return {
    barmode: "stack", barnorm: shares ? "percent" : "", height: 320,
    margin: { l: 52, r: 12, t: 16, b: el.dataset.xTitle ? 96 : 110 },
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: { color: fg, size: 11 },
    xaxis: { title: { text: el.dataset.xTitle || "" }, gridcolor: line, zerolinecolor: line },
    yaxis: { title: { text: shares ? "share (%)" : "trajectories" }, gridcolor: line, zerolinecolor: line },
    legend: { orientation: "h", y: -0.3 }, hovermode: "closest",
  };
}

class BucketChart {
  constructor(el) {
    this.el = el;
    const source = document.getElementById(el.dataset.failuresChart);
    this.data = source ? JSON.parse(source.textContent) : null;
  }

  traces() {
    return this.data.groups ? compareTraces(this.data) : stepsTraces(this.data);
  }

  draw() {
    if (!this.data || !this.data.buckets.length) {
      const note = document.createElement("p");
      note.className = "chart-empty muted";
      note.textContent = "Nothing to draw yet.";
      this.el.replaceChildren(note);
      return;
    }
    const traces = this.traces();
    window.Plotly.react(this.el, traces, layout(this.el, showShares()), { displaylogo: false, responsive: true });
    if (!this.clickWired) {
      this.clickWired = true;
      this.el.on("plotly_click", (event) => this.open(event));
    }
    this.el.dataset.traces = String(traces.length);
    this.el.dataset.drawn = showShares() ? "share" : "count";
    this.el.dispatchEvent(new CustomEvent("crucible:chart-drawn", { bubbles: true }));
  }

  open(event) {
    const point = event.points && event.points[0];
    const url = point ? point.customdata : "";
    if (url) window.location.assign(url);
  }
}

function keepShowInUrl() {
  const url = new URL(window.location.href);
  url.searchParams.set("show", showShares() ? "share" : "count");
  window.history.replaceState(null, "", url.toString());
}

function dropSplitWhenRunChanges() {
  // The split belongs to the run shown: another run gets its own default split, not this one's.
  const form = document.getElementById("failures-run-form");
  const run = document.getElementById("failures-run");
  const split = document.getElementById("failures-split");
  if (!form || !run || !split) return;
  const shown = run.value;
  form.addEventListener("submit", () => { if (run.value !== shown) split.disabled = true; });
}

export function start() {
  dropSplitWhenRunChanges();
  const charts = [...document.querySelectorAll("[data-failures-chart]")].map((el) => new BucketChart(el));
  const redraw = () => charts.forEach((chart) => chart.draw());
  redraw();
  for (const radio of document.querySelectorAll("input[name=show]")) {
    radio.addEventListener("change", () => { keepShowInUrl(); redraw(); });
  }
  // Theme "auto" follows the system: redraw in the new colours when it changes.
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", redraw);
}

if (window.Plotly) {
  start();
} else {
  window.addEventListener("load", start, { once: true });
}
