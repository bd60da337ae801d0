"""Reads behind the checkpoints page and its API: the checkpoint table, aliases, experiments.

A page view and the matching API endpoint call the same function here and differ only in
how they answer (UI.md, "Where the code goes"). Every list is a keyset page
(webapp.common.pagination), and a page costs a fixed number of queries whatever its length:
the columns that live in other tables (aliases, the experiment that chose a checkpoint,
its baseline's held-out metrics, the run's retention rule) are read for the whole page
at once, never one query per row.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.fields.json import KeyTextTransform

from training.checkpoints import kept_steps
from training.config import RunConfig
from webapp.common.pagination import Page, keyset_page
from webapp.common.rows import described
from webapp.projects.models import Project
from webapp.runs.models import (
    AliasMove,
    Checkpoint,
    CheckpointAlias,
    Experiment,
    ExperimentState,
    MetricPoint,
    Run,
    RunKind,
    RunStatus,
)
from webapp.runs.services.paths import checkpoint_folder

VALIDATION_PREFIX = "validation/"
HELD_OUT_PREFIX = "held_out/"
HELD_OUT_SPLIT = "held_out"
VALIDATION_SPLIT = "validation"
_NEVER = datetime.min.replace(tzinfo=UTC)


# ---------------------------------------------------------------------------------------
# The checkpoint table
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateView:
    """The promotion gates as the table shows them.

    `state` follows webapp.runs.services.promotion.checkpoint_gate_status ("passed",
    "failed", "none") so the table never disagrees with what promotion will decide, plus
    "pending" where that function says "none" but a running experiment has already chosen
    the checkpoint as its candidate (its held-out evaluation is under way). `rows` are that
    experiment's gate rows: {gate, baseline, candidate, rule, passed}.
    """

    state: str
    experiment_id: int | None
    detail: str
    rows: list[dict]


NO_GATES = GateView("none", None, "no finished experiment chose it as its candidate, so no gates ran for it", [])


@dataclass(frozen=True)
class CheckpointRow:
    """One row of the checkpoint table.

    validation: the checkpoint's own `validation/*` metrics (recorded when it was saved),
    overlaid by the latest finished evaluation run of it on a validation split (a run started
    from it, as `manage.py import_run` ties an imported evaluation to the checkpoint it names).
    held_out: its held-out metrics: `held_out/*` from its own metrics, overlaid by its latest
    finished held-out evaluation run, and, when it is an experiment's candidate, by that
    experiment's held-out evaluation (the numbers the gates compared). baseline: the experiment's baseline held-out metrics; deltas:
    held_out - baseline for every metric both have. kept: whether the run's keep_top_k
    retention keeps its folder (training.checkpoints.kept_steps, the rule training applies: derived from the run's config and the
    recorded metrics, since nothing records the deletion itself). folder: whether this
    server holds its weights (webapp.runs.services.paths: "present", "gone", or "elsewhere" for a
    path outside its run's folder, e.g. an imported run's, kept as a record only).
    """

    id: int
    run_id: int
    run_name: str
    run_kind: str
    step: int
    kind: str
    storage_uri: str
    content_hash: str
    created_at: datetime
    validation: dict[str, float]
    held_out: dict[str, float]
    baseline: dict[str, float]
    deltas: dict[str, float]
    gates: GateView
    aliases: list[str]
    kept: bool = field(metadata=described(
        "The run's keep_top_k retention keeps this checkpoint's folder (derived from the run's config and "
        "recorded metrics)."))
    folder: str = field(metadata=described(
        "Whether this server holds the checkpoint's weights: present (downloadable), gone (deleted by retention) "
        "or elsewhere (its path is outside its run's folder on this server, e.g. an imported run's: kept as a "
        "record, never opened)."))


def checkpoint_table(project: Project, *, run: Run | None = None, after: str | None = None,
                     limit: int = 50) -> Page:
    """A keyset page of CheckpointRow: newest first, or by step (highest first) within one run.

    Raises webapp.common.pagination.CursorError for a cursor this list did not give out.
    """
    checkpoints = Checkpoint.objects.filter(run__project=project).select_related("run")
    if run is not None:
        checkpoints = checkpoints.filter(run=run)
    ordering = ["-step"] if run is not None else ["-id"]
    page = keyset_page(checkpoints, ordering=ordering, after=after, limit=limit)
    return Page(items=checkpoint_rows(page.items), next_cursor=page.next_cursor)


def checkpoint_detail(checkpoint: Checkpoint) -> CheckpointRow:
    """The table's row for one checkpoint (its detail page and GET /checkpoints/{id})."""
    return checkpoint_rows([checkpoint])[0]


