"""Failures: a run's failure buckets per step, its top buckets with examples, human re-bucketing,
and two evaluations side by side (per bucket, per task category, which tasks changed bucket).

The reads are webapp.runs.selectors.failures', the same functions the API calls; the
query string is parsed with the API's FailuresQuery schema, so both refuse the same values.
Every count links to the trajectory list filtered to what it counts, once that page exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from webapp.api.failures import FailuresQuery, query_errors
from webapp.dashboard.views.common import breadcrumbs_for, has_page
from webapp.projects.models import Project, Role
from webapp.projects.selectors.access import get_project_or_404, has_role
from webapp.runs.models import Run
from webapp.runs.selectors import failures as fs
from webapp.runs.selectors.runs import run_choice_rows
from webapp.trajectories.selectors.trajectories import MAX_TEXT

RUN_CHOICES = 200
CATEGORY_LABEL = 40  # characters of a category shown under its bars (the tables show it whole)


@dataclass(frozen=True)
class Links:
    """URLs of the trajectory list (and the inspector) filtered by what a count counts."""

    slug: str
    trajectories: str  # "" until the trajectory list page exists
    inspector: bool

    @classmethod
    def for_project(cls, slug: str) -> Links:
        listing = reverse("dashboard:trajectory_list", args=[slug]) if has_page("dashboard:trajectory_list") else ""
        return cls(slug=slug, trajectories=listing, inspector=has_page("dashboard:trajectory_detail"))

    def listing(self, **params) -> str:
        query = {name: str(value) for name, value in params.items() if value not in (None, "")}
        return f"{self.trajectories}?{urlencode(query)}" if self.trajectories else ""

    def segment(self, run_id: int, bucket: str, **params) -> str:
        return self.listing(run=run_id, **params, **fs.bucket_filter(bucket))

    def example(self, trajectory) -> str:
        """The inspector once it exists, else the list narrowed to that task at that step."""
        if self.inspector:
            return reverse("dashboard:trajectory_detail", args=[self.slug, trajectory.pk])
        return self.listing(run=trajectory.run_id, step=trajectory.step, task=trajectory.task_key)


def _chosen_run(project: Project, query: FailuresQuery, errors: dict[str, str]) -> Run | None:
    """The run asked for, else the newest run with scored trajectories (training runs first)."""
    if query.run is not None:
        run = fs.run_in_project(project, query.run)
        if run is not None:
            return run
        errors["run"] = f"No run {query.run} in this project; showing the newest run instead."
    return fs.newest_scored_run(project)


def _step_params(bar: fs.StepBar) -> dict[str, int]:
    """The list's step filter for one bar: its step, or its range when it spans several."""
    if bar.step == bar.step_max:
        return {"step": bar.step}
    return {"step_min": bar.step, "step_max": bar.step_max}


def _step_row(steps: fs.RunSteps, bar: fs.StepBar, links: Links, bucket_queries: dict[str, str]) -> dict:
    """One row of the table under the chart, as strings: up to 100 rows of a dozen cells each
    are built on every page view, so the bar's query is encoded once and each bucket's part
    appended, and numbers are not left to the template to format."""
    at = links.listing(run=steps.run.pk, split=steps.split, **_step_params(bar))
    cells = []
    for bucket in steps.buckets:
        n = bar.counts.counts.get(bucket, 0)
        cells.append((bucket, str(n), f"{at}&{bucket_queries[bucket]}" if n and at else ""))
    label = str(bar.step) if bar.step == bar.step_max else f"{bar.step}–{bar.step_max}"
    return {"step": str(bar.step), "label": label, "total": str(bar.counts.total), "cells": cells}


def _run_context(run: Run, query: FailuresQuery, errors: dict[str, str], links: Links) -> dict:
    splits = fs.rollup_splits(run)
    split = query.split or fs.default_split(splits)
    if splits and split not in splits:
        errors["split"] = f"Run {run.name!r} has no trajectories in split {split!r}; it has {', '.join(splits)}."
        split = fs.default_split(splits)
    steps = fs.step_buckets(run, split)
    bucket_queries = {bucket: urlencode(fs.bucket_filter(bucket)) for bucket in steps.buckets}
    return {
        "run": run, "split": split, "splits": splits, "steps": steps,
        "step_rows": [_step_row(steps, bar, links, bucket_queries) for bar in reversed(steps.bars)],
        "steps_chart": _steps_chart(steps, links),
        "top": [{"top": top, "url": links.segment(run.pk, top.bucket, split=split),
                 "examples": [(t, links.example(t)) for t in top.examples]}
                for top in fs.top_buckets(run, split, steps.totals)],
        "rebucketing": fs.review_rebucketing(run),
    }


def _steps_chart(steps: fs.RunSteps, links: Links) -> dict:
    """What failures.js draws: one stacked bar per step (range), one trace per bucket."""
    return {
        "title": f"{steps.run.name} · {steps.split}", "buckets": steps.buckets,
        "bars": [{"step": bar.step, "step_max": bar.step_max, "counts": bar.counts.counts} for bar in steps.bars],
        "list": links.listing(run=steps.run.pk, split=steps.split),
        "queries": {b: fs.bucket_filter(b) for b in steps.buckets},
    }


