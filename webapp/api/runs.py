"""API for runs and their metric series (the run pages read the same selectors).

Viewers read; editors create, cancel and retry, set a run's tags and note (PATCH) and delete it (DELETE, a
job; owners only for a run people reviewed);
non-members get 404 on everything,
the series included. Field errors answer 422 as {"detail": message, "errors":
{field: message}}, the field named as the request names it (`config.learning_rate`,
`dataset`, `names`), so a form can show each error beside its field.
"""

from __future__ import annotations

import copy
import re
from datetime import datetime
from typing import Annotated, Any

from ninja import Field, Query, Router, Schema
from ninja.responses import Status

from training.config import RUN_CONFIG_SCHEMA
from webapp.api.errors import FieldErrorsOut, field_error, field_errors
from webapp.api.schemas import ErrorOut, JobOut, RunsDeletionOut
from webapp.common.bounds import (
    BIGINT_MAX,
    Choice,
    Count,
    Documented,
    JsonObject,
    LongText,
    RowId,
    Step,
    Text,
)
from webapp.common.pagination import MAX_PAGE, CursorError
from webapp.datasets.selectors.datasets import (
    dataset_named_version,
    first_dataset_names,
    newest_dataset_named,
)
from webapp.projects.models import Project, Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.runs.models import (
    MAX_RUN_TAGS,
    RUN_NOTE_LENGTH,
    RUN_TAG_LENGTH,
    RUN_TAG_PATTERN,
    Run,
    RunKind,
    RunStatus,
)
from webapp.runs.selectors.checkpoints import project_checkpoint
from webapp.runs.selectors.models import model_named, project_models
from webapp.runs.selectors.run_delete import run_delete_plan
from webapp.runs.selectors.runs import (
    CONFIG_COLUMNS,
    CONFIG_SORT_PREFIX,
    DEFAULT_RUN_SORT,
    RUN_SORTS,
    X_AXES,
    RunDetail,
    SeriesError,
    metric_names,
    metric_series,
    run_detail,
    run_headline_metrics,
    run_list,
    run_with_links,
    runs_by_id_in,
    runs_with_links,
)
from webapp.runs.selectors.seed_groups import seed_group_series
from webapp.runs.selectors.series import DEFAULT_BUCKETS
from webapp.runs.services.run_config import (
    PATH_KEYS,
    QUEUE_REFERENCE,
    ConfigError,
    run_config_check,
    run_create,
)
from webapp.runs.services.run_delete import RunDeleteRefused, run_delete_start
from webapp.runs.services.runs import (
    RunActionError,
    RunAnnotationError,
    run_annotate,
    run_cancel,
    run_retry,
)
from webapp.verifiers.selectors.verifiers import (
    verifier_named,
    verifier_names,
    verifier_version_numbered,
)

router = Router(tags=["runs"])

MAX_SERIES_NAMES = 20
METRIC_NAME_LENGTH = 128  # MetricPoint.name


# ---------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------


class RefIn(Schema):
    name: Text(200, min_length=1)
    version: Count | None = Field(None, description="A version number; omitted: the latest.")


def _request_config_schema() -> dict:
    """The run config's own schema, as a request may fill it: its keys and each key's values.

    A path never comes from a request (webapp.runs.services.run_config.PATH_KEYS): dataset,
    init_checkpoint and reviewed_trajectories may only be null there, preference_pairs names a
    review queue, and model_gguf_file is a .gguf file's name.
    """
    documented = copy.deepcopy({key: RUN_CONFIG_SCHEMA[key] for key in ("properties", "additionalProperties")})
    properties = documented["properties"]
    for key, instead in PATH_KEYS.items():
        if key == "preference_pairs":
            properties[key] = {"anyOf": [{"type": "null"}, {"type": "string", "pattern": REVIEW_QUEUE_REFERENCE}],
                               "description": f"A review queue of this project as \"review_queue:<id>\": {instead}."}
        else:
            properties[key] = {"type": "null", "description": f"Not from a request: {instead}."}
    gguf = properties.get("model_gguf_file")
    if gguf is not None:
        properties["model_gguf_file"] = {**gguf, "anyOf": [{"type": "null"},
                                                           {"type": "string", "pattern": GGUF_FILE_NAME}]}
    return documented


