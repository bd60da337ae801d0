"""The experiment pipeline: baseline -> SFT (only if needed) -> GRPO -> held-out eval -> gates.

`experiment_advance` recomputes where the pipeline stands from the stage runs'
states and takes the next step, under a row lock. Running it twice, or after a
worker restart, or from the periodic sweep and the job-completion hook at once,
changes nothing beyond what one run would: a stage is created only when it is
absent from `Experiment.stages`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from training.config import ConfigError
from webapp.datasets.models import TaskDataset
from webapp.projects.models import Project
from webapp.projects.services.webhooks import Notice, notify
from webapp.runs.models import (
    Checkpoint,
    Experiment,
    ExperimentState,
    MetricPoint,
    ModelSpec,
    Run,
    RunStatus,
)
from webapp.runs.services.run_config import CheckedRunConfig, run_config_check, run_create
from webapp.verifiers.models import Verifier, VerifierVersion

DEFAULT_CONFIG: dict = {
    "common": {},
    "baseline": {"kind": "eval", "eval_split": "held_out"},
    "sft": {"kind": "sft"},
    "grpo": {"kind": "grpo", "algorithm": "grpo"},
    "held_out": {"kind": "eval", "eval_split": "held_out"},
    # SFT runs only when the baseline follows the output format less often than this.
    "sft_valid_format_threshold": 0.5,
    # The candidate's held-out success must exceed the baseline's by more than this.
    "success_margin": 0.0,
    # The candidate's p95 latency may be at most this multiple of the baseline's.
    "latency_p95_max_ratio": 1.5,
    # Unsafe actions: the candidate's rate may not exceed the baseline's, or this rate where that is
    # higher. 0 is the strict rule; a baseline that never calls a tool is never unsafe, so a team whose
    # baseline cannot act states here the rate it accepts (the gate table shows it).
    "unsafe_action_allowance": 0.0,
    # Names of other datasets whose held-out split must not regress.
    "regression_datasets": [],
}
STAGE_ORDER = ("baseline", "sft", "grpo", "held_out")
SUCCEEDED, SKIPPED, FAILED, WAITING = "succeeded", "skipped", "failed", "waiting"


class ExperimentError(ValueError):
    """An experiment cannot be created or go on; `errors` says what, by the setting it is about.

    Keys name an experiment setting as the API's `config` and the form name it (a stage such as
    "grpo" or "common", a gate number, "regression_datasets"), or "" for the experiment as a
    whole; str() is every problem, a setting's as "config.<setting>: message".
    """

    def __init__(self, errors: str | dict[str, str]) -> None:
        self.errors = {"": errors} if isinstance(errors, str) else dict(errors)
        super().__init__("; ".join(f"config.{key}: {message}" if key else message
                                   for key, message in self.errors.items()))

    def __reduce__(self):
        return (type(self), (self.errors,))


# Small enough for a CPU demo: every stage runs, in minutes rather than hours
# (`crucible_experiment --quick`, the overview's "Quick experiment" button, the form's quick preset).
QUICK_CONFIG = {
    "common": {"max_tasks": 24, "max_completion_length": 64, "bf16": "auto", "device": "cpu"},
    "sft": {"kind": "sft", "max_steps": 6, "micro_batch_size": 4, "gradient_accumulation_steps": 1,
            "learning_rate": 1e-3, "eval_interval": 0, "checkpoint_interval": 6},
    "grpo": {"kind": "grpo", "algorithm": "dapo", "max_steps": 3, "num_prompts_per_step": 2,
             "num_generations_per_prompt": 4, "micro_batch_size": 8, "learning_rate": 2e-5,
             "eval_interval": 3, "checkpoint_interval": 3, "max_generation_batches": 1},
}

# The CPU recipe's stages (scripts/cpu_recipe.py at its documented settings; a test keeps them equal):
# the run that learns on a CPU. docs/training.md: 0% -> 52% (SFT) -> 65% (GRPO) held-out success on
# the recipe's reworded requests in one recording, 0% -> 51.5% -> 59% in the demo's example; about
# 1 h 30 min on 2 cores with AMX (bf16), several hours in fp32.
LEARNING_CONFIG = {
    "common": {"max_completion_length": 96, "bf16": "auto", "device": "cpu"},
    "sft": {"kind": "sft", "max_steps": 60, "num_epochs": 10, "micro_batch_size": 4,
            "gradient_accumulation_steps": 4, "learning_rate": 1e-3, "lr_scheduler": "cosine", "warmup_steps": 5,
            "eval_interval": 0, "checkpoint_interval": 0},
    "grpo": {"kind": "grpo", "algorithm": "dapo", "max_steps": 20, "num_prompts_per_step": 3,
             "num_generations_per_prompt": 8, "micro_batch_size": 8, "learning_rate": 1e-4,
             "lr_scheduler": "constant", "temperature": 1.0, "max_generation_batches": 3, "eval_interval": 0,
             "checkpoint_interval": 0},
}
PRESETS = {"quick": QUICK_CONFIG, "learning": LEARNING_CONFIG}


def preset_of(config: dict) -> str | None:
    """The preset ("quick", "learning") whose stage settings an experiment's config holds, else None:
    what its page says about what to expect from it."""
    for name, preset in PRESETS.items():
        if all(isinstance(config.get(stage), dict) and all(config[stage].get(k) == v for k, v in wanted.items())
               for stage, wanted in preset.items()):
            return name
    return None


# What the demo seed (webapp/runs/services/demo.py) names them: picked first when a project has them.
DEMO_DATASET = "workplace-json"
DEMO_VERIFIER = "exact tool call"
DEMO_MODEL = "SmolLM2-135M-Instruct (offline)"


@dataclass(frozen=True)
class ExperimentInputs:
    """The dataset version, verifier version and model an experiment would run on; `missing` names the absent ones."""

    dataset: TaskDataset | None
    verifier_version: VerifierVersion | None
    model: ModelSpec | None

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(what for what, obj in (("dataset", self.dataset), ("verifier", self.verifier_version),
                                            ("model", self.model)) if obj is None)


def _pick_name(queryset, name: str | None, demo: str) -> str | None:
    """The name asked for; without one, the demo seed's when present, else the most recently created one's."""
    if name is not None:
        return name
    if queryset.filter(name=demo).exists():
        return demo
    return queryset.order_by("-created_at", "-pk").values_list("name", flat=True).first()


def experiment_inputs(project: Project, *, dataset: str | None = None, verifier: str | None = None,
                      model: str | None = None) -> ExperimentInputs:
    """Pick what an experiment runs on: a dataset's newest version, a verifier's latest version, a model.

    A name picks exactly that one (None when the project has no such one, or the verifier no
    saved version). Without a name: the demo seed's (DEMO_*) when the project has it, else the
    most recently created one (for a verifier, the most recent one with a saved version).
    """
    datasets = TaskDataset.objects.filter(project=project)
    verifiers = Verifier.objects.filter(project=project, pk__in=VerifierVersion.objects.values("verifier_id"))
    models = ModelSpec.objects.filter(project=project)
    names = (_pick_name(datasets, dataset, DEMO_DATASET), _pick_name(verifiers, verifier, DEMO_VERIFIER),
             _pick_name(models, model, DEMO_MODEL))
    picked_verifier = verifiers.filter(name=names[1]).first() if names[1] is not None else None
    return ExperimentInputs(
        dataset=datasets.filter(name=names[0]).order_by("-version").first() if names[0] is not None else None,
        verifier_version=picked_verifier.latest_version if picked_verifier is not None else None,
        model=models.filter(name=names[2]).first() if names[2] is not None else None,
    )


STAGE_KEYS = ("common", "baseline", "sft", "grpo", "held_out")
# Gate thresholds: (lowest allowed, highest allowed) for each number.
NUMBER_BOUNDS = {
    "sft_valid_format_threshold": (0.0, 1.0),
    "success_margin": (-1.0, 1.0),
    "latency_p95_max_ratio": (0.0, 1000.0),
    "unsafe_action_allowance": (0.0, 1.0),
}


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value  # not NaN


def _config_shape_errors(overrides: dict) -> dict[str, str]:
    """Settings of the wrong type, by setting, before they are merged (a string where stage settings go, ...)."""
    if not isinstance(overrides, dict):
        return {"": "config: expected an object of experiment settings."}
    errors: dict[str, str] = {}
    unknown = set(overrides) - set(DEFAULT_CONFIG)
    if unknown:
        errors[""] = (f"Unknown experiment setting(s) {', '.join(sorted(map(str, unknown)))}; "
                      f"allowed: {', '.join(DEFAULT_CONFIG)}.")
    for key, value in overrides.items():
        if key in STAGE_KEYS and not isinstance(value, dict):
            errors[key] = f"expected an object of run settings, got {type(value).__name__}."
        if key in NUMBER_BOUNDS:
            low, high = NUMBER_BOUNDS[key]
            if not _is_number(value) or not low <= value <= high:
                errors[key] = f"expected a number from {low} to {high}, got {value!r}."
        if key == "regression_datasets" and not (
            isinstance(value, list) and all(isinstance(n, str) and 0 < len(n) <= 200 for n in value)
        ):
            errors[key] = "expected a list of dataset names."
    return errors


def _merged(overrides: dict) -> dict:
    merged = copy.deepcopy(DEFAULT_CONFIG)
    for key, value in overrides.items():
        if key in merged:
            merged[key] = {**merged[key], **value} if isinstance(merged[key], dict) else value
    return merged


def experiment_config(overrides: dict) -> dict:
    """The defaults with the overrides merged in, after checking each override's type and range
    (ExperimentError with every wrong one)."""
    errors = _config_shape_errors(overrides)
    if errors:
        raise ExperimentError(errors)
    return _merged(overrides)


@dataclass(frozen=True)
class ExperimentPlan:
    """An experiment checked once (experiment_check): its merged config and each stage's checked run config.

    The stages are checked with the experiment's dataset, verifier and model and no start checkpoint;
    a stage that starts later from a checkpoint (GRPO after SFT, the held-out evaluation) is checked
    again when it starts, with that checkpoint, in the process that starts it.
    """

    project: Project
    dataset: TaskDataset
    verifier_version: VerifierVersion
    model: ModelSpec
    config: dict
    stages: dict[str, CheckedRunConfig] = field(default_factory=dict)


def _blame(stage: str, problem_field: str, overrides: dict) -> str:
    """The setting a stage's run-config problem is about: "common" when its key came from there, else the stage."""
    key = problem_field.removeprefix("config.").split(".")[0]
    common, own = overrides.get("common"), overrides.get(stage)
    if isinstance(common, dict) and key in common and not (isinstance(own, dict) and key in own):
        return "common"
    return stage


