"""Jobs and workers: queues at a glance, every job with its attempts, the workers alive."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.common.pagination import CursorError, Page
from webapp.dashboard.views.common import breadcrumbs_for, has_page, query_without_after
from webapp.projects.models import Role
from webapp.projects.selectors.access import (
    get_object_or_404_for_user,
    get_project_or_404,
    has_role,
)
from webapp.runs.models import Job, JobState
from webapp.runs.selectors.jobs import (
    UnknownJobState,
    all_jobs,
    job_list,
    queue_summary,
    worker_list,
)
from webapp.runs.services.jobs import job_request_cancel, job_retry


def _filters(request: HttpRequest) -> dict[str, str]:
    """The table's filters from the query string, cut to their columns' lengths."""
    return {name: request.GET.get(name, "")[:32] for name in ("state", "queue", "kind")}


@login_required
def job_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    filters = _filters(request)
    error = None
    try:
        page = job_list(project, state=filters["state"] or None, queue=filters["queue"] or None,
                        kind=filters["kind"] or None, after=request.GET.get("after") or None, limit=50)
    except (UnknownJobState, CursorError) as exc:
        page, error = Page(items=[], next_cursor=None), str(exc)
    context = {
        "project": project, "jobs": page.items, "page": page, "filters": filters, "filter_error": error,
        "query": query_without_after(request), "can_edit": has_role(request.user, project, Role.EDITOR),
        "run_links": has_page("dashboard:run_detail"),
    }
    if request.htmx:
        return render(request, "dashboard/_job_rows.html", context)
    context.update(queues=queue_summary(project), workers=worker_list(limit=100).items, states=JobState.choices,
                   breadcrumbs=breadcrumbs_for(project, ("Jobs", None)))
    return render(request, "dashboard/job_list.html", context)


def _job_for_editor(request: HttpRequest, slug: str, job_id: int) -> Job:
    return get_object_or_404_for_user(all_jobs(), request.user, Role.EDITOR, pk=job_id, project__slug=slug)


def _job_action(request: HttpRequest, slug: str, job_id: int, action, done: str) -> HttpResponse:
    """Cancel or retry one job as an editor; the service's refusal becomes the flash message."""
    job = _job_for_editor(request, slug, job_id)
    try:
        action(job=job)
        messages.success(request, done.format(job=job))
    except ValueError as exc:
        messages.error(request, str(exc))
    return redirect("dashboard:job_list", slug=slug)


@login_required
@require_POST
def job_cancel(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    return _job_action(request, slug, job_id, job_request_cancel, "Cancellation of job {job.pk} requested.")


@login_required
@require_POST
def job_retry_view(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    return _job_action(request, slug, job_id, job_retry, "Job {job.pk} queued again.")
