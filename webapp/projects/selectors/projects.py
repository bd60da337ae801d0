"""Reads for the project pages."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.db.models import F, QuerySet

from webapp.projects.models import ApiToken, Membership, Project
from webapp.projects.selectors.access import projects_for_user


def project_members(project: Project) -> QuerySet[Membership]:
    return project.memberships.select_related("user").order_by("user__username")


def user_by_name(username: str):
    """The user of that name, for adding a member: exactly as typed, else the one user whose name differs
    only in case (None when there is none, or when two differ only in case: the owner must type it exactly)."""
    User = get_user_model()
    field = User.USERNAME_FIELD
    user = User.objects.filter(**{field: username}).first()
    if user is None:
        matches = list(User.objects.filter(**{f"{field}__iexact": username})[:2])
        user = matches[0] if len(matches) == 1 else None
    return user


def project_membership(project: Project, membership_id: int) -> Membership | None:
    """One membership of the project with its user (None for another project's), for the owner's member forms."""
    return project.memberships.select_related("user", "project").filter(pk=membership_id).first()


def members_with_roles(project: Project, roles: Iterable[str]) -> QuerySet[Membership]:
    """The project's memberships holding one of `roles`, with their users, by user name (who may be
    assigned to a review queue)."""
    return project.memberships.filter(role__in=roles).select_related("user").order_by("user__username")


def has_any_project(user) -> bool:
    """Whether the user holds a role in at least one project (within the request's token scope): the
    shared worker list is shown to members only."""
    return projects_for_user(user).exists()


def user_tokens(user, limit: int) -> list[ApiToken]:
    """The user's API tokens, live ones first, then newest first, with their project; at most `limit`
    (ask for one more than shown to know whether there are more)."""
    return list(ApiToken.objects.filter(user=user).select_related("project")
                .order_by(F("revoked_at").desc(nulls_first=True), "-created_at", "-pk")[:limit])


def user_token(user, token_id) -> ApiToken | None:
    """One of the user's own API tokens, revoked or not (another user's is as absent as a missing one)."""
    return ApiToken.objects.filter(pk=token_id, user=user).first()


def live_user_token(user, token_id) -> ApiToken | None:
    """One of the user's own API tokens with its project, unless it was revoked (the token just issued,
    shown once on the settings page)."""
    return ApiToken.objects.select_related("project").filter(pk=token_id, user=user, revoked_at__isnull=True).first()