def _add(errors: dict[str, str], key: str, message: str) -> None:
    seen = errors.get(key)
    errors[key] = message if seen is None or message in seen else f"{seen}; {message}"


def experiment_check(
    *, project: Project, dataset: TaskDataset, verifier_version: VerifierVersion, model: ModelSpec,
    config: dict | None = None,
) -> ExperimentPlan:
    """Check every setting and every stage's run config at once (ExperimentError with all of them), so a bad
    GRPO setting (or a path where the project's rows belong) fails the request, not stage three."""
    overrides = {} if config is None else config
    shape_errors = _config_shape_errors(overrides)
    if not isinstance(overrides, dict):
        raise ExperimentError(shape_errors)
    errors = dict(shape_errors)
    full = _merged({key: value for key, value in overrides.items() if key not in shape_errors})
    stages: dict[str, CheckedRunConfig] = {}
    for stage in STAGE_ORDER:
        if "common" in shape_errors or stage in shape_errors:
            continue
        run_config = {**full["common"], **full[stage]}
        try:
            stages[stage] = run_config_check(run_config, project=project, kind=run_config.get("kind", ""),
                                             dataset=dataset, verifier_version=verifier_version, model=model)
        except ConfigError as exc:
            for problem in exc.problems:
                _add(errors, _blame(stage, problem.field, overrides), problem.message)
    if "regression_datasets" not in shape_errors:
        for name_ in full["regression_datasets"]:
            if not TaskDataset.objects.filter(project=project, name=name_).exists():
                _add(errors, "regression_datasets", f"Regression dataset {name_!r} does not exist in this project.")
    if errors:
        raise ExperimentError(errors)
    return ExperimentPlan(project=project, dataset=dataset, verifier_version=verifier_version, model=model,
                          config=full, stages=stages)


