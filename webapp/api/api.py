"""API endpoints. Access goes through webapp.projects.selectors.access like every page."""

from __future__ import annotations

import json
import logging
import math

from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.http.multipartparser import MultiPartParserError
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError
from ninja.parser import Parser
from ninja.renderers import JSONRenderer

from webapp.api.auth import API_AUTH
from webapp.api.checkpoints import router as checkpoints_router
from webapp.api.experiments import router as experiments_router
from webapp.api.failures import router as failures_router
from webapp.api.jobs import router as jobs_router
from webapp.api.openapi import add_error_responses, state_input_rules
from webapp.api.reviews import router as reviews_router
from webapp.api.run_import import router as run_import_router
from webapp.api.runs import router as runs_router
from webapp.api.schemas import ErrorOut, ProjectOut
from webapp.api.trajectories import router as trajectories_router
from webapp.api.verifiers import router as verifiers_router
from webapp.common.bounds import JsonInputError, body_too_big_message, json_loads_bounded
from webapp.projects.selectors.access import get_project_or_404, role_in
from webapp.runs.selectors.overview import project_list_for_user

logger = logging.getLogger("webapp.api")



class BoundedJsonParser(Parser):
    """Request bodies through webapp.common.bounds: no NaN/Infinity/1e400, no 64-bit overflow, bounded nesting.

    One place for every endpoint: a number PostgreSQL's JSON refuses, or nesting that would
    exhaust the stack of whatever walks it next, is a 422 naming its path before any view runs.
    """

    def parse_body(self, request):
        return json_loads_bounded(request.body)


class FiniteJsonRenderer(JSONRenderer):
    """Answers that are always JSON: a non-finite float stored in a float column is sent as null."""

    def render(self, request, data, *, response_status):
        try:
            return json.dumps(data, cls=self.encoder_class, allow_nan=False)
        except ValueError:
            return json.dumps(_finite(data), cls=self.encoder_class, allow_nan=False)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


class CrucibleAPI(NinjaAPI):
    """The NinjaAPI whose OpenAPI document declares the error answers and the input rules shared code
    applies (webapp.api.openapi)."""

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        document = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        return state_input_rules(add_error_responses(document))


api = CrucibleAPI(title="Crucible API", version="1", auth=API_AUTH, urls_namespace="api",
                  parser=BoundedJsonParser(), renderer=FiniteJsonRenderer())
api.add_router("/", trajectories_router)
api.add_router("/", experiments_router)
api.add_router("/", run_import_router)  # before runs_router: /runs/import is not a run id
api.add_router("/", runs_router)
api.add_router("/", checkpoints_router)
api.add_router("/", jobs_router)
api.add_router("/", reviews_router)
api.add_router("/", failures_router)
api.add_router("/", "webapp.api.datasets.router")
api.add_router("/", verifiers_router)


@api.get("/projects", response=list[ProjectOut], tags=["projects"])
def list_projects(request):
    return [
        ProjectOut(slug=p.slug, name=p.name, description=p.description, role=role_in(request.user, p))
        for p in project_list_for_user(request.user)
    ]


@api.get("/projects/{slug}", response={200: ProjectOut, 404: ErrorOut}, tags=["projects"])
def get_project(request, slug: str):
    project = get_project_or_404(request.user, slug)
    return ProjectOut(slug=project.slug, name=project.name, description=project.description,
                      role=role_in(request.user, project))


@api.exception_handler(PermissionDenied)
def permission_denied(request, exc):
    return api.create_response(request, {"detail": str(exc) or "Permission denied."}, status=403)


def _field_name(loc: list | tuple) -> str:
    """A pydantic error location as the dotted field a client sent: body.trajectories.0.tokens_in -> trajectories.0.tokens_in."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "form", "header", "cookie", "file"):
        source, parts = parts[0], parts[1:]
        if source == "body" and len(parts) > 1:
            parts = parts[1:]  # the view's parameter name (`body`), not a field of the request
    return ".".join(parts) or "request"


@api.exception_handler(ValidationError)
def validation_error(request, exc: ValidationError):
    """422 with one message and the errors by field, the same shape on every endpoint (pages show them per field)."""
    errors: dict[str, str] = {}
    for error in exc.errors:
        errors.setdefault(_field_name(error.get("loc", ())), str(error.get("msg", "invalid")))
    detail = "; ".join(f"{field}: {message}" for field, message in errors.items())
    return api.create_response(request, {"detail": detail, "errors": errors}, status=422)


@api.exception_handler(HttpError)
def http_error(request, exc: HttpError):
    """ninja turns any failure of the body parser into a bare 400; say what was wrong instead."""
    cause = exc.__cause__
    if isinstance(cause, JsonInputError):
        field = cause.path or "body"
        return api.create_response(request, {"detail": f"{field}: {cause.reason}", "errors": {field: cause.reason}},
                                   status=422)
    if isinstance(cause, json.JSONDecodeError | UnicodeDecodeError):
        return api.create_response(request, {"detail": f"The request body is not valid JSON ({cause}); "
                                                       "send a JSON document encoded as UTF-8."}, status=400)
    return api.create_response(request, {"detail": str(exc)}, status=exc.status_code)


@api.exception_handler(RequestDataTooBig)
def request_too_big(request, exc):
    """413 with the limit, instead of the catch-all's 500 (Django raises this on reading the body)."""
    return api.create_response(request, {"detail": body_too_big_message(request)}, status=413)


@api.exception_handler(MultiPartParserError)
def malformed_multipart(request, exc):
    return api.create_response(request, {"detail": f"The multipart upload could not be read ({exc}); send it as "
                                                   "multipart/form-data with a valid boundary."}, status=400)


@api.exception_handler(SuspiciousOperation)
def suspicious_request(request, exc):
    """Too many fields or files, a bad header and the like: the client's request, so a 400 that says it."""
    return api.create_response(request, {"detail": f"The request was refused: {exc}"}, status=400)


@api.exception_handler(Exception)
def unexpected_error(request, exc):
    """A bug still answers JSON, as the rest of the API does; the traceback goes to the log only."""
    logger.error("Unhandled error in %s %s", request.method, request.path, exc_info=exc)
    return api.create_response(
        request, {"detail": "Internal error: the request could not be completed. It has been logged; "
                            "if it keeps happening, report it with the time of the request."}, status=500)
