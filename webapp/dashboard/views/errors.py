"""Error pages Django renders itself (config.urls sets them as handlers)."""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse, JsonResponse
from django.utils.html import escape
from django.views import defaults

from webapp.common.bounds import body_too_big_message


def bad_request(request, exception=None):
    """A body over DATA_UPLOAD_MAX_MEMORY_SIZE is a 413 that says the limit; any other 400 as Django renders it.

    Django reads the body in CsrfViewMiddleware or the view and turns RequestDataTooBig into a
    bare 400 here; the API answers it itself, this covers pages (and anything read before the API).
    """
    if not isinstance(exception, RequestDataTooBig):
        return defaults.bad_request(request, exception)
    message = body_too_big_message(request)
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message}, status=413)
    return HttpResponse(
        "<!doctype html>\n<html lang=\"en\">\n<head><title>Request too large (413)</title></head>\n"
        f"<body>\n  <h1>Request too large (413)</h1>\n  <p>{escape(message)}</p>\n"
        "  <p>Go back to keep what you typed.</p>\n</body>\n</html>\n",
        status=413,
    )
