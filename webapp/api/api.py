"""API endpoints. Access goes through webapp.projects.access like every page."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied
from ninja import NinjaAPI
from ninja.errors import HttpError
from ninja.responses import Status

from webapp.api.auth import API_AUTH
from webapp.api.bounds import Text
from webapp.api.experiments import router as experiments_router
from webapp.api.schemas import ErrorOut, JobIn, JobOut, ProjectOut
from webapp.api.trajectories import router as trajectories_router
from webapp.projects.access import for_user, get_object_or_404_for_user, get_project_or_404, role_in
from webapp.projects.models import Role
from webapp.projects.selectors import project_list_for_user
from webapp.runs.models import Job
from webapp.runs.services.jobs import job_create, job_request_cancel

logger = logging.getLogger("webapp.api")

api = NinjaAPI(title="Crucible API", version="1", auth=API_AUTH, urls_namespace="api")
api.add_router("/", trajectories_router)
api.add_router("/", experiments_router)

# Job kinds a script may start directly; training kinds are started through runs.
DIRECT_JOB_KINDS = {"noop"}


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


@api.get("/projects/{slug}/jobs", response=list[JobOut], tags=["jobs"])
def list_jobs(request, slug: str, state: Text(16) | None = None, limit: int = 100):
    project = get_project_or_404(request.user, slug)
    jobs = for_user(Job.objects.filter(project=project), request.user)
    if state:
        jobs = jobs.filter(state=state)
    return list(jobs[: max(1, min(limit, 1000))])


@api.post("/projects/{slug}/jobs", response={201: JobOut, 400: ErrorOut}, tags=["jobs"])
def create_job(request, slug: str, body: JobIn):
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    if body.kind not in DIRECT_JOB_KINDS:
        raise HttpError(400, f"Job kind {body.kind!r} cannot be started directly; allowed: {sorted(DIRECT_JOB_KINDS)}. "
                             "Start training and evaluation jobs by creating a run.")
    return Status(201, job_create(project=project, kind=body.kind, payload=body.payload))


@api.get("/jobs/{job_id}", response=JobOut, tags=["jobs"])
def get_job(request, job_id: int):
    return get_object_or_404_for_user(Job.objects.all(), request.user, pk=job_id)


@api.post("/jobs/{job_id}/cancel", response={200: JobOut, 409: ErrorOut}, tags=["jobs"])
def cancel_job(request, job_id: int):
    job = get_object_or_404_for_user(Job.objects.all(), request.user, Role.EDITOR, pk=job_id)
    try:
        return job_request_cancel(job=job)
    except ValueError as exc:
        return Status(409, ErrorOut(detail=str(exc)))




@api.exception_handler(PermissionDenied)
def permission_denied(request, exc):
    return api.create_response(request, {"detail": str(exc) or "Permission denied."}, status=403)


@api.exception_handler(Exception)
def unexpected_error(request, exc):
    """A bug still answers JSON, as the rest of the API does; the traceback goes to the log only."""
    logger.error("Unhandled error in %s %s", request.method, request.path, exc_info=exc)
    return api.create_response(
        request, {"detail": "Internal error: the request could not be completed. It has been logged; "
                            "if it keeps happening, report it with the time of the request."}, status=500)