def checkpoint_rows(checkpoints: list[Checkpoint]) -> list[CheckpointRow]:
    """Rows for these checkpoints (with `run` loaded) in at most four queries, whatever their number."""
    if not checkpoints:
        return []
    ids = [c.pk for c in checkpoints]
    aliases = _aliases_by_checkpoint(ids)
    chosen, measured = _measured_metrics(checkpoints)
    kept = _kept_steps({c.run_id: c.run for c in checkpoints})
    return [
        _row(c, experiment=chosen.get(c.pk), measured=measured[c.pk], aliases=aliases.get(c.pk, []),
             kept=kept.get(c.run_id, set()))
        for c in checkpoints
    ]


@dataclass(frozen=True)
class MeasuredMetrics:
    """A checkpoint's validation and held-out metrics and its experiment's baseline (see CheckpointRow)."""

    validation: dict[str, float]
    held_out: dict[str, float]
    baseline: dict[str, float]


def checkpoint_measured_metrics(checkpoints: list[Checkpoint]) -> dict[int, MeasuredMetrics]:
    """The checkpoint table's validation, held-out and baseline numbers per checkpoint id.

    Three queries whatever the number of checkpoints, and no look at their folders: what a
    page of runs needs to show the evaluations of their checkpoints.
    """
    return _measured_metrics(checkpoints)[1]


def _measured_metrics(checkpoints: list[Checkpoint]) -> tuple[dict[int, Experiment | None], dict[int, MeasuredMetrics]]:
    if not checkpoints:
        return {}, {}
    ids = [c.pk for c in checkpoints]
    chosen = {cid: _deciding_experiment(exps) for cid, exps in _experiments_by_candidate(ids).items()}
    held_out = _held_out_metrics_by_run(e for e in chosen.values() if e is not None)
    evaluations = _evaluations_by_checkpoint(ids)
    return chosen, {c.pk: _measured(c, chosen.get(c.pk), held_out, evaluations.get(c.pk, {})) for c in checkpoints}


def _measured(checkpoint: Checkpoint, experiment: Experiment | None, held_out: Mapping[int, dict[str, float]],
              evaluations: Mapping[str, dict[str, float]]) -> MeasuredMetrics:
    own = checkpoint.metrics if isinstance(checkpoint.metrics, dict) else {}
    candidate = {**_prefixed(own, HELD_OUT_PREFIX), **evaluations.get(HELD_OUT_SPLIT, {})}
    validation = {**_prefixed(own, VALIDATION_PREFIX), **evaluations.get(VALIDATION_SPLIT, {})}
    baseline: dict[str, float] = {}
    if experiment is not None:
        candidate = {**candidate, **held_out.get(_stage_run(experiment, "held_out"), {})}
        baseline = dict(held_out.get(_stage_run(experiment, "baseline"), {}))
    return MeasuredMetrics(validation=validation, held_out=candidate, baseline=baseline)


