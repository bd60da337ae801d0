"""API for experiments (the whole pipeline as one object), their deletion with their runs, and checkpoint
promotion."""

from __future__ import annotations

from ninja import Field, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status

from webapp.api.schemas import (
    AliasOut,
    ErrorOut,
    ExperimentIn,
    ExperimentOut,
    JobOut,
    PromoteIn,
    RunsDeletionOut,
)
from webapp.common.bounds import RowId, Text
from webapp.datasets.selectors.datasets import newest_dataset_named
from webapp.projects.models import Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.runs.selectors.checkpoints import alias_get, all_experiments, checkpoints_with_run
from webapp.runs.selectors.experiment_delete import experiment_delete_plan
from webapp.runs.selectors.models import model_named
from webapp.runs.services.experiment_delete import ExperimentDeleteRefused, experiment_delete_start
from webapp.runs.services.experiments import ExperimentError, experiment_create
from webapp.runs.services.promotion import (
    AliasConflict,
    GatesNotPassed,
    InvalidAliasName,
    alias_rollback,
    checkpoint_promote,
)
from webapp.verifiers.selectors.verifiers import verifier_named

router = Router(tags=["experiments"])


def _named(obj, name: str, what: str):
    if obj is None:
        raise HttpError(400, f"No {what} named {name!r} in this project.")
    return obj


@router.post("/projects/{slug}/experiments", response={201: ExperimentOut})
def create_experiment(request, slug: str, body: ExperimentIn):
    """Baseline -> SFT if needed -> GRPO -> held-out eval -> promotion gates, each stage a job."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    dataset = _named(newest_dataset_named(project, body.dataset), body.dataset, "dataset")
    verifier = _named(verifier_named(project, body.verifier), body.verifier, "verifier")
    model = _named(model_named(project, body.model), body.model, "model")
    try:
        experiment = experiment_create(project=project, name=body.name, dataset=dataset,
                                       verifier_version=verifier.latest_version, model=model, actor=request.user,
                                       config=body.config)
    except ExperimentError as exc:
        raise HttpError(400, str(exc)) from None
    return Status(201, experiment)


@router.get("/experiments/{experiment_id}", response=ExperimentOut)
def get_experiment(request, experiment_id: int):
    return get_object_or_404_for_user(all_experiments(), request.user, pk=experiment_id)


@router.post("/checkpoints/{checkpoint_id}/promote", response={200: AliasOut, 400: dict, 409: dict})
def promote_checkpoint(request, checkpoint_id: int, body: PromoteIn):
    """Point an alias (default `production`) at this checkpoint; audited, reversible.

    Only a checkpoint whose experiment passed its gates is promoted as asked; any other
    needs `force: true` and a reason, which the alias history and the audit log keep.
    """
    checkpoint = get_object_or_404_for_user(checkpoints_with_run(), request.user, Role.OWNER,
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
    alias = alias_get(project, name)
    if alias is None:
        raise HttpError(404, f"No alias {name!r} in this project.")
    try:
        alias = alias_rollback(alias=alias, actor=request.user, reason=body.reason)
    except AliasConflict as exc:
        return Status(409, {"detail": str(exc)})
    return AliasOut(name=alias.name, checkpoint_id=alias.checkpoint_id, run_id=alias.checkpoint.run_id,
                    step=alias.checkpoint.step)


class ExperimentRunOut(Schema):
    id: int
    name: str
    kind: str
    stage: str = Field(description="The experiment stage the run is; empty for an evaluation of a stage's checkpoint.")


class ExperimentDeletionOut(RunsDeletionOut):
    experiment_id: int
    name: str
    state: str
    runs: list[ExperimentRunOut] = Field(description="Its stage runs and the evaluation runs of their checkpoints: "
                                                     "they go with it.")


def _experiment_for(request, experiment_id: int, minimum: str):
    return get_object_or_404_for_user(all_experiments(), request.user, minimum, pk=experiment_id)


@router.get("/experiments/{experiment_id}/deletion", response={200: ExperimentDeletionOut, 404: ErrorOut},
            summary="What deleting an experiment would remove")
def get_experiment_deletion(request, experiment_id: RowId):
    """What DELETE /experiments/{experiment_id} would remove (its runs and what they hold) and, when it cannot be
    deleted now, why: for the caller's role (an editor may not delete people's reviews)."""
    return experiment_delete_plan(_experiment_for(request, experiment_id, Role.EDITOR), actor=request.user).as_dict()


@router.delete("/experiments/{experiment_id}", response={202: JobOut, 404: ErrorOut, 409: ErrorOut},
               summary="Delete an experiment with its runs")
def delete_experiment(request, experiment_id: RowId):
    """Queue the deletion of the experiment with every run it made (and the evaluation runs of their
    checkpoints): 202 with the job (GET /jobs/{id} follows it; its result says what was removed). The rows go in
    one transaction, then the folders. 409 when something keeps it (a stage still running, a job working on one of
    its runs, a promoted checkpoint, a run trained from one of them outside it, a verifier check, reviews for a
    non-owner), with what to do."""
    experiment = _experiment_for(request, experiment_id, Role.EDITOR)
    try:
        job = experiment_delete_start(experiment=experiment, actor=request.user)
    except ExperimentDeleteRefused as exc:
        return Status(409, ErrorOut(detail=str(exc)))
    return Status(202, job)
