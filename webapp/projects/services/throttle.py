"""Failed-login throttling (django-axes) and the client address it and the API token throttle use.

Policy: AXES_LOCKOUT_PARAMETERS locks a user name *from one client address* after
AXES_FAILURE_LIMIT failures within AXES_COOLOFF_TIME; the right password is refused too
until the cool-off has passed. The same user name from another address, and other user
names from the same address, are not affected. State is in axes' database tables, so every
gunicorn process and host sees the same counts.
"""

from __future__ import annotations

import ipaddress
import math
from datetime import timedelta

from axes.backends import AxesStandaloneBackend
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off
from django.conf import settings
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone


def client_ip(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, or X-Forwarded-For only behind trusted proxies.

    With CRUCIBLE_TRUSTED_PROXY_COUNT = N > 0 (N reverse proxies in front of gunicorn, each
    appending the address it saw to X-Forwarded-For, as nginx's $proxy_add_x_forwarded_for
    does), the client is the N-th address from the right; entries further left were sent by
    the client and could be anything. With the default 0 the header is ignored, so a client
    cannot choose its own address to dodge the throttles.
    """
    remote = request.META.get("REMOTE_ADDR") or ""
    hops = getattr(settings, "CRUCIBLE_TRUSTED_PROXY_COUNT", 0)
    if hops > 0:
        forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
        if len(forwarded) >= hops:
            candidate = forwarded[-hops]
            try:
                return str(ipaddress.ip_address(candidate))
            except ValueError:
                pass
    return remote


def in_words(seconds: int) -> str:
    """'45 seconds', '1 minute', '15 minutes', '2 hours'."""
    seconds = max(1, int(seconds))
    if seconds < 90:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = math.ceil(seconds / 60)
    if minutes < 120:
        return f"{minutes} minutes"
    return f"{math.ceil(minutes / 60)} hours"


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' lockout check, first in AUTHENTICATION_BACKENDS; it never logs anyone in itself.

    Calls to authenticate() without a request (the shell, management commands, tests) come
    from no HTTP client and pass through to the next backend instead of raising.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def login_retry_after(request: HttpRequest, credentials: dict | None) -> int:
    """Seconds until the locked-out user name may try again from this address."""
    cool_off = get_cool_off(request) or timedelta(0)
    handler = AxesProxyHandler.get_implementation()
    latest = None
    for attempts in getattr(handler, "get_user_attempts", lambda *a: [])(request, credentials):
        newest = attempts.aggregate(newest=Max("attempt_time"))["newest"]
        if newest and (latest is None or newest > latest):
            latest = newest
    if latest is None:
        return max(1, int(cool_off.total_seconds()))
    return max(1, math.ceil((latest + cool_off - timezone.now()).total_seconds()))


def login_lockout_response(request: HttpRequest, original_response=None, credentials=None) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: 429, Retry-After, and a page that says when to try again."""
    seconds = login_retry_after(request, credentials)
    retry_at = timezone.now() + timedelta(seconds=seconds)
    message = (
        f"Too many failed logins for this user name from your address. "
        f"Try again in {in_words(seconds)} (after {timezone.localtime(retry_at):%H:%M} {timezone.get_current_timezone_name()})."
    )
    response = render(request, "registration/locked_out.html", {"lockout_message": message}, status=429)
    response["Retry-After"] = str(seconds)
    return response
