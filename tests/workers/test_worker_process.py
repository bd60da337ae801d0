"""End to end: a real `celery worker` process runs jobs through their whole lifecycle."""

from __future__ import annotations

import pytest

from tests.workers.conftest import wait_for
from webapp.runs.models import Job, JobState
from webapp.runs.services.jobs import job_create, job_request_cancel

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _state(job_id: int) -> Job:
    return Job.objects.get(pk=job_id)


def _final(job_id: int, timeout: float = 60) -> Job:
    return wait_for(
        lambda: (j := _state(job_id)).state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED) and j,
        timeout=timeout, what=f"job {job_id} to finish",
    )


def test_trivial_job_runs_to_success(project_team, live_worker):
    job = job_create(project=project_team["project"], kind="noop", queue=live_worker.queue,
                     payload={"steps": 3, "sleep": 0.05})
    done = _final(job.pk)
    assert done.state == JobState.SUCCEEDED, live_worker.log()[-3000:]
    assert done.attempt == 1
    assert done.progress == 1.0
    assert "step 3/3" in done.log_tail
    assert done.started_at is not None and done.finished_at >= done.started_at
    assert [h["outcome"] for h in done.history] == ["succeeded"]


def test_failing_job_records_the_error(project_team, live_worker):
    job = job_create(project=project_team["project"], kind="noop", queue=live_worker.queue,
                     payload={"steps": 1, "sleep": 0.01, "fail": "disk full"})
    done = _final(job.pk)
    assert done.state == JobState.FAILED
    assert done.error == "RuntimeError: disk full"
    assert "Traceback" in done.log_tail


def test_unknown_kind_fails_with_a_clear_message(project_team, live_worker):
    job = job_create(project=project_team["project"], kind="teleport", queue=live_worker.queue)
    done = _final(job.pk)
    assert done.state == JobState.FAILED
    assert "No handler for job kind 'teleport'" in done.error


def test_running_job_is_cancelled_through_its_heartbeat(project_team, live_worker):
    job = job_create(project=project_team["project"], kind="noop", queue=live_worker.queue,
                     payload={"steps": 400, "sleep": 0.1})
    wait_for(lambda: _state(job.pk).state == JobState.RUNNING, what="job to start")
    job_request_cancel(job=_state(job.pk))
    done = _final(job.pk, timeout=30)
    assert done.state == JobState.CANCELLED
    assert done.progress < 1.0


def test_worker_registers_itself(live_worker):
    from webapp.runs.models import WorkerNode
    from webapp.runs.services.workers import workers_alive

    node = wait_for(lambda: WorkerNode.objects.filter(name__startswith=f"test-{live_worker.queue}@").first(),
                    what="worker registration")
    assert node.queues == [live_worker.queue]
    assert node.pid == live_worker.proc.pid
    assert node in workers_alive()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_a_cuda_run_on_a_worker_without_a_gpu_is_refused_before_it_starts(project_team, live_worker, tmp_path):
    """The job fails at once with what to do; no training process is started, no run folder trained."""
    from webapp.datasets.services.datasets import dataset_create
    from webapp.runs.services.run_config import run_config_check, run_create

    owner, project = project_team["owner"], project_team["project"]
    dataset = dataset_create(project=project, name="none", tasks=[], actor=owner, environment="json_tool_call")
    checked = run_config_check({"kind": "eval", "environment": "json_tool_call", "device": "cuda"}, project=project,
                               kind="eval", dataset=dataset)
    run, _ = run_create(name="on cuda", checked=checked, actor=owner, start=False)
    job = job_create(project=project, kind="eval", run=run, queue=live_worker.queue)
    done = _final(job.pk)
    assert done.state == JobState.FAILED, live_worker.log()[-3000:]
    assert "asks for device 'cuda'" in done.error and "has no CUDA GPU" in done.error
    assert "device to auto or cpu" in done.error
    assert "started training process" not in done.log_tail
