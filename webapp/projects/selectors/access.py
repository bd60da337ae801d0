"""The one place where per-project roles are enforced.

Every view and API endpoint reaches project data through these functions. A user
who is not a member of a project gets a 404 for it and for everything in it, so a
response never confirms that another team's object exists; a member whose role is
too low gets a 403.

A request made with an API token limited to one project (`user.token_scope`, set by
webapp.projects.services.projects.api_token_authenticate) sees only that project: lists leave the others
out, and naming one of the user's other projects or its objects gets a 403 that says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404

from webapp.projects.models import ROLE_RANK, Membership, Project, Role


@dataclass(frozen=True)
class TokenScope:
    """How the API token of this request narrows its user's roles (a browser session has none)."""

    project_id: int | None  # the one project the token works in; None: every project of the user
    project_name: str
    read_only: bool


def token_scope(user) -> TokenScope | None:
    return getattr(user, "token_scope", None)


def _outside_token_scope(user, project: Project) -> bool:
    scope = token_scope(user)
    return scope is not None and scope.project_id is not None and scope.project_id != project.pk


def _check_token_scope(user, project: Project) -> None:
    """403 for a member's project that the request's token is not limited to (the user may see it anyway)."""
    if _outside_token_scope(user, project):
        raise PermissionDenied(
            f"This API token is limited to the project “{token_scope(user).project_name}”, not {project.name}: "
            "use a token issued for this project, or one without a project limit."
        )


def role_in(user, project: Project) -> str | None:
    """The user's role in the project, or None when not a member (superusers count as owners).

    None too for a project outside the request's token scope.
    """
    if not user.is_authenticated or not user.is_active or _outside_token_scope(user, project):
        return None
    if user.is_superuser:
        return Role.OWNER
    return (
        Membership.objects.filter(user=user, project=project).values_list("role", flat=True).first()
    )


def has_role(user, project: Project, minimum: str) -> bool:
    role = role_in(user, project)
    return role is not None and ROLE_RANK[role] >= ROLE_RANK[minimum]


def projects_for_user(user, minimum: str = Role.VIEWER) -> QuerySet[Project]:
    """Projects in which the user holds at least `minimum` (only the token's project under a scoped token)."""
    projects = _member_projects(user, minimum)
    scope = token_scope(user)
    if scope is not None and scope.project_id is not None:
        projects = projects.filter(pk=scope.project_id)
    return projects


def _member_projects(user, minimum: str = Role.VIEWER) -> QuerySet[Project]:
    """Projects in which the user holds at least `minimum`, whatever the token's scope."""
    if not user.is_authenticated or not user.is_active:
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    allowed = [role for role, rank in ROLE_RANK.items() if rank >= ROLE_RANK[minimum]]
    return Project.objects.filter(memberships__user=user, memberships__role__in=allowed).distinct()


def for_user(queryset: QuerySet, user, minimum: str = Role.VIEWER, *, project_field: str = "project") -> QuerySet:
    """Restrict any queryset of project-owned rows to projects where the user holds `minimum`."""
    visible = projects_for_user(user, minimum).values("pk")
    return queryset.filter(**{f"{project_field}__in": visible})


def get_project_or_404(user, slug: str, minimum: str = Role.VIEWER) -> Project:
    """The project if the user may see it with at least `minimum`; 404 for non-members, 403 for low roles."""
    project = _member_projects(user, Role.VIEWER).filter(slug=slug).first()
    if project is None:
        raise Http404("No such project.")
    _check_token_scope(user, project)
    if not has_role(user, project, minimum):
        raise PermissionDenied(f"This needs the {minimum} role in {project.name}.")
    return project


def get_object_or_404_for_user(
    queryset: QuerySet, user, minimum: str = Role.VIEWER, *, project_field: str = "project", **lookup
) -> Model:
    """One project-owned object: 404 unless the user is a member, 403 when the role is too low."""
    visible = _member_projects(user, Role.VIEWER).values("pk")
    obj = queryset.filter(**{f"{project_field}__in": visible}).filter(**lookup).first()
    if obj is None:
        raise Http404("Not found.")
    project = _project_of(obj, project_field)
    _check_token_scope(user, project)
    if not has_role(user, project, minimum):
        raise PermissionDenied(f"This needs the {minimum} role in {project.name}.")
    return obj


def _project_of(obj: Model, project_field: str) -> Project:
    target = obj
    for part in project_field.split("__"):
        target = getattr(target, part)
    return target
