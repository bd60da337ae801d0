// Forms whose post takes a while (imports, generation, sanity-check scoring) show that they are working.
//
// A form opts in with data-long-submit; the attribute's value names the server's work ("Checking the
// file…"), "Working…" when empty.
// - With a file chosen (a multipart post), the form goes out through XMLHttpRequest so the upload can be
//   measured: a <progress> and "Uploading 3.2 of 12.0 MB (27%)", then "Checking the file… 4 s" while
//   the server works. A redirect is followed with location.assign (the answer is dropped as soon as its
//   headers show the redirect); any other answer (the form again with its errors, or a report rendered
//   in place) replaces this document, and the page's modules are evaluated again for the new one.
// - Otherwise the form posts as usual; "Working… N s" counts beside the button at once and the submit
//   buttons are disabled after the submit event (so the post still carries the pressed one), so a
//   second click cannot send it twice.
// Without JS the forms are plain posts; the CSRF token is the form's hidden input, which FormData sends.
// The status is a role="status" live region; the seconds counter is aria-hidden so it is not read out
// every second. Text goes in with textContent only.
//
// A page loads this module with a <script type="module"> (or imports it); it listens on the document,
// so forms added later (htmx swaps) are covered too.

const SELF = stripHash(import.meta.url);
const MB = 1024 * 1024;
const HANDLED = Symbol.for("crucible.longSubmit.handled");
const DISABLED_BY_US = "longSubmitDisabled";

let clock = null;  // the one running counter: { timer, element, started }
let replacements = 0;

function stripHash(url) {
  const parsed = new URL(url, document.baseURI);
  parsed.hash = "";
  return parsed.href;
}

export function elapsedText(seconds) {
  if (seconds < 60) return `${seconds} s`;
  return `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, "0")} s`;
}

export function uploadText(sent, total) {
  const percent = total > 0 ? Math.min(100, Math.floor((sent / total) * 100)) : 0;
  return `Uploading ${(sent / MB).toFixed(1)} of ${(total / MB).toFixed(1)} MB (${percent}%)`;
}

// A form's own properties, read through the prototype: a field named "action", "method" or "dataset"
// (the generate form has action buttons, the sanity-check form a "method" radio) shadows them on the form.
function formProperty(form, name) {
  return Object.getOwnPropertyDescriptor(HTMLFormElement.prototype, name).get.call(form);
}

function submitButtons(form) {
  return [...formProperty(form, "elements")].filter((el) => el.type === "submit" && (el.tagName === "BUTTON" || el.tagName === "INPUT"));
}

// The live region, present from the start (an element added at the moment it speaks is often not read).
function statusFor(form) {
  let status = form.querySelector("[data-long-submit-status]");
  if (!status) {
    status = document.createElement("span");
    status.setAttribute("data-long-submit-status", "");
    const buttons = submitButtons(form);
    const last = buttons[buttons.length - 1];
    if (last && last.parentElement !== form) last.parentElement.append(status);
    else if (last) last.after(status);
    else form.append(status);
  }
  status.classList.add("long-submit-status");
  status.setAttribute("role", "status");
  status.setAttribute("aria-live", "polite");
  return status;
}

function prepare(root) {
  for (const form of root.querySelectorAll("form[data-long-submit]")) statusFor(form);
}

function stopClock() {
  if (clock) clearInterval(clock.timer);
  clock = null;
}

function startClock(element) {
  stopClock();
  const started = performance.now();
  const tick = () => { element.textContent = elapsedText(Math.floor((performance.now() - started) / 1000)); };
  tick();
  clock = { timer: setInterval(tick, 1000), element };
}

// Fill the form's status: an indeterminate or measured bar, the text, the counter.
function begin(form) {
  const status = statusFor(form);
  const bar = document.createElement("progress");
  bar.max = 1;
  const text = document.createElement("span");
  text.className = "long-submit-text";
  const counter = document.createElement("span");
  counter.className = "long-submit-clock";
  counter.setAttribute("aria-hidden", "true");
  status.replaceChildren(bar, text, " ", counter);
  status.classList.remove("failed");
  form.setAttribute("data-long-submit-busy", "");  // not aria-busy: that would hush the live region inside
  return { status, bar, text, counter };
}

function setButtons(form, disabled) {
  for (const button of submitButtons(form)) {
    if (disabled && !button.disabled) {
      button.disabled = true;
      button.dataset[DISABLED_BY_US] = "1";
    } else if (!disabled && button.dataset[DISABLED_BY_US]) {
      button.disabled = false;
      delete button.dataset[DISABLED_BY_US];
    }
  }
}

function reset(form, message = "") {
  stopClock();
  setButtons(form, false);
  form.removeAttribute("data-long-submit-busy");
  const status = statusFor(form);
  status.replaceChildren();
  status.classList.toggle("failed", Boolean(message));
  if (message) status.textContent = message;
}

function chosenFiles(form) {
  return [...form.querySelectorAll("input[type=file]")].flatMap((input) => [...(input.files || [])]);
}

function labelOf(form) {
  return (form.getAttribute("data-long-submit") || "").trim() || "Working…";
}

// ------------------------------------------------------------------ a normal post with a counter

function plain(form) {
  const ui = begin(form);
  ui.text.textContent = labelOf(form);
  startClock(ui.counter);
  // After the submit event, so the form (and the pressed button's name=value) is still sent.
  setTimeout(() => setButtons(form, true), 0);
}

