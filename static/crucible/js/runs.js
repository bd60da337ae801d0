// The runs table: Compare and Delete selected gather the ticked runs into ?ids=4,7,9.
const form = document.getElementById("compare-form");
if (form) {
  form.addEventListener("submit", (event) => {
    const ids = [...document.querySelectorAll(".compare-box:checked")].map((box) => box.value);
    const deleting = event.submitter && event.submitter.id === "delete-selected-button";
    const [low, high, what] = deleting ? [1, Number(event.submitter.dataset.max), "delete"] : [2, 10, "compare"];
    if (ids.length < low || ids.length > high) {
      event.preventDefault();
      window.alert(`Tick between ${low} and ${high} runs to ${what}.`);
      return;
    }
    document.getElementById("compare-ids").value = ids.join(",");
  });
}

// The compare page: "differences only" hides config rows whose values agree (kept in ?diff=).
const onlyDifferences = document.getElementById("differences-only");
if (onlyDifferences) {
  onlyDifferences.addEventListener("change", () => {
    document.getElementById("config-diff").classList.toggle("only-differences", onlyDifferences.checked);
    const url = new URL(window.location.href);
    url.searchParams.set("diff", onlyDifferences.checked ? "1" : "0");
    window.history.replaceState(null, "", url.toString());
  });
}

// The compare page: "group by seed" draws runs that differ only by seed as one mean line with
// a min-max band (kept in ?group=seed; the server groups them, so the page reloads).
const groupBySeed = document.getElementById("group-by-seed");
if (groupBySeed) {
  groupBySeed.addEventListener("change", () => {
    const url = new URL(window.location.href);
    if (groupBySeed.checked) url.searchParams.set("group", "seed");
    else url.searchParams.delete("group");
    window.location.assign(url.toString());
  });
}
