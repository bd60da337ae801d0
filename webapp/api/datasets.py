"""API for datasets: versions with their counts, the task browser's keyset pages, one task, import
with the validation report (and a dry run), streamed export, split moves, synthetic generation and
deletion (a job: GET /datasets/{id}/deletion says what would go, DELETE queues it).

The same selectors and services as the datasets pages and `manage.py import_tasks`. Viewers read
and export; editors import, generate and move splits; non-members get 404 on everything. Field
errors answer 422 as {"detail", "errors": {field: message}}.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from django.http import StreamingHttpResponse
from django.http.multipartparser import MultiPartParserError
from django.utils.http import content_disposition_header
from ninja import Field, Query, Router, Schema
from ninja.responses import Status
from pydantic import ValidationError

from webapp.api.errors import FieldErrorsOut, field_errors
from webapp.api.schemas import ErrorOut, JobOut
from webapp.common.bounds import NAME_PATTERN, Choice, RowId, Text
from webapp.common.pagination import MAX_PAGE, CursorError
from webapp.datasets.models import Source, Split, TaskDataset
from webapp.datasets.selectors.datasets import (
    FilterError,
    TaskFilter,
    all_datasets,
    dataset_in_project,
    dataset_version,
    provenance_of,
    task_of,
    task_page,
    version_page,
)
from webapp.datasets.selectors.exports import EXPORT_FORMATS, export_filename, export_lines
from webapp.datasets.services.datasets import (
    DatasetConflict,
    dataset_name_format_problem,
    dataset_name_taken,
    ensure_stats,
)
from webapp.datasets.services.generation import (
    ENVIRONMENTS,
    PREVIEW_SIZE,
    GenerationError,
    default_roles,
    generate,
    generation_create,
    generation_spec,
    templates,
)
from webapp.datasets.services.imports import FORMATS as IMPORT_FORMATS
from webapp.datasets.services.imports import (
    ImportConflict,
    ImportFileError,
    ImportReport,
    import_check,
    import_create,
    import_target,
    upload_discard,
    upload_store,
)
from webapp.datasets.services.splits import SplitMoveError, dataset_split_move
from webapp.projects.models import Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.runs.selectors.dataset_delete import dataset_delete_plan
from webapp.runs.services.dataset_delete import DatasetDeleteRefused, dataset_delete_start
from webapp.trajectories.selectors.trajectories import trajectories_of_task

router = Router(tags=["datasets"])


# ---------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------


class DatasetStatsOut(Schema):
    tasks: int = 0
    split: dict[str, int] = {}
    category: dict[str, int] = {}
    source: dict[str, int] = {}


class DatasetVersionOut(Schema):
    id: int
    name: str
    version: int
    environment: str
    description: str
    content_hash: str
    parent_id: int | None
    parent_version: int | None
    lineage: str = Field(description="How the version was made: import, generation, trajectories, edit "
                                     "(empty when not recorded).")
    lineage_detail: dict = Field(description="File and format of an import, generator spec, split move.")
    stats: DatasetStatsOut
    created_by: str | None
    created_at: datetime


class DatasetVersionPageOut(Schema):
    items: list[DatasetVersionOut]
    next: str | None = Field(description="Pass as `after` for the next page; null on the last page.")


class TaskRowOut(Schema):
    id: int
    external_id: str
    category: str
    split: str
    source: str
    messages: list
    ground_truth: list | dict | str | int | float | bool | None
    origin_trajectory_id: int | None
    created_at: datetime


class TaskPageOut(Schema):
    items: list[TaskRowOut]
    next: str | None = Field(description="Pass as `after` for the next page; null on the last page.")


class TaskDetailOut(TaskRowOut):
    dataset_id: int
    tools: list
    metadata: dict
    content_hash: str
    provenance: dict = Field(description="Where the task came from: file and line, generator template and seed, "
                                         "source trajectory.")
    trajectories: list[int] = Field(description="Ids of the newest trajectories that ran it (at most 20).")


class ImportReportOut(Schema):
    filename: str
    size: int
    format: str = Field(description="crucible or nemo_gym (found from the rows unless chosen).")
    lines: int
    accepted: int
    rejected_count: int
    duplicate_count: int
    rejected: list[dict] = Field(description="{line, reason} of the first 500 rejected rows (a row holding NaN, "
                                             "Infinity or a number beyond ±1.8e308 anywhere is rejected, its "
                                             "reason naming the field).")
    duplicates: list[dict] = Field(description="{line, reason} of the first 500 duplicates skipped.")
    splits: dict[str, int]
    categories: dict[str, int]
    environment: str
    target: str
    parent_id: int | None
    parent_version: int | None
    parent_tasks: int
    no_ground_truth_count: int = Field(0, description="Accepted NeMo Gym rows without ground_truth.")
    no_ground_truth: list[int] = Field([], description="Their lines (the first 500).")
    warnings: list[str] = Field([], description="What was accepted but deserves a look (rows the workplace "
                                                "verifier cannot score).")
    dataset_id: int | None
    version: int | None
    seconds: float


# Where the tasks go, as the views require it: a version to add to (`dataset`), or a new
# dataset's name that is not blank; a generation's dry run needs neither (an import's does).
_EXISTING = {"required": ["dataset"], "properties": {"dataset": {"type": "integer"}}}
_NEW = {"required": ["name"], "properties": {"name": {"pattern": NAME_PATTERN}}}
IMPORT_TARGET = {"anyOf": [_EXISTING, _NEW]}
GENERATE_TARGET = {"anyOf": [_EXISTING, _NEW, {"required": ["dry_run"], "properties": {"dry_run": {"const": True}}}]}


class ImportForm(Schema):
    name: Text(200) = Field("", description="A new dataset of this name ...")
    dataset: RowId | None = Field(None, description="... or the id of a version: the new version is it plus the "
                                                    "file's new tasks.")
    format: Choice("auto", *IMPORT_FORMATS) = Field("auto", description="auto (found from the rows), crucible or "
                                                                        "nemo_gym.")
    split: Choice(*Split.values) = Field("train", description="Split of rows that name none (NeMo Gym rows never "
                                                              "do).")
    description: Text(10_000) = ""
    dry_run: bool = Field(False, description="Only the report: nothing is written.")


class ImportOut(Schema):
    dry_run: bool
    report: ImportReportOut
    dataset: DatasetVersionOut | None = None


class SplitMoveIn(Schema):
    to_split: Choice(*Split.values) = Field(description="train, validation or held_out.")
    split: Choice("", *Split.values) = Field("", description="Filter: tasks now in this split.")
    category: Text(64) = ""
    source: Choice("", *Source.values) = ""
    text: Text(200) = Field("", description="Filter: text in the messages.")


class SplitMoveOut(Schema):
    moved: int
    dataset: DatasetVersionOut


TemplateName = Choice(*(template.name for template in templates()))


class GenerateIn(Schema):
    model_config = {"json_schema_extra": GENERATE_TARGET}

    environment: Choice(*dict(ENVIRONMENTS)) = "workplace"
    n: Annotated[int, Field(ge=1, le=5_000)] = 50
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    train_templates: list[TemplateName] | None = Field(None, description="Omitted: the generator's training "
                                                                         "templates.")
    held_out_templates: list[TemplateName] | None = Field(None, description="Omitted: the generator's held-out "
                                                                            "templates (never one of the training "
                                                                            "ones; at least one in all).")
    name: Text(200) = Field("", description="A new dataset of this name ...")
    dataset: RowId | None = Field(None, description="... or the id of a version: the new version is it plus the "
                                                    "generated tasks it does not hold.")
    description: Text(10_000) = ""
    dry_run: bool = Field(False, description="Only the report and a preview of ten tasks.")


class GenerateOut(Schema):
    dry_run: bool
    report: dict = Field(description="The generator's validation: attempts, accepted, ground-truth refusals "
                                     "(with examples), duplicates, tasks per template and split.")
    preview: list[dict] = Field(description="The first ten tasks (dry run).")
    dataset: DatasetVersionOut | None = None


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


def _version_out(d: TaskDataset) -> dict:
    return {
        "id": d.pk, "name": d.name, "version": d.version, "environment": d.environment,
        "description": d.description, "content_hash": d.content_hash, "parent_id": d.parent_id,
        "parent_version": d.parent.version if d.parent_id and d.parent else None, "lineage": d.lineage,
        "lineage_detail": d.lineage_detail or {}, "stats": ensure_stats(d),
        "created_by": d.created_by.get_username() if d.created_by_id and d.created_by else None,
        "created_at": d.created_at,
    }


def _dataset_for(request, dataset_id: int, minimum: str = Role.VIEWER) -> TaskDataset:
    dataset = get_object_or_404_for_user(all_datasets(), request.user, minimum, pk=dataset_id)
    return dataset_version(dataset.project, dataset.pk)


# ---------------------------------------------------------------------------------------
# Reads
# ---------------------------------------------------------------------------------------


class VersionQuery(Schema):
    name: Text(200) | None = Field(None, description="Only the versions of this dataset.")
    after: Text(2000) | None = Field(None, description="The `next` cursor of the previous page.")
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 100


@router.get("/projects/{slug}/datasets", response={200: DatasetVersionPageOut, 400: FieldErrorsOut, 404: ErrorOut},
            summary="List dataset versions")
def list_datasets(request, slug: str, query: Query[VersionQuery]):
    """Every dataset version of the project by name, newest version first: content hash, parent, lineage,
    counts by split, category and source; keyset pages (`after`)."""
    project = get_project_or_404(request.user, slug)
    try:
        page = version_page(project, after=query.after, limit=query.limit, name=query.name or "")
    except CursorError as exc:
        return field_errors({"after": str(exc)}, 400)
    return {"items": [_version_out(d) for d in page.items], "next": page.next_cursor}


@router.get("/datasets/{dataset_id}", response={200: DatasetVersionOut, 404: ErrorOut}, summary="One dataset version")
def get_dataset(request, dataset_id: RowId):
    """A version with its counts and lineage."""
    return _version_out(_dataset_for(request, dataset_id))


class TaskQuery(Schema):
    split: Choice("", *Split.values) | None = Field(None, description="train, validation or held_out.")
    category: Text(64) | None = Field(None, description="Exactly this category.")
    source: Choice("", *Source.values) | None = Field(None, description="synthetic, human, production or imported.")
    text: Text(200) | None = Field(None, description="Text in the messages (case-insensitive).")
    after: Text(2000) | None = Field(None, description="The `next` cursor of the previous page.")
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 100


@router.get("/datasets/{dataset_id}/tasks",
            response={200: TaskPageOut, 400: FieldErrorsOut, 404: ErrorOut, 422: FieldErrorsOut},
            summary="List a version's tasks")
def list_tasks(request, dataset_id: RowId, query: Query[TaskQuery]):
    """The version's tasks in file order, filtered like the task browser (split, category, source, text in
    the messages); keyset pages (`after`)."""
    dataset = _dataset_for(request, dataset_id)
    try:
        flt = TaskFilter.from_query(query.dict(exclude={"after", "limit"}, exclude_none=True))
    except FilterError as exc:
        return field_errors(exc.errors)
    try:
        page = task_page(dataset, flt, after=query.after, limit=query.limit)
    except CursorError as exc:
        return field_errors({"after": str(exc)}, 400)
    return {"items": page.items, "next": page.next_cursor}


@router.get("/datasets/{dataset_id}/tasks/{task_id}", response={200: TaskDetailOut, 404: ErrorOut},
            summary="One task")
def get_task(request, dataset_id: RowId, task_id: RowId):
    """A task with its tools, ground truth, metadata, provenance and the trajectories that ran it."""
    dataset = _dataset_for(request, dataset_id)
    task = task_of(dataset, task_id)
    if task is None:
        return Status(404, ErrorOut(detail="No such task in this dataset version."))
    return {**{name: getattr(task, name) for name in TaskRowOut.model_fields}, "dataset_id": dataset.pk,
            "tools": task.tools, "metadata": task.metadata, "content_hash": task.content_hash,
            "provenance": provenance_of(task), "trajectories": [t.pk for t in trajectories_of_task(task).rows]}


@router.get("/datasets/{dataset_id}/export", response={200: None, 404: ErrorOut, 422: FieldErrorsOut},
            summary="Export a version as JSONL (streamed)",
            openapi_extra={"responses": {200: {"description": "One task per line, streamed as a file download.",
                                                 "content": {"application/x-ndjson": {}}}}})
def export_dataset(request, dataset_id: RowId, format: Choice(*EXPORT_FORMATS) = "crucible"):  # noqa: A002
    """Crucible JSONL ({"task", "trajectory": null, "result": null} per line) or NeMo Gym JSONL (task rows;
    a NeMo Gym import exports back as the rows imported). Streamed: any size, bounded memory."""
    dataset = _dataset_for(request, dataset_id)
    if format not in EXPORT_FORMATS:
        return field_errors({"format": f"Unknown format {format[:40]!r}; use crucible or nemo_gym."})
    response = StreamingHttpResponse(export_lines(dataset, format), content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(True, export_filename(dataset, format))
    response["X-Content-Type-Options"] = "nosniff"
    return response


# ---------------------------------------------------------------------------------------
# Writes
# ---------------------------------------------------------------------------------------


def _import_multipart() -> dict:
    """The multipart body of an import, declared by hand: the view reads it only after checking access."""
    form = ImportForm.model_json_schema()
    fields = {name: _as_form_field(schema) for name, schema in form["properties"].items()}
    properties = {"file": {"type": "string", "format": "binary",
                           "description": "The JSONL file (Crucible or NeMo Gym rows)."}, **fields}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
        "type": "object", "required": ["file"], "properties": properties, **IMPORT_TARGET}}}}}


_OPTIONAL = ("dataset", "dry_run")  # an empty form field here means "not given"


def _as_form_field(schema: dict) -> dict:
    """A nullable field as a form field: a form has no null, so "not given" is leaving the field out."""
    branches = [branch for branch in schema.get("anyOf", []) if branch.get("type") != "null"]
    if len(branches) != 1:
        return schema
    return {**branches[0], **{key: value for key, value in schema.items() if key not in ("anyOf", "default")}}


def _import_request(request) -> tuple[ImportForm, object] | Status:
    """The form and the file of an import request, or the 400/422 that says what is wrong with them.

    Read here, after the access check, rather than as ninja parameters (which parse the body before the
    view runs): a stranger learns nothing from how a body is refused, and a malformed multipart body
    (no boundary, an empty or non-ASCII one) is a 400 that says so, not a 500."""
    try:
        files, data = request.FILES, request.POST
    except MultiPartParserError as exc:
        return field_errors({"file": f"The multipart body could not be read ({exc}): send the file as "
                                      "multipart/form-data (curl -F file=@tasks.jsonl)."}, 400)
    upload = files.get("file")
    if upload is None:
        return field_errors({"file": "Send the JSONL file as the multipart field 'file' "
                                      "(curl -F file=@tasks.jsonl)."})
    try:
        form = ImportForm.model_validate({key: data.get(key) for key in data
                                          if key in ImportForm.model_fields and not (key in _OPTIONAL and
                                                                                     data.get(key) == "")})
    except ValidationError as exc:
        return field_errors({".".join(str(p) for p in error["loc"]) or "form": error["msg"]
                              for error in exc.errors()})
    return form, upload


@router.post("/projects/{slug}/datasets/import",
             response={200: ImportOut, 201: ImportOut, 400: FieldErrorsOut, 404: ErrorOut, 409: FieldErrorsOut,
                       422: FieldErrorsOut},
             openapi_extra=_import_multipart(), summary="Import a Crucible or NeMo Gym JSONL file")
def import_dataset(request, slug: str):
    """Multipart upload (`file`). The validation report comes first: rows accepted, rejected with line and
    reason, duplicates skipped by content hash (within the file and against `dataset`), split counts.
    `dry_run`: the report only (200), nothing written. Otherwise the new version is written in one
    transaction (201): a new dataset `name`, or `dataset`'s next version (its tasks plus the file's).
    A file that is too large, not UTF-8 or not JSONL is a 422 on `file`; a body that is not readable
    multipart a 400; a new `name` another dataset of the project has (also one another request made at
    the same moment), or a version made by another request at the same moment, a 409."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    parsed = _import_request(request)
    if isinstance(parsed, Status):
        return parsed
    form, file = parsed
    dry_run = form.dry_run
    try:
        target = import_target(project=project, name=form.name, parent_id=form.dataset, format=form.format,
                               default_split=form.split, description=form.description)
        upload = upload_store(file.chunks(), filename=file.name or "upload.jsonl", project=project,
                              user=request.user, declared_size=file.size)
    except ImportConflict as exc:  # the new dataset's name is taken
        return field_errors({exc.field: str(exc)}, 409)
    except ImportFileError as exc:
        return field_errors({exc.field: str(exc)})
    try:
        if dry_run:
            report = import_check(upload.path, target=target, filename=upload.filename)
            return Status(200, {"dry_run": True, "report": _report_out(report), "dataset": None})
        created, report = import_create(upload.path, project=project, target=target, actor=request.user,
                                        filename=upload.filename)
    except ImportConflict as exc:
        return field_errors({exc.field: str(exc)}, 409)
    except ImportFileError as exc:
        return field_errors({exc.field: str(exc)})
    finally:
        upload_discard(upload)
    return Status(201, {"dry_run": False, "report": _report_out(report),
                        "dataset": _version_out(dataset_version(project, created.pk))})


