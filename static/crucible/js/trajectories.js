import { rowKeys } from "./rows.js";

// Trajectory pages: "show all" for folded text, row focus / ticking on the list, previous /
// next in the inspector, sample to sample in the group view. Text is never built into HTML.

function wireShowAll() {
  for (const button of document.querySelectorAll("[data-show-all]")) {
    button.addEventListener("click", () => {
      const text = button.previousElementSibling;
      if (text) text.classList.remove("folded");
      button.remove();
    });
  }
}

function tickedIds() {
  return [...document.querySelectorAll(".row-box:checked")].map((box) => box.value);
}

function updateSelection() {
  const ids = tickedIds();
  const count = document.getElementById("selection-count");
  if (count) count.textContent = ids.length ? `${ids.length} ticked` : "Tick rows to compare two or add them to a dataset.";
  const diff = document.getElementById("diff-selected");
  if (diff) {
    const ready = ids.length === 2;
    diff.setAttribute("aria-disabled", ready ? "false" : "true");
    diff.href = ready ? `${diff.dataset.diffBase}?a=${encodeURIComponent(ids[0])}&b=${encodeURIComponent(ids[1])}` : diff.dataset.diffBase;
  }
}

function wireList() {
  const rows = [...document.querySelectorAll("table.trajectories tbody tr[data-trajectory]")];
  if (!rows.length) return;
  for (const box of document.querySelectorAll(".row-box")) box.addEventListener("change", updateSelection);
  const all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", () => {
      for (const box of document.querySelectorAll(".row-box")) box.checked = all.checked;
      updateSelection();
    });
  }
  rowKeys(rows, "td.task-key a", (key, row) => {
    if (key !== "x") return false;
    const box = row.querySelector(".row-box");
    box.checked = !box.checked;
    updateSelection();
    return true;
  });
  updateSelection();
}

function follow(id) {
  const link = document.getElementById(id);
  if (link) window.location.assign(link.href);
}

function wireInspector() {
  if (!document.querySelector(".inspector")) return;
  document.addEventListener("crucible:key", (event) => {
    const key = event.detail;
    if (key === "j" || key === "ArrowRight") follow("next-trajectory");
    else if (key === "k" || key === "ArrowLeft") follow("previous-trajectory");
    else if (key === "G") follow("open-group");
  });
}

function wireGroup() {
  const samples = [...document.querySelectorAll(".group-view .sample")];
  if (!samples.length) return;
  let current = Math.max(0, samples.findIndex((s) => s.classList.contains("current")));
  document.addEventListener("crucible:key", (event) => {
    const step = { j: 1, ArrowRight: 1, k: -1, ArrowLeft: -1 }[event.detail];
    if (!step) return;
    current = Math.max(0, Math.min(samples.length - 1, current + step));
    samples[current].focus();
    samples[current].scrollIntoView({ block: "nearest", inline: "nearest" });
  });
}

wireShowAll();
wireList();
wireInspector();
wireGroup();
