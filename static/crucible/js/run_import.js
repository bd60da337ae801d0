// The Import a run page: while the zip uploads and imports (one request), show that it is working.
const form = document.getElementById("run-import-form");
if (form) {
  form.addEventListener("submit", () => {
    const button = document.getElementById("run-import-submit");
    const progress = document.getElementById("run-import-progress");
    if (progress) progress.hidden = false;
    // Disabled after the submit event, so the form still sends; a second click cannot send it twice.
    if (button) setTimeout(() => { button.disabled = true; }, 0);
  });
}
