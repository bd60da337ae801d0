"""The job state machine.

queued -> claimed -> running -> succeeded | failed | cancelled, and back to queued
when the reaper finds an expired lease and attempts remain.

Rules that keep it correct with many workers and redelivered messages:
- the row is written first and the Celery message is sent on commit, so a worker
  never receives an id that is not in the database yet;
- a claim is one conditional UPDATE (state = queued) that bumps `attempt`, so of
  two workers racing for one job exactly one wins;
- every later write names the attempt it belongs to and changes nothing when the
  row has moved on (StaleAttempt), so a worker that lost its lease cannot
  overwrite the work of the one that took over.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from webapp.projects.models import Project
from webapp.projects.services.webhooks import Notice, notify
from webapp.runs.models import ACTIVE_JOB_STATES, FINAL_JOB_STATES, Job, JobState, Run, RunStatus
from webapp.runs.services.headlines import borrowers_headlines_refresh

# Which Celery queue a job kind goes to (DESIGN.md "Storage and processes").
QUEUE_BY_KIND: dict[str, str] = {
    "sft": "train",
    "grpo": "train",
    "dpo": "train",
    "eval": "rollout",
    "export": "rollout",
    "verify": "verify",
    "rescore": "verify",
    "run_import": "default",
    "run_delete": "default",
    "dataset_delete": "default",
    "experiment_delete": "default",
}
LOG_TAIL_CHARS = 20_000


class StaleAttempt(Exception):
    """The job row no longer belongs to this attempt: stop working on it."""


def queue_for_kind(kind: str) -> str:
    return QUEUE_BY_KIND.get(kind, "default")


def gpu_queue(queue: str, gpus: int) -> str:
    """The queue of jobs that need `gpus` GPUs on one worker: train.gpus2, train.gpus4, ...

    A worker with G GPUs consumes Q.gpus2 .. Q.gpusG beside each queue Q it serves
    (workers/registration.py), so Celery's routing hands a job only to a worker it fits.
    """
    return queue if gpus <= 1 else f"{queue}.gpus{gpus}"


def queue_for_run(kind: str, config: dict) -> str:
    """A run's job queue: its kind's, or the kind's multi-GPU queue for num_processes > 1 on cuda.

    device cpu (and auto) jobs of several processes run on any worker of the queue: CPU
    processes need cores, not GPUs, and auto uses GPUs only where there is one per process.
    """
    processes = int(config.get("num_processes") or 1)
    queue = queue_for_kind(kind)
    return gpu_queue(queue, processes) if config.get("device") == "cuda" else queue


def gpus_needed(queue: str) -> int:
    """How many GPUs a job of this queue needs on one worker (1 for ordinary queues)."""
    head, _, tail = queue.rpartition(".gpus")
    return int(tail) if head and tail.isdigit() else 1


def _lease_deadline(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.CRUCIBLE_JOB_LEASE_SECONDS)


def enqueue_job_message(job_id: int, queue: str) -> None:
    """Wake a worker for this job. The message carries only the id; the row holds the rest."""
    from webapp.common.celery import app

    app.send_task("workers.tasks.execute_job", args=[job_id], queue=queue)


def job_create(
    *,
    project: Project,
    kind: str,
    run: Run | None = None,
    payload: dict | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
) -> Job:
    """Write the job row; the worker is woken only after the transaction commits."""
    job = Job.objects.create(
        project=project,
        run=run,
        kind=kind,
        queue=queue or queue_for_kind(kind),
        payload=payload or {},
        max_attempts=max_attempts or settings.CRUCIBLE_JOB_MAX_ATTEMPTS,
    )
    if run is not None:
        Run.objects.filter(pk=run.pk).update(status=RunStatus.QUEUED)
        borrowers_headlines_refresh([run.pk])
    transaction.on_commit(lambda: enqueue_job_message(job.pk, job.queue))
    return job


def job_claim(*, job_id: int, worker: str) -> Job | None:
    """Take a queued job for this worker, or None if someone else has it (or it is gone)."""
    now = timezone.now()
    # A unique claim token lets us read back exactly the row version we claimed.
    token = f"{worker} [{uuid.uuid4().hex[:8]}]"
    claimed = Job.objects.filter(pk=job_id, state=JobState.QUEUED, cancel_requested=False).update(
        state=JobState.CLAIMED,
        attempt=F("attempt") + 1,
        lease_expires_at=_lease_deadline(now),
        heartbeat_at=now,
        worker=token,
    )
    if claimed != 1:
        return None
    job = Job.objects.filter(pk=job_id, worker=token).first()
    if job is not None and job.started_at is None:
        Job.objects.filter(pk=job_id, started_at__isnull=True).update(started_at=now)
    return job


def _fenced(job_id: int, attempt: int):
    return Job.objects.filter(pk=job_id, attempt=attempt, state__in=ACTIVE_JOB_STATES)


def job_mark_running(*, job_id: int, attempt: int) -> None:
    now = timezone.now()
    if not _fenced(job_id, attempt).update(state=JobState.RUNNING, heartbeat_at=now, lease_expires_at=_lease_deadline(now)):
        raise StaleAttempt(f"job {job_id} attempt {attempt} no longer holds the lease")
    run_id = Job.objects.filter(pk=job_id).values_list("run_id", flat=True).first()
    if run_id:
        Run.objects.filter(pk=run_id).update(status=RunStatus.RUNNING)
        Run.objects.filter(pk=run_id, started_at__isnull=True).update(started_at=now)
        borrowers_headlines_refresh([run_id])


@dataclass(frozen=True)
class Heartbeat:
    cancel_requested: bool


def job_heartbeat(
    *, job_id: int, attempt: int, progress: float | None = None, log_tail: str | None = None,
    processes: list[dict] | None = None,
) -> Heartbeat:
    """Extend the lease; tells the worker whether someone asked to cancel.

    `processes`: a data-parallel job's ranks (training/distributed.py heartbeats), for the Jobs page.
    """
    now = timezone.now()
    fields: dict = {"heartbeat_at": now, "lease_expires_at": _lease_deadline(now)}
    if processes is not None:
        fields["processes"] = [_process_row(p) for p in processes[:256]]
    if progress is not None:
        fields["progress"] = max(0.0, min(1.0, float(progress)))
    if log_tail is not None:
        fields["log_tail"] = log_tail[-LOG_TAIL_CHARS:]
    if not _fenced(job_id, attempt).update(**fields):
        raise StaleAttempt(f"job {job_id} attempt {attempt} no longer holds the lease")
    cancel = Job.objects.filter(pk=job_id).values_list("cancel_requested", flat=True).first()
    return Heartbeat(cancel_requested=bool(cancel))


def _process_row(beat: dict) -> dict:
    """Only the fields the page shows, typed; a rank's heartbeat file is the worker's, not the user's."""
    def number(key: str) -> float | None:
        value = beat.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return {"rank": int(number("rank") or 0), "device": str(beat.get("device", ""))[:32],
            "host": str(beat.get("host", ""))[:128], "pid": int(number("pid") or 0),
            "step": None if number("step") is None else int(number("step")), "time": number("time")}