def experiment_start(*, plan: ExperimentPlan, name: str, actor) -> Experiment:
    """Create the checked experiment and start its first stage (its run config as checked, not checked again)."""
    experiment = Experiment.objects.create(project=plan.project, name=name, dataset=plan.dataset,
                                           verifier_version=plan.verifier_version, model=plan.model,
                                           config=plan.config, created_by=actor)
    experiment_advance(experiment_id=experiment.pk, checked=plan.stages)
    experiment.refresh_from_db()
    return experiment


def experiment_create(
    *, project: Project, name: str, dataset: TaskDataset, verifier_version: VerifierVersion, model: ModelSpec,
    actor, config: dict | None = None,
) -> Experiment:
    """Check the experiment (ExperimentError with every problem) and start it: experiment_check, then experiment_start."""
    plan = experiment_check(project=project, dataset=dataset, verifier_version=verifier_version, model=model,
                            config=config)
    return experiment_start(plan=plan, name=name, actor=actor)


def _stage_config(experiment: Experiment, stage: str) -> dict:
    key = "baseline" if stage.startswith("regression:") and stage.endswith(":baseline") else stage
    key = "held_out" if stage.startswith("regression:") and stage.endswith(":candidate") else key
    return {**experiment.config["common"], **experiment.config[key]}


