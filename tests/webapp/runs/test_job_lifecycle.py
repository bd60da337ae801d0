"""The job state machine: claims, fencing by attempt, heartbeats, cancel, reaper."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from webapp.runs.models import Job, JobState, Run, RunStatus
from webapp.runs.services import jobs as js


@pytest.fixture
def job(project_team, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = js.job_create(project=project_team["project"], kind="noop", max_attempts=2)
    assert len(callbacks) == 1, "the Celery message must be sent on commit, once"
    return job


def _expire(job_id: int) -> None:
    Job.objects.filter(pk=job_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def test_queue_follows_kind():
    assert js.queue_for_kind("grpo") == "train"
    assert js.queue_for_kind("eval") == "rollout"
    assert js.queue_for_kind("verify") == "verify"
    assert js.queue_for_kind("noop") == "default"


def test_claim_bumps_attempt_and_second_claim_loses(job):
    first = js.job_claim(job_id=job.pk, worker="w1")
    assert first.state == JobState.CLAIMED and first.attempt == 1
    assert js.job_claim(job_id=job.pk, worker="w2") is None


def test_full_success_path_updates_run(project_team, django_capture_on_commit_callbacks):
    run = Run.objects.create(project=project_team["project"], name="r", kind="eval")
    with django_capture_on_commit_callbacks(execute=False):
        job = js.job_create(project=project_team["project"], kind="eval", run=run)
    assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED
    claimed = js.job_claim(job_id=job.pk, worker="w")
    js.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING
    js.job_heartbeat(job_id=job.pk, attempt=claimed.attempt, progress=0.5, log_tail="half way")
    done = js.job_succeed(job_id=job.pk, attempt=claimed.attempt)
    assert done.state == JobState.SUCCEEDED and done.progress == 1.0
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.finished_at is not None


def test_stale_attempt_cannot_write(job, django_capture_on_commit_callbacks):
    old = js.job_claim(job_id=job.pk, worker="w1")
    _expire(job.pk)
    with django_capture_on_commit_callbacks(execute=False):
        js.jobs_reap_expired()
    new = js.job_claim(job_id=job.pk, worker="w2")
    assert new.attempt == old.attempt + 1
    for write in (
        lambda: js.job_heartbeat(job_id=job.pk, attempt=old.attempt, progress=0.9),
        lambda: js.job_mark_running(job_id=job.pk, attempt=old.attempt),
        lambda: js.job_succeed(job_id=job.pk, attempt=old.attempt),
        lambda: js.job_fail(job_id=job.pk, attempt=old.attempt, error="late"),
    ):
        with pytest.raises(js.StaleAttempt):
            write()
    job.refresh_from_db()
    assert job.state == JobState.CLAIMED and job.attempt == new.attempt and job.progress == 0.0


def test_expired_lease_is_requeued_once_then_fails_with_reason(job, django_capture_on_commit_callbacks):
    js.job_claim(job_id=job.pk, worker="w1")
    _expire(job.pk)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        report = js.jobs_reap_expired()
    assert report.requeued == [job.pk] and len(callbacks) == 1
    # Reaping again changes nothing: the job is queued, not expired.
    assert js.jobs_reap_expired().requeued == []
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and "lease expired on attempt 1" in job.error

    js.job_claim(job_id=job.pk, worker="w2")
    _expire(job.pk)
    report = js.jobs_reap_expired()
    assert report.failed == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "gave up after 2 of 2 attempts" in job.error
    assert [h["outcome"] for h in job.history] == ["requeued", "failed"]


def test_live_lease_is_not_reaped(job):
    js.job_claim(job_id=job.pk, worker="w1")
    assert js.jobs_reap_expired().requeued == []


def test_cancel_queued_job_is_immediate_and_unclaimable(job):
    js.job_request_cancel(job=job)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert js.job_claim(job_id=job.pk, worker="w") is None
    with pytest.raises(ValueError, match="nothing to cancel"):
        js.job_request_cancel(job=job)


def test_cancel_running_job_is_seen_by_heartbeat(job):
    claimed = js.job_claim(job_id=job.pk, worker="w")
    assert js.job_heartbeat(job_id=job.pk, attempt=claimed.attempt).cancel_requested is False
    js.job_request_cancel(job=job)
    assert js.job_heartbeat(job_id=job.pk, attempt=claimed.attempt).cancel_requested is True
    assert js.job_mark_cancelled(job_id=job.pk, attempt=claimed.attempt).state == JobState.CANCELLED


def test_retry_gives_a_failed_job_new_attempts(job, django_capture_on_commit_callbacks):
    claimed = js.job_claim(job_id=job.pk, worker="w")
    js.job_fail(job_id=job.pk, attempt=claimed.attempt, error="boom")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        js.job_retry(job=job)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.max_attempts == 3 and len(callbacks) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_for_one_job_exactly_one_wins(project_team):
    if connection.vendor != "postgresql":
        pytest.skip("the race is only meaningful with concurrent connections (PostgreSQL)")
    job = Job.objects.create(project=project_team["project"], kind="noop")  # no message: nobody else may take it
    for _round in range(5):
        Job.objects.filter(pk=job.pk).update(state=JobState.QUEUED, worker="")
        barrier = threading.Barrier(4)
        results: list = []

        def contender(name: str, barrier=barrier, results=results) -> None:
            from django.db import connection as thread_connection

            try:
                barrier.wait()
                results.append(js.job_claim(job_id=job.pk, worker=name))
            finally:
                thread_connection.close()

        threads = [threading.Thread(target=contender, args=(f"w{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
    job.refresh_from_db()
    assert job.attempt == 5
