"""The API docs (Swagger UI) and the OpenAPI schema are for signed-in people and token holders.

Swagger UI itself is served from our own static files: with `ninja` in INSTALLED_APPS,
django-ninja renders `ninja/swagger.html`, which loads `ninja/swagger-ui-bundle.js` and
`ninja/swagger-ui-init.js` from STATIC_URL and keeps its settings in a JSON data block, so the
page works offline under our strict CSP (script-src 'self', no inline scripts).
"""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ImproperlyConfigured
from django.http import JsonResponse

from webapp.api.auth import TOKEN_AUTH

# django-ninja's URL names for the schema and the docs page.
SCHEMA_URL_NAME = "openapi-json"
DOCS_URL_NAME = "openapi-view"


def login_or_token_required(view, *, redirect: bool):
    """A logged-in session or a valid bearer token; otherwise the login page (docs) or 401 (schema)."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.user.is_authenticated or TOKEN_AUTH.accepts(request):
            return view(request, *args, **kwargs)
        if redirect:
            return redirect_to_login(request.get_full_path())
        return JsonResponse({"detail": "Unauthorized"}, status=401)

    return wrapped


def protect_docs(urls):
    """Wrap the docs and schema views of a NinjaAPI's `urls` (as given to path()) in the check above."""
    patterns, app_name, namespace = urls
    wrapped = set()
    for pattern in patterns:
        name = getattr(pattern, "name", None)
        if name in (SCHEMA_URL_NAME, DOCS_URL_NAME):
            pattern.callback = login_or_token_required(pattern.callback, redirect=name == DOCS_URL_NAME)
            wrapped.add(name)
    if wrapped != {SCHEMA_URL_NAME, DOCS_URL_NAME}:
        raise ImproperlyConfigured(f"django-ninja's docs/schema URLs not found (found {sorted(wrapped)}); "
                                   "they would be served without login.")
    return patterns, app_name, namespace
