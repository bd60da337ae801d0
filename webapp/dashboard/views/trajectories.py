"""Trajectories: the filtered list, the inspector, the GRPO group view, the diff of two, re-verify.

Reads are webapp.trajectories.selectors.trajectories' (the API lists with the same filter and pages),
the trace webapp.trajectories.selectors.trace's, writes webapp.trajectories.services'. Every string
shown here came from a model, a tool or a task: templates escape it, nothing is `|safe`.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.common.pagination import CursorError, Page
from webapp.common.timeline import pretty_json, prompt_turns, trajectory_diff, turn_timeline
from webapp.dashboard.views.common import breadcrumbs_for, has_page, query_without_after
from webapp.datasets.models import Split, TaskDataset
from webapp.datasets.selectors.datasets import dataset_in_project, newest_versions
from webapp.projects.models import Project, Role
from webapp.projects.selectors.access import get_project_or_404, has_role
from webapp.runs.models import Run
from webapp.runs.selectors.runs import run_choice, run_choices
from webapp.runs.services.rescore import trajectory_reverify
from webapp.trajectories.models import FAILURE_BUCKETS, Trajectory
from webapp.trajectories.selectors.trace import verifier_trace
from webapp.trajectories.selectors.trajectories import (
    FILTER_FIELDS,
    SOURCES,
    SPLITS,
    FilterError,
    TrajectoryFilter,
    matching_trajectories,
    rescore_results_of,
    review_states,
    same_task_elsewhere,
    search_match,
    selected_trajectories,
    trajectory_for_inspector,
    trajectory_group,
    trajectory_neighbours,
    trajectory_page,
)
from webapp.trajectories.services.evals import tasks_from_trajectories, tasks_into_new_dataset
from webapp.trajectories.services.verification import env_task_of
from webapp.verifiers.selectors.verifiers import project_verifier_version, project_verifier_versions

PAGE_SIZE = 50
RUN_CHOICES = 200
MAX_SELECTION = 500


def _filter_from(request: HttpRequest) -> tuple[TrajectoryFilter, dict[str, str]]:
    """The filter in the URL; bad parameters are dropped and reported beside their fields."""
    try:
        return TrajectoryFilter.from_query(request.GET), {}
    except FilterError as exc:
        clean = request.GET.copy()
        for name in exc.errors:
            clean.pop(name, None)
        try:
            return TrajectoryFilter.from_query(clean), exc.errors
        except FilterError:  # step_max below step_min: both are dropped
            return TrajectoryFilter(), exc.errors


def _filter_query(flt: TrajectoryFilter) -> str:
    return urlencode(flt.as_query())


def _run_choices(project: Project, selected: int | None) -> list[Run]:
    runs = run_choices(project, limit=RUN_CHOICES)
    if selected is not None and all(r.pk != selected for r in runs):
        extra = run_choice(project, selected)
        runs += [extra] if extra else []
    return runs


def _trajectory_or_404(project: Project, trajectory_id: int) -> Trajectory:
    trajectory = trajectory_for_inspector(project, trajectory_id)
    if trajectory is None:
        raise Http404("No such trajectory in this project.")
    return trajectory


@login_required
def trajectory_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    flt, errors = _filter_from(request)
    try:
        page = trajectory_page(project, flt, after=request.GET.get("after") or None, limit=PAGE_SIZE)
    except CursorError as exc:
        page, errors = Page(items=[], next_cursor=None), {**errors, "after": str(exc)}
    states = review_states([t.pk for t in page.items])
    filter_query = _filter_query(flt)
    rows = [{"t": t, "review": states.get(t.pk), "match": search_match(t.search_text, flt.q) if flt.q else None}
            for t in page.items]
    context = {
        "project": project, "rows": rows, "page": page, "flt": flt, "errors": errors,
        "query": query_without_after(request), "filter_query": filter_query,
        "runs": _run_choices(project, flt.run), "buckets": FAILURE_BUCKETS, "splits": SPLITS, "sources": SOURCES,
        "can_edit": has_role(request.user, project, Role.EDITOR),
        "datasets": _dataset_choices(project), "dataset_splits": Split.values, "max_selection": MAX_SELECTION,
        "review_url": _review_url(project, filter_query, request.user),
        "failures_url": reverse("dashboard:failures", args=[slug]) + (f"?run={flt.run}" if flt.run else "")
        if has_page("dashboard:failures") else "",
        "breadcrumbs": breadcrumbs_for(project, ("Trajectories", None)),
    }
    return render(request, "dashboard/trajectories/list.html", context)


def _review_url(project: Project, filter_query: str, user) -> str:
    """The review page's new-queue form, pre-filled with this filter (editors create queues)."""
    if not has_page("dashboard:review") or not has_role(user, project, Role.EDITOR):
        return ""
    return reverse("dashboard:review", args=[project.slug]) + "?" + urlencode({"filter": filter_query})