REVIEW_QUEUE_REFERENCE = QUEUE_REFERENCE.pattern
GGUF_FILE_NAME = r"^[^/~\\\u0000][^\u0000]*\.[gG][gG][uU][fF]$"
RUN_CONFIG_DOCUMENTED = _request_config_schema()


class RunIn(Schema):
    name: Text(200, min_length=1)
    kind: RunKind
    config: JsonObject = Field({}, description="A training run config (training/config.py's RUN_CONFIG_SCHEMA; "
                                               "its rules across fields are checked on creation).",
                               json_schema_extra=RUN_CONFIG_DOCUMENTED)
    dataset: Text(200, min_length=1) | RefIn | None = Field(None, description="A name, or {name, version}.")
    verifier: Text(200, min_length=1) | RefIn | None = Field(None, description="A name, or {name, version}.")
    model: Text(200, min_length=1) | None = Field(None, description="The name of one of the project's models.")
    parent_checkpoint_id: RowId | None = None


class RefOut(Schema):
    id: int
    name: str
    version: int


class RunOut(Schema):
    id: int
    name: str
    kind: str
    status: str
    stage: str
    dataset: RefOut | None
    verifier: RefOut | None
    model: str | None
    parent_checkpoint_id: int | None
    experiment_id: int | None
    created_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    headline: dict[str, float | None] = Field(description="Latest value per headline metric key (split/name).")
    tags: list[str] = Field(description="The run's tags, in lower case (set them with PATCH /runs/{id}).")
    note: str = Field(description="Free text about the run (set it with PATCH /runs/{id}).")


class RunPageOut(Schema):
    items: list[RunOut]
    next: str | None = Field(description="Pass as `after` for the next page; null on the last page.")


class CheckpointOut(Schema):
    id: int
    step: int
    kind: str
    storage_uri: str
    metrics: dict
    created_at: datetime


class RunDetailOut(RunOut):
    config: dict = Field(description="The config as submitted: only the fields the run set.")
    resolved_config: dict | None = Field(description=(
        "The config as launched: every field, training's defaults filled in as they were resolved when the "
        "run was created (or imported); null where that was not recorded."))
    job: JobOut | None = Field(description="The run's latest job: the one cancel and retry act on.")
    checkpoints: list[CheckpointOut]
    eta_seconds: float | None


class MetricNameOut(Schema):
    split: str
    name: str


class MetricNamesOut(Schema):
    names: list[MetricNameOut]


class SeriesOut(Schema):
    x: list[int | float] = Field(description="Steps (integers), seconds (x=wall) or tokens (x=tokens).")
    y: list[float]
    points: int = Field(description="Stored points in the requested range (before downsampling).")
    downsampled: bool


class SeriesSetOut(Schema):
    x: str
    split: str
    series: dict[str, SeriesOut]
    last_step: int | None = Field(description="Highest step returned (or the `since` sent): the next `since`.")


class GroupSeriesOut(Schema):
    x: list[int | float] = Field(description="Steps, or the mean x of the group's runs at each step (x=wall, x=tokens).")
    mean: list[float] = Field(description="Mean over the runs that have a point at that step.")
    min: list[float]
    max: list[float]
    n: list[int] = Field(description="How many of the group's runs have a point at that step.")
    points: int = Field(description="Stored points of all the runs in the request (before aggregation).")
    downsampled: bool


class GroupSeriesSetOut(Schema):
    x: str
    split: str
    runs: list[int] = Field(description="The runs aggregated, in the order given.")
    series: dict[str, GroupSeriesOut]


