"""Trajectories as the pipeline makes them, for page and API tests.

A dataset of json_tool_call tasks, a verifier, a GRPO run whose completions (right call,
wrong tool, wrong arguments, invalid JSON, prose) are scored by the real JsonToolCallVerifier
and ingested through EventIngestor, so rewards, buckets, groups, advantages and rollups are
what a worker would have written. `hostile=True` puts XSS probes in task keys, turns, tool
arguments and tool outputs.
"""

from __future__ import annotations

import json
import statistics

from environments.json_tool_call import JsonToolCallVerifier, make_task
from environments.types import ToolCall, ToolSpec
from environments.types import Trajectory as EnvTrajectory
from webapp.datasets.services.datasets import dataset_create
from webapp.runs.models import ModelSpec, Run
from webapp.runs.services import jobs as js
from webapp.runs.services.ingest import EventIngestor
from webapp.runs.services.run_config import run_config_check, run_create
from webapp.verifiers.services.verifiers import verifier_create

XSS = ['<script>alert(1)</script>', '<img src=x onerror=alert(1)>', '"><svg onload=alert(1)>']

TOOLS = [
    ToolSpec(name="send_email", description="Send an email.", parameters={
        "type": "object", "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
        "required": ["to", "subject"], "additionalProperties": False}),
    ToolSpec(name="create_event", description="Create a calendar event.", parameters={
        "type": "object", "properties": {"title": {"type": "string"}, "hours": {"type": "integer"}},
        "required": ["title", "hours"], "additionalProperties": False}),
]


def _call_text(name: str, arguments: dict) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def completions_for(expected: ToolCall, hostile: bool = False) -> list[str]:
    """Right call, wrong tool, wrong (mistyped, extra) arguments, invalid JSON: four buckets."""
    other = "create_event" if expected.name == "send_email" else "send_email"
    wrong_args = {key: 7 for key in expected.arguments} | {"extra": XSS[2] if hostile else "x"}
    return [
        _call_text(expected.name, expected.arguments),
        _call_text(other, {"title": XSS[0] if hostile else "t", "hours": 1}),
        _call_text(expected.name, wrong_args),
        ('{"name": "' + expected.name + '", "arguments": {' + (XSS[1] if hostile else "oops")),
    ]


def make_tasks(count: int, hostile: bool = False) -> list:
    tasks = []
    for i in range(count):
        key = f"task-{i}" + (XSS[0] if hostile and i == 0 else "")
        if i % 2 == 0:
            expected = ToolCall(name="send_email", arguments={"to": f"ann{i}@example.com", "subject": f"Report {i}"})
        else:
            expected = ToolCall(name="create_event", arguments={"title": f"Sync {i}", "hours": i})
        request = f"Please do task {i}" + (f" {XSS[1]}" if hostile else "")
        tasks.append(make_task(key, request, TOOLS, expected, category="email" if i % 2 == 0 else "calendar",
                               split="train" if i < count - 1 else "held_out"))
    return tasks


def _events(run: Run, tasks: list, *, steps: int, split: str, hostile: bool, improving: bool) -> list[dict]:
    verifier = JsonToolCallVerifier({})
    events = []
    for step in range(1, steps + 1):
        for task in tasks:
            expected = ToolCall.from_dict(task.ground_truth[0])
            texts = completions_for(expected, hostile)
            if improving and step == steps:
                texts = [texts[0]] * len(texts)
            scored = []
            for sample, text in enumerate(texts):
                turns = [*task.messages, {"role": "assistant", "content": text}]
                if hostile and sample == 0:
                    turns.append({"role": "tool", "name": expected.name, "content": XSS[0] + " ok " + XSS[2]})
                result = verifier.verify(task, EnvTrajectory(turns=turns))
                scored.append((sample, turns, result))
            rewards = [r.reward or 0.0 for _, _, r in scored]
            mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
            for sample, turns, result in scored:
                events.append({
                    "type": "trajectory", "task_id": task.id, "step": step, "split": split,
                    "group_id": f"{run.pk}-{step}-{task.id}"[:64], "sample_index": sample, "turns": turns,
                    "reward": result.reward, "components": result.components,
                    "advantage": 0.0 if std == 0 else ((result.reward or 0.0) - mean) / std,
                    "passed": result.passed,
                    "failure_bucket": str(result.failure_bucket) if result.failure_bucket else "",
                    "flags": result.flags, "tokens_in": 40 + sample, "tokens_out": len(turns[-1]["content"]) // 4,
                    "latency_ms": 100.0 + sample,
                })
        events.append({"type": "metric", "step": step, "split": "train",
                       "metrics": {"reward": statistics.fmean(e["reward"] or 0 for e in events[-len(tasks) * 4:])}})
    return events


