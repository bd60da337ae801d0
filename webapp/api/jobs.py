"""API for jobs, queues and workers.

Lists answer `{"items": [...], "next": CURSOR or null}` with keyset pages (see
webapp/api/checkpoints.py). GET /projects/{slug}/jobs used to answer a bare array of at
most `limit` (<= 1000) jobs; it now answers a page like every other list (`limit` and
`state` mean what they meant, a page holds at most 500; `after`, `queue`, `kind` are new).

Workers are shared infrastructure, not project data: any signed-in user who is a member
of at least one project may list them (they show host names, queues and GPUs, never a
project's jobs); a user with no project gets 403.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from ninja import Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from webapp.api.checkpoints import Cursor, next_field, paged
from webapp.api.derived import schema_of
from webapp.api.schemas import DIRECT_JOB_KIND_NAMES, ErrorOut, JobIn, JobOut
from webapp.common.bounds import Choice, Text
from webapp.projects.models import Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.projects.selectors.projects import has_any_project
from webapp.runs.selectors.jobs import (
    JOB_STATES,
    JobRow,
    QueueRow,
    UnknownJobState,
    WorkerRow,
    all_jobs,
    job_list,
    job_row,
    jobs_with_run,
    queue_summary,
    worker_list,
)
from webapp.runs.services.jobs import job_create, job_request_cancel, job_retry

router = Router(tags=["jobs"])

# Job kinds a script may start directly; training kinds are started through runs.
DIRECT_JOB_KINDS = set(DIRECT_JOB_KIND_NAMES)  # the document states them as JobIn.kind's enum


QueueOut = schema_of(QueueRow, "QueueOut")
JobRowOut = schema_of(JobRow, "JobRowOut")


class JobDetailOut(JobRowOut):
    log_tail: str


class JobPageOut(Schema):
    items: list[JobRowOut]
    next: str | None = next_field()


WorkerOut = schema_of(WorkerRow, "WorkerOut")


class WorkerPageOut(Schema):
    items: list[WorkerOut]
    next: str | None = next_field()


def _job_list(**kwargs):
    try:
        return job_list(**kwargs)
    except UnknownJobState as exc:
        raise HttpError(400, str(exc)) from None


@router.get("/projects/{slug}/queues", response=list[QueueOut])
def list_queues(request, slug: str):
    """Per queue: this project's queued and running jobs, and the alive workers consuming it."""
    project = get_project_or_404(request.user, slug)
    return queue_summary(project)


@router.get("/projects/{slug}/jobs", response={200: JobPageOut, 400: ErrorOut})
def list_jobs(request, slug: str, state: Choice("", *JOB_STATES) | None = None,
              queue: Text(32) | None = None, kind: Text(32) | None = None, after: Cursor | None = None,
              limit: int = 100):
    """Jobs newest first, with heartbeat age, lease, attempts, progress, error and history."""
    project = get_project_or_404(request.user, slug)
    return paged(_job_list, project=project, state=state, queue=queue, kind=kind, after=after,
                 limit=limit)


@router.post("/projects/{slug}/jobs", response={201: JobOut, 400: ErrorOut})
def create_job(request, slug: str, body: JobIn):
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    if body.kind not in DIRECT_JOB_KINDS:
        raise HttpError(400, f"Job kind {body.kind!r} cannot be started directly; allowed: {sorted(DIRECT_JOB_KINDS)}. "
                             "Start training and evaluation jobs by creating a run.")
    return Status(201, job_create(project=project, kind=body.kind, payload=body.payload))


@router.get("/jobs/{job_id}", response=JobDetailOut)
def get_job(request, job_id: int):
    job = get_object_or_404_for_user(jobs_with_run(), request.user, pk=job_id)
    row = job_row(job)
    return JobDetailOut(**{**row.__dict__, "log_tail": job.log_tail})


@router.post("/jobs/{job_id}/cancel", response={200: JobOut, 409: ErrorOut})
def cancel_job(request, job_id: int):
    job = get_object_or_404_for_user(all_jobs(), request.user, Role.EDITOR, pk=job_id)
    try:
        return job_request_cancel(job=job)
    except ValueError as exc:
        return Status(409, ErrorOut(detail=str(exc)))


@router.post("/jobs/{job_id}/retry", response={200: JobRowOut, 409: ErrorOut})
def retry_job(request, job_id: int):
    """Queue a failed or cancelled job again with a fresh attempt budget (editor); 409 otherwise."""
    job = get_object_or_404_for_user(jobs_with_run(), request.user, Role.EDITOR, pk=job_id)
    try:
        job = job_retry(job=job)
    except ValueError as exc:
        return Status(409, ErrorOut(detail=str(exc)))
    return job_row(job)


@router.get("/workers", response={200: WorkerPageOut, 400: ErrorOut, 403: ErrorOut})
def list_workers(request, after: Cursor | None = None, limit: int = 100):
    """Every worker that announced itself; alive = heartbeat within 90 s and not stopped."""
    if not has_any_project(request.user):
        raise PermissionDenied("Workers are shown to members of a project; you are not a member of any.")
    return paged(worker_list, after=after, limit=limit)
