"""API for trajectories: production logging, re-scoring and turning failures into evals."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any

from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from webapp.api.errors import FieldErrorsOut, field_errors
from webapp.api.schemas import (
    EvalsIn,
    EvalsOut,
    ProductionBatchIn,
    ProductionBatchOut,
    RescoreIn,
    RescoreOut,
)
from webapp.common.bounds import (
    BIGINT_MAX,
    BIGINT_MIN,
    NUMBER_TEXT,
    STORABLE_TEXT_PATTERN,
    WHOLE_NUMBER_TEXT,
    YES_NO,
    Choice,
    Cursor,
    Documented,
    RowId,
    Text,
)
from webapp.common.pagination import MAX_PAGE, CursorError
from webapp.common.timeline import prompt_turns, turn_timeline
from webapp.datasets.selectors.datasets import newest_dataset_named
from webapp.projects.models import Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.runs.selectors.runs import all_runs
from webapp.runs.services.production_scoring import (
    ProductionLogError,
    production_trajectories_log,
)
from webapp.runs.services.rescore import rescore_start, trajectory_reverify
from webapp.trajectories.models import FAILURE_BUCKETS, Trajectory
from webapp.trajectories.selectors.trace import verifier_trace
from webapp.trajectories.selectors.trajectories import (
    FILTER_FIELDS,
    SEARCH_PATTERN,
    SOURCES,
    SPLITS,
    VERDICTS,
    FilterError,
    TrajectoryFilter,
    all_rescores,
    bucket_trajectories,
    rescore_results_of,
    same_task_elsewhere,
    selected_trajectories,
    trajectories_with_relations,
    trajectory_group,
    trajectory_page,
)
from webapp.trajectories.services.evals import tasks_from_trajectories
from webapp.trajectories.services.verification import env_task_of
from webapp.verifiers.models import Verifier
from webapp.verifiers.selectors.verifiers import (
    verifier_named,
    verifier_names,
    verifier_version_or_latest,
)

router = Router(tags=["trajectories"])


class TrajectoryRowOut(Schema):
    id: int
    run_id: int | None
    checkpoint_id: int | None
    task_key: str
    source: str
    split: str
    step: int
    sample_index: int
    group_id: str
    reward: float | None
    advantage: float | None
    passed: bool
    failure_bucket: str
    flags: list
    tokens_in: int
    tokens_out: int
    latency_ms: float | None
    created_at: datetime


class TrajectoryPageOut(Schema):
    items: list[TrajectoryRowOut]
    next: str | None = Field(description="Pass as `after` for the next page; null on the last page.")


class TrajectoryListOut(Schema):
    items: list[TrajectoryRowOut]


class VerifierRefOut(Schema):
    id: int
    name: str
    version: int


class TrajectoryDetailOut(TrajectoryRowOut):
    components: dict
    turns: list
    tool_calls: list
    task_snapshot: dict | None
    category: str
    verifier: VerifierRefOut | None
    timeline: list[dict] = Field(description="Turns in order; assistant calls with each argument checked against "
                                             "the tool's schema (ok, extra, mistyped; missing listed), tool outputs "
                                             "paired with their call.")
    trace: dict = Field(description="The verifier's trace: parse format and errors, expected against actual calls, "
                                    "workplace end-state diff rows.")
    rescores: list[dict]


class TrajectoryGroupOut(Schema):
    group_id: str
    run_id: int | None
    step: int
    task_key: str
    mean: float | None
    std: float | None = Field(description="Population std of the rewards (GRPO's normaliser).")
    no_gradient: bool = Field(description="Every sample has the same reward: the group gives no gradient.")
    samples: list[TrajectoryRowOut]


class RescoreResultOut(Schema):
    id: int
    rescore_id: int
    trajectory_id: int
    verifier: VerifierRefOut
    reward: float | None
    passed: bool
    failure_bucket: str
    components: dict
    error: str
    disagrees: bool = Field(description="Pass/fail or reward differs from the stored verdict (which is kept).")
    info: dict
    created_at: datetime


def _verifier(project, name: str) -> Verifier:
    verifier = verifier_named(project, name)
    if verifier is None:
        names = ", ".join(verifier_names(project)) or "none yet"
        raise HttpError(400, f"No verifier named {name!r} in this project (available: {names}).")
    return verifier


@router.post("/projects/{slug}/trajectories", response={201: ProductionBatchOut, 200: ProductionBatchOut})
def log_production(request, slug: str, body: ProductionBatchIn):
    """Log an agent's production runs; they are verified on the verify queue when `verifier` is given."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    verifier = _verifier(project, body.verifier) if body.verifier else None
    items = [t.to_item() for t in body.trajectories]
    try:
        result = production_trajectories_log(project=project, items=items, verifier=verifier)
    except ProductionLogError as exc:
        raise HttpError(400, str(exc)) from None
    out = ProductionBatchOut(created=result.created, verify_job_id=result.job.pk if result.job else None,
                             trajectories=result.trajectories)
    return Status(201 if result.created else 200, out)