class RunFilters(Schema):
    kind: RunKind | None = None
    status: RunStatus | None = None
    dataset: Text(200) | None = Field(None, description="Dataset name (every version).")
    model: Text(200) | None = Field(None, description="Model name.")
    creator: Text(150) | None = Field(None, description="User name of whoever created the run.")
    experiment: RowId | None = None
    text: Text(200) | None = Field(None, description="Part of the run's name, note or one of its tags, any case.")
    tag: list[Text(200)] | None = Field(None, max_length=MAX_RUN_TAGS,
                                        description="Only runs having every one of these tags: repeat the parameter "
                                                    "(tag=a&tag=b) or give a comma list (tag=a,b); any case.")
    sort: Choice(*RUN_SORTS) = Field(DEFAULT_RUN_SORT, description=(
        f"One of {', '.join(s for s in RUN_SORTS if not s.lstrip('-').startswith(CONFIG_SORT_PREFIX))}, or "
        f"{CONFIG_SORT_PREFIX}<field> for a run config field the runs page can show as a column "
        f"({', '.join(column.key for column in CONFIG_COLUMNS)}); `-` first is descending. reward, validation "
        "and held_out sort by the latest train reward, validation success or held-out success as the runs page "
        "shows it (the run's own, else the latest evaluation of its checkpoints); a config field by the value the "
        "run was launched with (numbers by value; a default that does not apply to the run's kind is none). "
        "Runs without a value come last either way."))
    after: Text(2000) | None = Field(None, description="The `next` cursor of the previous page.")
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 50


# What _names_problem accepts: comma-separated names, the first not blank, each at most
# METRIC_NAME_LENGTH characters, at most MAX_SERIES_NAMES of them.
SERIES_NAMES_PATTERN = (rf"^\s*[^,\s\u0000][^,\u0000]{{0,{METRIC_NAME_LENGTH - 1}}}"
                        rf"(,[^,\u0000]{{0,{METRIC_NAME_LENGTH}}}){{0,{MAX_SERIES_NAMES - 1}}}$")


class SeriesQuery(Schema):
    names: Documented(MAX_SERIES_NAMES * (METRIC_NAME_LENGTH + 1), SERIES_NAMES_PATTERN, min_length=1) = Field(
        description=f"Metric names, comma-separated (at most {MAX_SERIES_NAMES}).")
    split: Text(32, min_length=1) = "train"
    x: Choice(*X_AXES) = Field("step", description="step, wall (seconds since the run's first point) or tokens.")
    since: Step | None = Field(None, description="Only points after this step (live pages append them).")
    buckets: Annotated[int, Field(ge=10, le=5000)] = DEFAULT_BUCKETS


# ---------------------------------------------------------------------------------------
# Reads
# ---------------------------------------------------------------------------------------


def _run_for(request, run_id: int, minimum: str = Role.VIEWER) -> Run:
    """The run if the user may act on it: 404 for non-members, 403 below `minimum`."""
    return get_object_or_404_for_user(runs_with_links(), request.user, minimum, pk=run_id)


def _run_out(run: Run, headline: dict[str, float | None]) -> dict[str, Any]:
    version = run.verifier_version
    return {
        "id": run.pk, "name": run.name, "kind": run.kind, "status": run.status, "stage": run.stage,
        "dataset": {"id": run.dataset.pk, "name": run.dataset.name, "version": run.dataset.version}
        if run.dataset else None,
        "verifier": {"id": version.pk, "name": version.verifier.name, "version": version.version} if version else None,
        "model": run.model.name if run.model else None, "parent_checkpoint_id": run.parent_checkpoint_id,
        "experiment_id": run.experiment_id, "created_by": run.created_by.username if run.created_by else None,
        "created_at": run.created_at, "started_at": run.started_at, "finished_at": run.finished_at,
        "headline": headline, "tags": [tag for tag in run.tags if isinstance(tag, str)] if isinstance(run.tags, list)
        else [], "note": run.note,
    }