def _dataset_choices(project: Project) -> list[TaskDataset]:
    """The newest version of each dataset (a new version is made from it)."""
    return newest_versions(project)


@login_required
def trajectory_detail_page(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    trajectory = _trajectory_or_404(project, trajectory_id)
    flt, _errors = _filter_from(request)
    previous, following = trajectory_neighbours(project, flt, trajectory.pk)
    task = env_task_of(trajectory)
    filter_query = _filter_query(flt)
    context = {
        "project": project, "t": trajectory, "task": task,
        "timeline": turn_timeline(trajectory.turns, task.tools if task else None,
                                  prompt_turns(trajectory.turns, task.messages if task else None)),
        "trace": verifier_trace(trajectory), "rescores": rescore_results_of(trajectory),
        "previous": previous, "following": following, "filter_query": filter_query,
        "elsewhere": same_task_elsewhere(trajectory),
        "versions": project_verifier_versions(project, limit=50),
        "can_reverify": has_role(request.user, project, Role.REVIEWER),
        "raw": pretty_json({"turns": trajectory.turns, "tool_calls": trajectory.tool_calls,
                            "components": trajectory.components, "flags": trajectory.flags,
                            "task": trajectory.task_snapshot}),
        "list_url": reverse("dashboard:trajectory_list", args=[slug]) + (f"?{filter_query}" if filter_query else ""),
        "breadcrumbs": breadcrumbs_for(project, ("Trajectories", reverse("dashboard:trajectory_list", args=[slug])),
                                       (f"#{trajectory.pk}", None)),
    }
    return render(request, "dashboard/trajectories/detail.html", context)


@login_required
def trajectory_group_page(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    trajectory = _trajectory_or_404(project, trajectory_id)
    group = trajectory_group(trajectory)
    task = env_task_of(trajectory)
    samples = [{"t": s, "timeline": turn_timeline(s.turns, task.tools if task else None)} for s in group.samples]
    context = {
        "project": project, "t": trajectory, "group": group, "samples": samples, "task": task,
        "breadcrumbs": breadcrumbs_for(
            project, ("Trajectories", reverse("dashboard:trajectory_list", args=[slug])),
            (f"#{trajectory.pk}", reverse("dashboard:trajectory_detail", args=[slug, trajectory.pk])), ("Group", None)),
    }
    return render(request, "dashboard/trajectories/group.html", context)


@login_required
def trajectory_diff_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    try:
        a_id, b_id = int(request.GET.get("a", "")), int(request.GET.get("b", ""))
    except ValueError:
        raise Http404("Say which two trajectories to compare: ?a=<id>&b=<id>.") from None
    a, b = _trajectory_or_404(project, a_id), _trajectory_or_404(project, b_id)
    task = env_task_of(a)
    context = {
        "project": project, "a": a, "b": b,
        "turns": trajectory_diff(a.turns, b.turns, task.tools if task else None),
        "breadcrumbs": breadcrumbs_for(project, ("Trajectories", reverse("dashboard:trajectory_list", args=[slug])),
                                       (f"#{a.pk} against #{b.pk}", None)),
    }
    return render(request, "dashboard/trajectories/diff.html", context)


@login_required
@require_POST
def trajectory_reverify_view(request: HttpRequest, slug: str, trajectory_id: int) -> HttpResponse:
    """Re-verify with a chosen verifier version; the new verdict is shown beside the stored one."""
    project = get_project_or_404(request.user, slug, Role.REVIEWER)
    trajectory = _trajectory_or_404(project, trajectory_id)
    version = project_verifier_version(project, _int(request.POST.get("version")))
    target = reverse("dashboard:trajectory_detail", args=[slug, trajectory.pk]) + "#reverify"
    if version is None:
        messages.error(request, "Choose a verifier version of this project to re-verify with.")
        return redirect(target)
    result = trajectory_reverify(trajectory=trajectory, verifier_version=version, actor=request.user)
    verdict = "an error" if result.error else f"reward {result.reward}"
    messages.success(request, f"Re-verified with {version.verifier.name} v{version.version}: {verdict}"
                              f"{' (differs from the stored verdict)' if result.disagrees else ''}.")
    return redirect(target)


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@login_required
@require_POST
def trajectory_to_dataset_view(request: HttpRequest, slug: str) -> HttpResponse:
    """"Add to dataset" from a selection: the ticked trajectories become tasks of a new dataset version."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    back = request.POST.get("back", "")
    back = back if back.startswith(f"/p/{slug}/trajectories/") else reverse("dashboard:trajectory_list", args=[slug])
    new_name = request.POST.get("new_dataset", "").strip()
    dataset = dataset_in_project(project, _int(request.POST.get("dataset")))
    if dataset is None and not new_name:
        messages.error(request, "Choose the dataset that gets the new version, or name a new dataset.")
        return redirect(back)
    try:
        rows = _chosen_trajectories(project, request.POST)
    except FilterError as exc:
        messages.error(request, f"The filter is not valid: {exc}.")
        return redirect(back)
    if not rows:
        messages.error(request, "Tick the trajectories to add first (or choose “all matching this filter”).")
        return redirect(back)
    split = request.POST.get("split", "held_out")
    try:
        if new_name:
            report = tasks_into_new_dataset(project=project, name=new_name, trajectories=rows, split=split,
                                            actor=request.user)
        else:
            report = tasks_from_trajectories(trajectories=rows, dataset=dataset, split=split, actor=request.user)
    except ValueError as exc:
        messages.error(request, str(exc))
        return redirect(back)
    _report_messages(request, report)
    return redirect(back)


def _chosen_trajectories(project: Project, form) -> list[Trajectory]:
    """The ticked rows, or every row the list's filter matches (newest first, at most MAX_SELECTION)."""
    if form.get("all_matching"):
        flt = TrajectoryFilter.from_query(QueryDict(form.get("filter", "")))
        return matching_trajectories(project, flt, limit=MAX_SELECTION)
    ids = [i for i in (_int(v) for v in form.getlist("ids")[:MAX_SELECTION]) if i is not None]
    return selected_trajectories(project, ids, limit=MAX_SELECTION)


def _report_messages(request: HttpRequest, report) -> None:
    if report.dataset is not None:
        messages.success(request, f"{report.dataset.name} v{report.dataset.version}: {report.created} new task(s) "
                                  f"from trajectories, {report.duplicates} already there.")
    else:
        messages.warning(request, f"No new dataset version: {report.duplicates} already there, "
                                  f"{len(report.skipped)} skipped.")
    for skipped in report.skipped[:10]:
        messages.warning(request, f"Trajectory #{skipped['trajectory']} skipped: {skipped['reason']}.")


def filter_link(slug: str, **params) -> str:
    """A link to the trajectory list with these filters (other pages build theirs with it)."""
    query = {k: v for k, v in params.items() if k in FILTER_FIELDS and v not in (None, "")}
    return reverse("dashboard:trajectory_list", args=[slug]) + ("?" + urlencode(query) if query else "")
