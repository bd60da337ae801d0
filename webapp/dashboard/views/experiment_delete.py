"""An experiment's delete page: the runs that go with it (every stage, their evaluations), what they hold,
what keeps it (a running stage, a promoted checkpoint, reviews for a non-owner…), and a form that asks
for its name.

The page only queues the deletion (webapp.runs.services.experiment_delete); a worker deletes the rows
and the runs' folders, so an experiment of a million trajectories never holds a request.
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
from webapp.runs.selectors.checkpoints import experiments_for_page
from webapp.runs.selectors.experiment_delete import experiment_delete_plan
from webapp.runs.services.experiment_delete import ExperimentDeleteRefused, experiment_delete_start


@login_required
@require_http_methods(["GET", "POST"])
def experiment_delete_page(request: HttpRequest, slug: str, experiment_id: int) -> HttpResponse:
    """GET: the plan (runs, counts, files, blockers). POST: queue the deletion when the typed name matches,
    then back to the experiments list; a refusal shows the page again with why (409, 422)."""
    experiment = get_object_or_404_for_user(experiments_for_page(), request.user, Role.EDITOR, pk=experiment_id,
                                            project__slug=slug)
    error, typed, status = "", "", 200
    if request.method == "POST":
        typed = request.POST.get("confirm", "")
        try:
            job = experiment_delete_start(experiment=experiment, actor=request.user, confirm_name=typed)
        except ExperimentDeleteRefused as exc:
            error, status = str(exc), exc.status
        else:
            messages.success(request, f"{experiment.name} is being deleted with its runs (job {job.pk}); it leaves "
                                      "this list once a worker has deleted it. The Jobs page follows the job.")
            return redirect("dashboard:experiment_list", slug=slug)
    project = experiment.project
    return render(request, "dashboard/experiments/delete.html", {
        "project": project, "experiment": experiment, "plan": experiment_delete_plan(experiment, actor=request.user),
        "error": error, "typed": typed,
        "breadcrumbs": breadcrumbs_for(project, ("Experiments", reverse("dashboard:experiment_list", args=[slug])),
                                       (experiment.name, reverse("dashboard:experiment_detail",
                                                                 args=[slug, experiment.pk])),
                                       ("Delete", None)),
    }, status=status)