def _comparison_context(project: Project, query: FailuresQuery, errors: dict[str, str], links: Links) -> dict:
    try:
        a, b = fs.comparison_runs(project, query.a, query.b)
    except fs.ComparisonError as exc:
        errors.update(exc.errors)
        a, b = fs.default_pair(project)
    if a is None or b is None:
        return {"comparison": None, "a_value": "", "b_value": ""}
    point_a, point_b = fs.eval_point(a), fs.eval_point(b)
    categories = fs.category_comparison(point_a, point_b)
    transitions = fs.bucket_transitions(point_a, point_b)
    buckets = fs.ordered(set(point_a.counts.counts) | set(point_b.counts.counts))
    at = {"split": point_b.split, "step": point_b.step}
    return {"a_value": str(a.pk), "b_value": str(b.pk), "comparison": {
        "a": point_a, "b": point_b, "buckets": buckets, "categories": categories, "transitions": transitions,
        "bucket_rows": [_bucket_row(bucket, point_a, point_b, links) for bucket in buckets],
        "category_buckets": fs.ordered({bk for row in categories.rows for bk in (*row.a.counts, *row.b.counts)}),
        "matrix": [(source, [(cell, _transition_url(cell, b, at, links)) for cell in cells], total)
                   for source, cells, total in transitions.matrix()],
        "chart": _comparison_chart(point_a, point_b, categories, buckets, links),
    }}


def _bucket_row(bucket: str, a: fs.EvalPoint, b: fs.EvalPoint, links: Links) -> dict:
    share_a, share_b = a.counts.shares.get(bucket, 0.0), b.counts.shares.get(bucket, 0.0)
    return {"bucket": bucket, "a": a.counts.counts.get(bucket, 0), "b": b.counts.counts.get(bucket, 0),
            "share_a": share_a, "share_b": share_b, "delta": share_b - share_a,
            "url_a": links.segment(a.run.pk, bucket, split=a.split, step=a.step),
            "url_b": links.segment(b.run.pk, bucket, split=b.split, step=b.step)}


def _transition_url(cell: fs.TransitionCell | None, b: Run, at: dict, links: Links) -> str:
    """One task: that task in b; more: every trajectory of b in the target bucket (the list cannot
    filter by a's bucket), as the page says above the table."""
    if cell is None:
        return ""
    if cell.task_key is not None:
        return links.listing(run=b.pk, **at, task=cell.task_key)
    return links.segment(b.pk, cell.target, **at)


def _filterable(category: str) -> bool:
    """Whether the trajectory list can show just this category ("no category" it cannot)."""
    return bool(category) and len(category) <= MAX_TEXT


def _short(category: str) -> str:
    return (category[:CATEGORY_LABEL] + "…" if len(category) > CATEGORY_LABEL else category) or "(no category)"


def _comparison_chart(a: fs.EvalPoint, b: fs.EvalPoint, categories: fs.Categories, buckets: list[str],
                      links: Links) -> dict:
    """Stacked bars of a and b side by side: all tasks, then each task category."""
    groups = [{"category": "", "link": True, "label": "all tasks", "a": a.counts.counts, "b": b.counts.counts}]
    groups += [{"category": row.category, "link": _filterable(row.category), "label": _short(row.category),
                "a": row.a.counts, "b": row.b.counts} for row in categories.rows]
    return {
        "buckets": buckets, "groups": groups, "queries": {bk: fs.bucket_filter(bk) for bk in buckets},
        "a": {"label": f"A: {a.run.name}", "list": links.listing(run=a.run.pk, split=a.split, step=a.step)},
        "b": {"label": f"B: {b.run.name}", "list": links.listing(run=b.run.pk, split=b.split, step=b.step)},
    }


def _run_choices(project: Project) -> list[tuple[str, str]]:
    """(value, label) of the run pickers, newest first; three pickers list them on every view."""
    return [(str(pk), f"{name} ({kind}, #{pk})") for pk, name, kind in run_choice_rows(project, limit=RUN_CHOICES)]


@login_required
def failures_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    query, errors = query_errors(request.GET)
    links = Links.for_project(slug)
    run = _chosen_run(project, query, errors)
    context = {
        "project": project, "links": links, "errors": errors, "show": "share" if request.GET.get("show") == "share" else "count",
        "run_choices": _run_choices(project),
        "run": run, "run_value": str(run.pk) if run else "",
        "new_eval_url": (reverse("dashboard:run_new", args=[slug]) + "?kind=eval"
                         if has_page("dashboard:run_new") and has_role(request.user, project, Role.EDITOR) else ""),
        "breadcrumbs": breadcrumbs_for(project, ("Failures", None)),
    }
    if run is not None:
        context.update(_run_context(run, query, errors, links))
    context.update(_comparison_context(project, query, errors, links))
    return render(request, "dashboard/failures/page.html", context)
