"""Jobs and workers."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.projects.access import get_object_or_404_for_user, get_project_or_404, role_in
from webapp.projects.models import Role
from webapp.runs.models import Job
from webapp.runs.services.jobs import job_request_cancel


@login_required
def job_list(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    jobs = project.jobs.select_related("run")[:200]
    template = "dashboard/_job_rows.html" if request.htmx else "dashboard/job_list.html"
    breadcrumbs = [(project.name, reverse("dashboard:project", args=[slug])), ("Jobs", None)]
    return render(request, template, {"project": project, "jobs": jobs, "role": role_in(request.user, project),
                                      "breadcrumbs": breadcrumbs})


@login_required
@require_POST
def job_cancel(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    job = get_object_or_404_for_user(Job.objects.all(), request.user, Role.EDITOR, pk=job_id, project__slug=slug)
    try:
        job_request_cancel(job=job)
        messages.success(request, f"Cancellation of job {job.pk} requested.")
    except ValueError as exc:
        messages.error(request, str(exc))
    return redirect("dashboard:job_list", slug=slug)
