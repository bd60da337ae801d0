"""Security headers that Django does not set by itself."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

from webapp.common.bounds import unstorable_text_reason

# Everything is served from our own origin (plotly.js and htmx included), so the
# policy can forbid inline scripts: model output that slipped past escaping still
# could not run.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response


def unstorable_url_part(request: HttpRequest) -> str | None:
    """What in the URL cannot be stored or looked up (a NUL, a lone surrogate), named, or None."""
    reason = unstorable_text_reason(request.path)
    if reason:
        return f"The URL path {reason}."
    for name, values in request.GET.lists():
        for text in (name, *values):
            reason = unstorable_text_reason(text)
            if reason:
                return f"Query parameter {name!r} {reason}."
    return None


class UnstorableUrlMiddleware:
    """Answers 400 (JSON under /api/) to URLs that no view could look up without a database error."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        problem = unstorable_url_part(request)
        if problem is None:
            return self.get_response(request)
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": problem}, status=400)
        return HttpResponseBadRequest(problem, content_type="text/plain; charset=utf-8")
