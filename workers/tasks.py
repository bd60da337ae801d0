"""Celery tasks: ids in, one service call each.

All are idempotent (a job is claimed at most once per attempt; the reaper and
the experiment sweep recompute from the database), so they are acknowledged late
and re-queued if their worker process dies: a redelivered message changes nothing.
Time limits sit above the training process's own deadline, as a last resort.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from workers import import_jobs, registration  # noqa: F401  (registration's signals; the run_import job handler)

logger = logging.getLogger(__name__)


_JOB_HARD_LIMIT = settings.CRUCIBLE_JOB_TIMEOUT_SECONDS + 600
_IDEMPOTENT = {"ignore_result": True, "acks_late": True, "reject_on_worker_lost": True}


@shared_task(name="workers.tasks.execute_job", soft_time_limit=_JOB_HARD_LIMIT - 60, time_limit=_JOB_HARD_LIMIT,
             **_IDEMPOTENT)
def execute_job(job_id: int) -> None:
    """Claim and run one job. A duplicate message finds the job claimed and does nothing."""
    from workers.runner import run_job

    run_job(job_id)


@shared_task(name="workers.tasks.reap_expired_jobs", soft_time_limit=60, time_limit=120, **_IDEMPOTENT)
def reap_expired_jobs() -> dict:
    """Periodic (celery beat): re-queue jobs whose worker died, fail those out of attempts."""
    from webapp.runs.services.jobs import jobs_reap_expired

    report = jobs_reap_expired()
    if report.requeued or report.failed or report.cancelled:
        logger.warning("reaper: requeued=%s failed=%s cancelled=%s", report.requeued, report.failed, report.cancelled)
    return {"requeued": report.requeued, "failed": report.failed, "cancelled": report.cancelled}


@shared_task(name="workers.tasks.advance_experiments", soft_time_limit=120, time_limit=240, **_IDEMPOTENT)
def advance_experiments() -> int:
    """Periodic (celery beat): move every running experiment pipeline forward if a stage finished."""
    from webapp.runs.services.experiments import experiments_advance_all

    return experiments_advance_all()


@shared_task(name="workers.tasks.deliver_webhook", soft_time_limit=60, time_limit=120, **_IDEMPOTENT)
def deliver_webhook(delivery_id: int) -> str:
    """POST one webhook notification; a failure is tried again later with backoff (a new message)."""
    from webapp.projects.services.webhooks import deliver, send_delivery

    attempt = deliver(delivery_id)
    if attempt.retry_in is not None:
        send_delivery(delivery_id, countdown=attempt.retry_in)
    return attempt.state