def _start_stage(experiment: Experiment, stage: str, *, parent: Checkpoint | None = None,
                 dataset: TaskDataset | None = None, checked: CheckedRunConfig | None = None) -> None:
    """Create the stage's run: from `checked` (the request's experiment_check) when the stage starts as it was
    checked (no start checkpoint, the experiment's dataset), else checked now, in this process."""
    if checked is None or parent is not None or dataset is not None:
        config = _stage_config(experiment, stage)
        checked = run_config_check(config, project=experiment.project, kind=config["kind"],
                                   dataset=dataset or experiment.dataset, verifier_version=experiment.verifier_version,
                                   model=experiment.model, parent_checkpoint=parent)
    run, _job = run_create(name=f"{experiment.name} · {stage}", checked=checked, actor=experiment.created_by)
    Run.objects.filter(pk=run.pk).update(experiment=experiment, stage=stage)
    experiment.stages[stage] = {"state": WAITING, "run": run.pk, "reason": ""}


def _skip(experiment: Experiment, stage: str, reason: str) -> None:
    experiment.stages[stage] = {"state": SKIPPED, "run": None, "reason": reason}


def run_metric(run_id: int, name: str, split: str) -> float | None:
    point = MetricPoint.objects.filter(run_id=run_id, name=name, split=split).order_by("-step").first()
    return point.value if point else None


def best_checkpoint(run_id: int, metric: str | None) -> Checkpoint | None:
    """The checkpoint with the best recorded `metric` (higher is better), else the latest."""
    checkpoints = list(Checkpoint.objects.filter(run_id=run_id).order_by("step"))
    scored = [c for c in checkpoints if metric and isinstance(c.metrics.get(metric), int | float)]
    if scored:
        return max(scored, key=lambda c: (c.metrics[metric], c.step))
    return checkpoints[-1] if checkpoints else None


def _stage_state(experiment: Experiment, stage: str) -> str | None:
    """The stage's state, refreshed from its run; None when the stage has not been created."""
    info = experiment.stages.get(stage)
    if info is None:
        return None
    if info["state"] != WAITING:
        return info["state"]
    run = Run.objects.get(pk=info["run"])
    if run.status == RunStatus.SUCCEEDED:
        info["state"] = SUCCEEDED
    elif run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        job = run.jobs.order_by("-id").first()
        info["state"] = FAILED
        info["reason"] = f"run {run.pk} {run.status}" + (f": {job.error}" if job and job.error else "")
    return info["state"]


def stage_plan(experiment: Experiment) -> list[str]:
    regression = [f"regression:{n}:{side}" for n in experiment.config["regression_datasets"]
                  for side in ("baseline", "candidate")]
    return [*STAGE_ORDER, *regression]


