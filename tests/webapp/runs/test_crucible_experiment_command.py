"""`manage.py crucible_experiment`: progress while a stage runs, and --fail-on-gates.

No worker runs here: the command's sleep between polls plays the next step of each stage's
job through the real job and ingestion services, as a worker would.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from webapp.datasets.services.datasets import dataset_create
from webapp.runs.management.commands import crucible_experiment as command
from webapp.runs.models import Experiment, ExperimentState, ModelSpec, Run
from webapp.runs.services import jobs as js
from webapp.runs.services.experiments import experiment_advance
from webapp.runs.services.ingest import EventIngestor
from webapp.verifiers.services.verifiers import verifier_create

BASELINE = {"valid_json_rate": 0.9, "success_rate": 0.1, "unsafe_action_rate": 0.0, "latency_p95": 100.0}
GOOD = {"success_rate": 0.6, "unsafe_action_rate": 0.0, "latency_p95": 110.0}
SLOW = {**GOOD, "latency_p95": 900.0}


@pytest.fixture
def project(project_team):
    from environments.workplace.generator import generate_tasks

    owner, project = project_team["owner"], project_team["project"]
    dataset_create(project=project, name="wp", tasks=generate_tasks(40, 0), actor=owner)
    verifier_create(project=project, name="v", kind="json_tool_call", config={}, actor=owner)
    ModelSpec.objects.create(project=project, name="tiny", hf_id="smollm2-135m-instruct")
    return project


class FakeWorker:
    """Each call (the command's sleep) plays one step of the running stage's job."""

    def __init__(self, held_out_metrics: dict, idle: int = 0):
        self.held_out_metrics = held_out_metrics
        self.idle = idle  # polls with nothing new before each step
        self.claims: dict[int, int] = {}
        self.sleeps = 0

    def __call__(self, _seconds: float) -> None:
        self.sleeps += 1
        if self.sleeps % (self.idle + 1):
            return
        experiment = Experiment.objects.get(state=ExperimentState.RUNNING)
        stage = command.running_stage(experiment)
        run = Run.objects.get(pk=experiment.stages[stage]["run"])
        job = run.jobs.get()
        if job.pk not in self.claims:  # first poll of a stage: a worker picks it up
            self.claims[job.pk] = js.job_claim(job_id=job.pk, worker="test").attempt
            js.job_mark_running(job_id=job.pk, attempt=self.claims[job.pk])
            js.job_heartbeat(job_id=job.pk, attempt=self.claims[job.pk], progress=0.5)
            if stage == "grpo":
                self._ingest(run, [{"type": "metric", "step": 1, "split": "train", "metrics": {"reward": 0.25}}])
            return
        self._finish(experiment, stage, run, job)

    def _finish(self, experiment, stage, run, job) -> None:
        metrics = {"baseline": BASELINE, "held_out": self.held_out_metrics}.get(stage)
        events = [{"type": "metric", "step": 0, "split": "held_out", "metrics": metrics}] if metrics else []
        if stage == "grpo":
            events.append({"type": "checkpoint", "step": 3, "path": f"/ckpt/{run.pk}/3", "kind": "adapter",
                           "content_hash": "h", "metrics": {}})
        self._ingest(run, events)
        js.job_succeed(job_id=job.pk, attempt=self.claims[job.pk])
        experiment_advance(experiment_id=experiment.pk)

    def _ingest(self, run, events) -> None:
        EventIngestor(run, attempt=self.claims[run.jobs.get().pk]).ingest(events)


def _run(project, monkeypatch, worker: FakeWorker, *flags: str) -> str:
    monkeypatch.setattr(command.time, "sleep", worker)
    out = StringIO()
    call_command("crucible_experiment", "--project", project.slug, "--dataset", "wp", "--verifier", "v",
                 "--model", "tiny", *flags, stdout=out)
    return out.getvalue()


def test_progress_of_the_running_stage_is_printed(project, monkeypatch):
    output = _run(project, monkeypatch, FakeWorker(GOOD))
    lines = output.splitlines()
    grpo = [line for line in lines if "grpo (run" in line]
    assert any("job queued 0%" in line for line in grpo), output
    assert any("job running 50% · step 1 reward 0.250" in line for line in grpo), output
    assert any("baseline (run" in line and "job running 50%" in line for line in lines), output
    assert "all gates passed" in output and "FAIL" not in output


def test_an_unchanged_stage_is_reported_again_after_the_heartbeat(project, monkeypatch):
    quiet = _run(project, monkeypatch, FakeWorker(GOOD, idle=2))
    busy = _run(project, monkeypatch, FakeWorker(GOOD))
    assert len(quiet.splitlines()) == len(busy.splitlines()), "idle polls print nothing new"
    monkeypatch.setattr(command, "HEARTBEAT_SECONDS", 0)
    chatty = _run(project, monkeypatch, FakeWorker(GOOD, idle=2))
    repeated = [line for line in chatty.splitlines() if "baseline (run" in line and "job running 50%" in line]
    assert len(repeated) == 3, chatty  # printed when it changed, then on both idle polls


def test_failing_gates_exit_0_by_default_and_1_with_fail_on_gates(project, monkeypatch):
    output = _run(project, monkeypatch, FakeWorker(SLOW))
    assert "FAIL  latency p95" in output
    with pytest.raises(CommandError, match="failed gates: latency p95") as raised:
        _run(project, monkeypatch, FakeWorker(SLOW), "--fail-on-gates")
    assert raised.value.returncode == 1


def test_passing_gates_with_fail_on_gates_exit_normally(project, monkeypatch):
    assert "all gates passed" in _run(project, monkeypatch, FakeWorker(GOOD), "--fail-on-gates")


def test_fail_on_gates_needs_to_wait(project, monkeypatch):
    with pytest.raises(CommandError, match="drop --no-wait"):
        _run(project, monkeypatch, FakeWorker(GOOD), "--fail-on-gates", "--no-wait")
