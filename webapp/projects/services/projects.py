"""Writes for projects, memberships, API tokens and the audit log."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from webapp.projects.models import (
    ApiToken,
    AuditEvent,
    Membership,
    Project,
    Role,
    Theme,
    TokenAccess,
    UserPreference,
)
from webapp.projects.selectors.access import TokenScope, has_role

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


class TokenOptionsError(ValueError):
    """A token's scope or expiry cannot be issued as asked; the message says what to give instead."""


class TokenExpired(ValueError):
    """A real token past its expiry: answered 401 with when it expired, so its owner issues another."""


def api_token_issue(*, user, name: str, access: str = TokenAccess.READ_WRITE, project: Project | None = None,
                    expires_at=None) -> IssuedToken:
    """Issue a token; `access`, `project` and `expires_at` narrow it (read-only, one project, an end)."""
    api_token_options_check(user=user, access=access, project=project, expires_at=expires_at)
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=raw[:12], token_hash=hash_token(raw),
                                    access=access, project=project, expires_at=expires_at)
    return IssuedToken(token=token, raw=raw)


def api_token_options_check(*, user, access: str, project: Project | None, expires_at) -> None:
    """Refuse a scope the token could not work with: an unknown access, a past expiry, a foreign project."""
    if access not in TokenAccess.values:
        raise TokenOptionsError(f"Unknown access {access!r}: choose one of {', '.join(TokenAccess.values)}.")
    if expires_at is not None and expires_at <= timezone.now():
        raise TokenOptionsError("The expiry must be in the future: pick a later date, or none for no expiry.")
    if project is not None and not has_role(user, project, Role.VIEWER):
        raise TokenOptionsError(f"{user.get_username()} is not a member of the project {project.slug!r}: a token "
                                "can only be limited to a project its user belongs to.")


def api_token_authenticate(raw: str):
    """The active user owning this token with its scope attached (`user.token_scope`), or None.

    Records last use. An expired token raises TokenExpired (it is a real token, not a guess, so
    its owner is told it expired rather than that it is unknown).
    """
    if not raw or not raw.startswith(TOKEN_PREFIX):
        return None
    token = (
        ApiToken.objects.select_related("user", "project")
        .filter(token_hash=hash_token(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    if token.is_expired(now):
        raise TokenExpired(
            f"This API token ({token.prefix}…, “{token.name}”) expired on {token.expires_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC: "
            "issue a new one on a project's settings page or with `manage.py crucible_token create`."
        )
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    user = token.user
    user.token_scope = TokenScope(
        project_id=token.project_id, project_name=token.project.name if token.project else "",
        read_only=token.read_only,
    )
    return user


def api_token_revoke(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


def user_theme_set(*, user, theme: str) -> None:
    """Remember the user's theme (auto follows the system's light or dark setting)."""
    if theme not in Theme.values:
        raise ValueError(f"Unknown theme {theme!r}; choose one of {', '.join(Theme.values)}.")
    UserPreference.objects.update_or_create(user=user, defaults={"theme": theme})


# --- the project settings page: members, price --------------------------------------------------


class MembershipExists(ValueError):
    """The user is a member already: change their role instead of adding them again."""


def _lock_owners(project: Project) -> list[Membership]:
    """Lock the project's owner memberships (in one order, so two writers never deadlock).

    Under PostgreSQL this serialises the "is there another owner?" check of concurrent role
    changes and removals, so two owners demoting each other cannot leave the project without one.
    """
    return list(Membership.objects.select_for_update().filter(project=project, role=Role.OWNER).order_by("pk"))


@transaction.atomic
def membership_add(*, project: Project, user, role: str, actor) -> Membership:
    """Add a new member (audited as membership_set_role audits an addition); refuses a current member."""
    if role not in Role.values:
        raise ValueError(f"Unknown role {role!r}: choose one of {', '.join(Role.values)}.")
    try:
        with transaction.atomic():
            membership = Membership.objects.create(user=user, project=project, role=role)
    except IntegrityError:
        current = Membership.objects.filter(user=user, project=project).values_list("role", flat=True).first()
        raise MembershipExists(f"{user.get_username()} is already a member ({current}); "
                               "change their role in the list instead.") from None
    audit_log(project=project, actor=actor, action="membership.set_role", target=membership,
              data={"user": user.get_username(), "from": None, "to": role})
    return membership


@transaction.atomic
def membership_change_role(*, membership: Membership, role: str, actor) -> Membership:
    """Change an existing member's role through membership_set_role, with the owners locked first."""
    _lock_owners(membership.project)
    if not Membership.objects.select_for_update().filter(pk=membership.pk).exists():
        raise ValueError(f"{membership.user.get_username()} is no longer a member of this project.")
    return membership_set_role(project=membership.project, user=membership.user, role=role, actor=actor)


@transaction.atomic
def membership_remove(*, membership: Membership, actor) -> None:
    """Remove a member (audited). Refuses to remove the last owner."""
    project = membership.project
    _lock_owners(project)
    current = Membership.objects.select_for_update().filter(pk=membership.pk).first()
    if current is None:
        return  # removed meanwhile
    if current.role == Role.OWNER and not _other_owner_exists(project, current.user):
        raise ValueError("A project needs at least one owner: make someone else owner first.")
    audit_log(project=project, actor=actor, action="membership.remove", target=current,
              data={"user": current.user.get_username(), "from": current.role})
    current.delete()


# Project.price_per_device_hour is a DecimalField(max_digits=10, decimal_places=4).
PRICE_DECIMAL_PLACES = 4
PRICE_MAX = Decimal("999999.9999")


def project_price_set(*, project: Project, price: Decimal | None, actor) -> Project:
    """Set (or clear, with None) the price of one device-hour used for cost estimates (audited)."""
    if price is not None:
        if not price.is_finite():
            raise ValueError("The price must be a finite number.")
        if price < 0:
            raise ValueError("The price cannot be negative.")
        if price > PRICE_MAX:
            raise ValueError(f"The price can be at most {PRICE_MAX:,}.")
        if -price.as_tuple().exponent > PRICE_DECIMAL_PLACES and price != round(price, PRICE_DECIMAL_PLACES):
            raise ValueError(f"The price can have at most {PRICE_DECIMAL_PLACES} decimal places.")
    with transaction.atomic():
        previous = Project.objects.select_for_update().filter(pk=project.pk).values_list(
            "price_per_device_hour", flat=True).first()
        Project.objects.filter(pk=project.pk).update(price_per_device_hour=price)
        project.price_per_device_hour = price
        if previous != price:
            audit_log(project=project, actor=actor, action="project.set_price", target=project,
                      data={"from": None if previous is None else str(previous),
                            "to": None if price is None else str(price)})
    return project