def _create(experiment: Experiment, stage: str, checked: dict[str, CheckedRunConfig]) -> None:
    """Create one stage, using what the earlier stages produced (`checked`: stage configs this request checked)."""
    stages = experiment.stages
    if stage == "baseline":
        _start_stage(experiment, stage, checked=checked.get(stage))
    elif stage == "sft":
        valid = run_metric(stages["baseline"]["run"], "valid_json_rate", "held_out")
        threshold = experiment.config["sft_valid_format_threshold"]
        if valid is not None and valid >= threshold:
            _skip(experiment, stage, f"baseline valid format rate {valid:.2f} >= threshold {threshold:.2f}")
        else:
            _start_stage(experiment, stage, checked=checked.get(stage))
    elif stage == "grpo":
        parent = None
        if stages["sft"]["state"] == SUCCEEDED:
            parent = best_checkpoint(stages["sft"]["run"], "validation/success_rate")
            if parent is None:
                raise ExperimentError("the SFT stage finished without a checkpoint")
        _start_stage(experiment, stage, parent=parent, checked=checked.get(stage))
    elif stage == "held_out" or stage.endswith(":candidate"):
        metric = _stage_config(experiment, "grpo").get("checkpoint_metric", "validation/success_rate")
        candidate = best_checkpoint(stages["grpo"]["run"], metric)
        if candidate is None:
            raise ExperimentError("the GRPO stage finished without a checkpoint")
        experiment.candidate_checkpoint = candidate
        dataset = _regression_dataset(experiment, stage)
        _start_stage(experiment, stage, parent=candidate, dataset=dataset)
    else:  # regression:<name>:baseline
        _start_stage(experiment, stage, dataset=_regression_dataset(experiment, stage))


def _regression_dataset(experiment: Experiment, stage: str) -> TaskDataset | None:
    if not stage.startswith("regression:"):
        return None
    name = stage.split(":")[1]
    return TaskDataset.objects.filter(project=experiment.project, name=name).order_by("-version").first()


@transaction.atomic
def experiment_advance(*, experiment_id: int, checked: dict[str, CheckedRunConfig] | None = None) -> Experiment:
    """Take the next step of the pipeline, if one is due (`checked`: stage configs experiment_check made in this
    request, used as they are when a stage starts as it was checked)."""
    experiment = Experiment.objects.select_for_update().get(pk=experiment_id)
    if experiment.state != ExperimentState.RUNNING:
        return experiment
    try:
        for stage in stage_plan(experiment):
            state = _stage_state(experiment, stage)
            if state is None:
                _create(experiment, stage, checked or {})
                if experiment.stages[stage]["state"] == SKIPPED:
                    continue
                break
            if state == WAITING:
                break
            if state == FAILED:
                _finish(experiment, ExperimentState.FAILED, f"stage {stage} failed: {experiment.stages[stage]['reason']}")
                break
        else:
            _finish_with_gates(experiment)
    except (ConfigError, ExperimentError) as exc:
        _finish(experiment, ExperimentState.FAILED, str(exc))
    experiment.save()
    return experiment


def _finish(experiment: Experiment, state: str, reason: str) -> None:
    experiment.state = state
    experiment.reason = reason
    experiment.finished_at = timezone.now()


@dataclass(frozen=True)
class Gate:
    name: str
    baseline: float | None
    candidate: float | None
    rule: str
    passed: bool

    def row(self) -> dict:
        return {"gate": self.name, "baseline": self.baseline, "candidate": self.candidate, "rule": self.rule,
                "passed": self.passed}


def promotion_gates(experiment: Experiment) -> list[Gate]:
    """Held-out success beats the baseline by the margin; no more unsafe actions than the baseline (or the
    allowance, where that is higher); latency within the ratio.

    latency_p95 is the evaluation's latency probe (training.evaluate): the split's first tasks
    run alone at batch size 1, so the gate compares the two models, not the batch sizes or
    prompt counts their evaluations happened to use.
    """
    base, cand = experiment.stages["baseline"]["run"], experiment.stages["held_out"]["run"]
    margin, ratio = experiment.config["success_margin"], experiment.config["latency_p95_max_ratio"]

    def metric(run_id: int, name: str, split: str = "held_out") -> float | None:
        return run_metric(run_id, name, split)

    b, c = metric(base, "success_rate"), metric(cand, "success_rate")
    gates = [Gate("held-out success", b, c, f"candidate > baseline + {margin}",
                  b is not None and c is not None and c > b + margin)]
    b, c = metric(base, "unsafe_action_rate"), metric(cand, "unsafe_action_rate")
    allowance = experiment.config.get("unsafe_action_allowance", 0.0)
    rule = f"candidate <= max(baseline, {allowance})" if allowance else "candidate <= baseline"
    gates.append(Gate("unsafe actions", b, c, rule, b is not None and c is not None and c <= max(b, allowance)))
    b, c = metric(base, "latency_p95"), metric(cand, "latency_p95")
    gates.append(Gate("latency p95", b, c, f"candidate <= {ratio} x baseline (batch-1 probe)",
                      b is not None and c is not None and c <= b * ratio))
    for name in experiment.config["regression_datasets"]:
        b = metric(experiment.stages[f"regression:{name}:baseline"]["run"], "success_rate")
        c = metric(experiment.stages[f"regression:{name}:candidate"]["run"], "success_rate")
        gates.append(Gate(f"regression: {name}", b, c, "candidate >= baseline",
                          b is not None and c is not None and c >= b))
    return gates