def _row(checkpoint: Checkpoint, *, experiment: Experiment | None, measured: MeasuredMetrics,
         aliases: list[str], kept: set[int]) -> CheckpointRow:
    validation, candidate, baseline = measured.validation, measured.held_out, measured.baseline
    deltas = {name: candidate[name] - baseline[name] for name in sorted(candidate.keys() & baseline.keys())}
    run = checkpoint.run
    return CheckpointRow(
        id=checkpoint.pk, run_id=run.pk, run_name=run.name, run_kind=run.kind, step=checkpoint.step,
        kind=checkpoint.kind, storage_uri=checkpoint.storage_uri, content_hash=checkpoint.content_hash,
        created_at=checkpoint.created_at, validation=validation, held_out=candidate,
        baseline=baseline, deltas=deltas, gates=gate_view(experiment), aliases=aliases,
        kept=checkpoint.step in kept, folder=checkpoint_folder(checkpoint)[1],
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _prefixed(metrics: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """The finite numbers among `metrics` whose name starts with `prefix`, the prefix removed."""
    return {k[len(prefix):]: float(v) for k, v in metrics.items() if k.startswith(prefix) and _is_number(v)}


def _aliases_by_checkpoint(ids: list[int]) -> dict[int, list[str]]:
    """Names of the aliases pointing at each checkpoint now: one query for the page."""
    found: dict[int, list[str]] = defaultdict(list)
    for checkpoint_id, name in (CheckpointAlias.objects.filter(checkpoint_id__in=ids).order_by("name")
                                .values_list("checkpoint_id", "name")):
        found[checkpoint_id].append(name)
    return found


def _experiments_by_candidate(ids: list[int]) -> dict[int, list[Experiment]]:
    """The experiments that chose each checkpoint as their candidate: one query for the page."""
    found: dict[int, list[Experiment]] = defaultdict(list)
    rows = Experiment.objects.filter(candidate_checkpoint_id__in=ids).only(
        "id", "name", "state", "stages", "gates", "gates_passed", "candidate_checkpoint_id", "finished_at")
    for experiment in rows:
        found[experiment.candidate_checkpoint_id].append(experiment)
    return found


def _newest_first(experiments: Iterable[Experiment]) -> list[Experiment]:
    # Sorted here, not in SQL: databases disagree on where a NULL finished_at sorts.
    return sorted(experiments, key=lambda e: (e.finished_at or _NEVER, e.pk), reverse=True)


def _deciding_experiment(experiments: list[Experiment]) -> Experiment | None:
    """The experiment whose verdict counts, as checkpoint_gate_status picks it, else a running one.

    A passed finished experiment wins; else the latest finished one (its gates failed);
    else the latest still running (gates pending); else none.
    """
    finished = _newest_first(e for e in experiments if e.state == ExperimentState.SUCCEEDED)
    passed = [e for e in finished if e.gates_passed]
    running = _newest_first(e for e in experiments if e.state == ExperimentState.RUNNING)
    return (passed or finished or running or [None])[0]


def gate_view(experiment: Experiment | None) -> GateView:
    """The gate column for the experiment `_deciding_experiment` chose (wording as promotion's)."""
    if experiment is None:
        return NO_GATES
    gates = list(experiment.gates or [])
    if experiment.state == ExperimentState.RUNNING:
        return GateView("pending", experiment.pk,
                        f"experiment {experiment.name!r} chose it as its candidate and is still evaluating it", gates)
    if experiment.gates_passed:
        return GateView("passed", experiment.pk, f"experiment {experiment.name!r} passed its gates", gates)
    names = ", ".join(g["gate"] for g in gates if not g.get("passed")) or "no gate passed"
    return GateView("failed", experiment.pk, f"experiment {experiment.name!r} failed its gates ({names})", gates)


def _evaluations_by_checkpoint(ids: list[int]) -> dict[int, dict[str, dict[str, float]]]:
    """Per checkpoint and split (validation, held_out): the metrics of its latest finished evaluation run.

    An evaluation run measures its config's eval_split (training's default split when the config
    names none); a later run of the same checkpoint and split wins. One query for the page.
    """
    default_split = RunConfig.__dataclass_fields__["eval_split"].default
    points = (MetricPoint.objects
              .filter(run__parent_checkpoint_id__in=ids, run__kind=RunKind.EVAL, run__status=RunStatus.SUCCEEDED,
                      split__in=(VALIDATION_SPLIT, HELD_OUT_SPLIT))
              .annotate(eval_split=KeyTextTransform("eval_split", "run__config"))
              .order_by("run_id", "step")
              .values_list("run__parent_checkpoint_id", "run_id", "eval_split", "split", "name", "value"))
    by_run: dict[tuple[int, str], dict[str, float]] = defaultdict(dict)
    checkpoint_of: dict[int, int] = {}
    for checkpoint_id, run_id, eval_split, split, name, value in points:
        if split == (eval_split or default_split):
            by_run[(run_id, split)][name] = value
            checkpoint_of[run_id] = checkpoint_id
    found: dict[int, dict[str, dict[str, float]]] = defaultdict(dict)
    for (run_id, split), metrics in sorted(by_run.items()):  # a later run of the same checkpoint and split wins
        found[checkpoint_of[run_id]][split] = dict(metrics)
    return found


def _stage_run(experiment: Experiment, stage: str) -> int | None:
    info = (experiment.stages or {}).get(stage) or {}
    return info.get("run")


def _held_out_metrics_by_run(experiments: Iterable[Experiment]) -> dict[int, dict[str, float]]:
    """Latest held-out value of every metric of the experiments' baseline and held-out runs.

    The same numbers services.experiments.run_metric gives the gates (latest step wins),
    read in one query for all experiments of the page.
    """
    run_ids = {r for e in experiments for r in (_stage_run(e, "baseline"), _stage_run(e, "held_out")) if r}
    found: dict[int, dict[str, float]] = defaultdict(dict)
    if not run_ids:
        return found
    points = (MetricPoint.objects.filter(run_id__in=run_ids, split=HELD_OUT_SPLIT).order_by("step")
              .values_list("run_id", "name", "value"))
    for run_id, name, value in points:
        found[run_id][name] = value
    return found


# Retention ------------------------------------------------------------------------------

_RUN_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)
                 if f.name in ("keep_top_k", "checkpoint_metric", "checkpoint_metric_mode")}


