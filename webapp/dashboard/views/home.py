"""The project list, the project switcher, the theme toggle and the search box."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from webapp.projects.selectors.access import get_project_or_404
from webapp.projects.services.projects import user_theme_set
from webapp.runs.selectors.overview import project_list_for_user


@login_required
def home(request: HttpRequest) -> HttpResponse:
    projects = project_list_for_user(request.user)
    return render(request, "dashboard/home.html", {"projects": projects})


@login_required
def switch_project(request: HttpRequest) -> HttpResponse:
    """The switcher's form: go to the chosen project (404 unless the user is a member)."""
    slug = request.GET.get("slug", "")
    if not slug:
        return redirect("dashboard:home")
    project = get_project_or_404(request.user, slug[:80])
    return redirect("dashboard:project", slug=project.slug)


def _safe_next(request: HttpRequest) -> str:
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return reverse("dashboard:home")


@login_required
@require_POST
def theme(request: HttpRequest) -> HttpResponse:
    try:
        user_theme_set(user=request.user, theme=request.POST.get("theme", ""))
    except ValueError as exc:
        messages.error(request, str(exc))
    return redirect(_safe_next(request))


@login_required
def search(request: HttpRequest, slug: str) -> HttpResponse:
    """The top bar's search: runs whose name matches, in the runs table."""
    project = get_project_or_404(request.user, slug)
    query = request.GET.get("q", "")[:200]
    try:
        target = reverse("dashboard:run_list", args=[project.slug])
    except NoReverseMatch:
        return redirect("dashboard:project", slug=project.slug)
    return redirect(f"{target}?text={query}" if query else target)
