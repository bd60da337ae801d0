"""API endpoints. Access goes through webapp.projects.access like every page."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied
from ninja import NinjaAPI
from ninja.errors import ValidationError

from webapp.api.auth import API_AUTH
from webapp.api.checkpoints import router as checkpoints_router
from webapp.api.experiments import router as experiments_router
from webapp.api.failures import router as failures_router
from webapp.api.jobs import router as jobs_router
from webapp.api.reviews import router as reviews_router
from webapp.api.run_import import router as run_import_router
from webapp.api.runs import router as runs_router
from webapp.api.schemas import ErrorOut, ProjectOut
from webapp.api.trajectories import router as trajectories_router
from webapp.api.verifiers import router as verifiers_router
from webapp.projects.access import get_project_or_404, role_in
from webapp.projects.selectors import project_list_for_user

logger = logging.getLogger("webapp.api")

api = NinjaAPI(title="Crucible API", version="1", auth=API_AUTH, urls_namespace="api")
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


@api.exception_handler(Exception)
def unexpected_error(request, exc):
    """A bug still answers JSON, as the rest of the API does; the traceback goes to the log only."""
    logger.error("Unhandled error in %s %s", request.method, request.path, exc_info=exc)
    return api.create_response(
        request, {"detail": "Internal error: the request could not be completed. It has been logged; "
                            "if it keeps happening, report it with the time of the request."}, status=500)