def _retention_rule(config: Mapping[str, Any]) -> tuple[int, str, str]:
    """(keep_top_k, checkpoint_metric, mode) of a run: its config, else training's defaults."""
    config = config if isinstance(config, dict) else {}
    keep = config.get("keep_top_k", _RUN_DEFAULTS["keep_top_k"])
    metric = config.get("checkpoint_metric", _RUN_DEFAULTS["checkpoint_metric"])
    mode = config.get("checkpoint_metric_mode", _RUN_DEFAULTS["checkpoint_metric_mode"])
    return (keep if isinstance(keep, int) and keep >= 1 else _RUN_DEFAULTS["keep_top_k"],
            str(metric), "min" if mode == "min" else "max")


def _kept_steps(runs: Mapping[int, Run]) -> dict[int, set[int]]:
    """Kept steps of each run on the page: one query for every checkpoint of those runs."""
    metrics_by_run: dict[int, dict[int, Any]] = defaultdict(dict)
    for run_id, step, metrics in Checkpoint.objects.filter(run_id__in=list(runs)).values_list(
            "run_id", "step", "metrics"):
        metrics_by_run[run_id][step] = metrics if isinstance(metrics, dict) else {}
    kept = {}
    for run_id, by_step in metrics_by_run.items():
        keep_top_k, metric, mode = _retention_rule(runs[run_id].config)
        kept[run_id] = kept_steps({s: m.get(metric) for s, m in by_step.items()}, keep_top_k=keep_top_k, mode=mode)
    return kept


# ---------------------------------------------------------------------------------------
# Aliases
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AliasRow:
    """An alias, where it points, and its latest move (who, when, forced, rollback)."""

    name: str
    checkpoint_id: int
    run_id: int
    run_name: str
    step: int
    updated_at: datetime
    moved_by: str | None
    moved_at: datetime | None
    forced: bool
    is_rollback: bool