// ------------------------------------------------------------------ an upload through XMLHttpRequest

function upload(form, submitter) {
  const action = stripHash(submitter && submitter.hasAttribute("formaction")
    ? submitter.formAction : formProperty(form, "action"));
  const method = (submitter && submitter.hasAttribute("formmethod")
    ? submitter.formMethod : formProperty(form, "method")).toUpperCase();
  const data = new FormData(form);
  if (submitter && submitter.name) data.append(submitter.name, submitter.value);
  const ui = begin(form);
  setButtons(form, true);
  ui.bar.value = 0;
  ui.text.textContent = uploadText(0, chosenFiles(form).reduce((sum, file) => sum + file.size, 0));

  const xhr = new XMLHttpRequest();
  let leaving = false;
  const redirected = () => Boolean(xhr.responseURL) && stripHash(xhr.responseURL) !== action;

  xhr.upload.addEventListener("progress", (event) => {
    if (!event.lengthComputable || event.total <= 0) return;
    ui.bar.value = event.loaded / event.total;
    ui.text.textContent = uploadText(event.loaded, event.total);
  });
  xhr.upload.addEventListener("load", () => {
    ui.bar.removeAttribute("value");  // the server is working: no measure of how far
    ui.text.textContent = labelOf(form);
    startClock(ui.counter);
  });
  xhr.addEventListener("readystatechange", () => {
    if (leaving || xhr.readyState !== XMLHttpRequest.HEADERS_RECEIVED || !redirected()) return;
    leaving = true;  // a redirect (to the report, say): go there; its body is not needed here
    const target = xhr.responseURL;
    xhr.abort();
    window.location.assign(target);
  });
  xhr.addEventListener("load", () => {
    if (leaving) return;
    if (redirected()) {
      leaving = true;
      window.location.assign(xhr.responseURL);
      return;
    }
    const type = xhr.getResponseHeader("Content-Type") || "";
    if (!type.includes("html")) {
      // Not a page (unexpected): let the browser handle a normal post of the form.
      reset(form);
      form.setAttribute("data-long-submit-plain", "");
      form.requestSubmit(submitter || undefined);
      return;
    }
    replaceDocument(xhr.responseText, xhr.responseURL);
  });
  const failed = () => {
    if (leaving) return;
    reset(form, "The upload did not get through (the connection was lost or refused): try again.");
  };
  xhr.addEventListener("error", failed);
  xhr.addEventListener("abort", failed);
  xhr.addEventListener("timeout", failed);

  xhr.open(method, action);
  xhr.send(data);
}

function moduleScripts(doc) {
  return [...doc.querySelectorAll("script[type=module][src]")].map((script) => stripHash(script.src));
}

// Show the answer as a navigation would. document.open() keeps this window, so the modules the page
// had already evaluated (they sit in its module map) would not run again for the new document: they
// are imported again under a fresh fragment, which makes them new module instances.
async function replaceDocument(html, url) {
  stopClock();
  const evaluated = new Set(moduleScripts(document));
  document.open();  // also drops every listener of the document and the window
  // `html` is this server's own rendered page for the form just posted (same origin, same CSP):
  // its templates escape model output and user text, so writing it is what loading it would do.
  document.write(html);
  document.close();
  if (url && stripHash(url) !== stripHash(window.location.href)) window.history.replaceState(null, "", url);
  if (document.readyState === "loading") {
    await new Promise((resolve) => document.addEventListener("DOMContentLoaded", resolve, { once: true }));
  }
  window.scrollTo(0, 0);
  listen();
  prepare(document);
  replacements += 1;
  for (const src of moduleScripts(document)) {
    if (src === SELF || !evaluated.has(src)) continue;  // this module is wired above; new ones ran already
    try {
      await import(`${src}#replaced-${replacements}`);
    } catch (error) {
      console.error(`long_submit: ${src} did not load again`, error);
    }
  }
}

// ------------------------------------------------------------------ wiring

function onSubmit(event) {
  const form = event.target;
  if (event[HANDLED] || !(form instanceof HTMLFormElement) || !form.matches("[data-long-submit]")) return;
  event[HANDLED] = true;  // a module imported twice listens twice; one of them acts
  if (event.defaultPrevented) return;  // cancelled (a data-confirm answered no)
  if (form.hasAttribute("data-long-submit-busy")) {
    event.preventDefault();  // already on its way
    return;
  }
  const submitter = event.submitter && event.submitter.form === form ? event.submitter : null;
  const plainOnce = form.hasAttribute("data-long-submit-plain");
  form.removeAttribute("data-long-submit-plain");
  const method = submitter && submitter.hasAttribute("formmethod") ? submitter.formMethod : formProperty(form, "method");
  const enctype = submitter && submitter.hasAttribute("formenctype") ? submitter.formEnctype : formProperty(form, "enctype");
  const multipart = method === "post" && enctype === "multipart/form-data";
  if (!plainOnce && multipart && chosenFiles(form).length) {
    event.preventDefault();
    upload(form, submitter);
  } else {
    plain(form);
  }
}

// Back to a page kept in the back/forward cache: it is no longer on its way.
function onPageShow(event) {
  if (!event.persisted) return;
  for (const form of document.querySelectorAll("form[data-long-submit]")) reset(form);
}

function listen() {
  document.addEventListener("submit", onSubmit);
  window.addEventListener("pageshow", onPageShow);
}

listen();
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", () => prepare(document), { once: true });
else prepare(document);
