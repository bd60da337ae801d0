"""API authentication: `Authorization: Bearer cru_…` tokens, or the browser session.

A request with neither a valid token nor a logged-in session gets 401 on every method.
CSRF is checked only for a logged-in session (the case CSRF protects): django-ninja's own
session auth checks it first, which answered anonymous POSTs with 403 "CSRF check Failed".
Bad tokens are counted per client address (webapp.api.throttle).
"""

from __future__ import annotations

from ninja.security import HttpBearer
from ninja.security import SessionAuth as NinjaSessionAuth

from webapp.api.throttle import record_token_failure
from webapp.projects.services import api_token_authenticate


class TokenAuth(HttpBearer):
    def authenticate(self, request, token: str):
        user = api_token_authenticate(token)
        if user is None:
            record_token_failure(request)
            return None
        request.user = user
        return user


class SessionAuth(NinjaSessionAuth):
    """The Django session; no session, no CSRF check (and no 403): the request is just unauthenticated."""

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        return super().__call__(request)  # CSRF check, 403 "CSRF check Failed" without the token


TOKEN_AUTH = TokenAuth()
API_AUTH = [TOKEN_AUTH, SessionAuth()]
