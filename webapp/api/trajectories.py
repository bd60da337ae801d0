"""API for trajectories: production logging, re-scoring and turning failures into evals."""

from __future__ import annotations

from ninja import Router
from ninja.errors import HttpError
from ninja.responses import Status

from webapp.api.bounds import Offset, RowId, Text
from webapp.api.schemas import (
    EvalsIn,
    EvalsOut,
    ProductionBatchIn,
    ProductionBatchOut,
    RescoreIn,
    RescoreOut,
    TrajectoryOut,
)
from webapp.datasets.models import TaskDataset
from webapp.projects.access import get_object_or_404_for_user, get_project_or_404
from webapp.projects.models import Role
from webapp.runs.models import Run
from webapp.trajectories.models import Trajectory
from webapp.trajectories.services.evals import tasks_from_trajectories
from webapp.trajectories.services.production import (
    ProductionLogError,
    production_trajectories_log,
)
from webapp.trajectories.services.rescore import rescore_start
from webapp.verifiers.models import Verifier

router = Router(tags=["trajectories"])


def _verifier(project, name: str) -> Verifier:
    verifier = project.verifiers.filter(name=name).first()
    if verifier is None:
        names = ", ".join(project.verifiers.values_list("name", flat=True)) or "none yet"
        raise HttpError(400, f"No verifier named {name!r} in this project (available: {names}).")
    return verifier


@router.post("/projects/{slug}/trajectories", response={201: ProductionBatchOut, 200: ProductionBatchOut})
def log_production(request, slug: str, body: ProductionBatchIn):
    """Log an agent's production runs; they are verified on the verify queue when `verifier` is given."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    verifier = _verifier(project, body.verifier) if body.verifier else None
    items = [t.to_item() for t in body.trajectories]
    try:
        result = production_trajectories_log(project=project, items=items, verifier=verifier)
    except ProductionLogError as exc:
        raise HttpError(400, str(exc)) from None
    out = ProductionBatchOut(created=result.created, verify_job_id=result.job.pk if result.job else None,
                             trajectories=result.trajectories)
    return Status(201 if result.created else 200, out)


@router.get("/projects/{slug}/trajectories", response=list[TrajectoryOut])
def list_trajectories(request, slug: str, source: Text(16) | None = None, run_id: RowId | None = None,
                      bucket: Text(32) | None = None, passed: bool | None = None, limit: int = 100,
                      offset: Offset = 0):
    project = get_project_or_404(request.user, slug)
    rows = Trajectory.objects.filter(project=project).order_by("-id")
    if source:
        rows = rows.filter(source=source)
    if run_id is not None:
        rows = rows.filter(run_id=run_id)
    if bucket:
        rows = rows.filter(failure_bucket=bucket)
    if passed is not None:
        rows = rows.filter(passed=passed)
    return list(rows[max(0, offset): max(0, offset) + max(1, min(limit, 1000))])


@router.post("/runs/{run_id}/rescore", response={201: RescoreOut})
def rescore_run(request, run_id: int, body: RescoreIn):
    """Score the run's stored trajectories with another verifier version; originals are kept."""
    run = get_object_or_404_for_user(Run.objects.all(), request.user, Role.EDITOR, pk=run_id)
    verifier = _verifier(run.project, body.verifier)
    version = verifier.versions.filter(version=body.version).first() if body.version else verifier.latest_version
    if version is None:
        raise HttpError(400, f"Verifier {verifier.name!r} has no version {body.version}.")
    rescore = rescore_start(run=run, verifier_version=version, actor=request.user)
    return Status(201, RescoreOut(id=rescore.pk, run_id=run.pk, verifier_version_id=version.pk,
                                  job_id=rescore.job_id, summary=rescore.summary))


@router.get("/rescores/{rescore_id}", response=RescoreOut)
def get_rescore(request, rescore_id: int):
    from webapp.trajectories.models import Rescore

    rescore = get_object_or_404_for_user(Rescore.objects.all(), request.user, pk=rescore_id)
    return RescoreOut(id=rescore.pk, run_id=rescore.run_id, verifier_version_id=rescore.verifier_version_id,
                      job_id=rescore.job_id, summary=rescore.summary)


@router.post("/projects/{slug}/evals-from-trajectories", response={201: EvalsOut, 200: EvalsOut})
def evals_from_trajectories(request, slug: str, body: EvalsIn):
    """Turn failures into evals: chosen trajectories (or a run's whole bucket) become dataset tasks."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    dataset = TaskDataset.objects.filter(project=project, name=body.dataset).order_by("-version").first()
    if dataset is None:
        raise HttpError(400, f"No dataset named {body.dataset!r} in this project.")
    rows = Trajectory.objects.filter(project=project)
    if body.trajectory_ids:
        rows = rows.filter(pk__in=body.trajectory_ids)
    elif body.run_id is not None and body.bucket:
        rows = rows.filter(run_id=body.run_id, failure_bucket=body.bucket)
    else:
        raise HttpError(400, "Say which trajectories: `trajectory_ids`, or `run_id` with `bucket`.")
    try:
        report = tasks_from_trajectories(trajectories=list(rows.select_related("task")), dataset=dataset,
                                         split=body.split, actor=request.user)
    except ValueError as exc:
        raise HttpError(400, str(exc)) from None
    out = EvalsOut(dataset=report.dataset.name if report.dataset else None,
                   version=report.dataset.version if report.dataset else None, created=report.created,
                   duplicates=report.duplicates, skipped=report.skipped)
    return Status(201 if report.created else 200, out)
