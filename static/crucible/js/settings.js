// Project settings: the copy button beside a new API token's secret.
// <button data-copy="ID"> copies the text of #ID; <span data-copy-status="ID"> says what happened.
// The clipboard API needs a secure context (https or localhost) and the page's focus; where it is
// missing or refused, the secret is selected instead so that Ctrl+C / Cmd+C copies it.

function selectText(element) {
  const range = document.createRange();
  range.selectNodeContents(element);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}

function say(id, text) {
  const status = document.querySelector(`[data-copy-status="${CSS.escape(id)}"]`);
  if (status) status.textContent = text;
}

function fallback(id, element) {
  selectText(element);
  let copied = false;
  try {
    copied = document.execCommand("copy");  // old browsers and plain-http pages
  } catch {
    copied = false;
  }
  say(id, copied ? "Copied." : "Selected: press Ctrl+C (⌘C on a Mac) to copy.");
}

async function copy(button) {
  const id = button.dataset.copy;
  const element = document.getElementById(id);
  if (!element) return;
  const text = element.textContent.trim();
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      say(id, "Copied to the clipboard.");
      return;
    } catch {
      // Refused (no permission, no focus): fall through to selecting the text.
    }
  }
  fallback(id, element);
}

for (const button of document.querySelectorAll("button[data-copy]")) {
  button.addEventListener("click", () => { copy(button); });
}
// A click on the secret itself selects all of it (one click, then Ctrl+C).
for (const secret of document.querySelectorAll("code.secret")) {
  secret.addEventListener("click", () => selectText(secret));
}