def _report_out(report: ImportReport) -> dict:
    return report.to_dict()


@router.post("/datasets/{dataset_id}/split",
             response={201: SplitMoveOut, 404: ErrorOut, 409: FieldErrorsOut, 422: FieldErrorsOut},
             summary="Move tasks to another split (a new version)")
def move_split(request, dataset_id: RowId, body: SplitMoveIn):
    """The tasks the filter matches go to `to_split` in a new version; the version itself is unchanged."""
    dataset = _dataset_for(request, dataset_id, Role.EDITOR)
    try:
        flt = TaskFilter.from_query(body.dict(exclude={"to_split"}))
        successor, moved = dataset_split_move(dataset=dataset, flt=flt, to_split=body.to_split, actor=request.user)
    except FilterError as exc:
        return field_errors(exc.errors)
    except SplitMoveError as exc:
        return field_errors({exc.field: str(exc)})
    except DatasetConflict as exc:
        return field_errors({"dataset": str(exc)}, 409)
    return Status(201, {"moved": moved, "dataset": _version_out(dataset_version(dataset.project, successor.pk))})


@router.post("/projects/{slug}/datasets/generate",
             response={200: GenerateOut, 201: GenerateOut, 404: ErrorOut, 409: FieldErrorsOut,
                       422: FieldErrorsOut},
             summary="Generate synthetic tasks (a new version)")