def _detail_out(detail: RunDetail) -> dict[str, Any]:
    return {**_run_out(detail.run, detail.headline), "config": detail.run.config,
            "resolved_config": detail.run.resolved_config, "job": detail.job,
            "checkpoints": detail.checkpoints, "eta_seconds": detail.eta_seconds}


@router.get("/projects/{slug}/runs", response={200: RunPageOut, 400: FieldErrorsOut, 422: FieldErrorsOut})
def list_runs(request, slug: str, filters: Query[RunFilters]):
    """The project's runs, newest first by default; filters as on the runs page, keyset pages."""
    project = get_project_or_404(request.user, slug)
    if filters.sort not in RUN_SORTS:
        return field_error("sort", f"Unknown sort {filters.sort!r}; use one of {', '.join(RUN_SORTS)}.")
    values = filters.dict(exclude={"limit", "after", "sort"})
    try:
        page = run_list(project, **values, sort=filters.sort, after=filters.after, limit=filters.limit)
    except CursorError as exc:
        return field_error("after", str(exc), 400)
    headline = run_headline_metrics(page.items)
    return {"items": [_run_out(run, headline.get(run.pk, {})) for run in page.items], "next": page.next_cursor}


@router.get("/runs/{run_id}", response=RunDetailOut)
def get_run(request, run_id: RowId):
    """One run with its config, latest job, checkpoints, headline metrics and ETA."""
    return _detail_out(run_detail(_run_for(request, run_id)))


@router.get("/runs/{run_id}/metrics/names", response=MetricNamesOut)
def list_metric_names(request, run_id: RowId):
    """Every (split, name) the run has recorded, for the chart pickers."""
    run = _run_for(request, run_id)
    return {"names": [{"split": split, "name": name} for split, name in metric_names(run)]}


@router.get("/runs/{run_id}/metrics", response={200: SeriesSetOut, 400: FieldErrorsOut, 422: FieldErrorsOut})
def get_metric_series(request, run_id: RowId, query: Query[SeriesQuery]):
    """Chart data: per name, points of one split, downsampled so spikes survive.

    GET /runs/{id}/metrics?names=reward,kl&split=train&x=step&since=120&buckets=666 answers
    {"x": "step", "split": "train", "last_step": 180,
     "series": {"reward": {"x": [...], "y": [...], "points": 60, "downsampled": false}, "kl": {...}}}.
    x and y are the points to draw, in x order: a series of up to max(1,000, 3*buckets+1)
    points comes whole, a longer one as its first point plus each x bucket's min, max
    and last point, so a line through them keeps every spike; the default 666 buckets
    keep any series under 2,000 points. `points` counts the stored points the request
    matched, `downsampled` says whether some were left out. x is the step (integers),
    seconds since the run's first recorded point (x=wall; points without a time are
    left out) or tokens trained so far (x=tokens, the running sum of
    cost/trained_tokens; 400 naming that metric when the run has none). A name without
    points gets empty lists. A live page sends `since` = the previous `last_step` and
    appends each series' x and y to its traces; `last_step` stays `since` when nothing
    is new.
    """
    run = _run_for(request, run_id)
    if query.x not in X_AXES:
        return field_error("x", f"Unknown x axis {query.x!r}; use one of {', '.join(X_AXES)}.")
    names = list(dict.fromkeys(part.strip() for part in query.names.split(",") if part.strip()))
    problem = _names_problem(names)
    if problem:
        return field_error("names", problem)
    try:
        result = metric_series(run, names, query.split, x=query.x, since_step=query.since, buckets=query.buckets)
    except SeriesError as exc:
        return field_error("x", str(exc), 400)
    return result


# What the seed-group endpoint's `ids` accepts: 1 to MAX_GROUP_RUNS run ids, comma-separated.
MAX_GROUP_RUNS = 10
GROUP_IDS_PATTERN = rf"^ *[0-9]{{1,19}} *(, *[0-9]{{1,19}} *){{0,{MAX_GROUP_RUNS - 1}}}$"


