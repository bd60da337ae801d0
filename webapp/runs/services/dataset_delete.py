"""Deleting a dataset version: its tasks in one transaction, in a job on the default queue.

A version can hold a million tasks, so the request only checks and queues (`dataset_delete_start`);
the worker deletes (`dataset_delete_execute`) with set-wise statements in foreign-key order inside one
transaction (webapp.common.deletion), so a killed or cancelled attempt leaves the version whole. What
keeps a version (webapp.runs.selectors.dataset_delete) is checked again under its row lock inside
that transaction. A new run's config check refuses a version whose deletion is queued
(run_config._links_problems); a run made between that check and the queueing makes the job refuse;
and the database's foreign key from the run holds for the rest: the version never goes from under a run.

What other rows keep: a later version made from it keeps its own tasks and records which version its
parent was (lineage_detail["deleted_parent"]); a trajectory that named one of its tasks (none should:
a run on the version keeps it) keeps its copy of the task (task_snapshot) and loses the link.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction

from webapp.common.deletion import (
    DeleteRefused,
    DeletionReport,
    Statement,
    actor_of,
    raw_delete,
    run_statements,
)
from webapp.datasets.models import Task, TaskDataset
from webapp.datasets.services.datasets import DATASET_DELETED_ACTION
from webapp.projects.services.projects import audit_log
from webapp.runs.models import Job
from webapp.runs.selectors.dataset_delete import (
    DATASET_DELETE_JOB_KIND,
    DatasetDeletePlan,
    dataset_delete_plan,
    dataset_label,
)
from webapp.runs.services.jobs import job_create
from webapp.trajectories.models import Trajectory


class DatasetDeleteRefused(DeleteRefused):
    """The version cannot be deleted now; the message says why and what to do."""


@dataclass(kw_only=True)
class DatasetDeleteReport(DeletionReport):
    """What a deletion removed: kept in the job's payload["result"] and in the audit event."""

    dataset_id: int
    label: str


def _refusal(plan: DatasetDeletePlan) -> str:
    return " ".join([f"Dataset {dataset_label(plan.dataset)!r} cannot be deleted.", *plan.blockers])


def _lock(dataset_id: int, project_id: int) -> TaskDataset | None:
    """The project's version, its row locked until the transaction ends (two deletions of it take turns)."""
    return TaskDataset.objects.select_for_update().filter(pk=dataset_id, project_id=project_id).first()


def dataset_delete_start(*, dataset: TaskDataset, actor, confirm_name: str | None = None) -> Job:
    """Check that `dataset` may go and queue the job that deletes it; returns the job.

    `confirm_name` is what the person typed on the confirmation page (the version's name and number,
    as "name v3"); None skips that check (the API's DELETE is its own confirmation). Raises
    DatasetDeleteRefused.
    """
    label = dataset_label(dataset)
    if confirm_name is not None and " ".join(confirm_name.split()) != label:
        raise DatasetDeleteRefused(f"Type {label!r}, the version's name and number, exactly to confirm the deletion; "
                                   "nothing was deleted.", status=422)
    with transaction.atomic():
        _lock(dataset.pk, dataset.project_id)  # two clicks queue one job
        plan = dataset_delete_plan(dataset)
        if plan.pending_job is not None:
            raise DatasetDeleteRefused(f"Dataset {label!r} is being deleted already (job {plan.pending_job.pk}, "
                                       f"{plan.pending_job.state}).")
        if plan.blockers:
            raise DatasetDeleteRefused(_refusal(plan))
        job = job_create(project=dataset.project, kind=DATASET_DELETE_JOB_KIND, payload={
            "dataset_id": dataset.pk, "dataset_label": label, "actor_id": getattr(actor, "pk", None)})
        audit_log(project=dataset.project, actor=actor, action="dataset.delete_requested", target=dataset,
                  data={"job_id": job.pk, **plan.as_dict()})
    return job


# ---------------------------------------------------------------------------------------
# The deletion (in the worker)
# ---------------------------------------------------------------------------------------


def _later_versions_unlinked(dataset: TaskDataset) -> int:
    """Each version made from this one forgets the link and keeps, in its lineage, which version it was."""
    children = list(TaskDataset.objects.filter(parent_id=dataset.pk).only("pk", "lineage_detail"))
    for child in children:
        detail = child.lineage_detail if isinstance(child.lineage_detail, dict) else {}
        TaskDataset.objects.filter(pk=child.pk).update(
            parent=None, lineage_detail={**detail, "deleted_parent": dataset_label(dataset)})
    return len(children)


def _deletion_steps(dataset: TaskDataset) -> list[tuple[str, Statement]]:
    """(name, statement) in foreign-key order: what points at a row lets go of it before the row goes."""
    tasks = Task.objects.filter(dataset_id=dataset.pk)
    return [
        ("trajectory task links unset", lambda: Trajectory.objects.filter(task__in=tasks.values("pk"))
         .update(task=None)),
        ("later versions unlinked", lambda: _later_versions_unlinked(dataset)),
        ("tasks", lambda: raw_delete(tasks)),
        ("dataset versions", lambda: raw_delete(TaskDataset.objects.filter(pk=dataset.pk))),
    ]


def dataset_delete_execute(*, project_id: int, payload: dict, check: Callable[[], None] = lambda: None,
                           progress: Callable[[str, float], None] = lambda name, fraction: None) -> DatasetDeleteReport:
    """Delete the version the job names, with its tasks, in one transaction.

    `check` is called between statements (a cancelled or stale attempt raises there and everything
    rolls back); `progress` hears each statement's name and the share done. A version that is gone
    already (an earlier attempt committed) is a success with nothing removed.
    """
    dataset_id = payload.get("dataset_id")
    report = DatasetDeleteReport(dataset_id=dataset_id if isinstance(dataset_id, int) else 0,
                                 label=str(payload.get("dataset_label", "")))
    actor = actor_of(payload.get("actor_id"))
    with transaction.atomic():
        dataset = _lock(report.dataset_id, project_id)
        if dataset is None:
            report.already_gone = True
            return report
        plan = dataset_delete_plan(dataset)
        if plan.blockers:
            raise DatasetDeleteRefused(_refusal(plan) + " Nothing was deleted.")
        report.label = dataset_label(dataset)
        audit_log(project=dataset.project, actor=actor, action=DATASET_DELETED_ACTION, target=dataset,
                  data=plan.as_dict())
        steps = _deletion_steps(dataset)
        report.removed, report.seconds = run_statements(steps, check=check, progress=progress)
        committing = time.perf_counter()
    report.seconds["commit"] = round(time.perf_counter() - committing, 3)  # the database's deferred key checks
    progress("commit", 1.0)
    return report
