"""Deleting a run: its rows in one transaction, then its folder, in a job on the default queue.

A run can hold a million trajectories, so the request only checks and queues (`run_delete_start`);
the worker deletes (`run_delete_execute`). The rows go in one transaction of set-wise statements
(DELETE ... WHERE run_id IN ..., never a row at a time, never the rows loaded into memory), in the
order the foreign keys need, so a killed or cancelled attempt leaves the run whole and the next
attempt starts over; the folder goes after the commit. What stops a deletion (webapp.runs.selectors
.run_delete) is checked again under the run's row lock inside that transaction, so a job queued
before someone promoted a checkpoint refuses instead of deleting it.

What other rows keep: a task made from one of its trajectories stays (without its origin link); a
verifier check drawn from the whole project loses the items that were its outputs (its counts are
recounted); a trajectory of another run that named one of its checkpoints keeps the rest.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction
from django.db.models import QuerySet

from webapp.common.deletion import (
    DeleteRefused,
    FilesDeletionReport,
    Statement,
    actor_of,
    raw_delete,
    run_statements,
)
from webapp.datasets.models import Task
from webapp.projects.services.projects import audit_log
from webapp.runs.models import Checkpoint, Experiment, Job, MetricPoint, Run
from webapp.runs.selectors.run_delete import (
    RUN_DELETE_JOB_KIND,
    RunDeletePlan,
    folder_size,
    run_delete_plan,
    run_files_folder,
)
from webapp.runs.services.jobs import job_create
from webapp.trajectories.models import (
    BucketRollup,
    QueueItem,
    Rescore,
    RescoreResult,
    Review,
    StepRollup,
    Trajectory,
)
from webapp.verifiers.models import VerifierCheck, VerifierCheckItem


class RunDeleteRefused(DeleteRefused):
    """The run cannot be deleted (now, or by this person); the message says why and what to do."""


@dataclass(kw_only=True)
class RunDeleteReport(FilesDeletionReport):
    """What a deletion removed: kept in the job's payload["result"] and in the audit event."""

    run_id: int
    run_name: str


def _refusal(plan: RunDeletePlan) -> str:
    what = f"Run #{plan.run.pk} {plan.run.name!r} cannot be deleted."
    return " ".join([what, *plan.blockers])


def run_delete_start(*, run: Run, actor, confirm_name: str | None = None) -> Job:
    """Check that `run` may go and queue the job that deletes it; returns the job.

    `confirm_name` is what the person typed on the confirmation page (it must be the run's name);
    None skips that check (the API's DELETE is its own confirmation). Raises RunDeleteRefused.
    """
    if confirm_name is not None and confirm_name.strip() != run.name:
        raise RunDeleteRefused(f"Type the run's name, {run.name!r}, exactly to confirm the deletion; nothing was "
                               "deleted.", status=422)
    with transaction.atomic():
        Run.objects.select_for_update().filter(pk=run.pk).first()  # two clicks queue one job
        plan = run_delete_plan(run, actor=actor)
        if plan.pending_job is not None:
            raise RunDeleteRefused(f"Run #{run.pk} {run.name!r} is being deleted already (job "
                                   f"{plan.pending_job.pk}, {plan.pending_job.state}).")
        if plan.blockers:
            raise RunDeleteRefused(_refusal(plan))
        job = job_create(project=run.project, kind=RUN_DELETE_JOB_KIND, payload={
            "run_id": run.pk, "run_name": run.name, "actor_id": getattr(actor, "pk", None)})
        audit_log(project=run.project, actor=actor, action="run.delete_requested", target=run,
                  data={"job_id": job.pk, **plan.as_dict()})
    return job


MAX_RUNS_AT_ONCE = 25
"""Runs one request may delete (the runs table's "Delete selected…"): each gets its plan on the page."""


@dataclass
class ManyDeletions:
    """What deleting several runs queued: a job per run that may go, and why each other one was kept."""

    jobs: list[Job]
    kept: dict[int, str]


