"""Writes for projects, memberships, API tokens and the audit log."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from webapp.projects.models import (
    ApiToken,
    AuditEvent,
    Membership,
    Project,
    Role,
    Theme,
    UserPreference,
)

TOKEN_PREFIX = "cru_"


def audit_log(*, project: Project | None, actor, action: str, target, data: dict | None = None) -> AuditEvent:
    """Record one audited action; `target` is any model instance."""
    return AuditEvent.objects.create(
        project=project,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        data=data or {},
    )


@transaction.atomic
def project_create(*, name: str, owner, slug: str | None = None, description: str = "") -> Project:
    """A new project with its creator as owner."""
    base = slugify(slug or name)[:70] or "project"
    candidate, n = base, 1
    while Project.objects.filter(slug=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    project = Project.objects.create(name=name, slug=candidate, description=description, created_by=owner)
    Membership.objects.create(user=owner, project=project, role=Role.OWNER)
    audit_log(project=project, actor=owner, action="project.create", target=project)
    return project


@transaction.atomic
def membership_set_role(*, project: Project, user, role: str, actor) -> Membership:
    """Add a member or change a member's role (audited). Refuses to remove the last owner."""
    if role not in Role.values:
        raise ValueError(f"Unknown role {role!r}: choose one of {', '.join(Role.values)}.")
    membership, created = Membership.objects.select_for_update().get_or_create(
        user=user, project=project, defaults={"role": role}
    )
    previous = None if created else membership.role
    if not created and previous != role:
        if previous == Role.OWNER and not _other_owner_exists(project, user):
            raise ValueError("A project needs at least one owner: make someone else owner first.")
        membership.role = role
        membership.save(update_fields=["role"])
    audit_log(
        project=project, actor=actor, action="membership.set_role", target=membership,
        data={"user": user.get_username(), "from": previous, "to": role},
    )
    return membership


def _other_owner_exists(project: Project, user) -> bool:
    return Membership.objects.filter(project=project, role=Role.OWNER).exclude(user=user).exists()


@dataclass(frozen=True)
class IssuedToken:
    """The token row and the raw token, which exists only in this object and is shown once."""

    token: ApiToken
    raw: str


def hash_token(raw: str) -> str:
    # Tokens are 256 random bits, so a plain SHA-256 is enough (no password stretching).
    return hashlib.sha256(raw.encode()).hexdigest()


def api_token_issue(*, user, name: str) -> IssuedToken:
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=raw[:12], token_hash=hash_token(raw))
    return IssuedToken(token=token, raw=raw)


def api_token_authenticate(raw: str):
    """The active user owning this token, or None; records last use."""
    if not raw or not raw.startswith(TOKEN_PREFIX):
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=hash_token(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token.user


def api_token_revoke(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


def user_theme_set(*, user, theme: str) -> None:
    """Remember the user's theme (auto follows the system's light or dark setting)."""
    if theme not in Theme.values:
        raise ValueError(f"Unknown theme {theme!r}; choose one of {', '.join(Theme.values)}.")
    UserPreference.objects.update_or_create(user=user, defaults={"theme": theme})