def generate_tasks(request, slug: str, body: GenerateIn):
    """The workplace generator over the chosen templates (held-out ones kept disjoint from the training ones);
    each task's ground truth is executed before it is accepted. `dry_run`: the report and ten tasks.
    A new `name` another dataset of the project has is a 409 on `name`, as is a version or name another
    request made at the same moment."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    name = body.name.strip()
    roles = default_roles()
    train = body.train_templates if body.train_templates is not None else [t for t, r in roles.items() if r == "train"]
    held = (body.held_out_templates if body.held_out_templates is not None
            else [t for t, r in roles.items() if r == "held_out"])
    try:
        spec = generation_spec(environment=body.environment, n=body.n, seed=body.seed, train_templates=train,
                               held_out_templates=held)
        parent = None
        if body.dataset is not None:
            parent = dataset_in_project(project, body.dataset)
            if parent is None:
                return field_errors({"dataset": "No such dataset version in this project."})
        elif not body.dry_run:
            problem = dataset_name_format_problem(name)
            if problem:
                return field_errors({"name": problem})
            taken = dataset_name_taken(project, name)
            if taken:
                return field_errors({"name": taken}, 409)
        if body.dry_run:
            tasks, report = generate(spec)
            return Status(200, {"dry_run": True, "report": report.to_dict(),
                                "preview": [t.to_dict() for t in tasks[:PREVIEW_SIZE]], "dataset": None})
        created, report = generation_create(project=project, spec=spec, actor=request.user, name=name,
                                            parent=parent, description=body.description)
    except GenerationError as exc:
        return field_errors(exc.errors, 409 if exc.conflict else 422)
    return Status(201, {"dry_run": False, "report": report.to_dict(), "preview": [],
                        "dataset": _version_out(dataset_version(project, created.pk))})


# ---------------------------------------------------------------------------------------
# Deletion
# ---------------------------------------------------------------------------------------


class DatasetVersionRefOut(Schema):
    id: int
    name: str
    version: int


class DatasetDeletionOut(Schema):
    dataset_id: int
    name: str
    version: int
    content_hash: str
    tasks: int = Field(description="The version's tasks: they go with it.")
    later_versions: list[DatasetVersionRefOut] = Field(
        description="Versions made from it: they keep their own tasks and lose only the link to it (their lineage "
                    "names it as deleted).")
    runs: int = Field(description="Runs that used this version (any kind): each keeps it.")
    experiments: int = Field(description="Experiments on this version: each keeps it.")
    blockers: list[str] = Field(description="Why it cannot be deleted now, each with what to do; empty: it can.")
    pending_job_id: int | None = Field(description="The deletion job already queued or running for it, if any.")


@router.get("/datasets/{dataset_id}/deletion", response={200: DatasetDeletionOut, 404: ErrorOut},
            summary="What deleting a dataset version would remove")
def get_dataset_deletion(request, dataset_id: RowId):
    """What DELETE /datasets/{dataset_id} would remove (its tasks), the later versions that stay, and, when it
    cannot be deleted now, why (runs or experiments use it)."""
    return dataset_delete_plan(_dataset_for(request, dataset_id, Role.EDITOR)).as_dict()


@router.delete("/datasets/{dataset_id}", response={202: JobOut, 404: ErrorOut, 409: ErrorOut},
               summary="Delete a dataset version")
def delete_dataset(request, dataset_id: RowId):
    """Queue the deletion of the version and its tasks: 202 with the job (GET /jobs/{id} follows it; its result
    says what was removed). The rows go in one transaction. 409 when something keeps the version (a run or an
    experiment used it, a deletion is queued already), with what to do. Other versions of the name stay."""
    dataset = _dataset_for(request, dataset_id, Role.EDITOR)
    try:
        job = dataset_delete_start(dataset=dataset, actor=request.user)
    except DatasetDeleteRefused as exc:
        return Status(409, ErrorOut(detail=str(exc)))
    return Status(202, job)
