"""A dataset version's delete page: what goes with it (its tasks), the later versions that keep their own
tasks, what keeps it (runs, experiments), and a form that asks for its name and number.

The page only queues the deletion (webapp.runs.services.dataset_delete); a worker deletes the tasks,
so a version of a million tasks never holds a request.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from webapp.dashboard.views.common import breadcrumbs_for
from webapp.datasets.selectors.datasets import all_datasets
from webapp.projects.models import Role
from webapp.projects.selectors.access import get_object_or_404_for_user
from webapp.runs.selectors.dataset_delete import dataset_delete_plan, dataset_label
from webapp.runs.services.dataset_delete import DatasetDeleteRefused, dataset_delete_start


@login_required
@require_http_methods(["GET", "POST"])
def dataset_delete_page(request: HttpRequest, slug: str, dataset_id: int) -> HttpResponse:
    """GET: the plan (tasks, later versions, blockers). POST: queue the deletion when the typed "name vN"
    matches, then back to the datasets list; a refusal shows the page again with why (409, 422)."""
    dataset = get_object_or_404_for_user(all_datasets(), request.user, Role.EDITOR,
                                         pk=dataset_id, project__slug=slug)
    label = dataset_label(dataset)
    error, typed, status = "", "", 200
    if request.method == "POST":
        typed = request.POST.get("confirm", "")
        try:
            job = dataset_delete_start(dataset=dataset, actor=request.user, confirm_name=typed)
        except DatasetDeleteRefused as exc:
            error, status = str(exc), exc.status
        else:
            messages.success(request, f"{label} is being deleted (job {job.pk}); it leaves this list once a worker has "
                                      "deleted its tasks. The Jobs page follows the job.")
            return redirect("dashboard:dataset_list", slug=slug)
    project = dataset.project
    return render(request, "dashboard/datasets/delete.html", {
        "project": project, "d": dataset, "label": label, "plan": dataset_delete_plan(dataset), "error": error,
        "typed": typed,
        "breadcrumbs": breadcrumbs_for(project, ("Datasets", reverse("dashboard:dataset_list", args=[slug])),
                                       (label, reverse("dashboard:dataset_detail", args=[slug, dataset.pk])),
                                       ("Delete", None)),
    }, status=status)
