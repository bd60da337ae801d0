"""Throttle bad API tokens per client address.

After CRUCIBLE_TOKEN_FAILURE_LIMIT bad bearer tokens from one address within
CRUCIBLE_TOKEN_COOLOFF_SECONDS, every bearer-token request from that address is answered
429 with Retry-After for CRUCIBLE_TOKEN_COOLOFF_SECONDS, before the token is even looked
up. Other addresses are unaffected. Counts live in the database (TokenFailure).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from webapp.api.models import TokenFailure
from webapp.projects.services.throttle import client_ip, in_words


def _limit() -> int:
    return settings.CRUCIBLE_TOKEN_FAILURE_LIMIT


def _cooloff() -> timedelta:
    return timedelta(seconds=settings.CRUCIBLE_TOKEN_COOLOFF_SECONDS)


def _client_key(request: HttpRequest) -> str:
    return client_ip(request)[:64] or "unknown"


def token_retry_after(request: HttpRequest) -> int | None:
    """Seconds this client must wait before its bearer tokens are looked at again, or None."""
    now = timezone.now()
    locked_until = (
        TokenFailure.objects.filter(client=_client_key(request), locked_until__gt=now)
        .values_list("locked_until", flat=True)
        .first()
    )
    if locked_until is None:
        return None
    return max(1, math.ceil((locked_until - now).total_seconds()))


def record_token_failure(request: HttpRequest) -> None:
    """Count one bad token from this client; lock it out at the limit."""
    now = timezone.now()
    window = _cooloff()
    client = _client_key(request)
    with transaction.atomic():
        row, created = TokenFailure.objects.select_for_update().get_or_create(
            client=client, defaults={"failures": 1, "window_start": now}
        )
        if not created:
            if row.window_start <= now - window:
                row.failures, row.window_start = 1, now
            else:
                row.failures += 1
        if row.failures >= _limit():
            row.locked_until = now + window
        row.save()
        # Forget clients whose window and lock are both over.
        TokenFailure.objects.filter(window_start__lte=now - window).filter(
            Q(locked_until__isnull=True) | Q(locked_until__lte=now)
        ).exclude(pk=row.pk).delete()


def token_lockout_response(seconds: int) -> HttpResponse:
    response = JsonResponse(
        {"detail": f"Too many bad API tokens from your address. Try again in {in_words(seconds)}."},
        status=429,
    )
    response["Retry-After"] = str(seconds)
    return response


def _has_bearer_token(request: HttpRequest) -> bool:
    # Parsed as ninja's HttpBearer parses it, so every header TokenAuth counts is also gated here.
    return request.headers.get("Authorization", "").split(" ")[0].lower() == "bearer"


class BadTokenThrottleMiddleware:
    """Refuses bearer-token requests from a locked-out client before any token is checked."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _has_bearer_token(request):
            seconds = token_retry_after(request)
            if seconds is not None:
                return token_lockout_response(seconds)
        return self.get_response(request)
