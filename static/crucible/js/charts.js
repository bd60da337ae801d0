// Metric charts: one module for the run page, the compare page and the runs table's sparklines.
//
// A chart is a <div data-chart> whose data- attributes say what to draw:
//   data-runs="4,7"        run ids (one trace per run, each run keeps its colour on every chart)
//   data-names="reward"    metric names (one trace per name when there is one run)
//   data-split="train"     the metrics' split
//   data-band="reward_std" optional: a shaded mean ± std band around the first name
//   data-live="1"          poll for new points while the page says a run is running
//   data-step-url="..."    a click on a point opens this URL with &step=N (training curves)
//   data-groups="ID"       optional: the id of a json_script block {project, groups: [{runs, label}]};
//                          each group's runs are drawn as one mean line with a min-max band
//                          (aggregated by the server, one request a group), the others as before
// Series come from the API (/api/runs/<id>/metrics), the same endpoint scripts use;
// the server downsamples, keeping each bucket's min, max and last point.
// Smoothing and the x axis are page controls (#chart-smoothing, #chart-x) kept in the URL.

const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777",
  "#4b5563", "#65a30d"];
const POLL_MS = 5000;

/** TensorBoard's debiased EMA: s = s*w + (1-w)*y; shown = s / (1 - w^n), n counting finite points. */
export function smoothEma(values, weight) {
  const out = new Array(values.length);
  let last = 0;
  let n = 0;
  for (let i = 0; i < values.length; i += 1) {
    const y = values[i];
    if (y === null || !Number.isFinite(y)) {
      out[i] = y;
      continue;
    }
    last = last * weight + (1 - weight) * y;
    n += 1;
    const debias = weight === 0 ? 1 : 1 - weight ** n;
    out[i] = last / debias;
  }
  return out;
}

/** Mean of the last `window` finite values at each point. */
export function runningAverage(values, window) {
  const out = new Array(values.length);
  const recent = [];
  let sum = 0;
  for (let i = 0; i < values.length; i += 1) {
    const y = values[i];
    if (y !== null && Number.isFinite(y)) {
      recent.push(y);
      sum += y;
      if (recent.length > window) sum -= recent.shift();
    }
    out[i] = recent.length ? sum / recent.length : null;
  }
  return out;
}

/** Plotly reads <b>, <a href> and friends in names and titles: run names and metric names are
 * user and model text, so they are escaped into entities, which Plotly shows as plain text. */
