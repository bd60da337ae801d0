"""Import a run: upload a zip of a `python -m training run` folder and read the import's report.

Editors only. The upload's size is bounded before it is read (the request's Content-Length,
then an upload handler that stops counting bytes past the limit); the zip is extracted
safely into a temporary folder under the data directory by the same service that
`manage.py import_run` and the API use (webapp/runs/services/run_import.py).

An upload over the inline limit (run_import.inline_max_bytes) is not imported within the
request, which a web timeout could kill: it is kept and imported by a job, and the form
redirects to the job's page, which follows its progress and shows the report (a link to the run)
or the reason it failed.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt, csrf_protect

from webapp.dashboard.views.common import breadcrumbs_for
from webapp.projects.models import Project, Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.runs.models import FINAL_JOB_STATES, Job, JobState
from webapp.runs.selectors.jobs import all_jobs
from webapp.runs.selectors.runs import run_exists
from webapp.runs.services import run_import as service
from webapp.runs.services.run_import import (
    IMPORT_JOB_KIND,
    NAME_LIMIT,
    ImportReport,
    RunImportError,
    UploadLimitHandler,
    declared_too_large,
    inline_max_bytes,
    job_error_text,
    run_import_enqueue,
    run_import_zip,
    too_large_message,
)


def _render(request: HttpRequest, project: Project, *, errors: dict | None = None, report=None, name: str = "",
            status: int = 200) -> HttpResponse:
    context = {
        "project": project, "errors": errors or {}, "report": report, "name": name,
        "limit_mb": round(service.MAX_UPLOAD_BYTES / 1024 ** 2),
        "inline_mb": f"{inline_max_bytes() / 1024 ** 2:g}",
        "run_url": reverse("dashboard:run_detail", args=[project.slug, report.run_id]) if report else "",
        "breadcrumbs": breadcrumbs_for(project, ("Runs", reverse("dashboard:run_list", args=[project.slug])),
                                       ("Import a run", None)),
    }
    return render(request, "dashboard/runs/import.html", context, status=status)


@login_required
@csrf_exempt  # checked by _import_post once the upload handler is in place (Django's documented pattern)
def run_import_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    if request.method != "POST":
        return _render(request, project, report=_pop_report(request, project))
    if declared_too_large(request):
        return _render(request, project, errors={"archive": too_large_message()}, status=413)
    limiter = UploadLimitHandler(request)
    request.upload_handlers.insert(0, limiter)
    try:
        request.POST  # noqa: B018 - parse the multipart body here, where a broken one can be answered
    except MultiPartParserError as exc:
        message = (f"The upload could not be read ({exc}): the browser sent a broken multipart body. Choose the "
                   "zip again and resend the form.")
        return _render(request, project, errors={"archive": message}, status=400)
    return _import_post(request, project, limiter)


@csrf_protect
def _import_post(request: HttpRequest, project: Project, limiter: UploadLimitHandler) -> HttpResponse:
    name = request.POST.get("name", "").strip()
    upload = request.FILES.get("archive")
    errors = {}
    if limiter.exceeded:
        errors["archive"] = too_large_message()
    elif upload is None:
        errors["archive"] = "Choose a .zip of the run folder to upload."
    if len(name) > NAME_LIMIT or "\x00" in name:
        errors["name"] = f"At most {NAME_LIMIT} characters, without NUL."
    if errors:
        status = 413 if limiter.exceeded else (400 if "archive" in errors else 422)
        return _render(request, project, errors=errors, name=name[:NAME_LIMIT], status=status)
    if upload.size > inline_max_bytes():  # too big to finish within a web timeout: a job imports it
        try:
            job = run_import_enqueue(project=project, upload=upload, actor=request.user, name=name or None,
                                     archive_name=upload.name or "upload.zip")
        finally:
            upload.close()
        return redirect("dashboard:run_import_job", slug=project.slug, job_id=job.pk)
    try:
        report = run_import_zip(project=project, archive=upload, actor=request.user, name=name or None,
                                archive_name=upload.name or "upload.zip")
    except RunImportError as exc:  # the zip cannot be imported (damaged, unsafe, not a run): nothing was written
        return _render(request, project, errors={"archive": str(exc)}, name=name, status=422)
    finally:
        upload.close()
    # Redirect, so that reloading the page that shows the report does not send the upload again.
    request.session[IMPORT_REPORT_KEY] = report.as_dict()
    return redirect(reverse("dashboard:run_import", args=[project.slug]) + "#import-report")


IMPORT_REPORT_KEY = "crucible.run_import_report"


def _pop_report(request: HttpRequest, project: Project) -> ImportReport | None:
    """The report of the import this session just made (shown once), rebuilt from the session."""
    held = request.session.pop(IMPORT_REPORT_KEY, None)
    if not isinstance(held, dict) or not run_exists(project, held.get("run_id")):
        return None
    return ImportReport.from_dict(held)


# ---------------------------------------------------------------------------------------
# An import job's page
# ---------------------------------------------------------------------------------------


def _job_report(job: Job, project: Project) -> ImportReport | None:
    held = (job.payload or {}).get("result")
    if job.state != JobState.SUCCEEDED or not isinstance(held, dict):
        return None
    if not run_exists(project, held.get("run_id")):  # the run was deleted since
        return None
    try:
        return ImportReport.from_dict(held)
    except TypeError:  # a report of another shape (an older version): the page still answers
        return None


@login_required
def run_import_job_page(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    """Progress of an import job, then its report and the run, or why it failed (polled while active)."""
    project = get_project_or_404(request.user, slug)
    job = get_object_or_404_for_user(all_jobs(), request.user, pk=job_id, project=project,
                                     kind=IMPORT_JOB_KIND)
    report = _job_report(job, project)
    context = {
        "project": project, "job": job, "active": job.state not in FINAL_JOB_STATES, "report": report,
        "error": job_error_text(job), "archive_name": (job.payload or {}).get("archive_name", ""),
        "log_lines": [line for line in (job.log_tail or "").splitlines() if line.startswith(("read ", "importing "))][-3:],
        "run_url": reverse("dashboard:run_detail", args=[project.slug, report.run_id]) if report else "",
        "breadcrumbs": breadcrumbs_for(project, ("Runs", reverse("dashboard:run_list", args=[project.slug])),
                                       ("Import a run", reverse("dashboard:run_import", args=[project.slug])),
                                       (f"Import job #{job.pk}", None)),
    }
    if request.htmx:
        return render(request, "dashboard/runs/_import_job_state.html", context)
    return render(request, "dashboard/runs/import_job.html", context)
