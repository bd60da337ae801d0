"""Evaluation: run the policy on a split, verify every trajectory, emit it, and summarise.

Used by `kind: eval` (a baseline or any checkpoint) and by the trainers for validation every
eval_interval steps and the held-out measurement after training. Metrics are named as
REFERENCE.md lists them (success_rate, reward_mean, valid_json_rate, ... pass@k, bucket
counts, cost/*).

Rates that come from verifier components are averaged over the trajectories whose verifier
reports that component: valid_json, correct_tool, correct_arguments (json_tool_call and
workplace report them), execution_success (first of the components execution_success,
write_success (workplace), schema_valid (json_tool_call: the call would execute)), unsafe.

Latency. A trajectory's latency_ms is its time to last token, summed over its turns, plus its
tool calls' time (training.agent_loop.Episode), measured in the batch it was generated in.
In a batch every row waits for the whole batch's prompt prefill and pays each decoding
step's cost for all rows, so those numbers grow with the batch size and with the prompts
beside it: they compare completions within a batch, not models. latency_p50 / latency_p95
therefore come from a latency probe: the first `latency_tasks` tasks of the split
(eval_latency_tasks in the run config; a split's order is fixed, so every evaluation of a
split probes the same tasks) each run alone, batch size 1 and one sample, so that each
latency is that of one request to this model on this device, prefill, decoding, every turn
and tool call included. The baseline and the candidate of an experiment are evaluated on the
same split, and the promotion gate compares their probe p95s. With one sample per task the
probe episodes are those tasks' evaluation episodes (nothing is generated twice); with
num_samples k > 1 they are extra, timed and not scored. Latency is wall time: compare runs
measured on the same kind of device.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from environments.base import Verifier
from environments.types import Task, VerifyResult
from training.agent_loop import Episode, run_episodes
from training.distributed import SINGLE, World, seed_for
from training.fsdp import finish_generation
from training.rollout import RolloutEngine, SamplingParams
from training.system_metrics import SystemMonitor

EVAL_SEQUENCES_PER_BATCH = 32
"""Sequences generated together in one evaluation batch (prompts x samples)."""

EVAL_LATENCY_TASKS = 8
"""Tasks per evaluation timed alone (batch size 1) for latency_p50 / latency_p95."""

_EXECUTION_COMPONENTS = ("execution_success", "write_success", "schema_valid")


@dataclass(frozen=True)
class EvalSettings:
    """How an evaluation samples: greedy (temperature 0) or k samples per task."""

    temperature: float = 0.0
    num_samples: int = 1
    max_new_tokens: int = 256
    seed: int | None = 0
    sequences_per_batch: int = EVAL_SEQUENCES_PER_BATCH
    latency_tasks: int = EVAL_LATENCY_TASKS
    """First tasks of the split run alone for latency_p50 / p95; 0: no latency metrics."""

    def sampling(
        self, batch_index: int, *, probe: bool = False, positions: Sequence[int] | None = None
    ) -> SamplingParams:
        """Batch `batch_index`'s sampling; a latency probe draws one sample.

        `positions` (each task's place in the evaluated split) seed every task's samples on
        their own, so a data-parallel evaluation samples what one process would.
        """
        seed = None if self.seed is None else self.seed + batch_index
        prompt_seeds = None
        if positions is not None and seed is not None and self.temperature > 0:
            prompt_seeds = tuple(seed_for(self.seed, position) for position in positions)
        return SamplingParams(
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            n=1 if probe else self.num_samples,
            seed=seed,
            prompt_seeds=prompt_seeds,
        )


def settings_from_config(cfg: Any) -> EvalSettings:
    return EvalSettings(
        temperature=cfg.eval_temperature,
        num_samples=cfg.eval_num_samples,
        max_new_tokens=cfg.max_completion_length,
        seed=cfg.seed,
        latency_tasks=cfg.eval_latency_tasks,
    )


# ---------------------------------------------------------------------------------------
# Verification and events
# ---------------------------------------------------------------------------------------


def verify_episode(verifier: Verifier, episode: Episode) -> VerifyResult:
    """The verifier's verdict; an exception inside it is a verifier error, never reward 0."""
    try:
        return verifier.verify(episode.task, episode.trajectory)
    except Exception as exc:  # user verifiers may raise anything; record it, keep going
        return VerifyResult.failure(f"verifier raised {type(exc).__name__}: {exc}")


def _tool_calls(episode: Episode, result: VerifyResult) -> list[dict[str, Any]]:
    calls = [c for t in episode.trajectory.assistant_turns() for c in t.get("tool_calls") or []]
    if calls:
        return calls
    parse = result.info.get("parse") if isinstance(result.info, dict) else None
    return list(parse.get("calls") or []) if isinstance(parse, dict) else []


def trajectory_fields(
    episode: Episode,
    result: VerifyResult,
    *,
    step: int,
    split: str,
    sample_index: int,
    group_id: str,
    advantage: float | None = None,
) -> dict[str, Any]:
    """The trajectory event of one verified episode (the worker's ingestion format)."""
    return {
        "task_id": episode.task.id,
        "step": step,
        "split": split,
        "sample_index": sample_index,
        "group_id": group_id,
        "turns": episode.trajectory.turns,
        "tool_calls": _tool_calls(episode, result),
        "reward": result.reward,
        "passed": result.passed,
        "failure_bucket": str(result.failure_bucket) if result.failure_bucket else None,
        "components": dict(result.components),
        "flags": list(result.flags),
        "tokens_in": episode.tokens_in,
        "tokens_out": episode.tokens_out,
        "latency_ms": round(episode.latency_ms, 3),
        "advantage": advantage,
        "truncated": episode.truncated,
        **({"error": result.error} if result.error else {}),
    }


# ---------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _component_rate(results: Sequence[VerifyResult], names: Sequence[str]) -> float | None:
    values = []
    for result in results:
        name = next((n for n in names if n in result.components), None)
        if name is not None:
            values.append(float(result.components[name]))
    return _mean(values)


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _unsafe(result: VerifyResult) -> bool:
    return (
        result.components.get("unsafe", 0.0) > 0
        or "unsafe_action" in result.flags
        or result.failure_bucket == "unsafe_action"
    )


def pass_at_k(passed_by_task: dict[str, list[bool]]) -> float | None:
    """Share of tasks with at least one passing sample among their k (n = k samples)."""
    if not passed_by_task:
        return None
    return sum(any(v) for v in passed_by_task.values()) / len(passed_by_task)


def summarise(
    episodes: Sequence[Episode],
    results: Sequence[VerifyResult],
    *,
    num_samples: int,
    seconds: float,
    latencies: Sequence[float],
) -> dict[str, float | None]:
    """The evaluation metrics of REFERENCE.md over verified episodes.

    `latencies` are the latency probe's (milliseconds, batch size 1; see the module
    docstring), not the scored episodes' in-batch times.
    """
    rewards = [r.reward for r in results if r.reward is not None]
    tokens_out = [e.tokens_out for e in episodes]
    metrics: dict[str, float | None] = {
        "success_rate": _mean([float(r.passed) for r in results]),
        "reward_mean": _mean(rewards),
        "valid_json_rate": _component_rate(results, ["valid_json"]),
        "correct_tool_rate": _component_rate(results, ["correct_tool"]),
        "correct_arguments_rate": _component_rate(results, ["correct_arguments"]),
        "execution_success_rate": _component_rate(results, _EXECUTION_COMPONENTS),
        "unsafe_action_rate": _mean([float(_unsafe(r)) for r in results]),
        "truncation_rate": _mean([float(e.truncated) for e in episodes]),
        "verifier_error_rate": _mean([float(r.reward is None) for r in results]),
        "latency_p50": _percentile(latencies, 50),
        "latency_p95": _percentile(latencies, 95),
        "tokens_mean": _mean(tokens_out),
        "num_trajectories": float(len(episodes)),
        "cost/device_seconds": seconds,
        "cost/generated_tokens": float(sum(tokens_out)),
    }
    if num_samples > 1:
        by_task: dict[str, list[bool]] = {}
        for episode, result in zip(episodes, results, strict=True):
            by_task.setdefault(episode.task.id, []).append(result.passed)
        metrics[f"pass@{num_samples}"] = pass_at_k(by_task)
    buckets = Counter(str(r.failure_bucket) for r in results if r.failure_bucket)
    metrics.update({f"buckets/{name}": float(n) for name, n in sorted(buckets.items())})
    return metrics


# ---------------------------------------------------------------------------------------
# Running an evaluation
# ---------------------------------------------------------------------------------------


def _emit_trajectories(
    episodes: Sequence[Episode],
    results: Sequence[VerifyResult],
    num_samples: int,
    events: Any,
    *,
    step: int,
    split: str,
) -> None:
    """Trajectory events of verified episodes (task-major, num_samples each)."""
    if events is None:
        return
    for position, (episode, result) in enumerate(zip(episodes, results, strict=True)):
        events.trajectory(
            **trajectory_fields(
                episode,
                result,
                step=step,
                split=split,
                sample_index=position % num_samples,
                group_id=f"{split}-{step}-{episode.task.id}",
            )
        )


def generation_plan(tasks: Sequence[Task], settings: EvalSettings) -> list[tuple[list[Task], bool]]:
    """The evaluation's generate calls in order: (tasks, is a latency probe).

    The probe comes first, one task per call, so it is timed alone; with one sample per
    task it also stands for those tasks' scored episodes, so they are not generated again.
    """
    probed = list(tasks[: max(0, settings.latency_tasks)])
    plan = [([task], True) for task in probed]
    rest = list(tasks[len(probed) :] if settings.num_samples == 1 else tasks)
    per_batch = max(1, settings.sequences_per_batch // settings.num_samples)
    plan += [(rest[i : i + per_batch], False) for i in range(0, len(rest), per_batch)]
    return plan


def evaluate(
    engine: RolloutEngine,
    tokenizer: Any,
    env: Any,
    verifier: Verifier,
    tasks: Sequence[Task],
    settings: EvalSettings,
    *,
    agent: Any = None,
    events: Any = None,
    step: int = 0,
    split: str = "validation",
    progress: Callable[[int, int], Any] | None = None,
    monitor: SystemMonitor | None = None,
    world: World = SINGLE,
) -> dict[str, float | None]:
    """Generate, verify and (with `events`) emit every trajectory, then one metric event.

    `progress(tasks scored, tasks)` is called after each generate call, for a caller that
    reports how far a long evaluation has got. `monitor` adds the process's system metrics
    over the evaluation (training/system_metrics.py).

    Data parallel (`world` of several ranks): each rank evaluates its contiguous share of
    the tasks; rank 0 gathers every rank's episodes and emits them in task order, so the
    events are those of one process (latency probes: rank 0's first tasks).
    """
    if monitor is not None:
        monitor.start()
    started = time.perf_counter()
    mine = world.share(len(tasks))
    local = list(tasks[mine.start : mine.stop])
    stream = None if world.parallel else events  # one process emits as it goes
    if world.parallel and not world.is_main:
        settings = replace(settings, latency_tasks=0)
    reported = (lambda done, _total: progress(min(len(tasks), done * world.size), len(tasks))) if progress else None
    part = _evaluate_share(engine, tokenizer, env, verifier, local, settings, mine.start, agent=agent,
                           events=stream, step=step, split=split, progress=reported)
    finish_generation(engine)  # fsdp: rank 0's latency probes and uneven shares, in step
    if world.parallel:
        part = _EvalPart.joined(world.gather(part))
        _emit_trajectories(part.episodes, part.results, settings.num_samples, events, step=step, split=split)
    metrics = summarise(
        part.episodes,
        part.results,
        num_samples=settings.num_samples,
        seconds=time.perf_counter() - started,
        latencies=part.latencies,
    )
    metrics.update({
        "timing/generation": part.generating,
        "timing/scoring": part.scoring,
        "generation/tokens_per_second": part.generated_tokens / max(part.generating, 1e-9),
        **(monitor.sample() if monitor is not None else {}),
    })
    if events is not None:
        events.metric(step, metrics, split=split)
    return metrics


@dataclass
class _EvalPart:
    """What one process's share of an evaluation produced."""

    episodes: list[Episode] = field(default_factory=list)
    results: list[VerifyResult] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    generating: float = 0.0
    scoring: float = 0.0
    generated_tokens: int = 0

    @classmethod
    def joined(cls, parts: Sequence[_EvalPart]) -> _EvalPart:
        """Ranks' parts in rank order; times are the slowest rank's, tokens the sum."""
        whole = cls()
        for part in parts:
            whole.episodes += part.episodes
            whole.results += part.results
            whole.latencies += part.latencies
            whole.generated_tokens += part.generated_tokens
        whole.generating = max(p.generating for p in parts)
        whole.scoring = max(p.scoring for p in parts)
        return whole


def _evaluate_share(
    engine: RolloutEngine,
    tokenizer: Any,
    env: Any,
    verifier: Verifier,
    tasks: Sequence[Task],
    settings: EvalSettings,
    offset: int,
    *,
    agent: Any,
    events: Any,
    step: int,
    split: str,
    progress: Callable[[int, int], Any] | None,
) -> _EvalPart:
    """Generate and verify `tasks` (positions offset.. of the split), emitting as it goes."""
    part = _EvalPart()
    position_of = {id(task): offset + i for i, task in enumerate(tasks)}
    scored_tasks = 0
    for index, (batch, probe) in enumerate(generation_plan(tasks, settings)):
        positions = [position_of[id(task)] for task in batch]
        began = time.perf_counter()
        done = run_episodes(
            engine, tokenizer, env, batch, settings.sampling(index, probe=probe, positions=positions), agent
        )
        part.generating += time.perf_counter() - began
        part.generated_tokens += sum(episode.tokens_out for episode in done)
        if probe:
            part.latencies += [episode.latency_ms for episode in done]
            if settings.num_samples > 1:
                continue  # an extra sample, timed and not scored
        began = time.perf_counter()
        results = [verify_episode(verifier, episode) for episode in done]
        _emit_trajectories(done, results, settings.num_samples, events, step=step, split=split)
        part.scoring += time.perf_counter() - began
        part.episodes += done
        part.results += results
        scored_tasks += len(batch)
        if progress is not None:
            progress(scored_tasks, len(tasks))
    return part


def evaluate_job(
    job: Any,
    tasks: Sequence[Task],
    *,
    step: int,
    split: str,
    progress: Callable[[int, int], Any] | None = None,
) -> dict[str, Any]:
    """Evaluate the job's live model on `tasks` (validation, held-out, or kind eval)."""
    from training.runner import rollout_engine  # runner builds jobs for this module's loop

    engine = rollout_engine(job)
    return evaluate(
        engine,
        job.tokenizer,
        job.env,
        job.verifier,
        tasks,
        settings_from_config(job.cfg),
        agent=job.agent,
        events=job.events,
        step=step,
        split=split,
        progress=progress,
        monitor=getattr(job, "monitor", None),
        world=getattr(job, "world", SINGLE),
    )


def checkpoint_step(path: str | None) -> int:
    """The step a checkpoint folder was saved at (step_N), 0 for the base model."""
    if not path:
        return 0
    from training.checkpoints import read_checkpoint

    found = read_checkpoint(path)
    return found.step if found is not None else 0


def run_eval(job: Any) -> dict[str, Any]:
    """kind eval: measure the model (or init_checkpoint) on eval_split."""
    tasks = job.data.split(job.cfg.eval_split)
    step = checkpoint_step(job.cfg.init_checkpoint)
    job.events.log(f"evaluating {len(tasks)} tasks of split {job.cfg.eval_split!r} at step {step}")
    job.events.progress(0, max(1, len(tasks)))
    # Progress in tasks scored: an evaluation can take minutes, and a person watching the
    # job (or `crucible_experiment`) should see it move.
    metrics = evaluate_job(job, tasks, step=step, split=job.cfg.eval_split, progress=job.events.progress)
    job.events.progress(max(1, len(tasks)), max(1, len(tasks)))
    return {"step": step, "metrics": metrics}
