"""New run: the schema-driven form, presets, clone from a run, the JSON view, launch."""

from __future__ import annotations

import json
from functools import partial

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from training.config import PRESETS
from webapp.common.bounds import unstorable_text_reason
from webapp.dashboard.run_form import (
    FORM,
    config_from_post,
    grouped_fields,
    raw_values_from_config,
    unknown_keys,
)
from webapp.dashboard.views.common import breadcrumbs_for
from webapp.datasets.selectors.datasets import dataset_in_project, newest_versions
from webapp.projects.models import Project, Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.runs.models import ModelSpec, RunKind
from webapp.runs.selectors.checkpoints import project_checkpoint, recent_checkpoints
from webapp.runs.selectors.models import project_model, project_models
from webapp.runs.selectors.runs import all_runs, recent_tokens_per_second
from webapp.runs.services.run_config import (
    QUEUE_REFERENCE,
    ConfigError,
    run_config_check,
    run_create,
)
from webapp.verifiers.selectors.verifiers import (
    flagged_versions,
    project_verifier_version,
    project_verifier_versions,
)

# run_config_check names linked rows by their API field; the form's inputs are named so.
LINK_INPUTS = {"verifier": "verifier_version", "model": "model_spec", "parent_checkpoint_id": "parent_checkpoint"}
PRESET_LABELS = {
    "smollm2_cpu_grpo": "CPU quick GRPO on SmolLM2-135M",
    "sft_format": "SFT for format (SmolLM2, ground-truth calls)",
    "seed_example": "The seeds' example (Nemotron-Nano-9B-v2, GRPO, LoRA)",
}
PRESET_HINTS = {
    # Measured with `python -m training run` on the demo's tasks on an idle 2-core CPU (docs/benchmarks.md).
    "smollm2_cpu_grpo": "about 9 min on 2 CPU cores",
}
"""What the preset button says besides its name: how long it takes where that was measured."""
PRESET_NOTES = {
    "smollm2_cpu_grpo": (
        "CPU quick GRPO checks the pipeline: 10 steps and 3 validations take about 9 minutes on 2 idle CPU cores. "
        "It is too short to learn, and from the base model, which rarely writes the tool-call format, its rewards "
        "stay near 0. To see learning, start GRPO from an SFT checkpoint (the SFT for format preset), or run an "
        "experiment with the Learning preset."
    ),
}


def _choices(project: Project) -> dict:
    """What the link selects offer: the newest version of each dataset, verifier versions, models, checkpoints."""
    return {
        "datasets": newest_versions(project),
        "verifier_versions": project_verifier_versions(project, limit=200),
        "flagged_versions": flagged_versions(project),  # latest sanity check under its agreement threshold
        "models": project_models(project),
        "checkpoints": recent_checkpoints(project, limit=200),
    }


def _pick(find, raw: str, label: str, errors: dict[str, str], field: str):
    """The row `find` answers for the id in `raw`, or None with an error beside `field`."""
    if not raw:
        return None
    obj = find(int(raw)) if raw.isdigit() and int(raw) < 2**63 else None
    if obj is None:
        errors[field] = f"Choose a {label} of this project."
    return obj


def _links(project: Project, data, errors: dict[str, str]) -> dict:
    return {
        "dataset": _pick(partial(dataset_in_project, project), data.get("dataset", ""), "dataset", errors,
                         "dataset"),
        "verifier_version": _pick(partial(project_verifier_version, project), data.get("verifier_version", ""),
                                  "verifier version", errors, "verifier_version"),
        "model": _pick(partial(project_model, project), data.get("model_spec", ""), "model", errors, "model_spec"),
        "parent_checkpoint": _pick(partial(project_checkpoint, project), data.get("parent_checkpoint", ""),
                                   "checkpoint", errors, "parent_checkpoint"),
    }


def _model_for_preset(project: Project, model: str | None) -> ModelSpec | None:
    """The project's model spec that a preset's model names (SmolLM2 presets find the offline GGUF)."""
    if not model:
        return None
    tail = model.lower().rsplit("/", 1)[-1]
    for spec in project_models(project):
        if spec.spec == model or tail in spec.spec.lower() or spec.spec.lower() in tail:
            return spec
    return None


