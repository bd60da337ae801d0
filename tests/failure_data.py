"""Evaluation runs with chosen first samples, for the Failures tests' transition examples.

pipeline_data's runs always answer sample 0 right, so every task's first sample passes in every
evaluation. Here each task's one sample is the completion picked by index (pipeline_data's
completions_for: 0 right call, 1 wrong tool, 2 wrong arguments, 3 invalid JSON), scored by the
real JsonToolCallVerifier and ingested through EventIngestor, as a worker would.
"""

from __future__ import annotations

from pipeline_data import completions_for, make_tasks

from environments.json_tool_call import JsonToolCallVerifier
from environments.types import ToolCall
from environments.types import Trajectory as EnvTrajectory
from webapp.runs.models import Run
from webapp.runs.services import jobs as js
from webapp.runs.services.ingest import EventIngestor
from webapp.runs.services.run_config import run_config_check, run_create


def _event(task, pick: int, *, step: int, split: str, hostile: bool) -> dict:
    expected = ToolCall.from_dict(task.ground_truth[0])
    turns = [*task.messages, {"role": "assistant", "content": completions_for(expected, hostile)[pick]}]
    result = JsonToolCallVerifier({}).verify(task, EnvTrajectory(turns=turns))
    return {"type": "trajectory", "task_id": task.id, "step": step, "split": split, "group_id": task.id[:64],
            "sample_index": 0, "turns": turns, "reward": result.reward, "components": result.components,
            "passed": result.passed, "failure_bucket": str(result.failure_bucket) if result.failure_bucket else "",
            "flags": result.flags, "tokens_in": 40, "tokens_out": 10, "latency_ms": 100.0}


def eval_run_with_first_samples(project, actor, setup, name: str, picks: list[int], *, step: int = 0,
                                split: str = "held_out", hostile: bool = False) -> Run:
    """An evaluation run (kind eval) in which task i answered completion picks[i], once."""
    dataset, verifier, model = setup
    checked = run_config_check({}, project=project, kind="eval", model=model, dataset=dataset,
                               verifier_version=verifier.latest_version)
    run, job = run_create(name=name, checked=checked, actor=actor)
    claimed = js.job_claim(job_id=job.pk, worker="test-worker")
    js.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
    tasks = make_tasks(dataset.tasks.count(), hostile)
    events = [_event(task, pick, step=step, split=split, hostile=hostile) for task, pick in zip(tasks, picks, strict=True)]
    EventIngestor(run, attempt=claimed.attempt).ingest(events)
    js.job_succeed(job_id=job.pk, attempt=claimed.attempt)
    run.refresh_from_db()
    return run
