"""The agent loop: generate -> parse tool calls -> environment step -> tool results -> repeat.

All live episodes generate together each turn. Each episode keeps one growing token
sequence: the prompt, then alternately the policy's tokens (loss mask 1, with their
sampling-time log-probs) and the template's tokens for the tool results and the next
assistant header (loss mask 0: the policy did not choose them). Generated tokens are never
re-tokenized, so the trainer scores exactly the tokens that were sampled.

An episode ends with a final answer (an assistant turn without a tool call), after its one
turn in a single-step environment, or truncated: a turn hit max_new_tokens, the episode hit
max_episode_tokens, or max_turns turns all called tools.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from environments.base import Environment
from environments.parsing import calls_from_message
from environments.types import Task, ToolCall, Trajectory
from training.distributed import seed_for
from training.prompts import ChatFormat, Style, clip_prompt
from training.rollout import Generation, RolloutEngine, SamplingParams

StopReason = Literal["answer", "single_step", "length", "max_tokens", "max_turns"]
TRUNCATING = frozenset({"length", "max_tokens", "max_turns"})


@dataclass(frozen=True)
class AgentLoopConfig:
    """Episode limits and formats."""

    max_turns: int = 8
    """Assistant turns per episode; ending on a tool call at this limit counts as truncation."""
    max_episode_tokens: int | None = None
    """Cap on tokens after the prompt (generated plus tool output); None: no cap."""
    parse_mode: Literal["strict", "lenient"] = "lenient"
    """How tool calls are read from assistant text (environments.parsing)."""
    prompt_style: Style = "auto"
    """How tools are shown to the model (training.prompts)."""
    max_prompt_tokens: int | None = None
    """Prompt tokens kept, left-truncated beyond this (recorded as `prompt_tokens_dropped`)."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {self.max_prompt_tokens}")
        if self.max_episode_tokens is not None and self.max_episode_tokens < 1:
            raise ValueError(f"max_episode_tokens must be >= 1, got {self.max_episode_tokens}")


@dataclass
class Episode:
    """One finished episode: what happened (trajectory) and what to train on (tokens).

    completion_* cover every token after the prompt; mask 1 marks tokens the policy generated,
    0 marks tool output and chat-template tokens. completion_logprobs is 0.0 where mask is 0.
    latency_ms sums, over the episode's turns, each turn's time to its last token
    (Generation.latency_ms, in that turn's generation batch) and its tool calls' time in the
    environment: what one request's answer took, as far as the batch it ran in allowed.
    """

    task: Task
    group: int
    trajectory: Trajectory
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    stop_reason: StopReason | None = None
    num_turns: int = 0
    latency_ms: float = 0.0
    final_state: Any = None

    @property
    def truncated(self) -> bool:
        return self.stop_reason in TRUNCATING

    @property
    def token_ids(self) -> list[int]:
        """The whole episode: prompt then completion."""
        return self.prompt_ids + self.completion_ids

    @property
    def loss_mask(self) -> list[int]:
        """Aligned with token_ids: 0 on prompt and tool-output tokens, 1 on generated ones."""
        return [0] * len(self.prompt_ids) + self.completion_mask

    @property
    def old_logprobs(self) -> list[float]:
        """Aligned with token_ids: sampling-time log-probs of generated tokens, else 0.0."""
        return [0.0] * len(self.prompt_ids) + self.completion_logprobs

    @property
    def tokens_out(self) -> int:
        """Tokens the policy generated."""
        return sum(self.completion_mask)

    @property
    def longest_turn_tokens(self) -> int:
        """Tokens of the longest assistant turn: the length max_completion_length limits.

        Each turn's generated tokens are one run of 1s in completion_mask (tool output and
        template tokens between turns are 0), so in a single-step episode this is tokens_out.
        """
        longest = run = 0
        for bit in self.completion_mask:
            run = run + 1 if bit else 0
            longest = max(longest, run)
        return longest

    @property
    def tokens_in(self) -> int:
        """Tokens the policy read but did not generate: the prompt and the tool output."""
        return len(self.token_ids) - self.tokens_out


