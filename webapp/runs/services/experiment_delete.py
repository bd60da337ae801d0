"""Deleting an experiment with all its runs: their rows in one transaction, then their folders, in a job.

The experiment's stage runs (and the evaluation runs of their checkpoints) go as a deleted run goes
(webapp.runs.services.run_delete.run_deletion_steps: set-wise statements in foreign-key order), then
the experiment's row, all in one transaction, so a killed or cancelled attempt leaves the experiment
whole; the folders go after the commit. What keeps it (webapp.runs.selectors.experiment_delete) is
checked again under the experiment's row lock inside that transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction

from webapp.common.deletion import (
    DeleteRefused,
    FilesDeletionReport,
    actor_of,
    raw_delete,
    run_statements,
)
from webapp.projects.services.projects import audit_log
from webapp.runs.models import Experiment, Job
from webapp.runs.selectors.experiment_delete import (
    EXPERIMENT_DELETE_JOB_KIND,
    ExperimentDeletePlan,
    experiment_delete_plan,
)
from webapp.runs.selectors.run_delete import run_files_folder
from webapp.runs.services.jobs import job_create
from webapp.runs.services.run_delete import remove_folders, run_deletion_steps


class ExperimentDeleteRefused(DeleteRefused):
    """The experiment cannot be deleted (now, or by this person); the message says why and what to do."""


@dataclass(kw_only=True)
class ExperimentDeleteReport(FilesDeletionReport):
    """What a deletion removed: kept in the job's payload["result"] and in the audit event."""

    experiment_id: int
    name: str


def _refusal(plan: ExperimentDeletePlan) -> str:
    return " ".join([f"Experiment #{plan.experiment.pk} {plan.experiment.name!r} cannot be deleted.", *plan.blockers])


def _lock(experiment_id: int, project_id: int) -> Experiment | None:
    return Experiment.objects.select_for_update().filter(pk=experiment_id, project_id=project_id).first()


def experiment_delete_start(*, experiment: Experiment, actor, confirm_name: str | None = None) -> Job:
    """Check that `experiment` may go and queue the job that deletes it with its runs; returns the job.

    `confirm_name` is what the person typed on the confirmation page (the experiment's name); None skips
    that check (the API's DELETE is its own confirmation). Raises ExperimentDeleteRefused.
    """
    if confirm_name is not None and confirm_name.strip() != experiment.name:
        raise ExperimentDeleteRefused(f"Type the experiment's name, {experiment.name!r}, exactly to confirm the "
                                      "deletion; nothing was deleted.", status=422)
    with transaction.atomic():
        _lock(experiment.pk, experiment.project_id)  # two clicks queue one job
        plan = experiment_delete_plan(experiment, actor=actor)
        if plan.pending_job is not None:
            raise ExperimentDeleteRefused(f"Experiment #{experiment.pk} {experiment.name!r} is being deleted already "
                                          f"(job {plan.pending_job.pk}, {plan.pending_job.state}).")
        if plan.blockers:
            raise ExperimentDeleteRefused(_refusal(plan))
        job = job_create(project=experiment.project, kind=EXPERIMENT_DELETE_JOB_KIND, payload={
            "experiment_id": experiment.pk, "experiment_name": experiment.name,
            "actor_id": getattr(actor, "pk", None)})
        audit_log(project=experiment.project, actor=actor, action="experiment.delete_requested", target=experiment,
                  data={"job_id": job.pk, **plan.as_dict()})
    return job


def experiment_delete_execute(*, project_id: int, payload: dict, check: Callable[[], None] = lambda: None,
                              progress: Callable[[str, float], None] = lambda name, fraction: None,
                              ) -> ExperimentDeleteReport:
    """Delete the experiment the job names with its runs, in one transaction; then the runs' folders.

    `check` is called between statements (a cancelled or stale attempt raises there and everything
    rolls back); `progress` hears each statement's name and the share done. An experiment that is
    gone already (an earlier attempt committed) is a success with nothing removed.
    """
    experiment_id = payload.get("experiment_id")
    report = ExperimentDeleteReport(experiment_id=experiment_id if isinstance(experiment_id, int) else 0,
                                    name=str(payload.get("experiment_name", "")))
    actor = actor_of(payload.get("actor_id"))
    with transaction.atomic():
        experiment = _lock(report.experiment_id, project_id)
        if experiment is None:
            report.already_gone = True
            return report
        plan = experiment_delete_plan(experiment, actor=actor)
        if plan.blockers:
            raise ExperimentDeleteRefused(_refusal(plan) + " Nothing was deleted.")
        report.name = experiment.name
        report.runs = [{"id": r.pk, "name": r.name, "kind": r.kind, "stage": r.stage} for r in plan.runs]
        folders = [run_files_folder(r) for r in plan.runs]
        audit_log(project=experiment.project, actor=actor, action="experiment.delete", target=experiment,
                  data=plan.as_dict())
        steps = [*run_deletion_steps(plan.run_ids, project_id),
                 ("experiments", lambda: raw_delete(Experiment.objects.filter(pk=experiment.pk)))]
        report.removed, report.seconds = run_statements(steps, check=check, progress=progress)
        committing = time.perf_counter()
    report.seconds["commit"] = round(time.perf_counter() - committing, 3)  # the database's deferred key checks
    report.freed_bytes, report.folder_errors = remove_folders(folders)
    progress("folders", 1.0)
    return report