def runs_delete_start(*, plans: list[RunDeletePlan], actor, confirm_count: str) -> ManyDeletions:
    """Queue the deletion of every run whose plan allows it, each in a job of its own (so one refusal or
    failure never holds the others back); the others are kept, with why. `confirm_count` is what the
    person typed: the number of runs that go. Raises RunDeleteRefused (409 when none may go, 422 for a
    wrong count)."""
    going = [plan.run for plan in plans if plan.allowed]
    kept = {plan.run.pk: _refusal(plan) if plan.blockers else f"Run #{plan.run.pk} {plan.run.name!r} is being "
            f"deleted already (job {plan.pending_job.pk})." for plan in plans if not plan.allowed}
    if not going:
        raise RunDeleteRefused("None of these runs can be deleted now. " + " ".join(kept.values()))
    if len(going) > MAX_RUNS_AT_ONCE:
        raise RunDeleteRefused(f"Delete at most {MAX_RUNS_AT_ONCE} runs at once; {len(going)} were chosen.",
                               status=422)
    if confirm_count.strip() != str(len(going)):
        raise RunDeleteRefused(f"Type {len(going)}, the number of runs to delete, to confirm; nothing was deleted.",
                               status=422)
    jobs = []
    for run in going:
        try:
            jobs.append(run_delete_start(run=run, actor=actor))
        except RunDeleteRefused as exc:  # something changed since the page was drawn
            kept[run.pk] = str(exc)
    return ManyDeletions(jobs=jobs, kept=kept)


# ---------------------------------------------------------------------------------------
# The deletion (in the worker)
# ---------------------------------------------------------------------------------------


def _recount_checks(check_ids: list[int]) -> None:
    """A project-wide verifier check that lost items: its size and agreement are those of the items left."""
    for check in VerifierCheck.objects.filter(pk__in=check_ids):
        items = VerifierCheckItem.objects.filter(sanity_check=check)
        VerifierCheck.objects.filter(pk=check.pk).update(
            size=items.count(), labelled=items.filter(human_right__isnull=False).count(),
            agreed=items.filter(human_right=True).count())


def _check_items(trajectories: QuerySet) -> int:
    items = VerifierCheckItem.objects.filter(trajectory__in=trajectories)
    checks = list(items.values_list("sanity_check_id", flat=True).distinct())
    removed = raw_delete(items)
    _recount_checks(checks)
    return removed


def _queue_items(trajectories: QuerySet) -> int:
    removed = 0
    for side in ("trajectory", "other"):
        items = QueueItem.objects.filter(**{f"{side}__in": trajectories})
        Review.objects.filter(item__in=items).update(item=None)
        removed += raw_delete(items)
    return removed


def _jobs(run_ids: list[int]) -> int:
    """The runs' jobs; a re-verification elsewhere that names one as its job lets go of it first."""
    jobs = Job.objects.filter(run_id__in=run_ids)
    Rescore.objects.filter(job__in=jobs.values("pk")).update(job=None)
    return raw_delete(jobs)


