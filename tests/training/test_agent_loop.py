"""The multi-turn agent loop: token masks, log-prob alignment, turn limits and truncation.

A scripted engine plays the policy (the tiny random model never writes JSON), but its
log-probs come from the tiny model by teacher forcing, so alignment with what the trainer
computes over the whole episode is checked for real.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
import torch

from environments.base import Environment
from environments.types import Task, ToolCall, ToolSpec
from training.agent_loop import AgentLoopConfig, run_episodes
from training.prompts import ChatFormat
from training.rollout import Generation, HFGenerateEngine, SamplingParams

ADD = ToolSpec(
    name="add",
    description="Add x to the running total.",
    parameters={"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
    writes=True,
)


def call(x: int) -> str:
    return json.dumps({"name": "add", "arguments": {"x": x}})


class CounterEnv(Environment):
    """A running total; `add` returns the new total. Records every step it executes."""

    name: ClassVar[str] = "counter"
    version: ClassVar[str] = "1"

    def __init__(self) -> None:
        self.steps: list[ToolCall] = []

    def tools(self, task: Task) -> list[ToolSpec]:
        return [ADD]

    def reset(self, task: Task) -> dict[str, int]:
        return {"total": 0}

    def step(self, state: dict[str, int], call: ToolCall) -> tuple[dict[str, int], str]:
        self.steps.append(call)
        if call.arguments["x"] < 0:
            raise ValueError("x must not be negative")
        total = state["total"] + call.arguments["x"]
        return {"total": total}, f"total={total}"


class SingleStepEnv(CounterEnv):
    single_step: ClassVar[bool] = True

    def step(self, state, call):
        raise AssertionError("a single-step environment is never stepped")


class ScriptedEngine:
    """Answers the k-th assistant turn of every episode with script[k] (text, finish reason).

    Log-probs are the tiny model's teacher-forced ones at temperature 1, like a real engine's.
    """

    def __init__(self, model, tokenizer, script: list[tuple[str, str]]) -> None:
        self.model, self.tokenizer, self.script = model, tokenizer, script
        self.batches: list[int] = []
        self.max_new_tokens: list[int] = []
        self.prompt_tokens = len(tokenizer.encode("x"))

    def generate(self, prompts, params):
        raise NotImplementedError

    def sync_weights(self, model) -> None:
        self.model = model

    def generate_ids(self, prompt_ids, params):
        self.batches.append(len(prompt_ids) * params.n)
        self.max_new_tokens.append(params.max_new_tokens)
        return [[self._one(ids) for _ in range(params.n)] for ids in prompt_ids]

    def _one(self, prompt_ids: list[int]) -> Generation:
        turn = self.tokenizer.decode(prompt_ids).count("<|im_start|>assistant") - 1
        text, finish = self.script[min(turn, len(self.script) - 1)]
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if finish == "stop":
            ids.append(self.tokenizer.eos_token_id)
        return Generation(
            prompt_ids=list(prompt_ids),
            completion_ids=ids,
            text=text,
            logprobs=teacher_forced(self.model, prompt_ids, ids).tolist(),
            finish_reason=finish,
            latency_ms=1.5,
        )


def teacher_forced(model, prefix: list[int], ids: list[int]) -> torch.Tensor:
    full = torch.tensor([prefix + ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(full).logits[0, len(prefix) - 1 : -1].float(), -1)
    return logp.gather(1, torch.tensor(ids)[:, None]).squeeze(1)


def make_task(request: str = "Add 3 to the total, then tell me the result.") -> Task:
    return Task(id="t1", messages=[{"role": "user", "content": request}], tools=[ADD.to_dict()])


def spans(mask: list[int], ids: list[int], value: int) -> list[list[int]]:
    """The maximal runs of ids where mask == value."""
    runs: list[list[int]] = []
    previous = None
    for m, token in zip(mask, ids, strict=True):
        if m == value:
            if previous != value:
                runs.append([])
            runs[-1].append(token)
        previous = m
    return runs


def run(tokenizer, model, script, env=None, tasks=None, n=1, **config: Any):
    engine = ScriptedEngine(model, tokenizer, script)
    env = env or CounterEnv()
    episodes = run_episodes(
        engine,
        tokenizer,
        env,
        tasks or [make_task()],
        SamplingParams(max_new_tokens=64, n=n),
        AgentLoopConfig(**config),
    )
    return episodes, engine, env


def test_tool_output_tokens_are_exactly_the_masked_ones(tokenizer, tiny_model):
    script = [(call(3), "stop"), ("The total is 3.", "stop")]
    (episode,), _, env = run(tokenizer, tiny_model, script)

    generated = [
        tokenizer.decode(s) for s in spans(episode.completion_mask, episode.completion_ids, 1)
    ]
    assert generated == [call(3) + "<|im_end|>", "The total is 3.<|im_end|>"]
    (tool_tokens,) = spans(episode.completion_mask, episode.completion_ids, 0)
    assert (
        tokenizer.decode(tool_tokens)
        == "\n<|im_start|>tool\ntotal=3<|im_end|>\n<|im_start|>assistant\n"
    )

    conversation = [*make_task().messages, *episode.trajectory.turns]
    rendered = ChatFormat.create(tokenizer, [ADD]).render(conversation, add_generation_prompt=False)
    assert tokenizer.decode(episode.token_ids) + "\n" == rendered
    assert episode.loss_mask == [0] * len(episode.prompt_ids) + episode.completion_mask
    assert env.steps == [ToolCall("add", {"x": 3}, "call_1_0")]
    assert episode.final_state == {"total": 3}
    assert (episode.stop_reason, episode.truncated, episode.num_turns) == ("answer", False, 2)


def test_old_logprobs_align_with_a_forward_over_the_whole_episode(tokenizer, tiny_model):
    script = [(call(1), "stop"), (call(2), "stop"), ("Done: 3", "stop")]
    (episode,), _, _ = run(tokenizer, tiny_model, script)
    ids = torch.tensor([episode.token_ids])
    with torch.no_grad():
        logp = torch.log_softmax(tiny_model(ids).logits[0, :-1].float(), -1)  # (T-1, V)
    per_token = logp.gather(1, ids[0, 1:, None]).squeeze(1)  # token t+1 given tokens <= t
    mask = torch.tensor(episode.loss_mask[1:], dtype=torch.bool)
    old = torch.tensor(episode.old_logprobs[1:])
    assert int(mask.sum()) == episode.tokens_out
    torch.testing.assert_close(old[mask], per_token[mask], atol=1e-4, rtol=0)
    assert torch.all(old[~mask] == 0)


def test_trajectory_records_calls_and_tool_results(tokenizer, tiny_model):
    script = [("Let me add. " + call(3), "stop"), ("3", "stop")]
    (episode,), _, _ = run(tokenizer, tiny_model, script)
    assistant, tool, final = episode.trajectory.turns
    assert assistant["content"] == "Let me add. " + call(3)
    assert assistant["tool_calls"] == [
        {"name": "add", "arguments": {"x": 3}, "call_id": "call_1_0"}
    ]
    assert tool == {"role": "tool", "tool_call_id": "call_1_0", "name": "add", "content": "total=3"}
    assert final == {"role": "assistant", "content": "3"}
    meta = episode.trajectory.metadata
    assert meta["tokens_out"] == episode.tokens_out and meta["stop_reason"] == "answer"
    assert episode.tokens_in + episode.tokens_out == len(episode.token_ids)
    assert episode.latency_ms >= 3.0  # two turns of 1.5 ms each plus the tool step


def test_max_turns_stops_a_model_that_keeps_calling(tokenizer, tiny_model):
    (episode,), engine, env = run(tokenizer, tiny_model, [(call(1), "stop")], max_turns=3)
    assert episode.num_turns == 3 and len(env.steps) == 3
    assert (episode.stop_reason, episode.truncated, episode.trajectory.truncated) == (
        "max_turns",
        True,
        True,
    )
    assert len(engine.batches) == 3
    assert episode.final_state == {"total": 3}


def test_length_finish_is_recorded_as_truncation(tokenizer, tiny_model):
    (episode,), _, env = run(tokenizer, tiny_model, [('{"name": "add", "argu', "length")])
    assert episode.truncated and episode.trajectory.truncated
    assert episode.stop_reason == "length" and env.steps == []
    assert episode.completion_mask == [1] * len(episode.completion_ids)


def test_episode_token_budget_truncates_and_lowers_max_new_tokens(tokenizer, tiny_model):
    budget = 30
    script = [(call(1), "stop"), ("x " * 40, "stop")]
    (episode,), engine, _ = run(tokenizer, tiny_model, script, max_episode_tokens=budget)
    assert episode.stop_reason == "max_tokens" and episode.truncated
    assert len(episode.completion_ids) == budget
    first_turn = len(spans(episode.completion_mask, episode.completion_ids, 1)[0])
    tool_turn = len(spans(episode.completion_mask, episode.completion_ids, 0)[0])
    assert engine.max_new_tokens == [30, budget - first_turn - tool_turn]


def test_single_step_environment_is_never_stepped(tokenizer, tiny_model):
    (episode,), engine, _ = run(tokenizer, tiny_model, [(call(3), "stop")], env=SingleStepEnv())
    assert episode.trajectory.turns == [{"role": "assistant", "content": call(3)}]
    assert (episode.stop_reason, episode.truncated, len(engine.batches)) == (
        "single_step",
        False,
        1,
    )


def test_a_tool_that_raises_reports_the_error_and_the_episode_goes_on(tokenizer, tiny_model):
    script = [(call(-1), "stop"), ("Sorry.", "stop")]
    (episode,), _, _ = run(tokenizer, tiny_model, script)
    tool = episode.trajectory.turns[1]
    assert tool["content"] == "Error: ValueError: x must not be negative"
    assert episode.stop_reason == "answer"


def test_all_live_episodes_generate_together_and_finished_ones_drop_out(tokenizer, tiny_model):
    tasks = [make_task("Add 3."), make_task("Just say hi.")]

    class PerTask(ScriptedEngine):
        def _one(self, prompt_ids):
            text = self.tokenizer.decode(prompt_ids)
            self.script = (
                [(call(3), "stop"), ("ok", "stop")] if "Add 3." in text else [("hi", "stop")]
            )
            return super()._one(prompt_ids)

    engine = PerTask(tiny_model, tokenizer, [])
    episodes = run_episodes(
        engine, tokenizer, CounterEnv(), tasks, SamplingParams(n=2, max_new_tokens=32)
    )
    assert [e.group for e in episodes] == [0, 0, 1, 1]
    assert [e.num_turns for e in episodes] == [2, 2, 1, 1]
    assert engine.batches == [4, 2]


def test_real_engine_with_tiny_model_produces_aligned_episodes(tokenizer, tiny_model):
    engine = HFGenerateEngine(tiny_model, tokenizer)
    params = SamplingParams(temperature=1.0, max_new_tokens=12, n=3, seed=0)
    episodes = run_episodes(engine, tokenizer, CounterEnv(), [make_task()], params)
    assert len(episodes) == 3
    for episode in episodes:
        assert len(episode.token_ids) == len(episode.loss_mask) == len(episode.old_logprobs)
        assert episode.stop_reason in ("answer", "length")
        assert episode.truncated == (episode.stop_reason == "length")
        assert episode.tokens_out == len(episode.completion_ids) <= 12


@pytest.mark.parametrize("max_turns", [0, -1])
def test_config_rejects_non_positive_max_turns(max_turns):
    with pytest.raises(ValueError, match="max_turns"):
        AgentLoopConfig(max_turns=max_turns)


def test_long_prompt_is_left_truncated_and_the_cut_recorded(tokenizer, tiny_model):
    task = make_task("Add 3 to the total. " + "Some long context. " * 40)
    full = len(tokenizer.encode(ChatFormat.create(tokenizer, [ADD]).prompt(task.messages)))
    (episode,), _, _ = run(tokenizer, tiny_model, [("done", "stop")], tasks=[task], max_prompt_tokens=50)
    assert len(episode.prompt_ids) == 50
    assert episode.trajectory.metadata["prompt_tokens_dropped"] == full - 50
    assert tokenizer.decode(episode.prompt_ids).endswith("<|im_start|>assistant\n")


def test_prompt_within_the_limit_is_kept_whole(tokenizer, tiny_model):
    (episode,), _, _ = run(tokenizer, tiny_model, [("done", "stop")], max_prompt_tokens=4096)
    assert "prompt_tokens_dropped" not in episode.trajectory.metadata
    assert tokenizer.decode(episode.prompt_ids).startswith("<|im_start|>system")
