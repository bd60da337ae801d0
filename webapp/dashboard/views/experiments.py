"""Experiments: the list, the new-experiment form, the quick experiment, and one experiment's pipeline page.

An experiment is the seeds' workflow as one object (baseline -> SFT when needed -> GRPO ->
held-out evaluation -> promotion gates); webapp.runs.services.experiments drives it. The form
validates with that module's own code, once (experiment_check: every setting, each stage's run
config), and starts what it checked (experiment_start), so the page accepts exactly what the API
accepts, and shows every error beside the field it is about (ExperimentError.errors names it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST
from pydantic import TypeAdapter, ValidationError

from training.config import RUN_CONFIG_SCHEMA
from webapp.common.bounds import Text, json_problem
from webapp.common.pagination import CursorError, Page
from webapp.dashboard.views.common import breadcrumbs_for, has_page, query_without_after
from webapp.datasets.selectors.datasets import dataset_in_project, dataset_version_rows
from webapp.projects.models import Project, Role
from webapp.projects.selectors.access import (
    get_object_or_404_for_user,
    get_project_or_404,
    has_role,
)
from webapp.runs.models import Experiment, ExperimentState, Run
from webapp.runs.selectors.checkpoints import ExperimentRow, experiment_list, experiments_for_page
from webapp.runs.selectors.experiment_delete import (
    experiments_being_deleted,
    pending_experiment_deletion,
)
from webapp.runs.selectors.models import model_choice_rows, project_model
from webapp.runs.selectors.runs import run_latest_jobs, runs_by_id_in
from webapp.runs.services.experiments import (
    DEFAULT_CONFIG,
    NUMBER_BOUNDS,
    PRESETS,
    QUICK_CONFIG,
    STAGE_KEYS,
    STAGE_ORDER,
    WAITING,
    ExperimentError,
    ExperimentPlan,
    experiment_check,
    experiment_config,
    experiment_create,
    experiment_inputs,
    experiment_start,
    preset_of,
    stage_plan,
)
from webapp.verifiers.selectors.verifiers import project_verifier, verifier_choice_rows

PAGE_SIZE = 50
CHOICES_LIMIT = 500  # datasets, verifiers and models offered in one select
MAX_REGRESSION_DATASETS = 50  # each one is two more evaluation runs
NAME_TEXT = TypeAdapter(Text(200, min_length=1))  # ExperimentIn.name's bound

STAGE_TITLES = {
    "common": "Shared",
    "baseline": "Baseline evaluation",
    "sft": "SFT",
    "grpo": "GRPO",
    "held_out": "Held-out evaluation",
}
STAGE_HELP = {
    "common": "Settings shared by every stage (each stage's own settings override them), "
              "e.g. max_tasks, max_completion_length, device.",
    "baseline": "Evaluates the model as it is on the dataset's held-out split: the numbers the gates compare against.",
    "sft": "Supervised fine-tuning on the dataset's reference answers, so the model learns the output format. "
           "Runs only when the baseline's valid-format rate is under the threshold; otherwise it is skipped.",
    "grpo": "Reinforcement learning with the verifier's rewards, starting from SFT's best checkpoint when SFT ran. "
            "Its best checkpoint (checkpoint_metric) becomes the candidate.",
    "held_out": "Evaluates the candidate on the held-out split, like the baseline.",
}
NUMBER_LABELS = {
    "sft_valid_format_threshold": "Run SFT when the baseline's valid-format rate is under",
    "success_margin": "Held-out success must beat the baseline's by more than",
    "latency_p95_max_ratio": "Candidate p95 latency at most this multiple of the baseline's",
    "unsafe_action_allowance": "Unsafe-action rate accepted even where the baseline's is lower",
}
NUMBER_STEPS = {"sft_valid_format_threshold": "0.01", "success_margin": "0.01", "latency_p95_max_ratio": "0.05",
                "unsafe_action_allowance": "0.01"}
FORM_FIELDS = ("name", "dataset", "verifier", "model", *STAGE_KEYS, *NUMBER_BOUNDS, "regression_datasets")


def _field_anchor(key: str) -> tuple[str, str]:
    """(label, element id) of a form field, for the error summary's links."""
    if key in STAGE_KEYS:
        return f"{STAGE_TITLES[key]} settings", f"cfg-{key}"
    if key in NUMBER_BOUNDS:
        return key, f"num-{key}"
    return key.replace("_", " ").capitalize(), f"exp-{key.replace('_', '-')}"


def _stage_text(value: dict) -> str:
    return json.dumps(value, indent=2)


