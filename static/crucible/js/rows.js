// Keyboard through a table's rows: j / k move a visible focus, Enter follows the row's link,
// and `extra` (key, row) handles any other key a page gives its rows (returns true if taken).

export function rowKeys(rows, linkSelector, extra = () => false) {
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
    else if (key === "Enter" && focused >= 0) rows[focused].querySelector(linkSelector)?.click();
    else if (!(focused >= 0 && extra(key, rows[focused]))) return;
    event.preventDefault();
  });
}
