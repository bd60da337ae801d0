// The shell's keys and small behaviours. No inline script anywhere: the CSP forbids it.
// Global keys (never while typing): ? help, / search, g then a letter: a project page.
// A page adds its own keys by listening to "crucible:key" events (detail: the key).

const TYPING = new Set(["INPUT", "TEXTAREA", "SELECT"]);

export function isTyping(target) {
  if (!target) return false;
  return TYPING.has(target.tagName) || target.isContentEditable;
}

function openHelp() {
  const help = document.getElementById("help");
  if (help && !help.open) help.showModal();
}

function navUrlFor(key) {
  const link = document.querySelector(`[data-nav-key="${CSS.escape(key)}"]`);
  return link ? link.getAttribute("href") : null;
}

let pendingG = false;
let pendingTimer = null;

function onKey(event) {
  if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
  if (isTyping(event.target)) return;
  const help = document.getElementById("help");
  if (help && help.open) return;  // the dialog handles Esc itself
  if (pendingG) {
    pendingG = false;
    clearTimeout(pendingTimer);
    const url = navUrlFor(event.key);
    if (url) {
      event.preventDefault();
      window.location.assign(url);
    }
    return;
  }
  if (event.key === "?") {
    event.preventDefault();
    openHelp();
  } else if (event.key === "/") {
    const search = document.getElementById("global-search");
    if (search) {
      event.preventDefault();
      search.focus();
      search.select();
    }
  } else if (event.key === "g") {
    pendingG = true;
    pendingTimer = setTimeout(() => { pendingG = false; }, 1500);
  } else {
    // A page handler that takes the key calls preventDefault() on the custom event; the key
    // then does nothing else (no scrolling on arrows, no character typed into a field it focused).
    const taken = !document.dispatchEvent(new CustomEvent("crucible:key", { detail: event.key, cancelable: true }));
    if (taken) event.preventDefault();
  }
}

function wire() {
  document.addEventListener("keydown", onKey);
  for (const button of document.querySelectorAll("[data-open-help]")) {
    button.addEventListener("click", openHelp);
  }
  for (const select of document.querySelectorAll("select[data-autosubmit]")) {
    select.addEventListener("change", () => select.form.requestSubmit());
  }
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
}

wire();
