// Verifier pages: the code editor (line numbers, Tab inserts spaces), Ctrl/Cmd+Enter submits a form,
// the sanity check's keyboard pass (a / d, 1-9 0, j / k or arrows, Ctrl/Cmd+Enter save and next),
// the reward histogram (Plotly, from a json_script block), "differences only" in a config diff,
// and page keys declared with data-page-key.
//
// Plain keys arrive as shell.js's "crucible:key" events, which it sends only while no field has the
// focus, so every page key is inactive while typing. Ctrl/Cmd+Enter is handled on the keydown
// itself (it works while typing; shell.js leaves modified keys alone). Nothing here builds HTML:
// text goes in with textContent, chart labels through plotlyText.

import { plotlyText } from "./charts.js";
import { isTyping } from "./shell.js";

const INDENT = "    ";

// --------------------------------------------------------------------------- code editor

function lineCount(text) {
  let n = 1;
  for (let i = 0; i < text.length; i += 1) if (text.charCodeAt(i) === 10) n += 1;
  return n;
}

function renderGutter(gutter, textarea) {
  const lines = lineCount(textarea.value);
  if (Number(gutter.dataset.lines) === lines) return;
  gutter.dataset.lines = String(lines);
  gutter.textContent = Array.from({ length: lines }, (_, i) => String(i + 1)).join("\n");
}

function replaceRange(textarea, start, end, text, selectStart, selectEnd) {
  textarea.setRangeText(text, start, end, "end");
  textarea.setSelectionRange(selectStart, selectEnd);
  textarea.dispatchEvent(new Event("input", { bubbles: true }));
}

function indentKey(event, textarea) {
  const { value, selectionStart: start, selectionEnd: end } = textarea;
  const lineStart = value.lastIndexOf("\n", start - 1) + 1;
  if (!event.shiftKey && start === end) {
    replaceRange(textarea, start, end, INDENT, start + INDENT.length, start + INDENT.length);
    return;
  }
  // A selection (or Shift+Tab): indent or dedent every line it touches.
  const block = value.slice(lineStart, end);
  const lines = block.split("\n");
  const changed = lines.map((line) => {
    if (!event.shiftKey) return INDENT + line;
    const spaces = line.match(/^ {1,4}/);
    return spaces ? line.slice(spaces[0].length) : line;
  }).join("\n");
  const firstDelta = event.shiftKey ? -(lines[0].match(/^ {1,4}/) || [""])[0].length : INDENT.length;
  const newStart = Math.max(lineStart, start + firstDelta);
  replaceRange(textarea, lineStart, end, changed, newStart,
    end + (changed.length - block.length));
}

function wireCodeEditor(editor) {
  const textarea = editor.querySelector("textarea");
  const gutter = editor.querySelector(".gutter");
  if (!textarea || !gutter) return;
  let escaped = false;
  const sync = () => renderGutter(gutter, textarea);
  textarea.addEventListener("input", sync);
  textarea.addEventListener("scroll", () => { gutter.scrollTop = textarea.scrollTop; });
  textarea.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      escaped = true;  // the next Tab leaves the editor, as keyboard users expect
      return;
    }
    if (event.key === "Tab" && !escaped && !event.ctrlKey && !event.metaKey && !event.altKey) {
      event.preventDefault();
      indentKey(event, textarea);
      return;
    }
    escaped = false;
  });
  textarea.addEventListener("blur", () => { escaped = false; });
  sync();
}

// --------------------------------------------------------------------------- forms

function wireSubmitShortcut(form) {
  const submitter = form.dataset.submitShortcut ? document.getElementById(form.dataset.submitShortcut) : null;
  form.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit(submitter || undefined);
    }
  });
}

function wireOnlyDifferences(box) {
  const table = document.getElementById("config-diff");
  if (!table) return;
  const apply = () => table.classList.toggle("only-differences", box.checked);
  box.addEventListener("change", apply);
  apply();
}

