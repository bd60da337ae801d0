"""Cancelling and retrying a run: both act on its latest job (pages and API share these)."""

from __future__ import annotations

from webapp.runs.models import FINAL_JOB_STATES, Job, JobState, Run
from webapp.runs.selectors.runs import run_latest_job
from webapp.runs.services.jobs import job_request_cancel, job_retry

RETRYABLE_JOB_STATES = (JobState.FAILED, JobState.CANCELLED)


class RunActionError(ValueError):
    """The run cannot be cancelled or retried now; the message says why."""


def run_cancel(*, run: Run) -> Job:
    """Cancel the run's job: at once if queued, at the worker's next heartbeat if running."""
    job = run_latest_job(run)
    if job is None or job.state in FINAL_JOB_STATES:
        state = f"its latest job has already {job.state}" if job else "it has no job"
        raise RunActionError(f"Run {run.pk} has nothing to cancel: {state}.")
    try:
        return job_request_cancel(job=job)
    except ValueError as exc:
        raise RunActionError(str(exc)) from None


def run_retry(*, run: Run) -> Job:
    """Queue the run's failed or cancelled job again; it resumes from its last checkpoint."""
    job = run_latest_job(run)
    if job is None or job.state not in RETRYABLE_JOB_STATES:
        state = f"its latest job is {job.state}" if job else "it has no job"
        raise RunActionError(f"Run {run.pk} cannot be retried: {state}; only a failed or cancelled run can be "
                             "retried.")
    try:
        return job_retry(job=job)
    except ValueError as exc:
        raise RunActionError(str(exc)) from None