def alias_list(project: Project, *, after: str | None = None, limit: int = 100) -> Page:
    """A keyset page of AliasRow by name; the latest move comes from subqueries, not a query per alias."""
    latest = AliasMove.objects.filter(alias=OuterRef("pk")).order_by("-moved_at", "-id")
    aliases = (CheckpointAlias.objects.filter(project=project).select_related("checkpoint__run")
               .annotate(last_by=Subquery(latest.values("moved_by__username")[:1]),
                         last_at=Subquery(latest.values("moved_at")[:1]),
                         last_forced=Subquery(latest.values("forced")[:1]),
                         last_rollback=Subquery(latest.values("is_rollback")[:1])))
    page = keyset_page(aliases, ordering=["name"], after=after, limit=limit)
    return Page(items=[_alias_row(a) for a in page.items], next_cursor=page.next_cursor)


def _alias_row(alias: CheckpointAlias) -> AliasRow:
    checkpoint = alias.checkpoint
    return AliasRow(name=alias.name, checkpoint_id=checkpoint.pk, run_id=checkpoint.run_id,
                    run_name=checkpoint.run.name, step=checkpoint.step, updated_at=alias.updated_at,
                    moved_by=alias.last_by, moved_at=alias.last_at, forced=bool(alias.last_forced),
                    is_rollback=bool(alias.last_rollback))


def alias_get(project: Project, name: str) -> CheckpointAlias | None:
    """The project's alias of that name, or None."""
    return CheckpointAlias.objects.filter(project=project, name=name).first()


@dataclass(frozen=True)
class AliasMoveRow:
    """One move of an alias: who pointed it from which checkpoint to which, when and why."""

    id: int
    moved_at: datetime
    moved_by: str | None
    to_checkpoint_id: int
    to_run_id: int
    to_run_name: str
    to_step: int
    from_checkpoint_id: int | None
    from_run_id: int | None
    from_run_name: str | None
    from_step: int | None
    is_rollback: bool
    forced: bool
    reason: str


def alias_history(alias: CheckpointAlias, *, after: str | None = None, limit: int = 50) -> Page:
    """A keyset page of AliasMoveRow, newest first, in one query (users and checkpoints joined)."""
    moves = AliasMove.objects.filter(alias=alias).select_related(
        "moved_by", "checkpoint__run", "previous_checkpoint__run")
    page = keyset_page(moves, ordering=["-moved_at"], after=after, limit=limit)
    return Page(items=[_move_row(m) for m in page.items], next_cursor=page.next_cursor)


def _move_row(move: AliasMove) -> AliasMoveRow:
    to, before = move.checkpoint, move.previous_checkpoint
    return AliasMoveRow(
        id=move.pk, moved_at=move.moved_at, moved_by=move.moved_by.username if move.moved_by else None,
        to_checkpoint_id=to.pk, to_run_id=to.run_id, to_run_name=to.run.name, to_step=to.step,
        from_checkpoint_id=before.pk if before else None, from_run_id=before.run_id if before else None,
        from_run_name=before.run.name if before else None, from_step=before.step if before else None,
        is_rollback=move.is_rollback, forced=move.forced, reason=move.reason,
    )


# ---------------------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExperimentRow:
    """An experiment with its stages, gate rows and candidate (run and step) for the list."""

    id: int
    name: str
    state: str
    reason: str
    stages: dict
    gates: list
    gates_passed: bool | None
    candidate_checkpoint_id: int | None
    candidate_run_id: int | None
    candidate_step: int | None
    created_by: str | None
    created_at: datetime
    finished_at: datetime | None


