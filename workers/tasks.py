"""Celery tasks: ids in, one service call each."""

from __future__ import annotations

import logging

from celery import shared_task

from workers import registration  # noqa: F401  (connects the worker registration signals)

logger = logging.getLogger(__name__)


@shared_task(name="workers.tasks.execute_job", ignore_result=True)
def execute_job(job_id: int) -> None:
    """Claim and run one job. A duplicate message finds the job claimed and does nothing."""
    from workers.runner import run_job

    run_job(job_id)


@shared_task(name="workers.tasks.reap_expired_jobs", ignore_result=True)
def reap_expired_jobs() -> dict:
    """Periodic (celery beat): re-queue jobs whose worker died, fail those out of attempts."""
    from webapp.runs.services.jobs import jobs_reap_expired

    report = jobs_reap_expired()
    if report.requeued or report.failed or report.cancelled:
        logger.warning("reaper: requeued=%s failed=%s cancelled=%s", report.requeued, report.failed, report.cancelled)
    return {"requeued": report.requeued, "failed": report.failed, "cancelled": report.cancelled}


@shared_task(name="workers.tasks.advance_experiments", ignore_result=True)
def advance_experiments() -> int:
    """Periodic (celery beat): move every running experiment pipeline forward if a stage finished."""
    from webapp.runs.services.experiments import experiments_advance_all

    return experiments_advance_all()