@dataclass
class _Live:
    """A running episode and what the loop needs to continue it."""

    episode: Episode
    chat: ChatFormat
    history: list[dict[str, Any]]  # messages for re-rendering the template: content only
    state: Any
    seed: int | None = None
    """This episode's own sampling seed when the call has per-prompt seeds (later turns)."""

    @property
    def ids(self) -> list[int]:
        return self.episode.token_ids


def run_episodes(
    engine: RolloutEngine,
    tokenizer: Any,
    env: Environment,
    tasks: Sequence[Task],
    params: SamplingParams,
    config: AgentLoopConfig | None = None,
) -> list[Episode]:
    """params.n episodes per task, task-major (episodes of task i share `group` i)."""
    config = config or AgentLoopConfig()
    live = [
        _start(tokenizer, env, task, group, config)
        for group, task in enumerate(tasks)
        for _ in range(params.n)
    ]
    if not live:
        return []
    episodes = [item.episode for item in live]
    for item, seed in zip(live, params.row_seeds(len(tasks)) or [], strict=False):
        item.seed = seed
    prompts = [live[i].ids for i in range(0, len(live), params.n)]
    first_params = replace(params, max_new_tokens=_turn_budget(live, params, config))
    generations = [g for group in engine.generate_ids(prompts, first_params) for g in group]
    turn = 1
    while live:
        live = [
            item
            for item, gen in zip(live, generations, strict=True)
            if _advance(item, gen, tokenizer, env, config)
        ]
        if not live:
            break
        turn_params = replace(
            params,
            n=1,
            seed=None if params.seed is None else params.seed + turn,
            max_new_tokens=_turn_budget(live, params, config),
            prompt_seeds=_turn_seeds(live, turn),
        )
        generations = [g[0] for g in engine.generate_ids([item.ids for item in live], turn_params)]
        turn += 1
    return episodes


def _turn_seeds(live: Sequence[_Live], turn: int) -> tuple[int, ...] | None:
    """Each live episode's seed for this turn, from its own seed: independent of the batch."""
    if any(item.seed is None for item in live):
        return None
    return tuple(seed_for(item.seed, turn) for item in live)  # type: ignore[arg-type]


def _start(
    tokenizer: Any, env: Environment, task: Task, group: int, config: AgentLoopConfig
) -> _Live:
    chat = ChatFormat.create(tokenizer, env.tools(task), config.prompt_style)
    history = [dict(m) for m in task.messages]
    prompt_ids, dropped = clip_prompt(
        tokenizer.encode(chat.prompt(history), add_special_tokens=False), config.max_prompt_tokens
    )
    episode = Episode(
        task=task, group=group, trajectory=Trajectory(turns=[]), prompt_ids=prompt_ids
    )
    if dropped:
        episode.trajectory.metadata["prompt_tokens_dropped"] = dropped
    return _Live(episode=episode, chat=chat, history=history, state=env.reset(task))


def _remaining(item: _Live, config: AgentLoopConfig) -> int | None:
    if config.max_episode_tokens is None:
        return None
    return config.max_episode_tokens - len(item.episode.completion_ids)


def _turn_budget(live: Sequence[_Live], params: SamplingParams, config: AgentLoopConfig) -> int:
    """max_new_tokens for a batch: the largest any live episode may still use."""
    if config.max_episode_tokens is None:
        return params.max_new_tokens
    largest = max(config.max_episode_tokens - len(item.episode.completion_ids) for item in live)
    return max(1, min(params.max_new_tokens, largest))


