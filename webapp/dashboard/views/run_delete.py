"""The run's delete page: what goes with the run, what keeps it, and a form that asks for its name.

The page only queues the deletion (webapp.runs.services.run_delete); a worker deletes the rows and
the folder, so a run of a million trajectories never holds a request.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from webapp.dashboard.views.common import breadcrumbs_for
from webapp.projects.models import Role
from webapp.projects.selectors.access import get_object_or_404_for_user
from webapp.runs.selectors.run_delete import run_delete_plan
from webapp.runs.selectors.runs import runs_for_run_page
from webapp.runs.services.run_delete import RunDeleteRefused, run_delete_start


@login_required
@require_http_methods(["GET", "POST"])
def run_delete_page(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """GET: the plan (counts, files, evaluations that go too, blockers). POST: queue the deletion when the
    typed name matches, then back to the runs list; a refusal shows the page again with why (409, 422)."""
    run = get_object_or_404_for_user(runs_for_run_page(), request.user, Role.EDITOR, pk=run_id,
                                     project__slug=slug)
    error, typed, status = "", "", 200
    if request.method == "POST":
        typed = request.POST.get("confirm", "")
        try:
            job = run_delete_start(run=run, actor=request.user, confirm_name=typed)
        except RunDeleteRefused as exc:
            error, status = str(exc), exc.status
        else:
            messages.success(request, f"{run.name} is being deleted (job {job.pk}); it leaves this list once a worker "
                                      "has deleted it. The Jobs page follows the job.")
            return redirect("dashboard:run_list", slug=slug)
    plan = run_delete_plan(run, actor=request.user)
    runs_url = reverse("dashboard:run_list", args=[slug])
    return render(request, "dashboard/runs/delete.html", {
        "project": run.project, "run": run, "plan": plan, "error": error, "typed": typed,
        "breadcrumbs": breadcrumbs_for(run.project, ("Runs", runs_url),
                                       (run.name, reverse("dashboard:run_detail", args=[slug, run.pk])),
                                       ("Delete", None)),
    }, status=status)
