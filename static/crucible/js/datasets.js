// Dataset pages: j / k / Enter through the task browser's rows, and the generate form's
// "Defaults" / "All train" template buttons. Text is never built into HTML.

function wireTaskTable() {
  const rows = [...document.querySelectorAll("table.tasks tbody tr[data-task]")];
  if (!rows.length) return;
  let focused = -1;
  const focus = (index) => {
    if (focused >= 0) rows[focused].classList.remove("focused");
    focused = Math.max(0, Math.min(rows.length - 1, index));
    rows[focused].classList.add("focused");
    rows[focused].scrollIntoView({ block: "nearest" });
  };
  document.addEventListener("crucible:key", (event) => {
    const key = event.detail;
    if (key === "j") focus(focused + 1);
    else if (key === "k") focus(focused - 1);
    else if (key === "Enter" && focused >= 0) rows[focused].querySelector("td.task-id a")?.click();
    else return;
    event.preventDefault();
  });
}

function wireTemplateRoles() {
  for (const button of document.querySelectorAll("[data-roles]")) {
    button.addEventListener("click", () => {
      for (const row of document.querySelectorAll("table.template-roles tbody tr")) {
        const role = button.dataset.roles === "default" ? row.dataset.default : button.dataset.roles;
        const radio = row.querySelector(`input[type=radio][value="${role}"]`);
        if (radio) radio.checked = true;
      }
    });
  }
}

wireTaskTable();
wireTemplateRoles();