def make_pipeline_project(project, actor, *, hostile: bool = False, tasks: int = 4):
    """The dataset, verifier and model a run needs."""
    dataset = dataset_create(project=project, name="tool calls", tasks=make_tasks(tasks, hostile), actor=actor,
                             environment="json_tool_call")
    verifier = verifier_create(project=project, name="tool_call_verifier", kind="json_tool_call", config={},
                               actor=actor)
    model = ModelSpec.objects.create(project=project, name="tiny", hf_id="x/tiny")
    return dataset, verifier, model


def make_pipeline_run(project, actor, *, name: str = "grpo quick", kind: str = "grpo", steps: int = 3,
                      split: str = "train", hostile: bool = False, improving: bool = False,
                      setup=None, finish: bool = True, config: dict | None = None) -> Run:
    """A run whose trajectories were scored by the real verifier and ingested as a worker would."""
    dataset, verifier, model = setup or make_pipeline_project(project, actor, hostile=hostile)
    checked = run_config_check(config or {}, project=project, kind=kind, model=model, dataset=dataset,
                               verifier_version=verifier.latest_version)
    run, job = run_create(name=name, checked=checked, actor=actor)
    claimed = js.job_claim(job_id=job.pk, worker="test-worker")
    js.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
    tasks = make_tasks(dataset.tasks.count(), hostile)
    EventIngestor(run, attempt=claimed.attempt).ingest(
        _events(run, tasks, steps=steps, split=split, hostile=hostile, improving=improving))
    if finish:
        js.job_succeed(job_id=job.pk, attempt=claimed.attempt)
    run.refresh_from_db()
    return run


def make_finished_experiment(project, actor, *, name: str, setup=None, checkpoint_bytes: int = 0,
                             baseline_name: str = "baseline"):
    """An ended experiment recorded from finished runs (experiment_record, as the demo's example is): a baseline
    evaluation, a GRPO run with a checkpoint at step 1 (its weights file `checkpoint_bytes` long when > 0, else no
    folder), and a held-out evaluation; returns (experiment, {stage: run})."""
    from webapp.runs.models import Checkpoint
    from webapp.runs.services.experiments import experiment_record
    from webapp.runs.services.paths import run_folder

    dataset, verifier, model = setup = setup or make_pipeline_project(project, actor)
    runs = {"baseline": make_pipeline_run(project, actor, name=baseline_name, kind="eval", steps=1, setup=setup),
            "grpo": make_pipeline_run(project, actor, name="grpo", steps=1, setup=setup),
            "held_out": make_pipeline_run(project, actor, name="held out", kind="eval", steps=1, split="held_out",
                                          setup=setup)}
    uri = "/nowhere"
    if checkpoint_bytes:
        folder = run_folder(runs["grpo"]) / "checkpoints" / "step_1"
        folder.mkdir(parents=True)
        (folder / "adapter_model.safetensors").write_bytes(b"w" * checkpoint_bytes)
        uri = str(folder)
    Checkpoint.objects.create(run=runs["grpo"], step=1, storage_uri=uri)
    experiment = experiment_record(project=project, name=name, dataset=dataset,
                                   verifier_version=verifier.latest_version, model=model, config={}, runs=runs,
                                   actor=actor)
    return experiment, runs
