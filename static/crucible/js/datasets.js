// Dataset pages: j / k / Enter through the task browser's rows, and the generate form's
// "Defaults" / "All train" template buttons. Text is never built into HTML.

import { rowKeys } from "./rows.js";

function wireTaskTable() {
  rowKeys([...document.querySelectorAll("table.tasks tbody tr[data-task]")], "td.task-id a");
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
