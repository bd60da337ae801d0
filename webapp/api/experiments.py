"""API for experiments (the whole pipeline as one object) and checkpoint promotion."""

from __future__ import annotations

from ninja import Router
from ninja.errors import HttpError
from ninja.responses import Status

from webapp.api.bounds import Text
from webapp.api.schemas import AliasOut, ExperimentIn, ExperimentOut, PromoteIn
from webapp.projects.access import get_object_or_404_for_user, get_project_or_404
from webapp.projects.models import Role
from webapp.runs.models import Checkpoint, CheckpointAlias, Experiment
from webapp.runs.services.experiments import ExperimentError, experiment_create
from webapp.runs.services.promotion import (
    AliasConflict,
    GatesNotPassed,
    InvalidAliasName,
    alias_rollback,
    checkpoint_promote,
)

router = Router(tags=["experiments"])


def _named(queryset, name: str, what: str):
    obj = queryset.filter(name=name).order_by(*(["-version"] if what == "dataset" else [])).first()
    if obj is None:
        raise HttpError(400, f"No {what} named {name!r} in this project.")
    return obj


@router.post("/projects/{slug}/experiments", response={201: ExperimentOut})
def create_experiment(request, slug: str, body: ExperimentIn):
    """Baseline -> SFT if needed -> GRPO -> held-out eval -> promotion gates, each stage a job."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    dataset = _named(project.datasets, body.dataset, "dataset")
    verifier = _named(project.verifiers, body.verifier, "verifier")
    model = _named(project.model_specs, body.model, "model")
    try:
        experiment = experiment_create(project=project, name=body.name, dataset=dataset,
                                       verifier_version=verifier.latest_version, model=model, actor=request.user,
                                       config=body.config)
    except ExperimentError as exc:
        raise HttpError(400, str(exc)) from None
    return Status(201, experiment)


@router.get("/experiments/{experiment_id}", response=ExperimentOut)
def get_experiment(request, experiment_id: int):
    return get_object_or_404_for_user(Experiment.objects.all(), request.user, pk=experiment_id)


@router.post("/checkpoints/{checkpoint_id}/promote", response={200: AliasOut, 400: dict, 409: dict})
def promote_checkpoint(request, checkpoint_id: int, body: PromoteIn):
    """Point an alias (default `production`) at this checkpoint; audited, reversible.

    Only a checkpoint whose experiment passed its gates is promoted as asked; any other
    needs `force: true` and a reason, which the alias history and the audit log keep.
    """
    checkpoint = get_object_or_404_for_user(Checkpoint.objects.select_related("run"), request.user, Role.OWNER,
                                            project_field="run__project", pk=checkpoint_id)
    try:
        alias = checkpoint_promote(checkpoint=checkpoint, alias=body.alias, actor=request.user, reason=body.reason,
                                   force=body.force)
    except InvalidAliasName as exc:
        return Status(400, {"detail": str(exc)})
    except (AliasConflict, GatesNotPassed) as exc:
        return Status(409, {"detail": str(exc)})
    return AliasOut(name=alias.name, checkpoint_id=checkpoint.pk, run_id=checkpoint.run_id, step=checkpoint.step)


@router.post("/projects/{slug}/aliases/{name}/rollback", response={200: AliasOut, 409: dict})
def rollback_alias(request, slug: str, name: Text(64), body: PromoteIn):
    project = get_project_or_404(request.user, slug, Role.OWNER)
    alias = CheckpointAlias.objects.filter(project=project, name=name).first()
    if alias is None:
        raise HttpError(404, f"No alias {name!r} in this project.")
    try:
        alias = alias_rollback(alias=alias, actor=request.user, reason=body.reason)
    except AliasConflict as exc:
        return Status(409, {"detail": str(exc)})
    return AliasOut(name=alias.name, checkpoint_id=alias.checkpoint_id, run_id=alias.checkpoint.run_id,
                    step=alias.checkpoint.step)
