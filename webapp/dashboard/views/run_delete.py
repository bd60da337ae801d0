"""The run's delete page (what goes with the run, what keeps it, a form that asks for its name) and the runs
table's "Delete selected…" (the same for several runs, the number of runs typed to confirm).

The page only queues the deletion (webapp.runs.services.run_delete); a worker deletes the rows and
the folder, so a run of a million trajectories never holds a request.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from webapp.dashboard.views.common import breadcrumbs_for, run_ids_from_text
from webapp.projects.models import Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.runs.selectors.run_delete import run_delete_plan
from webapp.runs.selectors.runs import runs_by_id_in, runs_for_run_page
from webapp.runs.services.run_delete import (
    MAX_RUNS_AT_ONCE,
    RunDeleteRefused,
    run_delete_start,
    runs_delete_start,
)


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


def _selected_runs(project, ids: list[int]) -> list:
    """The project's runs of the selection, in its order: 404 when one is not the project's."""
    runs_by_id = runs_by_id_in(project, ids)
    if len(runs_by_id) != len(ids):
        raise Http404("Some of these runs are not in this project.")
    return [runs_by_id[i] for i in ids]


@login_required
@require_http_methods(["GET", "POST"])
def run_delete_many_page(request: HttpRequest, slug: str) -> HttpResponse:
    """The runs table's "Delete selected…": each ticked run's plan (what goes, or what keeps it) and one
    confirmation, the number of runs that go typed. POST queues a job per run that may go."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    source = request.POST if request.method == "POST" else request.GET
    ids = run_ids_from_text(source.get("ids", ""))
    if not ids:
        messages.error(request, "Tick the runs to delete in the table first, then Delete selected….")
        return redirect("dashboard:run_list", slug=slug)
    if len(ids) > MAX_RUNS_AT_ONCE:
        messages.error(request, f"Delete at most {MAX_RUNS_AT_ONCE} runs at once: tick fewer runs.")
        return redirect("dashboard:run_list", slug=slug)
    plans = [run_delete_plan(run, actor=request.user) for run in _selected_runs(project, ids)]
    error, typed, status = "", "", 200
    if request.method == "POST":
        typed = source.get("confirm", "")
        try:
            outcome = runs_delete_start(plans=plans, actor=request.user, confirm_count=typed)
        except RunDeleteRefused as exc:
            error, status = str(exc), exc.status
        else:
            jobs = ", ".join(str(job.pk) for job in outcome.jobs)
            messages.success(request, f"{len(outcome.jobs)} run{'s are' if len(outcome.jobs) != 1 else ' is'} being "
                                      f"deleted (job{'s' if len(outcome.jobs) != 1 else ''} {jobs}); each leaves this "
                                      "list once a worker has deleted it.")
            if outcome.kept:
                messages.error(request, f"Kept {len(outcome.kept)}: " + " ".join(outcome.kept.values()))
            return redirect("dashboard:run_list", slug=slug)
    going = [plan for plan in plans if plan.allowed]
    return render(request, "dashboard/runs/delete_many.html", {
        "project": project, "plans": plans, "going": going, "ids": ",".join(map(str, ids)), "error": error,
        "typed": typed,
        "breadcrumbs": breadcrumbs_for(project, ("Runs", reverse("dashboard:run_list", args=[slug])),
                                       ("Delete selected", None)),
    }, status=status)