def _preset_texts(preset: str) -> dict[str, str]:
    """Each stage textarea's text for a preset: the defaults, or the defaults with the preset merged in."""
    config = experiment_config(PRESETS[preset]) if preset in PRESETS else DEFAULT_CONFIG
    return {key: _stage_text(config[key]) for key in STAGE_KEYS}


def _preset_asked(value: str | None) -> str:
    return value if value in PRESETS else "default"


# ---------------------------------------------------------------------------------------
# The list
# ---------------------------------------------------------------------------------------


def stage_order(stages: dict) -> list[str]:
    """The stages an experiment has, in pipeline order (PostgreSQL's jsonb does not keep key order)."""
    regression = sorted(name for name in stages if name not in STAGE_ORDER)
    return [name for name in STAGE_ORDER if name in stages] + regression


def current_stage(state: str, stages: dict) -> str:
    """Where the pipeline stands: the stage it waits for, the stage that failed, or "gates" when done."""
    ordered = stage_order(stages)
    for name in ordered:
        if stages[name].get("state") == WAITING:
            return name
    failed = [name for name in ordered if stages[name].get("state") == "failed"]
    if failed:
        return failed[0]
    if state == ExperimentState.SUCCEEDED:
        return "gates"
    return ordered[-1] if ordered else "—"


@dataclass(frozen=True)
class ListRow:
    experiment: ExperimentRow
    stage: str
    stage_state: str
    gates_total: int
    gates_failed: list[str]


def _list_row(row: ExperimentRow) -> ListRow:
    stage = current_stage(row.state, row.stages)
    stage_state = row.stages.get(stage, {}).get("state", "") if stage != "gates" else ""
    failed = [str(g.get("gate", "?")) for g in row.gates if not g.get("passed")]
    return ListRow(row, stage, stage_state, len(row.gates), failed)


@login_required
def experiment_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    error = None
    try:
        page = experiment_list(project, after=request.GET.get("after") or None, limit=PAGE_SIZE)
    except CursorError as exc:
        page, error = Page(items=[], next_cursor=None), str(exc)
    rows = [_list_row(r) for r in page.items]
    deleting = experiments_being_deleted(project.pk, [r.experiment.id for r in rows])
    context = {
        "deleting": deleting,
        "project": project, "rows": rows, "page": page, "query": query_without_after(request), "list_error": error,
        "can_edit": has_role(request.user, project, Role.EDITOR),
        # Refreshed while one runs or is being deleted (it leaves the list when its deletion is done).
        "any_running": bool(deleting) or any(r.experiment.state == ExperimentState.RUNNING for r in rows),
    }
    if request.htmx:
        return render(request, "dashboard/experiments/_rows.html", context)
    context["breadcrumbs"] = breadcrumbs_for(project, ("Experiments", None))
    return render(request, "dashboard/experiments/list.html", context)


# ---------------------------------------------------------------------------------------
# The form
# ---------------------------------------------------------------------------------------


# Run-config keys a stage does not set, left out of the settings reference: the experiment's dataset,
# verifier and model rows supply them (and the start checkpoint init_checkpoint), and a request never
# gives a path. Documentation only: a problem's field comes from the problem itself.
FROM_THE_EXPERIMENT = frozenset({"dataset", "environment", "verifier", "reward", "model", "model_gguf_file",
                                 "init_checkpoint"})


def settings_reference() -> list[dict]:
    """training's run-config keys a stage may set, with their documentation (those the experiment supplies excluded)."""
    rows = []
    for key, spec in RUN_CONFIG_SCHEMA["properties"].items():
        if key in FROM_THE_EXPERIMENT:
            continue
        rows.append({"key": key, "group": spec.get("x-group") or "", "kinds": ", ".join(spec.get("x-kinds") or []),
                     "default": json.dumps(spec["default"]) if "default" in spec else "",
                     "description": spec.get("description", "")})
    return rows


def _choices(project: Project) -> dict:
    datasets = dataset_version_rows(project, CHOICES_LIMIT)
    verifiers = verifier_choice_rows(project, CHOICES_LIMIT)
    models = model_choice_rows(project, CHOICES_LIMIT)
    names = sorted({d["name"] for d in datasets})
    return {"datasets": datasets, "verifiers": verifiers, "models": models, "dataset_names": names}


