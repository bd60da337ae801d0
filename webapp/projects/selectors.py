"""Reads for the project pages."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet

from webapp.projects.access import projects_for_user
from webapp.projects.models import Membership, Project
from webapp.runs.models import ACTIVE_JOB_STATES


def project_list_for_user(user) -> QuerySet[Project]:
    return projects_for_user(user).annotate(
        run_count=Count("runs", distinct=True),
        dataset_count=Count("datasets", distinct=True),
        active_jobs=Count("jobs", filter=Q(jobs__state__in=ACTIVE_JOB_STATES), distinct=True),
    )


def project_members(project: Project) -> QuerySet[Membership]:
    return project.memberships.select_related("user").order_by("user__username")