WholeNumber = Documented(20, WHOLE_NUMBER_TEXT)


def filter_object_schema() -> dict:
    """What a review queue's `filter` object may hold: the list's filters, as text or as JSON scalars.

    The queue's service reads each value as its query-string form (a number, true/false, null
    for "any"), so each filter takes its query parameter's text, null, and the scalars whose text
    that parameter accepts; `after` and `limit` (paging) are dropped.
    """
    query = TrajectoryQuery.model_json_schema()["properties"]
    paging = {"type": ["string", "integer", "null"], "pattern": STORABLE_TEXT_PATTERN, "minimum": BIGINT_MIN,
              "maximum": BIGINT_MAX}
    properties = {"after": paging, "limit": paging}
    for name in FILTER_FIELDS:
        text = next(branch for branch in query[name]["anyOf"] if branch.get("type") == "string")
        branches = [text, {"type": "null"}]
        if text.get("pattern") == WHOLE_NUMBER_TEXT:
            branches.append({"type": "integer", "minimum": 0, "maximum": 999_999_999})
        elif text.get("pattern") == NUMBER_TEXT:
            branches.append({"type": "number", "minimum": -1e15, "maximum": 1e15})
        elif text.get("enum") == list(YES_NO):
            branches.append({"type": "boolean"})
        properties[name] = {"anyOf": branches}
    return {"type": "object", "properties": properties, "additionalProperties": False}


class TrajectoryQuery(Schema):
    """The trajectory list's filters: the same query parameters as the page's URL."""

    run: WholeNumber | None = Field(None, description="A run id.")
    run_id: WholeNumber | None = Field(None, description="Same as `run` (kept for older clients).")
    checkpoint: WholeNumber | None = Field(None, description="A checkpoint id.")
    step: WholeNumber | None = Field(None, description="One step.")
    step_min: WholeNumber | None = Field(None, description="Steps from (inclusive).")
    step_max: WholeNumber | None = Field(None, description="Steps to (inclusive); not below step_min.")
    split: Choice("", *SPLITS) | None = Field(None, description="train, validation, held_out or production.")
    source: Choice("", *SOURCES) | None = Field(None, description="run or production.")
    reward_min: Documented(40, NUMBER_TEXT) | None = Field(None, description="Reward at least.")
    reward_max: Documented(40, NUMBER_TEXT) | None = Field(None, description="Reward at most.")
    passed: Choice(*YES_NO) | None = Field(None, description="yes or no.")
    bucket: Choice("", *FAILURE_BUCKETS, "none") | None = Field(
        None, description="A failure bucket, or `none` for passed trajectories.")
    flag: Text(64) | None = Field(None, description="A flag the trajectory carries (e.g. truncated).")
    category: Text(200) | None = Field(None, description="The task's category.")
    reviewed: Choice(*YES_NO) | None = Field(None, description="yes or no: has at least one review.")
    verdict: Choice("", *VERDICTS) | None = Field(None, description="A reviewer's verdict: agree or disagree.")
    review_bucket: Choice("", *FAILURE_BUCKETS) | None = Field(None, description="A bucket a reviewer chose.")
    disagree: Choice(*YES_NO) | None = Field(None, description="yes: a re-score disagrees with the stored verdict.")
    rescore: WholeNumber | None = Field(None, description="Only trajectories of this re-score.")
    group: Text(64) | None = Field(None, description="A GRPO group id.")
    task: Text(200) | None = Field(None, description="Exactly this task key.")
    text: Text(200) | None = Field(None, description="Task key contains.")
    q: Documented(200, SEARCH_PATTERN) | None = Field(
        None, description="Full-text search: prompts, outputs and tool-call arguments contain this text (case "
                          "ignored; at least 3 characters). Combines with every other filter.")
    after: Cursor | None = Field(None, description="The `next` cursor of the previous page.")
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 100