def _initial_form(request: HttpRequest, choices: dict) -> dict:
    preset = _preset_asked(request.GET.get("preset"))
    first = lambda rows: str(rows[0]["id"]) if rows else ""  # noqa: E731
    return {
        "name": "", "dataset": first(choices["datasets"]), "verifier": first(choices["verifiers"]),
        "model": first(choices["models"]), "stages": _preset_texts(preset),
        "numbers": {key: str(DEFAULT_CONFIG[key]) for key in NUMBER_BOUNDS},
        "regression_datasets": [], "preset": preset,
    }


def _posted_form(request: HttpRequest) -> dict:
    post = request.POST
    return {
        "name": post.get("name", "").strip(), "dataset": post.get("dataset", ""), "verifier": post.get("verifier", ""),
        "model": post.get("model", ""), "stages": {key: post.get(key, "") for key in STAGE_KEYS},
        "numbers": {key: post.get(key, "").strip() for key in NUMBER_BOUNDS},
        "regression_datasets": post.getlist("regression_datasets"), "preset": _preset_asked(post.get("preset")),
    }


_ALLOWED_LIST = re.compile(r" \(allowed: [^)]*\)")


def _sentence(message: str) -> str:
    """The message as a sentence; training's list of every allowed key gives way to the page's reference."""
    message, shortened = _ALLOWED_LIST.subn("", message.strip())
    if shortened:
        message = message.rstrip(".") + (" " if message.endswith("?") else ". ") + \
            "The settings reference below lists every key"
    message = message[:1].upper() + message[1:]
    return message if message.endswith((".", "?", "!")) else message + "."


def _no_constants(name: str):
    raise ValueError(f"{name} is not valid JSON (write a number, or null)")


def _parse_stage(text: str) -> tuple[object, str | None]:
    """A textarea's JSON value, or why it is not one (with the line and column of a syntax error)."""
    if not text.strip():
        return {}, None  # empty: the stage keeps its defaults
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        return None, f"Not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
    except ValueError as exc:  # NaN / Infinity
        return None, _sentence(str(exc))
    except RecursionError:
        return None, "Not valid JSON: it nests too deeply."
    problem = json_problem(value)
    if problem:
        return None, _sentence(problem)
    return value, None


def _number(text: str):
    """A float where the text is one; otherwise the text itself, for experiment_config to refuse by name."""
    try:
        return float(text)
    except ValueError:
        return text


def _pick(rows: list[dict], raw: str, what: str, errors: dict, field: str):
    if not raw:
        errors[field] = f"Choose a {what}."
        return None
    match = next((row for row in rows if str(row["id"]) == raw), None)
    if match is None:
        errors[field] = f"There is no such {what} in this project; choose one from the list."
    return match


def _validate(project: Project, form: dict, choices: dict) -> tuple[dict, ExperimentPlan | None]:
    """(errors by field, the checked experiment to start); every error at once, not only the first."""
    errors: dict[str, str] = {}
    try:
        NAME_TEXT.validate_python(form["name"])
    except ValidationError as exc:
        errors["name"] = "Give the experiment a name." if not form["name"] else _sentence(
            exc.errors()[0]["msg"].removeprefix("Value error, ").removeprefix("text "))
    dataset = _pick(choices["datasets"], form["dataset"], "dataset", errors, "dataset")
    verifier = _pick(choices["verifiers"], form["verifier"], "verifier", errors, "verifier")
    model = _pick(choices["models"], form["model"], "model", errors, "model")
    if verifier is not None and verifier["latest"] is None:
        errors["verifier"] = f"Verifier {verifier['name']!r} has no version yet; save one first."

    overrides: dict = {}
    for key in STAGE_KEYS:
        value, problem = _parse_stage(form["stages"][key])
        if problem:
            errors[key] = problem
        else:
            overrides[key] = value
    for key in NUMBER_BOUNDS:
        overrides[key] = _number(form["numbers"][key])
    overrides["regression_datasets"] = form["regression_datasets"]
    unstorable = json_problem(form["regression_datasets"])
    if len(form["regression_datasets"]) > MAX_REGRESSION_DATASETS or unstorable:
        errors["regression_datasets"] = (f"Pick at most {MAX_REGRESSION_DATASETS} regression datasets."
                                         if not unstorable else _sentence(f"A name in {unstorable}"))
        overrides.pop("regression_datasets")
    plan = None
    try:
        if dataset and verifier and model and verifier["latest"] is not None:
            # Every setting and each stage's run config (common beneath the stage), checked once, all at once.
            plan = experiment_check(
                project=project, config=overrides, dataset=dataset_in_project(project, dataset["id"]),
                model=project_model(project, model["id"]),
                verifier_version=project_verifier(project, verifier["id"]).latest_version)
        else:
            experiment_config(overrides)  # each setting's type and range, without the rows to check stages with
    except ExperimentError as exc:
        for key, message in exc.errors.items():
            errors.setdefault(key if key in FORM_FIELDS else "form", _sentence(message))
    return errors, plan