def experiment_list(project: Project, *, after: str | None = None, limit: int = 50) -> Page:
    """A keyset page of ExperimentRow, newest first, in one query."""
    experiments = Experiment.objects.filter(project=project).select_related("candidate_checkpoint", "created_by")
    page = keyset_page(experiments, ordering=["-created_at"], after=after, limit=limit)
    return Page(items=[_experiment_row(e) for e in page.items], next_cursor=page.next_cursor)


def _experiment_row(experiment: Experiment) -> ExperimentRow:
    candidate = experiment.candidate_checkpoint
    return ExperimentRow(
        id=experiment.pk, name=experiment.name, state=experiment.state, reason=experiment.reason,
        stages=experiment.stages, gates=experiment.gates, gates_passed=experiment.gates_passed,
        candidate_checkpoint_id=candidate.pk if candidate else None,
        candidate_run_id=candidate.run_id if candidate else None, candidate_step=candidate.step if candidate else None,
        created_by=experiment.created_by.username if experiment.created_by else None,
        created_at=experiment.created_at, finished_at=experiment.finished_at,
    )


# ---------------------------------------------------------------------------------------
# Lookups for the pages' and endpoints' access checks and forms
# ---------------------------------------------------------------------------------------


def checkpoints_with_run() -> QuerySet[Checkpoint]:
    """Every checkpoint with its run, for webapp.projects.selectors.access.get_object_or_404_for_user
    (project_field="run__project") to narrow to the caller's projects."""
    return Checkpoint.objects.select_related("run")


def checkpoints_with_run_and_project() -> QuerySet[Checkpoint]:
    """Every checkpoint with its run and the run's project (the checkpoint pages name both), for
    get_object_or_404_for_user to narrow to the caller's projects."""
    return Checkpoint.objects.select_related("run__project")


def recent_checkpoints(project: Project, limit: int = 200) -> list[Checkpoint]:
    """The project's newest `limit` checkpoints with their runs (the run form's parent checkpoint menu)."""
    return list(Checkpoint.objects.filter(run__project=project).select_related("run")
                .order_by("-created_at", "-id")[:limit])


def project_checkpoint(project: Project, checkpoint_id: int) -> Checkpoint | None:
    """The checkpoint with this id of one of the project's runs, or None (another project's is as absent as a
    missing one)."""
    return Checkpoint.objects.filter(run__project=project, pk=checkpoint_id).first()


def runs_with_checkpoints(project: Project, limit: int = 200) -> list[dict]:
    """{"id", "name"} of the project's latest `limit` runs that saved a checkpoint, newest first (the
    checkpoint list's run filter)."""
    return list(project.runs.filter(checkpoints__isnull=False).distinct().order_by("-id")
                .values("id", "name")[:limit])


def aliases_named(project: Project, names: list[str]) -> dict[str, CheckpointAlias]:
    """The project's aliases of these names, by name (alias_list gives rows; alias_history needs the alias)."""
    return {a.name: a for a in CheckpointAlias.objects.filter(project=project, name__in=names)}


def alias_names(project: Project, limit: int = 200) -> list[str]:
    """The names of the project's aliases, A to Z, at most `limit` (the promote form suggests them)."""
    return list(project.aliases.order_by("name").values_list("name", flat=True)[:limit])


def all_experiments() -> QuerySet[Experiment]:
    """Every experiment, for get_object_or_404_for_user to narrow to the caller's projects."""
    return Experiment.objects.all()


def experiments_for_page() -> QuerySet[Experiment]:
    """Every experiment with what its page shows beside it (project, dataset, verifier, model, creator, candidate
    checkpoint and its run), for get_object_or_404_for_user to narrow to the caller's projects."""
    return Experiment.objects.select_related("project", "dataset", "verifier_version__verifier", "model",
                                             "created_by", "candidate_checkpoint__run")


def running_experiments(project: Project, limit: int = 5) -> QuerySet[Experiment]:
    """The project's running experiments, newest first, at most `limit` (the overview's panel)."""
    return Experiment.objects.filter(project=project, state=ExperimentState.RUNNING).order_by("-created_at")[:limit]
