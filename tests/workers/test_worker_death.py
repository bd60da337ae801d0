"""Worker death: kill -9 mid-run, the reaper re-queues, the next attempt resumes from its checkpoint.

Real processes throughout: celery workers (with beat running the reaper), the
training process they supervise, PostgreSQL or SQLite, Redis or the filesystem broker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid

import pytest

from environments.types import Task as EnvTask
from tests.training.conftest import json_tasks_file, tiny_model_dir, tokenizer  # noqa: F401  (fixtures)
from tests.workers.conftest import start_worker, stop_worker, wait_for
from webapp.datasets.services.datasets import dataset_create
from webapp.runs.models import Job, JobState, MetricPoint, ModelSpec
from webapp.runs.services.jobs import job_create
from webapp.runs.services.run_config import run_config_check, run_create
from webapp.trajectories.models import Trajectory
from webapp.verifiers.services.verifiers import verifier_create

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REAPER = {"CRUCIBLE_REAPER_INTERVAL_SECONDS": "1"}
LEASE_SECONDS = 5
PROMPTS, GENERATIONS, STEPS = 2, 2, 24


def _kill_group(worker) -> None:
    os.killpg(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait()


def _training_processes(run_dir_part: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "training run"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if run_dir_part in line]


@pytest.fixture
def grpo_run(project_team, tiny_model_dir, json_tasks_file):  # noqa: F811
    owner, project = project_team["owner"], project_team["project"]
    tasks = [EnvTask.from_dict(json.loads(line)) for line in json_tasks_file.read_text().splitlines()]
    dataset = dataset_create(project=project, name="json", tasks=tasks, actor=owner, environment="json_tool_call")
    verifier = verifier_create(project=project, name="exact", kind="json_tool_call", config={}, actor=owner)
    model = ModelSpec.objects.create(project=project, name="tiny", local_path=str(tiny_model_dir))
    config = {"kind": "grpo", "environment": "json_tool_call", "device": "cpu", "bf16": False, "max_steps": STEPS,
              "num_prompts_per_step": PROMPTS, "num_generations_per_prompt": GENERATIONS,
              "max_completion_length": 8, "checkpoint_interval": 2, "eval_interval": 1000, "keep_top_k": 2}
    checked = run_config_check(config, project=project, kind="grpo", dataset=dataset,
                               verifier_version=verifier.latest_version, model=model)
    run, _ = run_create(name="grpo", checked=checked, actor=owner, start=False)
    return run


def test_kill_9_mid_run_resumes_without_duplicates_or_gaps(grpo_run, tmp_path):
    queue = f"death-{uuid.uuid4().hex[:6]}"
    env = {**REAPER, "CRUCIBLE_BEAT_QUEUE": queue}
    first = start_worker(queue, tmp_path / "a.log", lease_seconds=LEASE_SECONDS, beat=True, extra_env=env)
    try:
        job = job_create(project=grpo_run.project, kind="grpo", run=grpo_run, queue=queue)
        wait_for(lambda: grpo_run.checkpoints.filter(step__gte=2).exists(), timeout=180,
                 what="a checkpoint to be ingested")
        assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    finally:
        _kill_group(first)
    wait_for(lambda: not _training_processes(f"/runs/{grpo_run.folder_name}/"), timeout=20,
             what="the orphaned training process to die with its worker")

    second = start_worker(queue, tmp_path / "b.log", lease_seconds=LEASE_SECONDS, beat=True, extra_env=env)
    try:
        done = wait_for(lambda: (j := Job.objects.get(pk=job.pk)).state in ("succeeded", "failed") and j,
                        timeout=300, what="the resumed job to finish")
    finally:
        stop_worker(second)
    assert done.state == JobState.SUCCEEDED, done.error + "\n" + second.log()[-3000:]
    assert done.attempt == 2
    assert [h["outcome"] for h in done.history] == ["requeued", "succeeded"]
    resumed = [line for line in done.log_tail.splitlines() if "resumes from the checkpoint of step" in line]
    assert resumed and 2 <= int(resumed[0].split()[-1]) < STEPS, done.log_tail[:2000]

    train = Trajectory.objects.filter(run=grpo_run, split="train")
    per_step = {s: train.filter(step=s).count() for s in range(1, STEPS + 1)}
    assert per_step == {s: PROMPTS * GENERATIONS for s in range(1, STEPS + 1)}, "a gap or a duplicate"
    reward_steps = sorted(MetricPoint.objects.filter(run=grpo_run, split="train", name="reward")
                          .values_list("step", flat=True))
    assert reward_steps == list(range(1, STEPS + 1))
    assert set(train.values_list("attempt", flat=True)) == {1, 2}


def test_a_job_whose_worker_dies_every_time_stops_at_the_attempt_limit(project_team, tmp_path):
    queue = f"crash-{uuid.uuid4().hex[:6]}"
    worker = start_worker(queue, tmp_path / "w.log", lease_seconds=LEASE_SECONDS, beat=True,
                          extra_env={**REAPER, "CRUCIBLE_BEAT_QUEUE": queue})
    try:
        job = job_create(project=project_team["project"], kind="noop", queue=queue, max_attempts=2,
                         payload={"steps": 1000, "sleep": 0.1})
        for attempt in (1, 2):
            running = wait_for(lambda a=attempt: (j := Job.objects.get(pk=job.pk)).state == "running"
                               and j.attempt == a and j, timeout=60, what=f"attempt {attempt} to run")
            pool_pid = int(running.worker.split(":")[1].split()[0])
            os.kill(pool_pid, signal.SIGKILL)  # the process running the job dies, as in an OOM kill
        final = wait_for(lambda: (j := Job.objects.get(pk=job.pk)).state == "failed" and j, timeout=60,
                         what="the job to fail")
    finally:
        stop_worker(worker)
    assert final.attempt == 2
    assert "gave up after 2 of 2 attempts" in final.error
    assert "stopped heartbeating" in final.error