def _finish(job_id: int, attempt: int, state: str, *, error: str = "", log_tail: str | None = None,
            processes: list[dict] | None = None) -> Job:
    now = timezone.now()
    with transaction.atomic():
        job = _fenced(job_id, attempt).select_for_update().first()
        if job is None:
            raise StaleAttempt(f"job {job_id} attempt {attempt} no longer holds the lease")
        job.state = state
        job.finished_at = now
        job.lease_expires_at = None
        job.error = error
        if state == JobState.SUCCEEDED:
            job.progress = 1.0
        if log_tail is not None:
            job.log_tail = log_tail[-LOG_TAIL_CHARS:]
        if processes is not None:  # a short job may end between two heartbeats: keep its ranks
            job.processes = [_process_row(p) for p in processes[:256]]
        job.history = [*job.history, _history_entry(job, state, error, now)]
        job.save(update_fields=["state", "finished_at", "lease_expires_at", "error", "progress", "log_tail", "history",
                                "processes"])
        _sync_run_status(job)
        _notify_run_end(job)
    return job


def _notify_run_end(job: Job) -> None:
    """A run's job that succeeded or failed tells the project's webhooks (within this transaction)."""
    if job.run_id is None or job.state not in (JobState.SUCCEEDED, JobState.FAILED):
        return
    run = Run.objects.select_related("project").only("id", "name", "kind", "project__slug", "project__name").get(
        pk=job.run_id)
    finished = job.state == JobState.SUCCEEDED
    subject = (f"Run {run.name!r} ({run.kind}) finished" if finished
               else f"Run {run.name!r} ({run.kind}) failed: {job.error[:300] or 'no error message'}")
    link = f"{settings.CRUCIBLE_PUBLIC_URL}/p/{run.project.slug}/runs/{run.pk}/"
    notify(run.project, Notice(event="run.finished" if finished else "run.failed", subject=subject, link=link,
                               fields={"run_id": run.pk, "run_name": run.name, "run_kind": run.kind,
                                       "job_id": job.pk, "attempt": job.attempt, "error": job.error[:2000]}))


def job_record_result(*, job_id: int, attempt: int, result: dict) -> None:
    """Keep what the attempt produced (an import's report) as payload["result"], for the job's page."""
    with transaction.atomic():
        job = _fenced(job_id, attempt).select_for_update().first()
        if job is None:
            raise StaleAttempt(f"job {job_id} attempt {attempt} no longer holds the lease")
        job.payload = {**job.payload, "result": result}
        job.save(update_fields=["payload"])


def job_succeed(*, job_id: int, attempt: int, log_tail: str | None = None, processes: list[dict] | None = None) -> Job:
    return _finish(job_id, attempt, JobState.SUCCEEDED, log_tail=log_tail, processes=processes)


