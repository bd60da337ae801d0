// Experiments pages: the list's "n" key, and on the new-experiment form the stage-size presets
// (fill the stage textareas from QUICK_CONFIG or LEARNING_CONFIG) and the regression list without the main dataset.
// Page data comes from a json_script block; nothing is built with innerHTML.

function wireNewKey() {
  const link = document.querySelector("[data-key-new]");
  if (!link) return;
  document.addEventListener("crucible:key", (event) => {
    if (event.detail === "n") {
      event.preventDefault();
      window.location.assign(link.getAttribute("href"));
    }
  });
}

function normalised(text) {
  try {
    return JSON.stringify(JSON.parse(text));
  } catch {
    return text.trim();
  }
}

function wirePresets(presets) {
  const radios = [...document.querySelectorAll("input[data-preset]")];
  let current = (radios.find((r) => r.checked) || { value: "default" }).value;
  for (const radio of radios) {
    radio.addEventListener("change", () => {
      if (!radio.checked || !(radio.value in presets)) return;
      const to = presets[radio.value];
      const from = presets[current];
      const areas = [...document.querySelectorAll("textarea[data-stage]")];
      // Textareas still holding the previous preset change silently; edited ones only after asking.
      const edited = areas.filter((a) => {
        const key = a.dataset.stage;
        return normalised(a.value) !== normalised(from[key]) && normalised(a.value) !== normalised(to[key]);
      });
      if (edited.length && !window.confirm(
        `Replace what you typed in ${edited.map((a) => a.dataset.stage).join(", ")} with the ${radio.value} settings?`)) {
        radios.find((r) => r.value === current).checked = true;
        return;
      }
      for (const area of areas) {
        if (!(area.dataset.stage in to)) continue;
        area.value = to[area.dataset.stage];
        area.rows = Math.min(18, Math.max(3, area.value.split("\n").length + 1));
      }
      current = radio.value;
    });
  }
}

function wireRegression() {
  const main = document.querySelector("select[data-main-dataset]");
  const regression = document.querySelector("select[data-regression]");
  if (!main || !regression) return;
  const sync = () => {
    const chosen = main.selectedOptions[0];
    const name = chosen ? chosen.dataset.name : undefined;
    for (const option of regression.options) {
      const same = name !== undefined && option.value === name;
      option.hidden = same;
      option.disabled = same;
      if (same) option.selected = false;
    }
  };
  main.addEventListener("change", sync);
  sync();
}

function wire() {
  wireNewKey();
  const data = document.getElementById("experiment-presets");
  if (data) wirePresets(JSON.parse(data.textContent));
  wireRegression();
}

wire();
