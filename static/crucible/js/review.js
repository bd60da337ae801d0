// Review pages: the labelling keys of UI.md (Langfuse's map), "show all" for folded content,
// and the queue page's "l" to start labelling.
//
// Plain keys arrive as shell.js's "crucible:key" events, which it sends only while no field has
// the focus, so the page gets "keys inactive while typing" for free. Three keys are handled on
// the keydown itself: Ctrl/Cmd+Enter saves and goes to the next item (also while typing; shell.js
// leaves modified keys alone), Escape leaves the field, and n focuses the note (the keydown must
// be cancelled, or the "n" would be typed into it). Nothing here builds HTML: text goes in with
// textContent.

import { isTyping } from "./shell.js";

const page = document.getElementById("labelling");
const form = document.getElementById("label-form");
const feedback = document.getElementById("key-feedback");

function say(text) {
  if (feedback) feedback.textContent = text;
}

// --------------------------------------------------------------------------- folded content

for (const button of document.querySelectorAll("[data-show-all]")) {
  const label = button.textContent;
  button.addEventListener("click", () => {
    const block = button.previousElementSibling;
    if (!block) return;
    const folded = block.classList.toggle("folded");
    button.textContent = folded ? label : "Fold";
  });
}

// --------------------------------------------------------------------------- the labelling form

function radio(id) {
  return document.getElementById(id);
}

function choose(id, text) {
  const input = radio(id);
  if (!input) return;
  input.checked = true;
  input.dispatchEvent(new Event("change", { bubbles: true }));
  say(text);
}

function preferredSide() {
  const checked = form && form.querySelector("input[name=preferred]:checked");
  return checked ? checked.value : "";
}

function markPreferred() {
  const side = preferredSide();
  for (const sample of document.querySelectorAll(".sample[data-side]")) {
    sample.classList.toggle("preferred", sample.dataset.side === side);
  }
}

function pickBucket(key) {
  const select = document.getElementById("failure-bucket");
  if (!select) return false;
  const option = select.querySelector(`option[data-key="${CSS.escape(key)}"]`);
  if (!option) return false;
  select.value = option.value;
  select.dispatchEvent(new Event("change", { bubbles: true }));
  say(option.value ? `Bucket: ${option.value}` : "No bucket");
  return true;
}

function save() {
  if (!form) return;
  if (page.dataset.mode === "pair" && !preferredSide()) {
    say("Choose the better sample first: ← left, → right (or p).");
    return;
  }
  say("Saving…");
  form.requestSubmit();
}

function go(url, missing) {
  if (url) {
    window.location.assign(url);
  } else {
    say(missing);
  }
}


function undo() {
  const undoForm = document.getElementById("undo-form");
  if (undoForm) {
    say("Undoing your last label…");
    undoForm.requestSubmit();
  } else {
    say("Nothing to undo: you have no label in this queue yet.");
  }
}

const NEXT_MISSING = "This is your current item: save it (Ctrl+Enter) to get the next one.";
const PREVIOUS_MISSING = "No earlier label of yours in this queue.";

function onPageKey(event) {
  const key = event.detail;
  const mode = page.dataset.mode;
  const pair = mode === "pair";
  if (key === "j" || (key === "ArrowRight" && !pair)) {
    go(page.dataset.nextUrl, NEXT_MISSING);
  } else if (key === "k" || (key === "ArrowLeft" && !pair)) {
    go(page.dataset.previousUrl, PREVIOUS_MISSING);
  } else if (key === "u") {
    undo();
  } else if (mode === "done") {
    return;
  } else if (pair && key === "ArrowLeft") {
    choose("preferred-left", "Preferred: left");
  } else if (pair && key === "ArrowRight") {
    choose("preferred-right", "Preferred: right");
  } else if (pair && key === "p") {
    choose(preferredSide() === "left" ? "preferred-right" : "preferred-left",
      `Preferred: ${preferredSide() === "left" ? "right" : "left"}`);
  } else if (!pair && key === "a") {
    choose("verdict-agree", "You agree with the verifier");
  } else if (!pair && key === "d") {
    choose("verdict-disagree", "You disagree with the verifier");
  } else if (!pair && /^[0-9-]$/.test(key)) {
    pickBucket(key);
  } else {
    return;
  }
  event.preventDefault();
}

function onKeyDown(event) {
  const plain = !(event.ctrlKey || event.metaKey || event.altKey);
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && form) {
    event.preventDefault();
    save();
  } else if (event.key === "n" && plain && form && !isTyping(event.target) && !document.querySelector("dialog[open]")) {
    // Focused during the keydown, which is cancelled, so the "n" is not typed and the next keys land in the note.
    event.preventDefault();
    document.getElementById("note").focus();
  } else if (event.key === "Escape" && isTyping(event.target) && !event.target.closest("dialog")) {
    event.target.blur();
  }
}

if (page) {
  document.addEventListener("crucible:key", onPageKey);
  document.addEventListener("keydown", onKeyDown);
  if (form) {
    form.addEventListener("change", markPreferred);
    // A radio clicked with the mouse keeps the focus, which would silence the keys: give it back.
    for (const input of form.querySelectorAll("input[type=radio]")) {
      input.addEventListener("click", (event) => { if (event.detail > 0) input.blur(); });
    }
    markPreferred();
  }
}

// --------------------------------------------------------------------------- other review pages

// An element with data-page-key="x" is clicked by the key x (the queue page's "l": start labelling).
document.addEventListener("crucible:key", (event) => {
  if (page) return;
  const target = document.querySelector(`[data-page-key="${CSS.escape(event.detail)}"]`);
  if (target) {
    event.preventDefault();
    target.click();
  }
});