// --------------------------------------------------------------------------- histogram

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function drawHistogram(el) {
  const source = document.getElementById(el.dataset.histogram);
  if (!source || !window.Plotly) return;
  let data;
  try {
    data = JSON.parse(source.textContent);
  } catch {
    return;
  }
  const bins = Array.isArray(data.bins) ? data.bins : [];
  const labels = bins.map((b) => plotlyText(b.label));
  const counts = bins.map((b) => b.count);
  if (data.errors) {
    labels.push("verifier error");
    counts.push(data.errors);
  }
  if (!labels.length) return;
  const fg = cssVar("--fg") || "#1d2330";
  const line = cssVar("--line") || "#e3e6eb";
  const colours = labels.map((_, i) => (data.errors && i === labels.length - 1 ? (cssVar("--bad") || "#dc2626")
    : (cssVar("--accent") || "#2563eb")));
  window.Plotly.react(el, [{ type: "bar", x: labels, y: counts, marker: { color: colours },
    hovertemplate: "reward %{x}: %{y} outputs<extra></extra>" }], {
    margin: { l: 40, r: 12, t: 12, b: 48 }, height: 220, paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)", font: { color: fg, size: 11 },
    xaxis: { type: "category", title: { text: "reward" }, gridcolor: line },
    yaxis: { title: { text: "outputs" }, gridcolor: line, rangemode: "tozero", tickformat: ",d" },
  }, { displaylogo: false, responsive: true, staticPlot: false });
  el.dataset.drawn = "1";
}

// --------------------------------------------------------------------------- sanity check: keyboard pass

const judge = document.getElementById("check-label");
const labelForm = document.getElementById("label-form");
const feedback = document.getElementById("key-feedback");

function say(text) {
  if (feedback) feedback.textContent = text;
}

function choose(id, text) {
  const input = document.getElementById(id);
  if (!input) return;
  input.checked = true;
  input.dispatchEvent(new Event("change", { bubbles: true }));
  say(text);
}

function pickBucket(key) {
  const select = document.getElementById("human-bucket");
  if (!select) return;
  const option = select.querySelector(`option[data-key="${CSS.escape(key)}"]`);
  if (!option) return;
  select.value = option.value;
  select.dispatchEvent(new Event("change", { bubbles: true }));
  say(option.value ? `Bucket: ${option.value}` : "No bucket");
}

function go(url, missing) {
  if (url) window.location.assign(url);
  else say(missing);
}

function saveAndNext() {
  if (!labelForm) return;
  if (!labelForm.querySelector("input[name=verdict]:checked")) {
    say("First say whether the verdict is right (a) or wrong (d).");
    return;
  }
  say("Saving…");
  labelForm.requestSubmit();
}

function onJudgeKey(event) {
  const key = event.detail;
  if (key === "a") choose("verdict-right", "The verdict is right");
  else if (key === "d") choose("verdict-wrong", "The verdict is wrong");
  else if (/^[0-9-]$/.test(key)) pickBucket(key);
  else if (key === "j" || key === "ArrowRight") go(judge.dataset.nextUrl, "This is the last output.");
  else if (key === "k" || key === "ArrowLeft") go(judge.dataset.previousUrl, "This is the first output.");
  else return;
  event.preventDefault();
}

function onJudgeKeyDown(event) {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    saveAndNext();
  } else if (event.key === "Escape" && isTyping(event.target) && !event.target.closest("dialog")) {
    event.target.blur();
  }
}

// --------------------------------------------------------------------------- start

function showAllButtons() {
  for (const button of document.querySelectorAll("[data-show-all]")) {
    const label = button.textContent;
    button.addEventListener("click", () => {
      const block = button.previousElementSibling;
      if (!block) return;
      const folded = block.classList.toggle("folded");
      button.textContent = folded ? label : "Fold";
    });
  }
}

function start() {
  document.querySelectorAll("[data-code-editor]").forEach(wireCodeEditor);
  document.querySelectorAll("form[data-submit-shortcut]").forEach(wireSubmitShortcut);
  document.querySelectorAll("[data-only-differences]").forEach(wireOnlyDifferences);
  showAllButtons();
  const histograms = document.querySelectorAll("[data-histogram]");
  if (histograms.length) {
    // plotly.min.js is a deferred classic script: it has run once the document is loaded.
    const draw = () => histograms.forEach(drawHistogram);
    if (document.readyState === "complete") draw();
    else window.addEventListener("load", draw);
  }
  if (judge) {
    document.addEventListener("crucible:key", onJudgeKey);
    document.addEventListener("keydown", onJudgeKeyDown);
    if (labelForm) {
      // A radio clicked with the mouse keeps the focus, which would silence the keys: give it back.
      for (const input of labelForm.querySelectorAll("input[type=radio]")) {
        input.addEventListener("click", (event) => { if (event.detail > 0) input.blur(); });
      }
    }
  } else {
    // An element with data-page-key="x" is clicked by the key x (n: new verifier, p: playground, l: judge).
    document.addEventListener("crucible:key", (event) => {
      const target = document.querySelector(`[data-page-key="${CSS.escape(event.detail)}"]`);
      if (target) {
        event.preventDefault();
        target.click();
      }
    });
  }
}

start();
