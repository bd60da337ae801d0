"""Reads that sum up a project across apps (the home page's project list, the overview's start steps).

Counting a project's runs, datasets and jobs needs the apps above projects, so it lives here,
in the top domain app, rather than in projects (which imports no other app)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from webapp.datasets.models import TaskDataset
from webapp.projects.models import Project
from webapp.projects.selectors.access import projects_for_user
from webapp.runs.models import ACTIVE_JOB_STATES, Job, Run, RunKind, RunStatus
from webapp.verifiers.selectors.verifiers import latest_version_checks

# Runs that tick a start step: launched here or imported, and not failed, cancelled or a draft.
COUNTED_RUN_STATES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SUCCEEDED)


def _count(queryset) -> Subquery:
    """COUNT(*) of `queryset` (filtered by project=OuterRef("pk")) as a scalar subquery."""
    return Subquery(queryset.order_by().values("project").annotate(n=Count("pk")).values("n")[:1])


def project_list_for_user(user) -> QuerySet[Project]:
    """The user's projects with their numbers of runs, dataset versions and active jobs, each counted on its
    own (three COUNT(DISTINCT) over one join would count runs x datasets x jobs rows: 40 ms for one
    project of 100 runs and 400 jobs)."""
    project = OuterRef("pk")
    return projects_for_user(user).annotate(
        run_count=Coalesce(_count(Run.objects.filter(project=project)), 0),
        dataset_count=Coalesce(_count(TaskDataset.objects.filter(project=project)), 0),
        active_jobs=Coalesce(_count(Job.objects.filter(project=project, state__in=ACTIVE_JOB_STATES)), 0),
    )


@dataclass(frozen=True)
class ProjectProgress:
    """How far an empty project has come along the seeds' workflow (the overview's start steps); runs imported
    as the demo's examples do not count: they were not made in this project."""

    has_datasets: bool
    has_verifiers: bool
    has_checked_verifier: bool
    has_models: bool
    has_eval_run: bool
    has_sft_run: bool
    has_grpo_run: bool
    has_aliases: bool


def project_progress(project: Project) -> ProjectProgress:
    """Which steps of dataset -> verifier -> model -> baseline eval -> SFT -> GRPO -> promotion the project has
    taken: one EXISTS query per step. A verifier counts as sanity-checked as the verifiers list shows it (its
    latest version has a judged check: latest_version_checks); a run counts once launched and not failed,
    cancelled or a draft (a baseline that failed measured nothing)."""
    runs = (Run.objects.filter(project=project, status__in=COUNTED_RUN_STATES)
            .exclude(import_info__has_key="example"))
    return ProjectProgress(
        has_datasets=project.datasets.exists(),
        has_verifiers=project.verifiers.exists(),
        has_checked_verifier=any(check is not None for check in latest_version_checks(project).values()),
        has_models=project.model_specs.exists(),
        has_eval_run=runs.filter(kind=RunKind.EVAL).exists(),
        has_sft_run=runs.filter(kind=RunKind.SFT).exists(),
        has_grpo_run=runs.filter(kind=RunKind.GRPO).exists(),
        # The demo's example alias points at an imported example checkpoint: not a promotion made here.
        has_aliases=project.aliases.exclude(checkpoint__run__import_info__has_key="example").exists(),
    )