class GroupSeriesQuery(Schema):
    ids: Documented(20 * MAX_GROUP_RUNS, GROUP_IDS_PATTERN, min_length=1) = Field(
        description=f"Run ids of this project, comma-separated (at most {MAX_GROUP_RUNS}).")
    names: Documented(MAX_SERIES_NAMES * (METRIC_NAME_LENGTH + 1), SERIES_NAMES_PATTERN, min_length=1) = Field(
        description=f"Metric names, comma-separated (at most {MAX_SERIES_NAMES}).")
    split: Text(32, min_length=1) = "train"
    x: Choice(*X_AXES) = Field("step", description="step, wall (seconds since each run's first point) or tokens.")
    buckets: Annotated[int, Field(ge=10, le=5000)] = DEFAULT_BUCKETS


@router.get("/projects/{slug}/runs/seed-groups/metrics",
            response={200: GroupSeriesSetOut, 400: FieldErrorsOut, 422: FieldErrorsOut},
            summary="Several runs' series as one group: mean, min and max per step")
def get_group_series(request, slug: str, query: Query[GroupSeriesQuery]):
    """Chart data of a seed group (runs that differ only by seed): per name and step, the mean,
    minimum and maximum over the runs that have a point at that step, and n, how many do.

    GET /projects/{slug}/runs/seed-groups/metrics?ids=4,7,9&names=reward&split=train&x=step answers
    {"x": "step", "split": "train", "runs": [4, 7, 9],
     "series": {"reward": {"x": [...], "mean": [...], "min": [...], "max": [...], "n": [...],
                           "points": 180, "downsampled": false}}}.
    The runs are aggregated as given (the compare page groups them with the same key the
    selector `seed_groups` computes). A step missing in some runs is aggregated over the runs
    that have it; on x=wall and x=tokens x is the mean of the runs' x at that step. Long series
    are downsampled as a single run's are, keeping each bucket's extremes of the mean and of
    the band. A run id that is not this project's is a 422 naming `ids`.
    """
    project = get_project_or_404(request.user, slug)
    if query.x not in X_AXES:
        return field_error("x", f"Unknown x axis {query.x!r}; use one of {', '.join(X_AXES)}.")
    if not re.fullmatch(GROUP_IDS_PATTERN, query.ids):
        return field_error("ids", f"Give 1 to {MAX_GROUP_RUNS} run ids, comma-separated, e.g. ids=4,7,9.")
    ids = list(dict.fromkeys(int(part) for part in query.ids.split(",")))
    names = list(dict.fromkeys(part.strip() for part in query.names.split(",") if part.strip()))
    problem = _names_problem(names)
    if problem:
        return field_error("names", problem)
    found = runs_by_id_in(project, [i for i in ids if i <= BIGINT_MAX])
    missing = next((i for i in ids if i not in found), None)
    if missing is not None:
        return field_error("ids", f"No run {missing} in this project.")
    try:
        return seed_group_series([found[i] for i in ids], names, query.split, x=query.x, buckets=query.buckets)
    except SeriesError as exc:
        return field_error("x", str(exc), 400)


def _names_problem(names: list[str]) -> str | None:
    if not names:
        return "Give at least one metric name, e.g. names=reward,kl."
    if len(names) > MAX_SERIES_NAMES:
        return f"At most {MAX_SERIES_NAMES} names per request, got {len(names)}; ask in several requests."
    long = next((name for name in names if len(name) > METRIC_NAME_LENGTH), None)
    if long:
        return f"Metric names are at most {METRIC_NAME_LENGTH} characters; {long[:40]!r}... is longer."
    return None


# ---------------------------------------------------------------------------------------
# Writes
# ---------------------------------------------------------------------------------------


