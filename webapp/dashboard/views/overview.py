"""The project overview: what is running, what was promoted, and where to start."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from webapp.dashboard.views.common import has_page
from webapp.projects.models import Project, Role
from webapp.projects.selectors.access import get_project_or_404, has_role, role_in
from webapp.projects.selectors.projects import project_members
from webapp.runs.selectors.checkpoints import alias_list, running_experiments
from webapp.runs.selectors.jobs import job_list, queued_job_count
from webapp.runs.selectors.overview import project_progress
from webapp.runs.selectors.runs import (
    HEADLINE_METRICS,
    run_headline_cells,
    run_list,
    running_run_count,
)


@dataclass(frozen=True)
class StartStep:
    """One step of the seeds' workflow on an empty project: done or not, and where to do it."""

    label: str
    done: bool
    url: str | None
    action: str


def _url(name: str, slug: str, query: str = "") -> str | None:
    return reverse(name, args=[slug]) + query if has_page(name) else None


def start_steps(project: Project) -> list[StartStep]:
    """Dataset → verifier → model → baseline eval → SFT when the format rate is low → GRPO → promote.

    The demo's imported example runs do not tick a step: they were not done in this project."""
    done = project_progress(project)
    slug = project.slug
    return [
        StartStep("Import a dataset of tasks", done.has_datasets, _url("dashboard:dataset_list", slug),
                  "Import tasks"),
        StartStep("Create a verifier and sanity-check it", done.has_checked_verifier,
                  _url("dashboard:verifier_list", slug),
                  "Sanity-check its latest version" if done.has_verifiers else "Add a verifier"),
        StartStep("Register the model to train", done.has_models,
                  _url("dashboard:project_settings", slug, "#models"), "Add a model"),
        StartStep("Measure a baseline on held-out tasks", done.has_eval_run,
                  _url("dashboard:run_new", slug, "?kind=eval"), "New evaluation run"),
        StartStep("SFT if the baseline rarely follows the format", done.has_sft_run,
                  _url("dashboard:run_new", slug, "?preset=sft_format"), "New SFT run"),
        StartStep("GRPO with verifiable rewards", done.has_grpo_run,
                  _url("dashboard:run_new", slug, "?preset=smollm2_cpu_grpo"), "New GRPO run"),
        StartStep("Promote a checkpoint that beats the baseline", done.has_aliases,
                  _url("dashboard:checkpoint_list", slug), "Checkpoints"),
    ]


@login_required
def project_overview(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    runs = run_list(project, limit=8).items
    headline = run_headline_cells(runs)
    steps = start_steps(project)
    context = {
        "project": project,
        "role": role_in(request.user, project),
        "can_edit": has_role(request.user, project, Role.EDITOR),
        "runs": [(run, headline[run.pk]) for run in runs],
        "headlines": HEADLINE_METRICS,
        "running_jobs": job_list(project, state="running", limit=10).items,
        "queued_jobs": queued_job_count(project),
        "experiments": running_experiments(project, limit=5),
        "aliases": alias_list(project, limit=20).items,
        "members": project_members(project),
        "start_steps": steps,
        "show_start": not all(step.done for step in steps),
        "running_count": running_run_count(project),
        "new_run_url": _url("dashboard:run_new", slug),
        "experiment_url": _url("dashboard:experiment_new", slug),
        "quick_experiment_url": _url("dashboard:experiment_quick", slug),
        "breadcrumbs": [(project.name, None)],
    }
    return render(request, "dashboard/project_overview.html", context)