def _start_values(request: HttpRequest, project: Project) -> tuple[dict, dict, list[str]]:
    """Initial inputs: from ?clone=<run>, ?preset=<name>, or empty (kind grpo)."""
    kind = request.GET.get("kind", "")
    top: dict = {"kind": kind if kind in RunKind.values else "grpo", "name": ""}
    notes: list[str] = []
    config: dict = {}
    clone = request.GET.get("clone", "")
    preset = request.GET.get("preset", "")
    if clone.isdigit() and int(clone) < 2**63:
        run = get_object_or_404_for_user(all_runs(), request.user, pk=int(clone), project=project)
        config = dict(run.config)
        top.update(name=f"{run.name} (copy)"[:200], kind=run.kind, dataset=run.dataset_id or "",
                   verifier_version=run.verifier_version_id or "", model_spec=run.model_id or "",
                   parent_checkpoint=run.parent_checkpoint_id or "")
        notes.append(f"Cloned from run {run.pk} ({run.name}).")
    elif preset in PRESETS:
        config = {k: v for k, v in PRESETS[preset].items() if k not in ("kind",)}
        top.update(kind=PRESETS[preset].get("kind", "grpo"), name=PRESET_LABELS.get(preset, preset))
        if preset in PRESET_NOTES:
            notes.append(PRESET_NOTES[preset])
        spec = _model_for_preset(project, config.get("model"))
        if spec is not None:
            top["model_spec"] = spec.pk
            config.pop("model", None)
            notes.append(f"The preset's model {PRESETS[preset]['model']} is this project's model {spec.name}.")
    pairs = request.GET.get("preference_pairs", "")[:2000].strip()
    if top["kind"] == "dpo" and QUEUE_REFERENCE.match(pairs):  # from a review queue's "Train DPO on these pairs"
        config["preference_pairs"] = pairs
        notes.append("The preference pairs come from a review queue (written for the job when it starts): choose "
                     "the model and dataset, then launch.")
    return top, raw_values_from_config(config), notes


def _throughput(project: Project) -> float | None:
    """Tokens per second this project's runs measured lately (for the estimate), or None."""
    values = recent_tokens_per_second(project, limit=200)
    return sorted(values)[len(values) // 2] if values else None


def _render(request, project, *, top, values, errors, notes, status=200, config_json="") -> HttpResponse:
    context = {
        "config_json": config_json,
        "project": project, "top": top, "values": values, "errors": errors, "notes": notes,
        "general_errors": FORM.general_errors(errors),
        "groups": grouped_fields(), "kinds": RunKind.choices, "presets": [(key, label, PRESET_HINTS.get(key, "")) for key, label in PRESET_LABELS.items()], **_choices(project),
        "throughput": _throughput(project), "price": getattr(project, "price_per_device_hour", None),
        "breadcrumbs": breadcrumbs_for(project, ("Runs", reverse("dashboard:run_list", args=[project.slug])),
                                       ("New run", None)),
    }
    return render(request, "dashboard/runs/new.html", context, status=status)


def _top_from_post(data) -> dict:
    return {key: data.get(key, "") for key in ("name", "kind", "dataset", "verifier_version", "model_spec",
                                               "parent_checkpoint")}


def _load_json(request, project, top) -> HttpResponse:
    """'Load JSON into the form': the pasted config becomes the inputs (unknown keys are named)."""
    raw = request.POST.get("config_json", "")
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        return _render(request, project, top=top, values=config_from_post(request.POST)[2],
                       errors={"config_json": f"Not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."},
                       notes=[], status=422, config_json=raw)
    if not isinstance(config, dict):
        return _render(request, project, top=top, values={}, errors={"config_json": "Paste a JSON object."},
                       notes=[], status=422, config_json=raw)
    if isinstance(config.get("kind"), str) and config["kind"] in RunKind.values:
        top["kind"] = config["kind"]
    extra = unknown_keys(config)
    errors = {"config_json": f"Unknown key(s) {', '.join(extra)}: not loaded."} if extra else {}
    return _render(request, project, top=top, values=raw_values_from_config(config), errors=errors,
                   notes=["The JSON was loaded into the form; check it and launch."])


@login_required
def run_new(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    if request.method != "POST":
        top, values, notes = _start_values(request, project)
        return _render(request, project, top=top, values=values, errors={}, notes=notes)
    top = _top_from_post(request.POST)
    if request.POST.get("action") == "load_json":
        return _load_json(request, project, top)
    config, errors, values = config_from_post(request.POST)
    name = top["name"].strip()
    if not name or len(name) > 200 or unstorable_text_reason(name):
        errors["name"] = "Give the run a name (at most 200 characters, no NUL)."
    if top["kind"] not in RunKind.values:
        errors["kind"] = f"Choose one of {', '.join(RunKind.values)}."
    links = _links(project, request.POST, errors)
    if not errors:
        try:
            checked = run_config_check(config, project=project, kind=top["kind"], **links)
        except ConfigError as exc:  # each problem beside the input that holds its field
            errors = FORM.place({LINK_INPUTS.get(field, field): message for field, message in exc.by_field().items()})
    if errors:
        return _render(request, project, top=top, values=values, errors=errors, notes=[], status=422)
    with transaction.atomic():
        run, _job = run_create(name=name, checked=checked, actor=request.user)
    messages.success(request, f"Run {run.name} queued: a worker picks it up on the {_job.queue} queue.")
    return redirect("dashboard:run_detail", slug=slug, run_id=run.pk)