def _advance(
    item: _Live, gen: Generation, tokenizer: Any, env: Environment, config: AgentLoopConfig
) -> bool:
    """Record one generated turn, run its tool calls; True while the episode continues."""
    episode = item.episode
    ids, logprobs, finish = gen.completion_ids, gen.logprobs, gen.finish_reason
    remaining = _remaining(item, config)
    over_budget = remaining is not None and len(ids) > remaining
    if over_budget:
        ids, logprobs = ids[:remaining], logprobs[:remaining]
    text = tokenizer.decode(ids, skip_special_tokens=True) if over_budget else gen.text
    episode.completion_ids += ids
    episode.completion_mask += [1] * len(ids)
    episode.completion_logprobs += logprobs
    episode.latency_ms += gen.latency_ms
    episode.num_turns += 1
    assistant = {"role": "assistant", "content": text}
    episode.trajectory.turns.append(assistant)
    if over_budget:
        return _finish(item, env, "max_tokens")
    if finish == "length":
        return _finish(item, env, "length")
    if env.single_step:
        return _finish(item, env, "single_step")
    calls = calls_from_message(assistant, item.chat.tools, mode=config.parse_mode).calls
    if not calls:
        return _finish(item, env, "answer")
    calls = [_with_call_id(call, episode.num_turns, i) for i, call in enumerate(calls)]
    assistant["tool_calls"] = [call.to_dict() for call in calls]
    tool_messages = _execute(item, env, calls)
    episode.trajectory.turns.extend(tool_messages)
    if episode.num_turns >= config.max_turns:
        return _finish(item, env, "max_turns")
    return _append_tool_tokens(item, tokenizer, gen, tool_messages, text, env, config)


def _with_call_id(call: ToolCall, turn: int, index: int) -> ToolCall:
    return call if call.call_id else replace(call, call_id=f"call_{turn}_{index}")


def _execute(item: _Live, env: Environment, calls: list[ToolCall]) -> list[dict[str, Any]]:
    """Run each call in the environment; a tool that raises reports the error to the model."""
    messages = []
    for call in calls:
        started = time.perf_counter()
        try:
            item.state, observation = env.step(item.state, call)
        except Exception as exc:  # a tool failing on the model's arguments is feedback, not a crash
            observation = f"Error: {type(exc).__name__}: {exc}"
        item.episode.latency_ms += (time.perf_counter() - started) * 1000.0
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call.call_id,
                "name": call.name,
                "content": observation,
            }
        )
    return messages


def _append_tool_tokens(
    item: _Live,
    tokenizer: Any,
    gen: Generation,
    tool_messages: list[dict[str, Any]],
    text: str,
    env: Environment,
    config: AgentLoopConfig,
) -> bool:
    """Append the template's tool-result tokens (mask 0); False when they exceed the budget."""
    between = item.chat.tool_turn_text(item.history, tool_messages)
    if gen.finish_reason == "stop":
        eos_text = tokenizer.decode(gen.completion_ids[-1:])
        if eos_text and between.startswith(eos_text):  # the model already generated it
            between = between[len(eos_text) :]
    tool_ids = tokenizer.encode(between, add_special_tokens=False)
    remaining = _remaining(item, config)
    if remaining is not None and len(tool_ids) >= remaining:
        return _finish(item, env, "max_tokens")
    episode = item.episode
    episode.completion_ids += tool_ids
    episode.completion_mask += [0] * len(tool_ids)
    episode.completion_logprobs += [0.0] * len(tool_ids)
    item.history += [{"role": "assistant", "content": text}, *tool_messages]
    return True


def _finish(item: _Live, env: Environment, reason: StopReason) -> bool:
    episode = item.episode
    episode.stop_reason = reason
    episode.final_state = env.final_state(item.state)
    episode.trajectory.truncated = episode.truncated
    episode.trajectory.metadata.update(
        {
            "stop_reason": reason,
            "num_turns": episode.num_turns,
            "tokens_in": episode.tokens_in,
            "tokens_out": episode.tokens_out,
            "latency_ms": round(episode.latency_ms, 3),
        }
    )
    return False