class _BadReference(ValueError):
    """A body field names something this project does not have."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


AVAILABLE_NAMES = 20  # an unknown name's error lists at most this many that exist


def _available(names: list[str], what: str) -> str:
    return f"available: {', '.join(names)}" if names else f"this project has no {what} yet"


def _dataset(project: Project, ref: str | RefIn):
    name, version = (ref, None) if isinstance(ref, str) else (ref.name, ref.version)
    dataset = newest_dataset_named(project, name) if version is None else dataset_named_version(project, name, version)
    if dataset is None:
        latest = newest_dataset_named(project, name) if version is not None else None
        if latest is not None:
            raise _BadReference("dataset", f"Dataset {name!r} has no version {version} (latest: {latest.version}).")
        available = _available(first_dataset_names(project, AVAILABLE_NAMES), "datasets")
        raise _BadReference("dataset", f"No dataset named {name!r} in this project ({available}).")
    return dataset


def _verifier_version(project: Project, ref: str | RefIn):
    name, version = (ref, None) if isinstance(ref, str) else (ref.name, ref.version)
    verifier = verifier_named(project, name)
    if verifier is None:
        raise _BadReference("verifier", f"No verifier named {name!r} in this project "
                                        f"({_available(verifier_names(project)[:AVAILABLE_NAMES], 'verifiers')}).")
    found = verifier_version_numbered(verifier, version) if version is not None else verifier.latest_version
    if found is None:
        raise _BadReference("verifier", f"Verifier {name!r} has no version {version}." if version is not None
                            else f"Verifier {name!r} has no version yet; save its configuration first.")
    return found


def _links(project: Project, body: RunIn) -> dict[str, Any]:
    """The rows the body names, or _BadReference naming the field that names something missing."""
    links: dict[str, Any] = {}
    if body.dataset is not None:
        links["dataset"] = _dataset(project, body.dataset)
    if body.verifier is not None:
        links["verifier_version"] = _verifier_version(project, body.verifier)
    if body.model is not None:
        links["model"] = model_named(project, body.model)
        if links["model"] is None:
            names = [model.name for model in project_models(project, AVAILABLE_NAMES)]
            raise _BadReference("model", f"No model named {body.model!r} in this project "
                                         f"({_available(names, 'models')}).")
    if body.parent_checkpoint_id is not None:
        links["parent_checkpoint"] = project_checkpoint(project, body.parent_checkpoint_id)
        if links["parent_checkpoint"] is None:
            raise _BadReference("parent_checkpoint_id",
                                f"No checkpoint {body.parent_checkpoint_id} among this project's runs.")
    return links


@router.post("/projects/{slug}/runs", response={201: RunDetailOut, 422: FieldErrorsOut})
def create_run(request, slug: str, body: RunIn):
    """Validate the config as the run form does (once), save the run and queue its job (one transaction).

    Every problem of the config comes back at once, each under the field it is about: `config.<path>`
    (`config.verifier.name`), or the linked row's field when that row supplied the key.
    """
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    try:
        checked = run_config_check(body.config, project=project, kind=body.kind, **_links(project, body))
    except _BadReference as exc:
        return field_error(exc.field, str(exc))
    except ConfigError as exc:
        errors = {field: _invalid(message) for field, message in exc.by_field().items()}
        return field_error(*next(iter(errors.items()))) if len(errors) == 1 else field_errors(errors)
    run, _job = run_create(name=body.name, checked=checked, actor=request.user)
    return Status(201, _detail_out(run_detail(run_with_links(run.pk))))


def _invalid(message: str) -> str:
    return f"Invalid run config: {message}" + ("" if message.endswith((".", "?")) else ".")


class RunPatchIn(Schema):
    tags: list[Documented(200, RUN_TAG_PATTERN)] | None = Field(
        None, max_length=MAX_RUN_TAGS,
        description=f"Replaces the run's tags: at most {MAX_RUN_TAGS}, each 1 to {RUN_TAG_LENGTH} letters, digits, "
                    "spaces (inside) or - _ . : /; trimmed, inner spaces as one, kept in lower case, duplicates "
                    "dropped. [] removes every tag.")
    note: LongText | None = Field(None, description=f"Replaces the run's note: free text up to {RUN_NOTE_LENGTH:,} "
                                                   "characters (outer blank space trimmed). \"\" removes it.",
                                  json_schema_extra={"maxLength": RUN_NOTE_LENGTH})


@router.patch("/runs/{run_id}", response={200: RunDetailOut, 422: FieldErrorsOut}, summary="Set a run's tags or note")
def update_run(request, run_id: RowId, body: RunPatchIn):
    """Set the run's tags, its note, or both (editor); a field left out or null keeps its value.

    Both are checked before anything is saved: a refused request changes nothing and answers 422
    with each problem under its field (`tags`, `note`), the same checks and messages as the run
    page's form. The answer is the run, as GET /runs/{id} gives it.
    """
    run = _run_for(request, run_id, Role.EDITOR)
    try:
        run_annotate(run=run, actor=request.user, tags=body.tags, note=body.note)
    except RunAnnotationError as exc:
        return field_error(*next(iter(exc.errors.items()))) if len(exc.errors) == 1 else field_errors(exc.errors)
    return _detail_out(run_detail(run_with_links(run.pk)))


@router.post("/runs/{run_id}/cancel", response={200: RunDetailOut, 409: ErrorOut})
def cancel_run(request, run_id: RowId):
    """Cancel the run's job: at once if queued, at the worker's next heartbeat if running."""
    run = _run_for(request, run_id, Role.EDITOR)
    try:
        run_cancel(run=run)
    except RunActionError as exc:
        return Status(409, ErrorOut(detail=str(exc)))
    return _detail_out(run_detail(run_with_links(run.pk)))


@router.post("/runs/{run_id}/retry", response={200: RunDetailOut, 409: ErrorOut})
def retry_run(request, run_id: RowId):
    """Queue the run's failed or cancelled job again; it resumes from its last checkpoint."""
    run = _run_for(request, run_id, Role.EDITOR)
    try:
        run_retry(run=run)
    except RunActionError as exc:
        return Status(409, ErrorOut(detail=str(exc)))
    return _detail_out(run_detail(run_with_links(run.pk)))


