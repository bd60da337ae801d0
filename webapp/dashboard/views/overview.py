"""The project overview: what is running, what was promoted, and where to start."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from webapp.projects.access import get_project_or_404, role_in
from webapp.projects.selectors import project_members


@login_required
def project_overview(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    context = {
        "project": project,
        "role": role_in(request.user, project),
        "datasets": project.datasets.all()[:20],
        "verifiers": project.verifiers.all()[:20],
        "runs": project.runs.select_related("model")[:20],
        "jobs": project.jobs.select_related("run")[:10],
        "members": project_members(project),
        "breadcrumbs": [(project.name, None)],
    }
    return render(request, "dashboard/project_overview.html", context)