export function plotlyText(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

export function colourFor(runId) {
  return PALETTE[Number(runId) % PALETTE.length];
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function controls() {
  const smoothing = document.getElementById("chart-smoothing");
  const axis = document.getElementById("chart-x");
  const method = document.getElementById("chart-smoothing-method");
  return {
    weight: smoothing ? Math.min(0.99, Math.max(0, Number(smoothing.value) || 0)) : 0,
    x: axis ? axis.value : "step",
    method: method ? method.value : "ema",
  };
}

function smooth(values, settings) {
  if (settings.weight <= 0) return values;
  if (settings.method === "mean") return runningAverage(values, Math.max(1, Math.round(settings.weight * 100)));
  return smoothEma(values, settings.weight);
}

async function fetchSeries(runId, names, split, x, since) {
  const params = new URLSearchParams({ names: names.join(","), split, x });
  if (since !== null && since !== undefined) params.set("since", String(since));
  const response = await fetch(`/api/runs/${runId}/metrics?${params}`, { credentials: "same-origin",
    headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.detail || `HTTP ${response.status}`);
  return body;
}

async function fetchGroupSeries(project, runIds, names, split, x) {
  const params = new URLSearchParams({ ids: runIds.join(","), names: names.join(","), split, x });
  const response = await fetch(`/api/projects/${encodeURIComponent(project)}/runs/seed-groups/metrics?${params}`,
    { credentials: "same-origin", headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.detail || `HTTP ${response.status}`);
  return body;
}

/** The seed groups a compare chart draws (data-groups names their json_script block), run ids as strings. */
export function readGroups(element) {
  const source = element.dataset.groups ? document.getElementById(element.dataset.groups) : null;
  if (!source) return { project: "", groups: [] };
  try {
    const parsed = JSON.parse(source.textContent);
    const groups = (parsed.groups || []).filter((g) => Array.isArray(g.runs) && g.runs.length > 1)
      .map((g) => ({ runs: g.runs.map(String), label: String(g.label || "") }));
    return { project: String(parsed.project || ""), groups };
  } catch {
    return { project: "", groups: [] };
  }
}

/** A band's fill: the group's colour, more opaque on a dark background, where a faint fill vanishes. */
export function bandFill(colour, dark) {
  return `${colour}${dark ? "4d" : "2e"}`;
}

function darkTheme() {
  return getComputedStyle(document.documentElement).colorScheme === "dark";
}

class Chart {
  constructor(element) {
    this.el = element;
    this.runs = (element.dataset.runs || "").split(",").filter(Boolean);
    this.names = (element.dataset.names || "").split(",").filter(Boolean);
    this.split = element.dataset.split || "train";
    this.band = element.dataset.band || "";
    this.live = element.dataset.live === "1";
    this.stepUrl = element.dataset.stepUrl || "";
    this.title = element.dataset.title || this.names.join(", ");
    this.data = {};  // `${run}|${name}` -> {x: [], y: []}
    const { project, groups } = readGroups(element);
    this.project = project;
    this.groups = groups;  // [{runs: ["4", "7"], label}]
    this.grouped = new Set(groups.flatMap((g) => g.runs));
    this.groupData = {};  // `${group index}|${name}` -> {x, mean, min, max, n}
    this.lastStep = {};
    this.timer = null;
  }

  fetchNames() {
    return this.band ? [...this.names, this.band] : this.names;
  }

  async load() {
    const { x } = controls();
    this.x = x;
    this.data = {};
    this.groupData = {};
    await Promise.all([...this.runs.filter((run) => !this.grouped.has(run)).map(async (run) => {
      const body = await fetchSeries(run, this.fetchNames(), this.split, x, null);
      this.lastStep[run] = body.last_step;
      for (const [name, series] of Object.entries(body.series)) {
        this.data[`${run}|${name}`] = { x: series.x.slice(), y: series.y.slice() };
      }
    }), ...this.groups.map(async (group, index) => {
      const body = await fetchGroupSeries(this.project, group.runs, this.names, this.split, x);
      for (const [name, series] of Object.entries(body.series)) this.groupData[`${index}|${name}`] = series;
    })]);
    this.draw();
    if (this.live && !this.timer) this.timer = setInterval(() => this.poll(), POLL_MS);
  }

  async poll() {
    // The run header (refreshed by htmx) carries data-run-active while the run is queued or
    // running; once it is gone this is the last poll, which picks up the final points.
    if (!document.querySelector("[data-run-active]")) {
      clearInterval(this.timer);
      this.timer = null;
    }
    let grew = false;
    await Promise.all(this.runs.map(async (run) => {
      const body = await fetchSeries(run, this.fetchNames(), this.split, this.x, this.lastStep[run]);
      this.lastStep[run] = body.last_step;
      for (const [name, series] of Object.entries(body.series)) {
        if (!series.x.length) continue;
        const key = `${run}|${name}`;
        const known = this.data[key] || { x: [], y: [] };
        known.x.push(...series.x);
        known.y.push(...series.y);
        this.data[key] = known;
        grew = true;
      }
    }));
    if (grew) this.draw();
  }

  traces() {
    const settings = controls();
    const traces = [];
    const many = this.runs.length > 1;
    for (const run of this.runs) {
      if (this.grouped.has(run)) continue;
      this.names.forEach((name, i) => {
        const series = this.data[`${run}|${name}`];
        if (!series || !series.x.length) return;
        const colour = many ? colourFor(run) : PALETTE[i % PALETTE.length];
        const label = plotlyText(many ? (this.el.dataset[`label${run}`] || `run ${run}`) : name);
        if (this.band && i === 0) traces.push(...this.bandTraces(run, series, colour));
        if (settings.weight > 0) {
          traces.push({ x: series.x, y: series.y, mode: "lines", name: `${label} (raw)`, showlegend: false,
            line: { color: colour, width: 1 }, opacity: 0.25, hoverinfo: "skip", meta: { run, raw: true } });
        }
        traces.push({ x: series.x, y: smooth(series.y, settings), mode: "lines", name: label,
          line: { color: colour, width: 2 }, meta: { run, raw: false } });
      });
    }
    this.groups.forEach((group, index) => {
      this.names.forEach((name) => {
        const series = this.groupData[`${index}|${name}`];
        if (series && series.x.length) traces.push(...this.groupTraces(group, index, series, settings));
      });
    });
    return traces;
  }

  // A seed group: the min trace, the max trace filled down to it (tonexty), then the mean line;
  // one legend entry (the mean's), which shows and hides the band with it.
  groupTraces(group, index, series, settings) {
    const colour = colourFor(group.runs[0]);
    const label = plotlyText(group.label || `runs ${group.runs.join(", ")}`);
    const legendgroup = `seed-group-${index}`;
    const edge = { mode: "lines", line: { width: 0, color: colour }, showlegend: false, legendgroup, hoverinfo: "skip" };
    const traces = [
      { ...edge, x: series.x, y: series.min, name: `${label} min`, meta: { group: index, band: "min" } },
      { ...edge, x: series.x, y: series.max, name: `${label} max`, fill: "tonexty",
        fillcolor: bandFill(colour, darkTheme()), meta: { group: index, band: "max" } },
    ];
    if (settings.weight > 0) {
      traces.push({ x: series.x, y: series.mean, mode: "lines", name: `${label} (raw)`, showlegend: false, legendgroup,
        line: { color: colour, width: 1 }, opacity: 0.25, hoverinfo: "skip", meta: { group: index, raw: true } });
    }
    traces.push({ x: series.x, y: smooth(series.mean, settings), mode: "lines", name: label, legendgroup,
      line: { color: colour, width: 2 }, customdata: series.n.map((n, i) => [n, series.min[i], series.max[i]]),
      hovertemplate: "%{y:.4g} (min %{customdata[1]:.4g}, max %{customdata[2]:.4g}, n=%{customdata[0]})",
      meta: { group: index, raw: false } });
    return traces;
  }

  bandTraces(run, series, colour) {
    const std = this.data[`${run}|${this.band}`];
    if (!std || std.y.length !== series.y.length) return [];
    const upper = series.y.map((y, i) => y + std.y[i]);
    const lower = series.y.map((y, i) => y - std.y[i]);
    return [
      { x: series.x, y: upper, mode: "lines", line: { width: 0, color: colour }, showlegend: false, hoverinfo: "skip" },
      { x: series.x, y: lower, mode: "lines", line: { width: 0, color: colour }, fill: "tonexty",
        fillcolor: `${colour}22`, name: "± std", showlegend: false, hoverinfo: "skip" },
    ];
  }

  layout(traces = []) {
    const fg = cssVar("--fg") || "#1d2330";
    const line = cssVar("--line") || "#e3e6eb";
    const axisTitles = { step: "step", wall: "seconds since start", tokens: "tokens trained" };
    const legend = this.runs.length > 1 || this.names.length > 1;
    return {
      title: { text: plotlyText(this.title), font: { size: 13, color: fg }, x: 0.02 },
      margin: { l: 48, r: 12, t: 32, b: legend ? 72 : 40 }, height: legend ? 290 : 260,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: { color: fg, size: 11 },
      xaxis: { title: { text: axisTitles[this.x] || this.x }, gridcolor: line, zerolinecolor: line,
        ...(this.x === "step" ? stepTicks(traces) : {}) },
      yaxis: { gridcolor: line, zerolinecolor: line, ...this.yAxis(traces) }, showlegend: legend,
      legend: { orientation: "h", y: -0.32 }, hovermode: "x unified",
    };
  }

  // The panel's own y settings (log scale, a fixed range, both kept in the URL), else the
  // automatic range (flat for a constant series).
  yAxis(traces) {
    const view = panelView(this.el);
    const axis = view.log ? { type: "log" } : { type: "linear", ...flatRange(traces) };
    const [low, high] = rangeBounds(view.range, traces);
    if (low !== null && high !== null && low < high && (!view.log || low > 0)) {
      axis.range = view.log ? [Math.log10(low), Math.log10(high)] : [low, high];
      axis.autorange = false;
    }
    return axis;
  }

  draw() {
    const traces = this.traces();
    const empty = this.el.querySelector(".chart-empty");
    if (!traces.length) {
      if (!empty) {
        const note = document.createElement("p");
        note.className = "chart-empty muted";
        note.textContent = `${this.title}: no points yet.`;
        this.el.replaceChildren(note);
      }
      return;
    }
    if (empty) empty.remove();
    window.Plotly.react(this.el, traces, this.layout(traces), { displaylogo: false, responsive: true });
    if (this.stepUrl && !this.clickWired) {
      this.clickWired = true;
      this.el.on("plotly_click", (event) => this.openStep(event));
    }
    this.el.dataset.points = String(traces.filter((t) => t.meta && !t.meta.raw && !t.meta.band)
      .reduce((n, t) => n + t.x.length, 0));
    this.el.dataset.bands = String(traces.filter((t) => t.meta && t.meta.band === "max").length);
    this.el.dispatchEvent(new CustomEvent("crucible:chart-drawn", { bubbles: true }));
  }

  openStep(event) {
    if (this.x !== "step" || !event.points.length) return;
    const step = Math.round(event.points[0].x);
    const url = new URL(this.stepUrl, window.location.origin);
    url.searchParams.set("step", String(step));
    window.location.assign(url.toString());
  }
}

// Steps are whole numbers: a short run gets a tick per step, a long one Plotly's own
// (whole) spacing, never "1.5".
export function stepTicks(traces) {
  const xs = traces.flatMap((t) => t.x || []);
  if (!xs.length) return { tickformat: "d" };
  const span = Math.max(...xs) - Math.min(...xs);
  return span <= 10 ? { tickformat: "d", dtick: 1, tick0: 0 } : { tickformat: "d" };
}

// A constant series (a fixed learning rate) is a flat line in the middle of a sane range,
// not a zoom into float noise with labels like "…0001421μ".
export function flatRange(traces) {
  const ys = traces.filter((t) => !t.fill).flatMap((t) => t.y || []).filter(Number.isFinite);
  if (!ys.length) return {};
  const low = Math.min(...ys);
  const high = Math.max(...ys);
  const scale = Math.max(Math.abs(low), Math.abs(high));
  if (high - low > scale * 1e-9 && high > low) return {};
  const pad = scale > 0 ? scale * 0.5 : 1;
  return { range: [low - pad, high + pad], exponentformat: "e" };
}

const charts = [];

// Per-panel settings live in the URL, so a link shows the same view: log=KEY;KEY,
// y=KEY=MIN:MAX;KEY=MIN:MAX and hide=KEY;KEY, where KEY is the panel's split:names.
export function panelKey(el) {
  return `${el.dataset.split || "train"}:${el.dataset.names || ""}`;
}

function keyList(name) {
  const raw = new URL(window.location.href).searchParams.get(name) || "";
  return raw.split(";").filter(Boolean);
}

function setKeyList(name, keys) {
  const url = new URL(window.location.href);
  if (keys.length) url.searchParams.set(name, keys.join(";"));
  else url.searchParams.delete(name);
  window.history.replaceState(null, "", url.toString());
}

function ranges() {
  const out = {};
  for (const entry of keyList("y")) {
    const cut = entry.lastIndexOf("=");
    if (cut > 0) out[entry.slice(0, cut)] = entry.slice(cut + 1);
  }
  return out;
}

export function parseRange(text) {
  const [low, high] = String(text || "").split(":");
  const number = (v) => (v === undefined || v.trim() === "" || !Number.isFinite(Number(v)) ? null : Number(v));
  return [number(low), number(high)];
}

// A bound left empty follows the data, so "min only" or "max only" works too.
function rangeBounds(range, traces) {
  let [low, high] = range;
  if (low === null && high === null) return [null, null];
  const ys = traces.filter((t) => !t.fill).flatMap((t) => t.y || []).filter(Number.isFinite);
  if (!ys.length) return [null, null];
  if (low === null) low = Math.min(...ys);
  if (high === null) high = Math.max(...ys);
  return [low, high];
}

export function panelView(el) {
  const key = panelKey(el);
  return { log: keyList("log").includes(key), range: parseRange(ranges()[key]), hidden: keyList("hide").includes(key) };
}

function toggleKey(name, key, on) {
  const keys = keyList(name).filter((k) => k !== key);
  setKeyList(name, on ? [...keys, key] : keys);
}

function setRange(key, low, high) {
  const all = ranges();
  if (low === "" && high === "") delete all[key];
  else all[key] = `${low}:${high}`;
  setKeyList("y", Object.entries(all).map(([k, v]) => `${k}=${v}`));
}

function redraw(el) {
  const chart = charts.find((c) => c.el === el);
  if (chart && Object.keys(chart.data).length) chart.draw();
}

function labelled(text, input) {
  const label = document.createElement("label");
  label.append(input, ` ${text}`);
  return label;
}

// A small toolbar above each panel: log scale, y from/to, hide.
function addPanelTools(el) {
  const card = el.closest(".chart-card");
  if (!card || card.querySelector(".chart-tools")) return;
  const key = panelKey(el);
  const view = panelView(el);
  const tools = document.createElement("div");
  tools.className = "chart-tools";
  const log = document.createElement("input");
  log.type = "checkbox";
  log.checked = view.log;
  log.dataset.panelLog = "";
  log.addEventListener("change", () => { toggleKey("log", key, log.checked); redraw(el); });
  const bound = (which, value) => {
    const input = document.createElement("input");
    input.type = "text";
    input.inputMode = "decimal";
    input.size = 6;
    input.placeholder = which;
    input.value = value === null ? "" : String(value);
    input.setAttribute("aria-label", `${el.dataset.title || key}: y ${which}`);
    input.dataset.panelY = which;
    return input;
  };
  const low = bound("min", view.range[0]);
  const high = bound("max", view.range[1]);
  const apply = () => {
    const ok = (v) => v.trim() === "" || Number.isFinite(Number(v));
    low.classList.toggle("invalid", !ok(low.value));
    high.classList.toggle("invalid", !ok(high.value));
    if (!ok(low.value) || !ok(high.value)) return;
    setRange(key, low.value.trim(), high.value.trim());
    redraw(el);
  };
  low.addEventListener("change", apply);
  high.addEventListener("change", apply);
  const hide = document.createElement("button");
  hide.type = "button";
  hide.className = "ghost";
  hide.textContent = "Hide";
  hide.dataset.panelHide = "";
  hide.addEventListener("click", () => setHidden(el, true));
  const range = document.createElement("span");
  range.className = "chart-range";
  range.append("y ", low, " – ", high);
  tools.append(labelled("log", log), range, hide);
  card.prepend(tools);
  card.hidden = view.hidden;
}

function setHidden(el, hidden) {
  const card = el.closest(".chart-card");
  if (card) card.hidden = hidden;
  toggleKey("hide", panelKey(el), hidden);
  fillPicker();
  if (!hidden) redraw(el);
}

// The metric picker: every panel of the page with a checkbox; unticked panels are hidden.
function fillPicker() {
  const list = document.querySelector("[data-chart-picker-list]");
  if (!list) return;
  const hidden = keyList("hide");
  const items = [...document.querySelectorAll("[data-chart]")].map((el) => {
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = !hidden.includes(panelKey(el));
    box.dataset.pickerKey = panelKey(el);
    box.addEventListener("change", () => setHidden(el, !box.checked));
    const split = el.dataset.split && el.dataset.split !== "train" ? ` (${el.dataset.split})` : "";
    return labelled(`${el.dataset.title || panelKey(el)}${split}`, box);
  });
  list.replaceChildren(...items);
  const count = document.querySelector("[data-chart-picker-count]");
  const shown = items.filter((item) => item.querySelector("input").checked).length;
  if (count) count.textContent = `${shown} of ${items.length}`;
}

function decorate(elements) {
  elements.forEach(addPanelTools);
  fillPicker();
}

function observe(elements) {
  // Only charts in view are fetched and drawn: a page with 20 panels stays responsive.
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      observer.unobserve(entry.target);
      const chart = new Chart(entry.target);
      charts.push(chart);
      chart.load().catch((error) => {
        const note = document.createElement("p");
        note.className = "chart-empty error";
        note.textContent = `${chart.title}: ${error.message}`;
        entry.target.replaceChildren(note);
      });
    }
  }, { rootMargin: "200px" });
  elements.forEach((el) => observer.observe(el));
}

function keepControlsInUrl() {
  const url = new URL(window.location.href);
  const { weight, x, method } = controls();
  url.searchParams.set("smoothing", String(weight));
  url.searchParams.set("x", x);
  url.searchParams.set("smooth", method);
  window.history.replaceState(null, "", url.toString());
  const shown = document.getElementById("chart-smoothing-value");
  if (shown) shown.textContent = weight.toFixed(2);
}

function wireControls() {
  const smoothing = document.getElementById("chart-smoothing");
  const axis = document.getElementById("chart-x");
  const method = document.getElementById("chart-smoothing-method");
  if (smoothing) smoothing.addEventListener("input", () => { keepControlsInUrl(); charts.forEach((c) => c.draw()); });
  if (method) method.addEventListener("change", () => { keepControlsInUrl(); charts.forEach((c) => c.draw()); });
  if (axis) {
    axis.addEventListener("change", () => {
      keepControlsInUrl();
      charts.forEach((c) => c.load().catch(() => {}));
    });
  }
}

function drawSparklines() {
  // Small inline curves in tables: data-values holds the numbers, no fetch needed.
  for (const el of document.querySelectorAll("[data-sparkline]")) {
    let values;
    try {
      values = JSON.parse(el.dataset.sparkline);
    } catch {
      continue;
    }
    if (!Array.isArray(values) || values.length < 2) continue;
    const finite = values.filter((v) => Number.isFinite(v));
    const lo = Math.min(...finite);
    const hi = Math.max(...finite);
    const width = 80;
    const height = 18;
    const points = values.map((v, i) => {
      const px = (i / (values.length - 1)) * width;
      const py = hi === lo ? height / 2 : height - ((v - lo) / (hi - lo)) * height;
      return `${px.toFixed(1)},${py.toFixed(1)}`;
    }).join(" ");
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("width", String(width));
    svg.setAttribute("height", String(height));
    svg.setAttribute("class", "sparkline");
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", points);
    svg.appendChild(line);
    el.replaceChildren(svg);
  }
}

function colourSwatches() {
  for (const swatch of document.querySelectorAll("[data-run-swatch]")) {
    swatch.style.background = colourFor(swatch.dataset.runSwatch);
  }
}

let controlsWired = false;

function wireControlsOnce() {
  if (controlsWired || !document.getElementById("chart-smoothing")) return;
  controlsWired = true;
  wireControls();
}

// A live run page's header (swapped in by htmx) carries the run's current panels in a
// <template>: charts of metrics first recorded after the page was opened are added here.
export function addLivePanels() {
  const template = document.querySelector("template[data-live-panels]");
  const grid = document.querySelector(".charts");
  if (!template || !grid) return [];
  const key = (el) => `${el.dataset.split}|${el.dataset.names}`;
  const known = new Set([...grid.querySelectorAll("[data-chart]")].map(key));
  const added = [];
  for (const card of template.content.querySelectorAll(".chart-card")) {
    const chart = card.querySelector("[data-chart]");
    if (!chart || known.has(key(chart))) continue;
    const copy = document.importNode(card, true);
    grid.append(copy);
    known.add(key(chart));
    added.push(copy.querySelector("[data-chart]"));
  }
  if (added.length) {
    grid.querySelector("[data-no-curves]")?.remove();
    wireControlsOnce();
    decorate(added);
    observe(added);
  }
  return added;
}

export function start() {
  colourSwatches();
  const elements = [...document.querySelectorAll("[data-chart]")];
  if (elements.length) {
    wireControlsOnce();
    decorate(elements);
    observe(elements);
  }
  document.body.addEventListener("htmx:afterSettle", () => addLivePanels());
  drawSparklines();
}

start();