# ---------------------------------------------------------------------------------------
# Deleting a run
# ---------------------------------------------------------------------------------------


class NamedRunOut(Schema):
    id: int
    name: str


class RunDeletionOut(RunsDeletionOut):
    run_id: int
    run_name: str
    evaluations: list[NamedRunOut] = Field(description="The evaluation runs of its checkpoints: they go with it.")


@router.get("/runs/{run_id}/deletion", response=RunDeletionOut, summary="What deleting a run would remove")
def get_run_deletion(request, run_id: RowId):
    """What DELETE /runs/{run_id} would remove (counts, files, the evaluations that go with it) and, when it
    cannot be deleted now, why: for the caller's role (an editor may not delete people's reviews)."""
    run = _run_for(request, run_id, Role.EDITOR)
    return run_delete_plan(run, actor=request.user).as_dict()


@router.delete("/runs/{run_id}", response={202: JobOut, 409: ErrorOut}, summary="Delete a run")
def delete_run(request, run_id: RowId):
    """Queue the deletion of the run and of the evaluation runs of its checkpoints: 202 with the job (GET
    /jobs/{id} follows it; its result says what was removed). The rows go in one transaction, then the
    folders. 409 when something keeps the run (a job still working on it, a promoted checkpoint, a run
    trained from it, an experiment, a verifier check, reviews for a non-owner), with what to do."""
    run = _run_for(request, run_id, Role.EDITOR)
    try:
        job = run_delete_start(run=run, actor=request.user)
    except RunDeleteRefused as exc:
        return Status(409, ErrorOut(detail=str(exc)))
    return Status(202, job)
