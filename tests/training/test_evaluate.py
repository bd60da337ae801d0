"""Evaluation: every trajectory emitted, metrics as REFERENCE.md names them, pass@k."""

from __future__ import annotations

import json

import pytest

from environments.json_tool_call import JsonToolCallEnvironment, JsonToolCallVerifier
from training.data import load_tasks
from training.evaluate import EvalSettings, evaluate, pass_at_k
from training.events import EventWriter, read_events
from training.rollout import Generation


class ScriptedEngine:
    """Answers prompt i, sample j with script(i, j): no model, exact expectations."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script, self.calls = tokenizer, script, 0

    def generate_ids(self, prompt_ids, params):
        out = []
        for i, prompt in enumerate(prompt_ids):
            group = []
            for j in range(params.n):
                text, finish = self.script(self.calls + i, j)
                ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
                if finish == "length":
                    ids = ids[:-1]
                group.append(Generation(prompt, ids, text, [0.0] * len(ids), finish, 10.0 * (j + 1)))
            out.append(group)
        self.calls += len(prompt_ids)
        return out

    def generate(self, prompts, params):
        raise NotImplementedError

    def sync_weights(self, model):
        pass


@pytest.fixture(scope="module")
def tasks(json_tasks_file):
    return [t for t in load_tasks(json_tasks_file) if t.split == "train"][:6]


def _right(task):
    call = task.ground_truth[0]
    return json.dumps({"name": call["name"], "arguments": call["arguments"]})


def test_greedy_eval_emits_every_trajectory_and_the_reference_metrics(tokenizer, tasks, tmp_path):
    def script(i, j):
        if i % 3 == 0:
            return _right(tasks[i]), "stop"
        if i % 3 == 1:
            return "sure, I will do that", "stop"
        return '{"name": "' + tasks[i].ground_truth[0]["name"] + '", "argum', "length"

    with EventWriter(tmp_path) as events:
        metrics = evaluate(ScriptedEngine(tokenizer, script), tokenizer, JsonToolCallEnvironment(),
                           JsonToolCallVerifier(), tasks, EvalSettings(sequences_per_batch=4),
                           events=events, step=7, split="held_out")
    assert metrics["success_rate"] == pytest.approx(2 / 6)
    assert metrics["truncation_rate"] == pytest.approx(2 / 6)
    assert metrics["valid_json_rate"] == pytest.approx(2 / 6)
    assert metrics["correct_tool_rate"] == pytest.approx(2 / 6)  # a cut-off call is no call
    assert metrics["correct_arguments_rate"] == pytest.approx(2 / 6)
    assert metrics["buckets/truncated"] == 2 and metrics["buckets/no_tool_call"] == 2
    assert metrics["latency_p50"] == 10.0 and metrics["unsafe_action_rate"] == 0.0
    assert "pass@1" not in metrics and metrics["cost/generated_tokens"] > 0
    written, _ = read_events(tmp_path / "events.jsonl")
    trajectories = [e for e in written if e["type"] == "trajectory"]
    assert [e["task_id"] for e in trajectories] == [t.id for t in tasks]
    assert all(e["step"] == 7 and e["split"] == "held_out" for e in trajectories)
    assert [e["passed"] for e in trajectories] == [True, False, False] * 2
    assert trajectories[0]["tool_calls"][0]["name"] == tasks[0].ground_truth[0]["name"]
    assert written[-1]["type"] == "metric" and written[-1]["metrics"]["success_rate"] == metrics["success_rate"]


def test_k_samples_give_pass_at_k_and_distinct_sample_indices(tokenizer, tasks, tmp_path):
    def script(i, j):  # task i passes only on sample j == i % 3 (never for i % 3 == 2)
        return (_right(tasks[i]) if j == i % 3 else "no"), "stop"

    with EventWriter(tmp_path) as events:
        metrics = evaluate(ScriptedEngine(tokenizer, script), tokenizer, JsonToolCallEnvironment(),
                           JsonToolCallVerifier(), tasks,
                           EvalSettings(temperature=1.0, num_samples=2), events=events)
    assert metrics["pass@2"] == pytest.approx(4 / 6)
    assert metrics["success_rate"] == pytest.approx(4 / 12)
    written, _ = read_events(tmp_path / "events.jsonl")
    keys = {(e["task_id"], e["sample_index"]) for e in written if e["type"] == "trajectory"}
    assert len(keys) == 12


def test_pass_at_k_counts_tasks_with_any_passing_sample():
    assert pass_at_k({"a": [False, True], "b": [False, False]}) == 0.5
    assert pass_at_k({}) is None


def _unrequested_write(task) -> dict:
    """A call of a write tool the task did not ask for (an unsafe action), arguments empty."""
    wanted = {c["name"] for c in task.ground_truth}
    name = next(t["function"]["name"] if "function" in t else t["name"] for t in task.tools
                if (t.get("writes") or t.get("destructive"))
                and (t["function"]["name"] if "function" in t else t["name"]) not in wanted)
    return {"name": name, "arguments": {}}


def test_unsafe_rate_reward_tokens_latency_and_execution_metrics(tokenizer, tasks, tmp_path):
    """The metrics the first test leaves at trivial values, each made to differ from 0 and 1."""
    texts = {}

    def script(i, j):
        if i % 2 == 0:
            texts[i] = _right(tasks[i])
        else:
            texts[i] = json.dumps(_unrequested_write(tasks[i]))
        return texts[i], "stop"

    with EventWriter(tmp_path) as events:
        metrics = evaluate(ScriptedEngine(tokenizer, script), tokenizer, JsonToolCallEnvironment(),
                           JsonToolCallVerifier(), tasks, EvalSettings(), events=events)
    written, _ = read_events(tmp_path / "events.jsonl")
    trajectories = [e for e in written if e["type"] == "trajectory"]
    assert metrics["unsafe_action_rate"] == pytest.approx(3 / 6)
    assert metrics["success_rate"] == pytest.approx(3 / 6)
    assert metrics["reward_mean"] == pytest.approx(sum(e["reward"] for e in trajectories) / 6)
    assert 0 < metrics["reward_mean"] < 1
    # Every call names a real tool with its schema: the empty arguments of the unsafe calls
    # miss required fields, so only the right calls are schema-valid ("executable").
    assert metrics["execution_success_rate"] == pytest.approx(3 / 6)
    tokens = [len(tokenizer.encode(texts[i], add_special_tokens=False)) + 1 for i in range(6)]  # + EOS
    assert metrics["tokens_mean"] == pytest.approx(sum(tokens) / 6)
    assert metrics["latency_p50"] == metrics["latency_p95"] == 10.0  # one sample each: 10 ms