def _decide_gates(experiment: Experiment) -> str:
    """Run the gates, record their table and the finished state on `experiment` (not saved); the verdict in words."""
    gates = promotion_gates(experiment)
    experiment.gates = [g.row() for g in gates]
    experiment.gates_passed = all(g.passed for g in gates)
    verdict = "all gates passed" if experiment.gates_passed else "gates failed: " + ", ".join(
        g.name for g in gates if not g.passed)
    _finish(experiment, ExperimentState.SUCCEEDED, f"candidate {experiment.candidate_checkpoint}: {verdict}")
    return verdict


def _finish_with_gates(experiment: Experiment) -> None:
    verdict = _decide_gates(experiment)
    link = f"{settings.CRUCIBLE_PUBLIC_URL}/p/{experiment.project.slug}/experiments/{experiment.pk}/"
    notify(experiment.project, Notice(
        event="experiment.decided", link=link,
        subject=f"Experiment {experiment.name!r}: {verdict}",
        fields={"experiment_id": experiment.pk, "experiment_name": experiment.name,
                "gates_passed": experiment.gates_passed, "gates": experiment.gates}))


def experiment_record(
    *, project: Project, name: str, dataset: TaskDataset, verifier_version: VerifierVersion, model: ModelSpec,
    config: dict, runs: dict[str, Run], actor,
) -> Experiment:
    """A finished experiment made of runs that already ran (imported ones: the demo's example), its gates
    decided by promotion_gates from the runs' own numbers, as experiment_advance would have.

    `runs` maps each of STAGE_ORDER's stages to its finished run (sft may be missing: skipped);
    the candidate is the GRPO run's best checkpoint by the GRPO stage's checkpoint_metric. No
    webhook is sent: nothing was decided now. ExperimentError when a stage is missing or unfinished.
    """
    missing = [stage for stage in STAGE_ORDER if stage != "sft" and stage not in runs]
    unfinished = [stage for stage, run in runs.items() if run.status != RunStatus.SUCCEEDED]
    if missing or unfinished:
        raise ExperimentError(f"an experiment needs finished runs for every stage (missing: {missing or 'none'}, "
                              f"not succeeded: {unfinished or 'none'}).")
    merged = experiment_config(config)
    candidate = best_checkpoint(runs["grpo"].pk, merged["grpo"].get("checkpoint_metric", "validation/success_rate"))
    if candidate is None:
        raise ExperimentError("the GRPO stage's run has no checkpoint to be the candidate")
    stages = {stage: {"state": SUCCEEDED, "run": run.pk, "reason": ""} for stage, run in runs.items()}
    if "sft" not in runs:
        stages["sft"] = {"state": SKIPPED, "run": None, "reason": "no SFT run in this experiment"}
    with transaction.atomic():
        experiment = Experiment.objects.create(
            project=project, name=name, dataset=dataset, verifier_version=verifier_version, model=model,
            config=merged, stages=stages, candidate_checkpoint=candidate, created_by=actor)
        for stage, run in runs.items():
            Run.objects.filter(pk=run.pk).update(experiment=experiment, stage=stage)
        _decide_gates(experiment)
        # The runs' own times, so an imported experiment is not "created" after it finished.
        started = [run.started_at for run in runs.values() if run.started_at is not None]
        experiment.created_at = min(started, default=experiment.created_at)
        experiment.finished_at = runs["held_out"].finished_at or experiment.finished_at
        experiment.save()
    return experiment


def experiments_advance_all() -> int:
    """The periodic sweep: advance every running experiment (safety net for missed hooks)."""
    ids = list(Experiment.objects.filter(state=ExperimentState.RUNNING).values_list("pk", flat=True))
    for experiment_id in ids:
        experiment_advance(experiment_id=experiment_id)
    return len(ids)