def job_fail(*, job_id: int, attempt: int, error: str, log_tail: str | None = None,
             processes: list[dict] | None = None) -> Job:
    return _finish(job_id, attempt, JobState.FAILED, error=error, log_tail=log_tail, processes=processes)


def job_mark_cancelled(*, job_id: int, attempt: int, log_tail: str | None = None,
                       processes: list[dict] | None = None) -> Job:
    """The worker stopped the work after a cancel request."""
    return _finish(job_id, attempt, JobState.CANCELLED, error="cancelled on request", log_tail=log_tail,
                   processes=processes)


def job_request_cancel(*, job: Job) -> Job:
    """Cancel a queued job at once; ask the worker of an active one to stop at its next heartbeat."""
    now = timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state in FINAL_JOB_STATES:
            raise ValueError(f"Job {job.pk} has already {job.state}; there is nothing to cancel.")
        job.cancel_requested = True
        if job.state == JobState.QUEUED:
            job.state = JobState.CANCELLED
            job.finished_at = now
            job.error = "cancelled before a worker started it"
            job.history = [*job.history, _history_entry(job, JobState.CANCELLED, job.error, now)]
        job.save(update_fields=["cancel_requested", "state", "finished_at", "error", "history"])
        _sync_run_status(job)
    return job


@dataclass
class ReapReport:
    requeued: list[int]
    failed: list[int]
    cancelled: list[int]


def jobs_reap_expired(*, now: datetime | None = None) -> ReapReport:
    """Re-queue jobs whose worker stopped heartbeating; fail those out of attempts."""
    now = now or timezone.now()
    report = ReapReport(requeued=[], failed=[], cancelled=[])
    candidates = list(
        Job.objects.filter(state__in=ACTIVE_JOB_STATES, lease_expires_at__lt=now).values_list("pk", "attempt")
    )
    for job_id, attempt in candidates:
        outcome = _reap_one(job_id, attempt, now)
        if outcome is not None:
            getattr(report, outcome).append(job_id)
    return report


def _reap_one(job_id: int, attempt: int, now: datetime) -> str | None:
    with transaction.atomic():
        job = (
            _fenced(job_id, attempt).filter(lease_expires_at__lt=now).select_for_update().first()
        )
        if job is None:  # it heartbeated or finished meanwhile
            return None
        reason = f"lease expired on attempt {attempt}: worker {job.worker or 'unknown'} stopped heartbeating"
        job.lease_expires_at = None
        if job.cancel_requested:
            job.state, job.error, outcome = JobState.CANCELLED, "cancelled (worker gone)", "cancelled"
            job.finished_at = now
        elif job.attempt >= job.max_attempts:
            job.state, outcome = JobState.FAILED, "failed"
            job.error = f"{reason}; gave up after {job.attempt} of {job.max_attempts} attempts"
            job.finished_at = now
        else:
            job.state, job.error, outcome = JobState.QUEUED, reason, "requeued"
            job.worker = ""
        job.history = [*job.history, _history_entry(job, outcome, reason, now)]
        job.save(update_fields=["state", "error", "finished_at", "lease_expires_at", "worker", "history"])
        _sync_run_status(job)
        if outcome == "requeued":
            transaction.on_commit(lambda: enqueue_job_message(job.pk, job.queue))
    return outcome


def job_retry(*, job: Job) -> Job:
    """Put a failed or cancelled job back in the queue with a fresh attempt budget."""
    with transaction.atomic():
        updated = Job.objects.filter(pk=job.pk, state__in=[JobState.FAILED, JobState.CANCELLED]).update(
            state=JobState.QUEUED, cancel_requested=False, error="", finished_at=None,
            max_attempts=F("attempt") + F("max_attempts"),
        )
        if not updated:
            raise ValueError(f"Job {job.pk} is {job.state}: only failed or cancelled jobs can be retried.")
        job.refresh_from_db()
        _sync_run_status(job)
        transaction.on_commit(lambda: enqueue_job_message(job.pk, job.queue))
    return job


def _history_entry(job: Job, outcome: str, reason: str, now: datetime) -> dict:
    return {"attempt": job.attempt, "worker": job.worker, "outcome": outcome, "reason": reason, "at": now.isoformat()}


_RUN_STATUS_BY_JOB_STATE = {
    JobState.QUEUED: RunStatus.QUEUED,
    JobState.CLAIMED: RunStatus.RUNNING,
    JobState.RUNNING: RunStatus.RUNNING,
    JobState.SUCCEEDED: RunStatus.SUCCEEDED,
    JobState.FAILED: RunStatus.FAILED,
    JobState.CANCELLED: RunStatus.CANCELLED,
}


def _sync_run_status(job: Job) -> None:
    if job.run_id is None:
        return
    fields: dict = {"status": _RUN_STATUS_BY_JOB_STATE[job.state]}
    if job.state in FINAL_JOB_STATES:
        fields["finished_at"] = job.finished_at
    Run.objects.filter(pk=job.run_id).update(**fields)
    borrowers_headlines_refresh([job.run_id])