def run_deletion_steps(run_ids: list[int], project_id: int) -> list[tuple[str, Statement]]:
    """(name, statement) in foreign-key order: what points at a row goes (or lets go) before the row."""
    trajectories = Trajectory.objects.filter(run_id__in=run_ids).values("pk")
    checkpoints = Checkpoint.objects.filter(run_id__in=run_ids).values("pk")
    return [
        ("task origins unlinked", lambda: Task.objects.filter(origin_trajectory__in=trajectories)
         .update(origin_trajectory=None)),
        ("reviews", lambda: raw_delete(Review.objects.filter(trajectory__in=trajectories))
         + raw_delete(Review.objects.filter(preferred_over__in=trajectories))),
        ("review queue items", lambda: _queue_items(trajectories)),
        ("rescore results", lambda: raw_delete(RescoreResult.objects.filter(rescore__run_id__in=run_ids))
         + raw_delete(RescoreResult.objects.filter(trajectory__in=trajectories))),
        ("rescores", lambda: raw_delete(Rescore.objects.filter(run_id__in=run_ids))),
        ("verifier check items", lambda: _check_items(trajectories)),
        ("trajectories", lambda: raw_delete(Trajectory.objects.filter(run_id__in=run_ids))),
        ("metric points", lambda: raw_delete(MetricPoint.objects.filter(run_id__in=run_ids))),
        ("step rollups", lambda: raw_delete(StepRollup.objects.filter(run_id__in=run_ids))),
        ("bucket rollups", lambda: raw_delete(BucketRollup.objects.filter(run_id__in=run_ids))),
        ("checkpoint links unset", lambda: Trajectory.objects.filter(project_id=project_id, checkpoint__in=checkpoints)
         .update(checkpoint=None) + Experiment.objects.filter(candidate_checkpoint__in=checkpoints)
         .update(candidate_checkpoint=None)),
        ("jobs", lambda: _jobs(run_ids)),
        ("checkpoints", lambda: raw_delete(Checkpoint.objects.filter(run_id__in=run_ids))),
        ("runs", lambda: raw_delete(Run.objects.filter(pk__in=run_ids))),
    ]


def _rmtree(folder: Path, errors: list[str]) -> None:
    """shutil.rmtree that notes each file it could not remove and goes on with the rest."""
    if sys.version_info >= (3, 12):
        shutil.rmtree(folder, onexc=lambda _fn, path, exc: errors.append(f"{path}: {exc}"))
    else:
        shutil.rmtree(folder, onerror=lambda _fn, path, info: errors.append(f"{path}: {info[1]}"))


def remove_folders(folders: list[Path]) -> tuple[int, list[str]]:
    """(bytes freed, problems): each folder removed whole; a link in its place is unlinked, never followed."""
    freed, problems = 0, []
    for folder in folders:
        try:
            if folder.is_symlink():
                folder.unlink()
                continue
            if not folder.is_dir():
                continue
            size = folder_size(folder, limit=10 ** 9).bytes
            errors: list[str] = []
            _rmtree(folder, errors)
        except OSError as exc:
            problems.append(f"{folder}: {exc}")
            continue
        if errors:
            problems.append(f"{folder}: {len(errors)} file(s) could not be removed, first {errors[0]}; remove the "
                            "folder by hand")
        else:
            freed += size
    return freed, problems


def run_delete_execute(*, project_id: int, payload: dict, check: Callable[[], None] = lambda: None,
                       progress: Callable[[str, float], None] = lambda name, fraction: None) -> RunDeleteReport:
    """Delete the run the job names, with its evaluations, in one transaction; then their folders.

    `check` is called between statements (a cancelled or stale attempt raises there and everything
    rolls back); `progress` hears each statement's name and the share done. A run that is gone
    already (an earlier attempt committed) is a success with nothing removed.
    """
    run_id = payload.get("run_id")
    report = RunDeleteReport(run_id=run_id if isinstance(run_id, int) else 0, run_name=str(payload.get("run_name", "")))
    actor = actor_of(payload.get("actor_id"))
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=report.run_id, project_id=project_id).first()
        if run is None:
            report.already_gone = True
            return report
        plan = run_delete_plan(run, actor=actor)
        if plan.blockers:
            raise RunDeleteRefused(_refusal(plan) + " Nothing was deleted.")
        runs = [run, *plan.evaluations]
        report.run_name = run.name
        report.runs = [{"id": r.pk, "name": r.name, "kind": r.kind} for r in runs]
        folders = [run_files_folder(r) for r in runs]
        audit_log(project=run.project, actor=actor, action="run.delete", target=run, data=plan.as_dict())
        steps = run_deletion_steps(plan.run_ids, project_id)
        report.removed, report.seconds = run_statements(steps, check=check, progress=progress)
        committing = time.perf_counter()
    report.seconds["commit"] = round(time.perf_counter() - committing, 3)  # the database's deferred key checks
    report.freed_bytes, report.folder_errors = remove_folders(folders)
    progress("folders", 1.0)
    return report
