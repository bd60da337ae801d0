"""API: import a run trained elsewhere from a zip of its `python -m training run` folder.

    curl -H "Authorization: Bearer $TOKEN" -F file=@run.zip -F name="cluster run 7" \\
         https://crucible.example/api/projects/SLUG/runs/import

Editors only (viewers 403, non-members 404). The answer is the import's report, the same one
the Import a run page shows and `manage.py import_run` prints; importing the same folder
again answers created=false, nothing_new=true. Errors, all as {"detail", "errors": {"file" | "name":
message}}: 400 when the body is not readable multipart or has no file, 422 when the zip cannot be
imported (damaged, unsafe, not a run folder) or the name is too long, 413 when the zip is over the
upload limit. A failed import writes nothing (no run row, no extracted files).

The multipart body is read by hand, after an upload handler that stops past the limit is in
place (with token auth; a browser session's CSRF check reads the body first).
"""

from __future__ import annotations

from django.http.multipartparser import MultiPartParserError
from ninja import Field, Router, Schema
from ninja.responses import Status

from webapp.projects.access import get_project_or_404
from webapp.projects.models import Role
from webapp.runs.services.run_import import (
    MAX_UPLOAD_BYTES,
    NAME_LIMIT,
    RunImportError,
    UploadLimitHandler,
    declared_too_large,
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


@router.post("/projects/{slug}/runs/import", response={200: ImportReportOut, 400: ImportErrorOut,
                                                        413: ImportErrorOut, 422: ImportErrorOut},
             openapi_extra=MULTIPART, summary="Import a run folder (zip)")
def import_run(request, slug: str):
    """Import a zip of a `python -m training run` folder as an imported run (idempotent); returns the report."""
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
        report = run_import_zip(project=project, archive=upload, actor=request.user, name=name or None,
                                archive_name=upload.name or "upload.zip")
    except RunImportError as exc:
        return _error(422, "file", str(exc))
    finally:
        upload.close()
    return report.as_dict()
