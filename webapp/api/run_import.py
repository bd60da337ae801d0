"""API: import a run trained elsewhere from a zip of its `python -m training run` folder.

    curl -H "Authorization: Bearer $TOKEN" -F file=@run.zip -F name="cluster run 7" \\
         https://crucible.example/api/projects/SLUG/runs/import

Editors only (viewers 403, non-members 404). The answer is the import's report, the same one
the Import a run page shows and `manage.py import_run` prints; importing the same folder
again answers created=false, nothing_new=true. Errors, all as {"detail", "errors": {"file" | "name":
message}}: 400 when the body is not readable multipart or has no file, 422 when the zip cannot be
imported (damaged, unsafe, not a run folder) or the name is too long, 413 when the zip is over the
upload limit. A failed import writes nothing (no run row, no extracted files).

Big imports run off the request: with ?background=1, or automatically for a zip over the inline
limit (CRUCIBLE_RUN_IMPORT_INLINE_MAX_BYTES, 2 MB by default), the zip is kept and a "run_import"
job imports it; the answer is 202 with the job's id and URLs. GET .../runs/import/jobs/{id} follows
it: state, progress, and once it succeeded this same report, or once it failed the error that the
inline import answers with 422 (a failed import writes nothing). ?background=0 forces the import within the request.

The multipart body is read by hand, after an upload handler that stops past the limit is in
place (with token auth; a browser session's CSRF check reads the body first).
"""

from __future__ import annotations

from django.http.multipartparser import MultiPartParserError
from django.urls import reverse
from ninja import Field, Query, Router, Schema
from ninja.responses import Status

from webapp.common.bounds import RowId
from webapp.projects.models import Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.runs.models import JobState
from webapp.runs.selectors.jobs import all_jobs
from webapp.runs.services.run_import import (
    IMPORT_JOB_KIND,
    MAX_UPLOAD_BYTES,
    NAME_LIMIT,
    RunImportError,
    UploadLimitHandler,
    declared_too_large,
    inline_max_bytes,
    job_error_text,
    run_import_enqueue,
    run_import_zip,
    too_large_message,
)

router = Router(tags=["runs"])


class ImportErrorOut(Schema):
    detail: str
    errors: dict[str, str] = {}


class SkippedLineOut(Schema):
    line: int
    reason: str


class ImportedCheckpointOut(Schema):
    step: int
    storage_uri: str = Field(description="The original path (checkpoint folders are not copied).")
    exists: bool = Field(description="Whether that folder exists on the server.")
    metrics: int = Field(description="How many metrics the checkpoint event recorded.")


class ImportReportOut(Schema):
    run_id: int
    run_name: str
    created: bool = Field(description="False: this folder was imported before; its run was found.")
    nothing_new: bool = Field(description="True: everything in the folder was already stored.")
    kind: str
    status: str
    source: str
    config_source: str = Field(description="Where the config was found in the folder (empty: none).")
    config_problems: list[str] = Field(description="Why the current schema refuses the config (stored anyway).")
    lines: int
    events: dict[str, int] = Field(description="Valid events read, per type.")
    stored: dict[str, int] = Field(description="Rows stored now: metric (points), trajectory, checkpoint.")
    already_present: dict[str, int] = Field(description="Rows skipped because they were already stored.")
    superseded: dict[str, int] = Field(description="Events written again by a restarted training process.")
    null_metric_values: int
    restarts: int
    skipped: list[SkippedLineOut] = Field(description="Skipped lines (the first 200), with the reason.")
    skipped_total: int
    skipped_by_reason: dict[str, int]
    checkpoints: list[ImportedCheckpointOut]
    warnings: list[str]
    error: str = Field(description="The run's own error message, when its training process failed.")


class ImportJobOut(Schema):
    job_id: int
    state: str = Field(description="The job's state now (queued); follow it at job_url.")
    job_url: str = Field(description="GET it for state, progress, the error or (once it succeeded) the report.")
    page_url: str = Field(description="The import job's page in the browser.")


