"""Multi-process jobs through the workers: routing by GPUs, a 2-process job end to end, its ranks shown.

Real processes: a celery worker, the training launcher, torchrun and its two ranks (CPU, gloo).
"""

from __future__ import annotations

import json
import uuid

import pytest

from environments.types import Task as EnvTask
from tests.training.conftest import json_tasks_file, tiny_model_dir, tokenizer  # noqa: F401  (fixtures)
from tests.workers.conftest import start_worker, stop_worker, wait_for
from webapp.datasets.services.datasets import dataset_create
from webapp.runs.models import Job, JobState, MetricPoint, ModelSpec, WorkerNode
from webapp.runs.selectors.jobs import job_row, placement_problem
from webapp.runs.services.jobs import gpus_needed, job_create, queue_for_run
from webapp.runs.services.run_config import run_config_check, run_create
from webapp.trajectories.models import Trajectory
from webapp.verifiers.services.verifiers import verifier_create
from workers.registration import capacity_queues
from workers.training_process import DeviceUnavailable, refuse_device_this_worker_lacks

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GPU = {"name": "H200", "memory_mb": 143_000}


def test_a_multi_gpu_run_goes_to_the_queue_of_workers_it_fits():
    assert queue_for_run("grpo", {"device": "cuda", "num_processes": 4}) == "train.gpus4"
    assert queue_for_run("grpo", {"device": "cuda"}) == "train"
    # CPU processes need cores, not GPUs; auto uses GPUs only where there is one per process
    assert queue_for_run("sft", {"device": "cpu", "num_processes": 2}) == "train"
    assert queue_for_run("eval", {"device": "auto", "num_processes": 2}) == "rollout"
    assert gpus_needed("train.gpus4") == 4 and gpus_needed("train") == 1 and gpus_needed("my.gpusx") == 1
    assert capacity_queues(["train", "rollout"], 3) == ["train.gpus2", "train.gpus3", "rollout.gpus2", "rollout.gpus3"]
    assert capacity_queues(["train"], 1) == []


def test_a_worker_refuses_more_cuda_processes_than_it_has_gpus():
    config = {"device": "cuda", "num_processes": 4}
    with pytest.raises(DeviceUnavailable, match="4 processes on cuda .* sees 2 GPU"):
        refuse_device_this_worker_lacks(config, worker_gpus=[GPU, GPU])
    refuse_device_this_worker_lacks({**config, "num_processes": 2}, worker_gpus=[GPU, GPU])
    refuse_device_this_worker_lacks({"device": "cpu", "num_processes": 8}, worker_gpus=[])


def test_the_placement_problem_names_what_is_missing():
    assert placement_problem("train.gpus4", [["train", "train.gpus2"]]).startswith(
        "No running worker offers 4 GPUs to one job: the most any train worker offers is 2.")
    assert "offers is 0" in placement_problem("train.gpus2", [["verify"]])
    assert placement_problem("train.gpus2", [["train", "train.gpus2"]]) is None
    assert placement_problem("train", []) is None


def test_a_worker_with_gpus_consumes_their_queues_and_a_bigger_job_says_it_fits_none(project_team, tmp_path):
    queue = f"dp-{uuid.uuid4().hex[:6]}"
    worker = start_worker(queue, tmp_path / "gpus.log", extra_env={"CRUCIBLE_WORKER_GPUS": "2"})
    try:
        node = wait_for(lambda: WorkerNode.objects.filter(name__startswith=f"test-{queue}@").first(),
                        what="worker registration")
        assert sorted(node.queues) == sorted([queue, f"{queue}.gpus2"])
        project = project_team["project"]
        fits = job_create(project=project, kind="noop", payload={"steps": 1}, queue=f"{queue}.gpus2")
        wait_for(lambda: Job.objects.get(pk=fits.pk).state == JobState.SUCCEEDED, what="the 2-GPU job to run")
        too_big = job_create(project=project, kind="noop", payload={"steps": 1}, queue=f"{queue}.gpus4")
        row = job_row(Job.objects.get(pk=too_big.pk))
        assert row.state == JobState.QUEUED
        assert f"the most any {queue} worker offers is 2" in row.placement_problem
    finally:
        stop_worker(worker)


def test_a_two_process_job_runs_through_a_real_worker_and_its_page_shows_its_ranks(
    project_team, tiny_model_dir, json_tasks_file, tmp_path, client  # noqa: F811
):
    owner, project = project_team["owner"], project_team["project"]
    tasks = [EnvTask.from_dict(json.loads(line)) for line in json_tasks_file.read_text().splitlines()]
    dataset = dataset_create(project=project, name="json", tasks=tasks, actor=owner, environment="json_tool_call")
    verifier = verifier_create(project=project, name="exact", kind="json_tool_call", config={}, actor=owner)
    model = ModelSpec.objects.create(project=project, name="tiny", local_path=str(tiny_model_dir))
    config = {"kind": "grpo", "environment": "json_tool_call", "device": "cpu", "bf16": False, "max_steps": 2,
              "num_prompts_per_step": 2, "num_generations_per_prompt": 2, "max_completion_length": 8,
              "eval_interval": 0, "num_processes": 2}
    checked = run_config_check(config, project=project, kind="grpo", dataset=dataset,
                               verifier_version=verifier.latest_version, model=model)
    run, _ = run_create(name="two ranks", checked=checked, actor=owner, start=False)
    queue = f"dp-{uuid.uuid4().hex[:6]}"
    worker = start_worker(queue, tmp_path / "worker.log", lease_seconds=20)
    try:
        job = job_create(project=project, kind="grpo", run=run, queue=queue)
        done = wait_for(lambda: (j := Job.objects.get(pk=job.pk)).state in ("succeeded", "failed") and j,
                        timeout=300, what="the 2-process job to finish")
    finally:
        stop_worker(worker)
    assert done.state == JobState.SUCCEEDED, done.error + "\n" + done.log_tail[-3000:]
    assert "2 processes (ddp)" in done.log_tail
    assert sorted(p["rank"] for p in done.processes) == [0, 1]
    assert {p["device"] for p in done.processes} == {"cpu"}
    # rank 0 alone wrote the events: each step once, every rank's trajectories once
    steps = sorted(MetricPoint.objects.filter(run=run, split="train", name="reward").values_list("step", flat=True))
    assert steps == [1, 2]
    assert Trajectory.objects.filter(run=run, split="train").count() == 2 * 2 * 2
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/runs/{run.pk}/").content.decode()
    assert "data-processes" in page and "Rank" in page
    assert "data-chart" in page