def _trajectory_filter(query: TrajectoryQuery) -> TrajectoryFilter:
    values = query.dict(exclude={"after", "limit", "run_id"}, exclude_none=True)
    if query.run_id and not query.run:
        values["run"] = query.run_id
    return TrajectoryFilter.from_query(values)


@router.get("/projects/{slug}/trajectories",
            response={200: TrajectoryPageOut, 400: FieldErrorsOut, 422: FieldErrorsOut})
def list_trajectories(request, slug: str, query: Query[TrajectoryQuery]):
    """The project's trajectories, newest first, filtered like the trajectory page; keyset pages (`after`)."""
    project = get_project_or_404(request.user, slug)
    try:
        flt = _trajectory_filter(query)
    except FilterError as exc:
        return field_errors(exc.errors)
    try:
        page = trajectory_page(project, flt, after=query.after, limit=query.limit)
    except CursorError as exc:
        return field_errors({"after": str(exc)}, 400)
    return {"items": page.items, "next": page.next_cursor}


def _trajectory_for(request, trajectory_id: int, minimum: str = Role.VIEWER) -> Trajectory:
    return get_object_or_404_for_user(
        trajectories_with_relations(), request.user, minimum, pk=trajectory_id)


@router.get("/trajectories/{trajectory_id}", response=TrajectoryDetailOut)
def get_trajectory(request, trajectory_id: RowId):
    """One trajectory with its turns (each call checked against its tool's schema, outputs paired),
    the verifier's trace (expected against actual calls, parse errors, end-state diff) and its re-verifications."""
    trajectory = _trajectory_for(request, trajectory_id)
    task = env_task_of(trajectory)
    version = trajectory.verifier_version
    return {
        **_row(trajectory), "components": trajectory.components, "turns": trajectory.turns, "tool_calls": trajectory.tool_calls,
        "task_snapshot": trajectory.task_snapshot, "category": task.category if task else "",
        "verifier": {"id": version.pk, "name": version.verifier.name, "version": version.version} if version else None,
        "timeline": [asdict(turn) for turn in turn_timeline(
            trajectory.turns, task.tools if task else None, prompt_turns(trajectory.turns, task.messages if task else None))],
        "trace": _trace_out(verifier_trace(trajectory)),
        "rescores": [_rescore_result_out(r) for r in rescore_results_of(trajectory)],
    }


@router.get("/trajectories/{trajectory_id}/group", response=TrajectoryGroupOut)
def get_trajectory_group(request, trajectory_id: RowId):
    """The GRPO group of a trajectory: every sample of its prompt at its step, mean and std of the rewards,
    and whether the group gives no gradient (all rewards equal)."""
    trajectory = _trajectory_for(request, trajectory_id)
    group = trajectory_group(trajectory)
    return {"group_id": trajectory.group_id, "run_id": trajectory.run_id, "step": trajectory.step,
            "task_key": trajectory.task_key, "mean": group.mean, "std": group.std, "no_gradient": group.no_gradient,
            "samples": group.samples}


@router.get("/trajectories/{trajectory_id}/same-task", response=TrajectoryListOut)
def get_same_task(request, trajectory_id: RowId):
    """The same task's trajectories in other runs, checkpoints and steps (newest 20)."""
    return {"items": same_task_elsewhere(_trajectory_for(request, trajectory_id))}