class ImportJobStateOut(Schema):
    job_id: int
    state: str = Field(description="queued, claimed, running, succeeded, failed or cancelled.")
    progress: float = Field(description="The share of the event log read, 0 to 1.")
    error: str = Field(description="Why the import failed (nothing was written), or empty.")
    report: ImportReportOut | None = Field(description="The import's report once the job succeeded.")


class ImportOptions(Schema):
    background: bool | None = Field(
        None, description="true: always import in a job (202); false: always within the request; unset: a job "
                          "for a zip over the inline limit.")


MULTIPART = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": {
            "type": "object", "required": ["file"],
            "properties": {
                "file": {"type": "string", "format": "binary",
                         "description": f"A zip of the run folder (at most {MAX_UPLOAD_BYTES // 1024 ** 2} MB)."},
                "name": {"type": "string", "maxLength": NAME_LIMIT,
                         "description": "The run's name if it is new (default: the folder's name)."},
            },
        }}},
    },
}


def _error(status: int, field: str, message: str) -> Status:
    return Status(status, ImportErrorOut(detail=message, errors={field: message}))


@router.post("/projects/{slug}/runs/import", response={200: ImportReportOut, 202: ImportJobOut, 400: ImportErrorOut,
                                                        413: ImportErrorOut, 422: ImportErrorOut},
             openapi_extra=MULTIPART, summary="Import a run folder (zip)")
def import_run(request, slug: str, options: Query[ImportOptions]):
    """Import a zip of a `python -m training run` folder as an imported run (idempotent); returns the report,
    or 202 with an import job for a big zip (or ?background=true)."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    if declared_too_large(request):
        return _error(413, "file", too_large_message())
    limiter = UploadLimitHandler(request)
    if not hasattr(request, "_files"):
        request.upload_handlers.insert(0, limiter)
    try:
        upload = request.FILES.get("file")
        name = request.POST.get("name", "").strip()
    except MultiPartParserError as exc:
        return _error(400, "file", f"The multipart body could not be read ({exc}): send the zip as "
                                   "multipart/form-data (curl -F file=@run.zip).")
    if limiter.exceeded:
        return _error(413, "file", too_large_message())
    if upload is None:
        return _error(400, "file", "Send the zip of the run folder as the multipart field 'file'.")
    try:
        if len(name) > NAME_LIMIT or "\x00" in name:
            return _error(422, "name", f"At most {NAME_LIMIT} characters, without NUL.")
        if options.background or (options.background is None and upload.size > inline_max_bytes()):
            return _enqueued(request, project, upload, name)
        report = run_import_zip(project=project, archive=upload, actor=request.user, name=name or None,
                                archive_name=upload.name or "upload.zip")
    except RunImportError as exc:
        return _error(422, "file", str(exc))
    finally:
        upload.close()
    return report.as_dict()


def _enqueued(request, project, upload, name: str) -> Status:
    job = run_import_enqueue(project=project, upload=upload, actor=request.user, name=name or None,
                             archive_name=upload.name or "upload.zip")
    return Status(202, ImportJobOut(
        job_id=job.pk, state=job.state, job_url=reverse("api:import_run_job", args=[project.slug, job.pk]),
        page_url=reverse("dashboard:run_import_job", args=[project.slug, job.pk])))


@router.get("/projects/{slug}/runs/import/jobs/{job_id}", response=ImportJobStateOut,
            summary="An import job's state and report")
def import_run_job(request, slug: str, job_id: RowId):
    """Follow a background import (the 202 of the import): its state and progress, then its report or error."""
    project = get_project_or_404(request.user, slug)
    job = get_object_or_404_for_user(all_jobs(), request.user, pk=job_id, project=project, kind=IMPORT_JOB_KIND)
    result = (job.payload or {}).get("result")
    report = result if job.state == JobState.SUCCEEDED and isinstance(result, dict) else None
    return {"job_id": job.pk, "state": job.state, "progress": job.progress, "error": job_error_text(job),
            "report": report}