@login_required
@require_http_methods(["GET", "POST"])
def experiment_new_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    choices = _choices(project)
    errors: dict[str, str] = {}
    if request.method == "POST":
        form = _posted_form(request)
        errors, plan = _validate(project, form, choices)
        if not errors and plan is not None:
            experiment = experiment_start(plan=plan, name=form["name"], actor=request.user)
            baseline = experiment.stages.get("baseline", {}).get("run")
            messages.success(request, f"Experiment {experiment.name!r} started"
                                      + (f": the baseline evaluation is queued as run {baseline}." if baseline
                                         else "."))
            return redirect("dashboard:experiment_detail", slug=slug, experiment_id=experiment.pk)
    else:
        form = _initial_form(request, choices)
    selected_dataset = next((d["name"] for d in choices["datasets"] if str(d["id"]) == form["dataset"]), None)
    regression = [{"name": n, "main": n == selected_dataset and n not in form["regression_datasets"]}
                  for n in choices["dataset_names"]]
    context = {
        "project": project, "form": form, "errors": errors, **choices,
        "regression_choices": regression,
        "regression_size": min(6, max(2, sum(not r["main"] for r in regression))),
        "stage_fields": {key: {"key": key, "title": STAGE_TITLES[key], "help": STAGE_HELP[key],
                               "text": form["stages"][key], "error": errors.get(key),
                               "rows": min(18, max(3, form["stages"][key].count("\n") + 2))} for key in STAGE_KEYS},
        "field_errors": [(_field_anchor(key), message) for key, message in errors.items() if key != "form"],
        "settings_reference": settings_reference(),
        "number_fields": {key: {"key": key, "label": NUMBER_LABELS[key], "value": form["numbers"][key],
                                "min": NUMBER_BOUNDS[key][0], "max": NUMBER_BOUNDS[key][1], "step": NUMBER_STEPS[key],
                                "default": DEFAULT_CONFIG[key], "error": errors.get(key)} for key in NUMBER_BOUNDS},
        "presets": {name: _preset_texts(name) for name in ("default", *PRESETS)},
        "links": {name: reverse(f"dashboard:{name}", args=[slug]) if has_page(f"dashboard:{name}") else ""
                  for name in ("dataset_list", "verifier_list")},
        "breadcrumbs": breadcrumbs_for(project, ("Experiments", reverse("dashboard:experiment_list", args=[slug])),
                                       ("New experiment", None)),
    }
    return render(request, "dashboard/experiments/new.html", context, status=400 if errors else 200)


# ---------------------------------------------------------------------------------------
# The quick experiment (the overview's button)
# ---------------------------------------------------------------------------------------

QUICK_NAME_MAX = 200  # Experiment.name's length
# What a quick experiment lacks, and where a person adds it.
WHERE_TO_ADD = {
    "dataset": "import or generate one in Datasets",
    "verifier": "add one in Verifiers and save a version of it",
    "model": "add one in Settings → Models",
}


def missing_message(missing: tuple[str, ...]) -> str:
    """Why the quick experiment cannot start: which of dataset / verifier / model is missing and where to add it."""
    things = [f"no {what}" + (" with a saved version" if what == "verifier" else "") for what in missing]
    listed = things[0] if len(things) == 1 else ", ".join(things[:-1]) + " and " + things[-1]
    steps = " ".join(f"{what.capitalize()}: {WHERE_TO_ADD[what]}." for what in missing)
    return f"A quick experiment needs a dataset, a verifier and a model, and this project has {listed} yet. {steps}"


