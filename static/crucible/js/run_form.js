// The new-run form: the JSON view follows the inputs, groups that do not apply to the chosen
// kind are dimmed, and the estimate panel recomputes. The server validates everything again.

const form = document.getElementById("run-form");

function inputValue(input) {
  const raw = input.value.trim();
  if (raw === "") return undefined;
  const widget = input.dataset.widget;
  if (widget === "select") return raw === "true" ? true : raw === "false" ? false : raw;
  if (widget === "number") return Number(raw);
  if (widget === "json") {
    try {
      return JSON.parse(raw);
    } catch {
      return raw;
    }
  }
  return raw;
}

function currentConfig() {
  const config = {};
  for (const input of form.querySelectorAll("[data-config-key]")) {
    const value = inputValue(input);
    if (value !== undefined) config[input.dataset.configKey] = value;
  }
  return config;
}

function parsed(text) {
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

// What a key will be: what is typed, else the schema's default for the chosen kind
// (x-kind-defaults), else the schema's default; the server renders both on the input.
function effective(key) {
  const input = form.querySelector(`[data-config-key="${key}"]`);
  if (!input) return NaN;
  const value = inputValue(input);
  if (value !== undefined) return value;
  const kind = document.getElementById("id_kind").value;
  const byKind = parsed(input.dataset.kindDefaults);
  const fallback = byKind && byKind[kind] !== undefined ? byKind[kind] : parsed(input.dataset.default);
  return typeof fallback === "number" ? fallback : NaN;
}

function format(n) {
  return Number.isFinite(n) ? Math.round(n).toLocaleString("en") : "—";
}

function updateEstimate() {
  const panel = document.getElementById("estimate");
  const kind = document.getElementById("id_kind").value;
  const prompts = kind === "grpo" ? effective("num_prompts_per_step") : effective("micro_batch_size");
  const group = kind === "grpo" ? effective("num_generations_per_prompt") : 1;
  const rollouts = prompts * group;
  const perTurn = effective("max_completion_length");
  const turns = effective("max_turns");
  const tokensStep = kind === "grpo" ? rollouts * perTurn * turns : NaN;
  const steps = kind === "eval" ? 1 : effective("max_steps");
  const total = tokensStep * steps;
  const throughput = Number(panel.dataset.throughput);
  const price = Number(panel.dataset.price);
  const hours = throughput > 0 ? total / throughput / 3600 : NaN;
  // N processes share the device hours (one device each): the ideal wall clock is hours / N.
  const processes = Math.max(1, effective("num_processes"));
  const set = (name, text) => { panel.querySelector(`[data-estimate="${name}"]`).textContent = text; };
  set("prompts", format(prompts));
  set("rollouts", kind === "grpo" ? format(rollouts) : "—");
  set("tokens_step", format(tokensStep));
  set("tokens_total", format(total));
  set("hours", Number.isFinite(hours) ? hours.toFixed(2) : "—");
  set("processes", format(processes));
  set("wall_hours", Number.isFinite(hours) ? (hours / processes).toFixed(2) : "—");
  set("cost", Number.isFinite(hours) && price > 0 ? (hours * price).toFixed(2) : "—");
}

function updateKinds() {
  const kind = document.getElementById("id_kind").value;
  for (const field of form.querySelectorAll(".field[data-kinds]")) {
    const kinds = field.dataset.kinds.split(" ").filter(Boolean);
    field.classList.toggle("not-for-kind", kinds.length > 0 && !kinds.includes(kind));
  }
}

function updateJson() {
  document.getElementById("config-json").value = JSON.stringify(currentConfig(), null, 2);
}

if (form) {
  const refresh = () => { updateJson(); updateKinds(); updateEstimate(); };
  form.addEventListener("input", (event) => { if (event.target.id !== "config-json") refresh(); });
  form.addEventListener("change", (event) => { if (event.target.id !== "config-json") refresh(); });
  const json = document.getElementById("config-json");
  if (!json.value || json.value === "{}") updateJson();
  updateKinds();
  updateEstimate();
}
