"""Evaluation: every trajectory emitted, metrics as REFERENCE.md names them, pass@k."""

from __future__ import annotations

import json

import pytest

from environments.json_tool_call import JsonToolCallEnvironment, JsonToolCallVerifier
from training.data import load_tasks
from training.evaluate import EvalSettings, evaluate, pass_at_k
from training.events import EventWriter, read_events
from training.models import tiny_llama
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

    # latency_tasks=0: a latency probe's extra calls would shift the script's prompt count.
    with EventWriter(tmp_path) as events:
        metrics = evaluate(ScriptedEngine(tokenizer, script), tokenizer, JsonToolCallEnvironment(),
                           JsonToolCallVerifier(), tasks,
                           EvalSettings(temperature=1.0, num_samples=2, latency_tasks=0), events=events)
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


class BatchTimedEngine(ScriptedEngine):
    """Every completion's latency is 10 ms per sequence in its call, as when a batch's cost is
    shared by all its rows; it logs each call's (prompts, samples)."""

    def __init__(self, tokenizer, script):
        super().__init__(tokenizer, script)
        self.log = []

    def generate_ids(self, prompt_ids, params):
        groups = super().generate_ids(prompt_ids, params)
        self.log.append((len(prompt_ids), params.n))
        for gen in (g for group in groups for g in group):
            gen.latency_ms = 10.0 * len(prompt_ids) * params.n
        return groups


@pytest.fixture(scope="module")
def many_tasks(json_tasks_file):
    return [t for t in load_tasks(json_tasks_file) if t.split == "train"][:16]


def _run(engine, tokenizer, tasks, settings, tmp_path=None):
    if tmp_path is None:
        return evaluate(engine, tokenizer, JsonToolCallEnvironment(), JsonToolCallVerifier(), tasks, settings)
    with EventWriter(tmp_path) as events:
        return evaluate(engine, tokenizer, JsonToolCallEnvironment(), JsonToolCallVerifier(), tasks, settings,
                        events=events)


def test_latency_percentiles_come_from_the_batch_one_probe_not_the_batch_size(tokenizer, many_tasks):
    """In-batch latencies grow with the batch (here 10 ms per row); the metrics do not."""
    def script(i, j):
        return _right(many_tasks[i]), "stop"

    by_batch = {}
    for per_batch in (1, 8):
        engine = BatchTimedEngine(tokenizer, script)
        by_batch[per_batch] = _run(engine, tokenizer, many_tasks, EvalSettings(sequences_per_batch=per_batch))
        assert engine.log[:8] == [(1, 1)] * 8, "the first 8 tasks are probed alone"
    assert by_batch[1]["latency_p95"] == by_batch[8]["latency_p95"] == 10.0
    assert by_batch[1]["success_rate"] == by_batch[8]["success_rate"] == 1.0


def test_with_k_samples_the_probe_is_timed_apart_and_not_scored(tokenizer, many_tasks, tmp_path):
    def script(i, j):
        return "no", "stop"

    engine = BatchTimedEngine(tokenizer, script)
    settings = EvalSettings(temperature=1.0, num_samples=2, sequences_per_batch=8, latency_tasks=3)
    metrics = _run(engine, tokenizer, many_tasks, settings, tmp_path)
    assert engine.log == [(1, 1)] * 3 + [(4, 2)] * 4  # 3 probes alone, then every task 2 x 4 per call
    assert metrics["num_trajectories"] == 32 and metrics["latency_p95"] == 10.0
    written, _ = read_events(tmp_path / "events.jsonl")
    assert sum(e["type"] == "trajectory" for e in written) == 32
    assert {e["latency_ms"] for e in written if e["type"] == "trajectory"} == {80.0}  # in-batch times


def test_no_probe_means_no_latency_metrics_and_progress_counts_tasks(tokenizer, many_tasks):
    calls = []
    settings = EvalSettings(sequences_per_batch=8, latency_tasks=0)
    metrics = evaluate(BatchTimedEngine(tokenizer, lambda i, j: ("no", "stop")), tokenizer,
                       JsonToolCallEnvironment(), JsonToolCallVerifier(), many_tasks, settings,
                       progress=lambda done, total: calls.append((done, total)))
    assert metrics["latency_p50"] is None and metrics["latency_p95"] is None
    assert calls == [(8, 16), (16, 16)]


class TokenCostClock:
    """Reads the tokens the model has processed so far (prompt and generated, padding too):
    the time of a compute-bound device, where a batch's every step costs all of its rows,
    without the noise of wall time on a shared machine."""

    def __init__(self, model):
        self.tokens = 0
        self.handle = model.register_forward_hook(self._count, with_kwargs=True)

    def _count(self, _module, args, kwargs, _output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.tokens += ids.numel()

    def __call__(self) -> float:
        return float(self.tokens)


def test_tiny_model_latency_p95_does_not_scale_with_the_eval_batch(tokenizer, json_tasks_file, tmp_path):
    """The real engine (shared prefill, StaticCache): batched 16 at a time, each row's time to
    last token is many times its time alone; latency_p95 stays that of the probe."""
    from training.rollout import HFGenerateEngine

    model = tiny_llama(tokenizer, seed=0)
    clock = TokenCostClock(model)
    engine = HFGenerateEngine(model, tokenizer, clock=clock)
    tasks = [t for t in load_tasks(json_tasks_file) if t.split == "train"][:24]
    metrics = {}
    for per_batch in (1, 16):
        settings = EvalSettings(max_new_tokens=8, sequences_per_batch=per_batch)
        metrics[per_batch] = _run(engine, tokenizer, tasks, settings, tmp_path / str(per_batch))
    assert metrics[1]["latency_p95"] == metrics[16]["latency_p95"] > 0
    written, _ = read_events(tmp_path / "16" / "events.jsonl")
    in_batch = [e["latency_ms"] for e in written if e["type"] == "trajectory"][8:]  # after the probe
    assert min(in_batch) > 8 * metrics[16]["latency_p95"], "in a batch of 16 a row waits for all 16"