@router.post("/trajectories/{trajectory_id}/reverify", response={201: RescoreResultOut})
def reverify_trajectory(request, trajectory_id: RowId, body: RescoreIn):
    """Verify one trajectory again with a verifier (its latest version, or `version`) now; the stored verdict
    is kept and the new one is returned (and listed with the trajectory)."""
    trajectory = _trajectory_for(request, trajectory_id, Role.REVIEWER)
    verifier = _verifier(trajectory.project, body.verifier)
    version = verifier_version_or_latest(verifier, body.version)
    if version is None:
        raise HttpError(400, f"Verifier {verifier.name!r} has no version {body.version}.")
    result = trajectory_reverify(trajectory=trajectory, verifier_version=version, actor=request.user)
    result.rescore.verifier_version = version
    return Status(201, _rescore_result_out(result))


def _row(t: Trajectory) -> dict[str, Any]:
    return {name: getattr(t, name) for name in TrajectoryRowOut.model_fields}


def _trace_out(trace) -> dict[str, Any]:
    return {
        "source": trace.source, "explanation": trace.explanation, "parse_format": trace.parse_format,
        "parse_errors": trace.parse_errors, "error": trace.error, "state_diff": trace.state_diff,
        "reward_parts": trace.reward_parts, "weights": trace.weights,
        "calls": [{"expected": p.expected, "actual": p.actual, "matches": p.matches,
                   "argument_diffs": p.argument_diffs} for p in trace.calls],
    }


def _rescore_result_out(result) -> dict[str, Any]:
    version = result.rescore.verifier_version
    return {"id": result.pk, "rescore_id": result.rescore_id, "trajectory_id": result.trajectory_id,
            "verifier": {"id": version.pk, "name": version.verifier.name, "version": version.version},
            "reward": result.reward, "passed": result.passed, "failure_bucket": result.failure_bucket,
            "components": result.components, "error": result.error, "disagrees": result.disagrees,
            "info": result.info, "created_at": result.rescore.created_at}


@router.post("/runs/{run_id}/rescore", response={201: RescoreOut})
def rescore_run(request, run_id: int, body: RescoreIn):
    """Score the run's stored trajectories with another verifier version; originals are kept."""
    run = get_object_or_404_for_user(all_runs(), request.user, Role.EDITOR, pk=run_id)
    verifier = _verifier(run.project, body.verifier)
    version = verifier_version_or_latest(verifier, body.version)
    if version is None:
        raise HttpError(400, f"Verifier {verifier.name!r} has no version {body.version}.")
    rescore = rescore_start(run=run, verifier_version=version, actor=request.user)
    return Status(201, RescoreOut(id=rescore.pk, run_id=run.pk, verifier_version_id=version.pk,
                                  job_id=rescore.job_id, summary=rescore.summary))


@router.get("/rescores/{rescore_id}", response=RescoreOut)
def get_rescore(request, rescore_id: int):
    rescore = get_object_or_404_for_user(all_rescores(), request.user, pk=rescore_id)
    return RescoreOut(id=rescore.pk, run_id=rescore.run_id, verifier_version_id=rescore.verifier_version_id,
                      job_id=rescore.job_id, summary=rescore.summary)


@router.post("/projects/{slug}/evals-from-trajectories", response={201: EvalsOut, 200: EvalsOut})
def evals_from_trajectories(request, slug: str, body: EvalsIn):
    """Turn failures into evals: chosen trajectories (or a run's whole bucket) become dataset tasks."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    dataset = newest_dataset_named(project, body.dataset)
    if dataset is None:
        raise HttpError(400, f"No dataset named {body.dataset!r} in this project.")
    if body.trajectory_ids:
        rows = selected_trajectories(project, body.trajectory_ids)
    elif body.run_id is not None and body.bucket:
        rows = bucket_trajectories(project, body.run_id, body.bucket)
    else:
        raise HttpError(400, "Say which trajectories: `trajectory_ids`, or `run_id` with `bucket`.")
    try:
        report = tasks_from_trajectories(trajectories=rows, dataset=dataset,
                                         split=body.split, actor=request.user)
    except ValueError as exc:
        raise HttpError(400, str(exc)) from None
    out = EvalsOut(dataset=report.dataset.name if report.dataset else None,
                   version=report.dataset.version if report.dataset else None, created=report.created,
                   duplicates=report.duplicates, skipped=report.skipped)
    return Status(201 if report.created else 200, out)
