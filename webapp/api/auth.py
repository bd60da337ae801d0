"""API authentication: `Authorization: Bearer cru_…` tokens, or the browser session.

A request with neither a valid token nor a logged-in session gets 401 on every method.
CSRF is checked only for a logged-in session (the case CSRF protects): django-ninja's own
session auth checks it first, which answered anonymous POSTs with 403 "CSRF check Failed".
Bad tokens are counted per client address (webapp.api.throttle).

A token's scope narrows what its user may do: an expired token gets 401 saying when it expired, a
read-only token 403 on any method but GET, HEAD and OPTIONS, and a token limited to one project
403 on the user's other projects (webapp.projects.selectors.access checks that, for pages' and API's reads alike).
"""

from __future__ import annotations

from ninja.errors import HttpError
from ninja.security import HttpBearer
from ninja.security import SessionAuth as NinjaSessionAuth

from webapp.api.throttle import record_token_failure
from webapp.projects.selectors.access import get_project_or_404, token_scope
from webapp.projects.services.projects import TokenExpired, api_token_authenticate

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class TokenAuth(HttpBearer):
    def authenticate(self, request, token: str):
        try:
            user = api_token_authenticate(token)
        except TokenExpired as exc:
            raise HttpError(401, str(exc)) from None
        if user is None:
            record_token_failure(request)
            return None
        if token_scope(user).read_only and request.method not in READ_METHODS:
            raise HttpError(403, f"This API token is read-only: it may only read (GET), not {request.method}. "
                                 "Use a read-write token to change anything.")
        request.user = user
        return user

    def accepts(self, request) -> bool:
        """Whether the request carries a token that may be used now (for views outside the API, e.g. the docs)."""
        try:
            return self(request) is not None
        except HttpError:
            return False


class SessionAuth(NinjaSessionAuth):
    """The Django session; no session, no CSRF check (and no 403): the request is just unauthenticated.

    The CSRF check reads the form body (`csrfmiddlewaretoken`), so on a path of a project the
    caller's membership is checked first: a non-member or an unknown project is the 404 a token
    caller gets, whatever the body, and a broken multipart upload is only a 400 for members.
    """

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        _project_of_path_or_404(request, user)
        return super().__call__(request)  # CSRF check, 403 "CSRF check Failed" without the token


def _project_of_path_or_404(request, user) -> None:
    """Http404 when the URL names a project (`slug`) the user is not a member of; roles are the view's to check."""
    match = getattr(request, "resolver_match", None)
    slug = match.kwargs.get("slug") if match is not None else None
    if slug is not None:
        get_project_or_404(user, slug)


TOKEN_AUTH = TokenAuth()
API_AUTH = [TOKEN_AUTH, SessionAuth()]