@login_required
@require_POST
def experiment_quick(request: HttpRequest, slug: str) -> HttpResponse:
    """Start the whole pipeline with QUICK_CONFIG (what `crucible_experiment --quick` runs) and open its page."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    inputs = experiment_inputs(project)
    if inputs.missing:
        messages.error(request, missing_message(inputs.missing))
        return redirect("dashboard:project", slug=slug)
    name = f"quick · {inputs.dataset} · {inputs.model.name}"[:QUICK_NAME_MAX]
    try:
        experiment = experiment_create(project=project, name=name, dataset=inputs.dataset,
                                       verifier_version=inputs.verifier_version, model=inputs.model,
                                       actor=request.user, config=QUICK_CONFIG)
    except ExperimentError as exc:
        messages.error(request, f"The quick experiment could not start: {_sentence(str(exc))} "
                                "Adjust its settings in the form and start it from there.")
        return redirect(reverse("dashboard:experiment_new", args=[slug]) + "?preset=quick")
    messages.success(request, f"Quick experiment started on {inputs.dataset}, verifier "
                              f"{inputs.verifier_version.verifier.name} v{inputs.verifier_version.version} and "
                              f"model {inputs.model.name}: tiny stage sizes, minutes on a CPU once a worker runs it.")
    return redirect("dashboard:experiment_detail", slug=slug, experiment_id=experiment.pk)


# ---------------------------------------------------------------------------------------
# One experiment
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageView:
    key: str
    title: str
    state: str  # succeeded / skipped / failed / waiting, or "not started" / "not reached"
    run: Run | None
    progress: float | None
    run_status: str
    reason: str

    @property
    def label(self) -> str:
        """What the stage is doing now: a started stage says its run's state (queued, running), not "waiting"."""
        if self.state == WAITING and self.run_status:
            return "queued" if self.run_status == "draft" else self.run_status
        return self.state


def _stage_title(key: str) -> str:
    if key.startswith("regression:"):
        _, name, side = key.split(":", 2)
        return f"Regression {name}: {'baseline' if side == 'baseline' else 'candidate'}"
    return STAGE_TITLES.get(key, key)


def stage_views(experiment: Experiment) -> list[StageView]:
    """Every stage of the plan, in order, with its run and the run's job progress: two queries."""
    stages = experiment.stages
    plan = stage_plan(experiment)
    plan += [name for name in stage_order(stages) if name not in plan]
    run_ids = [info["run"] for info in stages.values() if info.get("run")]
    runs = runs_by_id_in(experiment.project, run_ids)
    jobs = run_latest_jobs(runs.values())
    views = []
    for key in plan:
        info = stages.get(key)
        if info is None:
            state = "not started" if experiment.state == ExperimentState.RUNNING else "not reached"
            views.append(StageView(key, _stage_title(key), state, None, None, "", ""))
            continue
        run = runs.get(info.get("run"))
        job = jobs.get(run.pk) if run else None
        views.append(StageView(key, _stage_title(key), info.get("state", ""), run,
                               job.progress if job and info.get("state") == WAITING else None,
                               run.status if run else "", info.get("reason", "")))
    return views


def _experiment_for(request: HttpRequest, slug: str, experiment_id: int) -> Experiment:
    return get_object_or_404_for_user(
        experiments_for_page(), request.user, Role.VIEWER, pk=experiment_id, project__slug=slug)


def _live_context(request: HttpRequest, experiment: Experiment) -> dict:
    config = experiment.config
    gates = experiment.gates or []
    return {
        "project": experiment.project, "experiment": experiment, "stages": stage_views(experiment),
        "running": experiment.state == ExperimentState.RUNNING, "gates": gates,
        "gates_failed": [g.get("gate") for g in gates if not g.get("passed")],
        "can_promote": has_role(request.user, experiment.project, Role.OWNER),
        "margin": config.get("success_margin"), "ratio": config.get("latency_p95_max_ratio"),
        "threshold": config.get("sft_valid_format_threshold"),
        "regression": config.get("regression_datasets") or [],
        "preset": preset_of(config), "new_url": reverse("dashboard:experiment_new", args=[experiment.project.slug]),
    }


@login_required
def experiment_detail_page(request: HttpRequest, slug: str, experiment_id: int) -> HttpResponse:
    experiment = _experiment_for(request, slug, experiment_id)
    context = _live_context(request, experiment)
    context.update(
        config_json=json.dumps(experiment.config, indent=2),
        can_edit=has_role(request.user, experiment.project, Role.EDITOR),
        deletion_job=pending_experiment_deletion(experiment),
        breadcrumbs=breadcrumbs_for(experiment.project,
                                    ("Experiments", reverse("dashboard:experiment_list", args=[slug])),
                                    (experiment.name, None)),
    )
    return render(request, "dashboard/experiments/detail.html", context)


@login_required
def experiment_live(request: HttpRequest, slug: str, experiment_id: int) -> HttpResponse:
    """The header, timeline, gates and candidate, swapped in by htmx every few seconds while it runs."""
    experiment = _experiment_for(request, slug, experiment_id)
    return render(request, "dashboard/experiments/_live.html", _live_context(request, experiment))
