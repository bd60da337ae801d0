"""The GRPO-family trainer (grpo, dr_grpo, dapo, gspo, bnpo): one readable loop.

Each step: draw num_prompts_per_step training tasks -> sample num_generations_per_prompt
episodes per task through the rollout engine and the agent loop -> verify -> group
advantages -> one policy update over the generation batch in micro-batches -> metrics,
trajectories, validation, checkpoint.

What keeps it cheap (and correct):
- one policy update per generation batch, so old log-probs are logp.detach() (ratio 1, a
  loss of ~0 with a real gradient): no extra forward pass for them;
- no reference forward at all when beta = 0; with LoRA the reference is the same model with
  its adapters disabled, never a second copy;
- logits only for completion positions: prompts are left-padded and completions
  right-padded to a shared boundary, so one `logits_to_keep` covers every completion;
- a prompt shared by several sequences of a micro-batch (the G samples of a group) is run
  once and its KV cache fanned out to them, in training and in the reference forward;
- log-probs from logits / sampling temperature, the quantity the sampler used;
- the loss normaliser of loss_type dapo is the completion-token count of the whole
  generation batch, so gradient accumulation equals one large batch; the other types weigh
  each micro-batch by its share of the sequences.
"""

from __future__ import annotations

import functools
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from environments.base import Verifier
from environments.registry import VERIFIERS, canonical_verifier_name, get_verifier
from environments.types import Task, VerifyResult
from training.agent_loop import Episode, run_episodes
from training.distributed import seed_for
from training.evaluate import evaluate_job, trajectory_fields, verify_episode
from training.fsdp import finish_generation
from training.losses import group_advantages_with_stats, policy_loss, soft_overlong_penalty
from training.models import autocast_context
from training.rollout import (
    SamplingParams,
    cache_kwarg,
    has_plain_kv_cache,
    padding_id,
    position_ids_from_mask,
)
from training.runner import (
    MAX_GRAD_NORM,
    Job,
    JobProgress,
    checkpoint_due,
    make_optimizer,
    micro_batch_rng,
    micro_batches,
    prefixed,
    resume,
    rollout_engine,
    save_checkpoint,
    sum_gradients_over_ranks,
    validation_due,
)

# ---------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------


def prompts_for_step(
    tasks: Sequence[Task], step: int, count: int, seed: int, draw: int = 0, draws_per_step: int = 1
) -> list[Task]:
    """`count` tasks for generation round `draw` of `step`, from epochs of seeded shuffles.

    A pure function of its arguments, so a resumed run draws exactly what it would have.
    """
    n = len(tasks)
    start = ((step - 1) * draws_per_step + draw) * count
    chosen = []
    for position in range(start, start + count):
        epoch, index = divmod(position, n)
        chosen.append(tasks[_epoch_order(seed, epoch, n)[index]])
    return chosen


@functools.lru_cache(maxsize=4)
def _epoch_order(seed: int, epoch: int, n: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return tuple(order)


# ---------------------------------------------------------------------------------------
# Rollouts and rewards
# ---------------------------------------------------------------------------------------


@dataclass
class Rollouts:
    """Episodes of one step, grouped by prompt (G consecutive episodes per group)."""

    episodes: list[Episode] = field(default_factory=list)
    results: list[VerifyResult] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)  # shaped; NaN on verifier error
    rounds: int = 0
    generation_seconds: float = 0.0  # the engine and the environment's tool calls
    scoring_seconds: float = 0.0  # the verifier

    def extend(self, other: Rollouts) -> None:
        self.episodes += other.episodes
        self.results += other.results
        self.rewards += other.rewards
        self.generation_seconds += other.generation_seconds
        self.scoring_seconds += other.scoring_seconds


def shaped_reward(result: VerifyResult, episode: Episode, cfg: Any) -> float:
    """Verifier reward plus DAPO's soft overlong penalty; NaN when the verifier failed.

    The penalty looks at the longest turn, since max_completion_length is a per-turn limit:
    a multi-turn episode whose turns are all short is not overlong however many turns it has.
    """
    if result.reward is None:
        return math.nan
    reward = float(result.reward)
    if cfg.overlong_buffer:
        penalty = soft_overlong_penalty(
            [episode.longest_turn_tokens], cfg.max_completion_length, cfg.overlong_buffer
        )
        reward += float(penalty[0])
    return reward


def _group_rewards(rewards: Sequence[float]) -> list[float]:
    """Verifier errors take their group's mean (advantage ~0; they are masked out anyway)."""
    valid = [r for r in rewards if not math.isnan(r)]
    fill = sum(valid) / len(valid) if valid else 0.0
    return [fill if math.isnan(r) else r for r in rewards]


def _groups(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


@dataclass
class TrainBatch:
    """The groups a step trains on, with their advantages."""

    episodes: list[Episode]
    rewards: torch.Tensor  # (N,)
    advantages: torch.Tensor  # (N,)
    trained: list[bool]  # False: verifier error (no reward), never in the loss


# ---------------------------------------------------------------------------------------
# Log-probs
# ---------------------------------------------------------------------------------------


def pack(
    episodes: Sequence[Episode], pad_id: int, device: torch.device, *, share_prompts: bool = True
) -> dict[str, torch.Tensor]:
    """Prompts left-padded and completions right-padded to one boundary (column P).

    Returns input_ids / attention_mask / position_ids (b, P + C), completion ids and mask
    (b, C): the mask is 1 on policy tokens only (not tool output, not padding). Rows with the
    same prompt (the G samples of a GRPO group, the two sides of a DPO pair) also get one
    shared copy of it: prompt_ids / prompt_attention (u, P) and prompt_index (b,), the row of
    each sequence's prompt there; share_prompts=False gives every row its own.
    """
    width_p = max(len(e.prompt_ids) for e in episodes)
    width_c = max(len(e.completion_ids) for e in episodes)
    b = len(episodes)
    ids = torch.full((b, width_p + width_c), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width_p + width_c), dtype=torch.long)
    completion_mask = torch.zeros((b, width_c), dtype=torch.float32)
    for row, e in enumerate(episodes):
        p, c = len(e.prompt_ids), len(e.completion_ids)
        ids[row, width_p - p : width_p] = torch.tensor(e.prompt_ids)
        ids[row, width_p : width_p + c] = torch.tensor(e.completion_ids)
        attention[row, width_p - p : width_p + c] = 1
        completion_mask[row, :c] = torch.tensor(e.completion_mask, dtype=torch.float32)
    prompt_index, first_rows = _distinct_prompts(episodes) if share_prompts else (list(range(b)), list(range(b)))
    rows = torch.tensor(first_rows)
    return {
        "input_ids": ids.to(device),  # (b, P+C)
        "attention_mask": attention.to(device),  # (b, P+C)
        "position_ids": position_ids_from_mask(attention).to(device),  # (b, P+C)
        "completion_ids": ids[:, width_p:].to(device),  # (b, C)
        "completion_mask": completion_mask.to(device),  # (b, C)
        "prompt_ids": ids[rows, :width_p].to(device),  # (u, P)
        "prompt_attention": attention[rows, :width_p].to(device),  # (u, P)
        "prompt_index": torch.tensor(prompt_index, dtype=torch.long).to(device),  # (b,)
    }


def _distinct_prompts(episodes: Sequence[Episode]) -> tuple[list[int], list[int]]:
    """Each sequence's index among the distinct prompts, and the first row of each of those."""
    seen: dict[tuple[int, ...], int] = {}
    first_rows: list[int] = []
    index = []
    for row, e in enumerate(episodes):
        key = tuple(e.prompt_ids)
        if key not in seen:
            seen[key] = len(first_rows)
            first_rows.append(row)
        index.append(seen[key])
    return index, first_rows


def forward_passes(model: Any, rows: Sequence[Any]) -> int:
    """Forward passes completion_logits makes for these rows (episodes or token sequences):
    2 when some share a prompt (the prompt once, then the completions on its cache), else 1.

    Under fsdp every rank must run the same passes at the same time, so the ranks take
    micro-batches of equal passes together (runner.micro_batches).
    """
    distinct = len({tuple(row.prompt_ids) for row in rows})
    width_c = max(len(row.completion_ids) for row in rows)
    return 2 if distinct < len(rows) and width_c > 1 and has_plain_kv_cache(model) else 1


def completion_logprobs(
    model: Any, packed: dict[str, torch.Tensor], temperature: float, *, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(completion token) under logits / temperature, (b, C); entropy (b, C) if asked."""
    logits = completion_logits(model, packed).float() / temperature  # (b, C, V)
    logp_all = torch.log_softmax(logits, dim=-1)  # (b, C, V)
    logp = logp_all.gather(-1, packed["completion_ids"][..., None]).squeeze(-1)  # (b, C)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)  # (b, C)
    return logp, entropy


def completion_logits(model: Any, packed: dict[str, torch.Tensor]) -> torch.Tensor:
    """(b, C, V) logits: position t predicts completion token t.

    When rows share prompts, each distinct prompt is run once and its KV cache is fanned out
    to its rows, so a GRPO group costs one prompt plus G completions instead of G prompts:
    with ~330-token prompts, 64-token completions and G = 8 that is about a quarter of the
    tokens. The gradient reaches the prompt's activations through the cache exactly as in a
    full forward, since completion tokens attend to the same keys and values either way.
    Models whose cache is not plain keys and values (sliding windows, Mamba layers) run
    every row in full.
    """
    if packed["prompt_ids"].shape[0] < packed["input_ids"].shape[0] and has_plain_kv_cache(model):
        return _shared_prompt_logits(model, packed)
    width_c = packed["completion_ids"].shape[1]
    out = model(
        input_ids=packed["input_ids"],
        attention_mask=packed["attention_mask"],
        position_ids=packed["position_ids"],
        logits_to_keep=width_c + 1,
        use_cache=False,
    )
    return out.logits[:, :-1]


def _shared_prompt_logits(model: Any, packed: dict[str, torch.Tensor]) -> torch.Tensor:
    """The prompts once (u rows), then every completion on its prompt's cache (b rows)."""
    index = packed["prompt_index"]  # (b,)
    width_p = packed["prompt_ids"].shape[1]
    width_c = packed["completion_ids"].shape[1]
    prompts = model(
        input_ids=packed["prompt_ids"],
        attention_mask=packed["prompt_attention"],
        position_ids=position_ids_from_mask(packed["prompt_attention"]),
        use_cache=True,
        logits_to_keep=1,
    )
    first = prompts.logits[index]  # (b, 1, V): the last prompt token predicts completion token 0
    if width_c == 1:
        return first
    cache = getattr(prompts, "cache", None) or prompts.past_key_values
    cache.batch_select_indices(index)  # (u, ...) -> (b, ...), differentiable indexing
    rest = model(
        input_ids=packed["completion_ids"][:, :-1],  # the last token predicts nothing we score
        attention_mask=packed["attention_mask"][:, :-1],  # (b, P + C - 1): cache + these
        position_ids=packed["position_ids"][:, width_p : width_p + width_c - 1],
        use_cache=True,
        **{cache_kwarg(model): cache},
    )
    return torch.cat([first, rest.logits], dim=1)  # (b, C, V)


def reference_logprobs(job: Job, packed: dict[str, torch.Tensor], temperature: float) -> torch.Tensor:
    """Log-probs of the reference policy: LoRA adapters disabled, or the frozen full copy."""
    with torch.no_grad(), autocast_context(job.device, job.autocast):
        if job.is_lora:
            with job.model.disable_adapter():
                return completion_logprobs(job.model, packed, temperature)[0]
        return completion_logprobs(job.reference, packed, temperature)[0]


# ---------------------------------------------------------------------------------------
# The trainer
# ---------------------------------------------------------------------------------------


class GRPOTrainer:
    """The loop of one grpo job; `step(n)` is also what bench/grpo_step.py times."""

    def __init__(self, job: Job) -> None:
        self.job = job
        cfg = job.cfg
        self.cfg = cfg
        self.tasks = job.data.split(cfg.train_split)
        self.group_size = cfg.num_generations_per_prompt
        self.engine = rollout_engine(job)
        self.optimizer, self.scheduler = make_optimizer(job, cfg.max_steps)
        self.pad_id = padding_id(job.tokenizer, job.model)
        self.validation: dict[int, dict[str, Any]] = {}
        self.progress = JobProgress(job, cfg.max_steps, 0, cfg.num_prompts_per_step * self.group_size)

    # --- generation ---------------------------------------------------------------------

    def _sampling(self, step: int, draw: int, positions: range) -> SamplingParams:
        """Seeded per prompt (its position in the step's draw), so any rank samples it alike."""
        return SamplingParams(
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            max_new_tokens=self.cfg.max_completion_length,
            n=self.group_size,
            seed=self.cfg.seed * 1_000_003 + step * 101 + draw,
            dropout=self.cfg.rollout_dropout,
            prompt_seeds=tuple(seed_for(self.cfg.seed, step, draw, position) for position in positions),
        )

    def generate_round(self, step: int, draw: int) -> Rollouts:
        """One generation batch: num_prompts_per_step tasks x G episodes, verified.

        In a data-parallel job each rank generates and verifies its share of the prompts
        (whole groups: a group never spans ranks), then every rank gathers the whole round.
        """
        draws = self.cfg.max_generation_batches if self.cfg.dynamic_sampling else 1
        prompts = prompts_for_step(
            self.tasks, step, self.cfg.num_prompts_per_step, self.cfg.seed, draw, draws
        )
        mine = self.job.world.share(len(prompts))
        self.engine.sync_weights(self.job.model)
        started = time.perf_counter()
        episodes = run_episodes(
            self.engine, self.job.tokenizer, self.job.env, prompts[mine.start : mine.stop],
            self._sampling(step, draw, mine), self.job.agent,
        )
        finish_generation(self.engine)  # fsdp: wait in step for the ranks still generating
        generated = time.perf_counter()
        results = [verify_episode(self.job.verifier, e) for e in episodes]
        rewards = [shaped_reward(r, e, self.cfg) for r, e in zip(results, episodes, strict=True)]
        local = Rollouts(episodes=episodes, results=results, rewards=rewards, rounds=1,
                         generation_seconds=generated - started, scoring_seconds=time.perf_counter() - generated)
        return gathered_rollouts(self.job, local)

    def collect(self, step: int) -> tuple[Rollouts, list[int]]:
        """All rollouts of the step and the indices of the groups to train on.

        With dynamic sampling, groups whose rewards are all equal carry no signal: they are
        dropped and more are generated, at most max_generation_batches rounds; if none with
        a spread turned up, the last round is trained on as it is (zero advantages).
        """
        target = self.cfg.num_prompts_per_step
        rollouts = Rollouts()
        kept: list[int] = []
        rounds = self.cfg.max_generation_batches if self.cfg.dynamic_sampling else 1
        for draw in range(rounds):
            first_group = len(rollouts.episodes) // self.group_size
            rollouts.extend(self.generate_round(step, draw))
            rollouts.rounds = draw + 1
            if not self.cfg.dynamic_sampling:
                return rollouts, list(range(len(rollouts.episodes) // self.group_size))
            for offset, group in enumerate(_groups(rollouts.rewards[first_group * self.group_size :], self.group_size)):
                filled = _group_rewards(group)
                if max(filled) - min(filled) > 1e-6:
                    kept.append(first_group + offset)
            if len(kept) >= target:
                return rollouts, kept[:target]
        if kept:
            return rollouts, kept
        last = len(rollouts.episodes) // self.group_size
        return rollouts, list(range(last - target, last))

    def advantages(self, rollouts: Rollouts, groups: Sequence[int]) -> TrainBatch:
        g = self.group_size
        episodes, rewards, trained = [], [], []
        for group in groups:
            span = slice(group * g, (group + 1) * g)
            raw = rollouts.rewards[span]
            episodes += rollouts.episodes[span]
            rewards += _group_rewards(raw)
            trained += [not math.isnan(r) for r in raw]
        reward_tensor = torch.tensor(rewards, dtype=torch.float32)  # (N,)
        advantages, _ = group_advantages_with_stats(
            reward_tensor, g, scale=self.cfg.scale_rewards, leave_one_out=self.cfg.leave_one_out
        )
        return TrainBatch(episodes, reward_tensor, advantages, trained)

    # --- the update ---------------------------------------------------------------------

    def _loss_mask(self, batch: TrainBatch, rows: range, packed: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = packed["completion_mask"].clone()  # (b, C)
        for i, row in enumerate(rows):
            episode = batch.episodes[row]
            if not batch.trained[row] or (self.cfg.mask_truncated_completions and episode.truncated):
                mask[i] = 0
        return mask

    def _trained_tokens(self, batch: TrainBatch) -> float:
        """Policy tokens of the whole batch that enter the loss (the dapo normaliser).

        Counted from the episodes, so every rank knows the global count without packing
        micro-batches it does not train on.
        """
        total = 0.0
        for row, episode in enumerate(batch.episodes):
            if batch.trained[row] and not (self.cfg.mask_truncated_completions and episode.truncated):
                total += float(sum(episode.completion_mask))
        return total

    def train_on(self, batch: TrainBatch, step: int = 0) -> dict[str, float]:
        """One optimizer step over the batch in micro-batches; returns the update's metrics.

        Data parallel: each rank trains on its share of the micro-batches, each loss scaled
        for the global batch (its share of all sequences, or of all tokens for dapo), and the
        gradients are summed over ranks before clipping: the update of one process. Under
        fsdp the ranks take micro-batches of the same forward_passes at the same time, and a
        rank with fewer runs a filler whose loss is multiplied by 0 (runner.micro_batches).
        """
        job, cfg = self.job, self.cfg
        model = job.model
        model.train()
        n = len(batch.episodes)
        micro = cfg.micro_batch_size
        spans = [range(i, min(i + micro, n)) for i in range(0, n, micro)]
        total_tokens = self._trained_tokens(batch)
        sums: Counter[str] = Counter()
        loss_total = 0.0
        passes = [forward_passes(model, [batch.episodes[r] for r in rows]) for rows in spans] if job.lockstep else None
        for index, trains in micro_batches(job, len(spans), passes):
            rows = spans[index]
            packed = pack([batch.episodes[r] for r in rows], self.pad_id, job.device)
            mask = self._loss_mask(batch, rows, packed)
            ref_logp = reference_logprobs(job, packed, cfg.temperature) if cfg.beta > 0 else None
            with micro_batch_rng(job, step, index), autocast_context(job.device, job.autocast):
                logp, entropy = completion_logprobs(model, packed, cfg.temperature, with_entropy=True)
            loss, metrics = policy_loss(
                logp,
                logp.detach(),  # one update per generation batch: old policy == current policy
                batch.advantages[rows.start : rows.stop].to(job.device),
                mask,
                loss_type=cfg.loss_type,
                eps_low=cfg.epsilon,
                eps_high=cfg.epsilon_high,
                ref_logp=ref_logp,
                beta=cfg.beta,
                max_completion_length=cfg.max_completion_length,
                num_items_in_batch=total_tokens,
            )
            if cfg.loss_type != "dapo":
                loss = loss * (len(rows) / n)  # each micro-batch's share of the sequences
            if not trains:  # fsdp's filler: every rank's passes, no gradient, no metrics
                (loss * 0.0).backward()
                continue
            loss.backward()
            loss_total += float(loss.detach())
            tokens = float(mask.sum())
            for name, value in metrics.items():
                sums[name] += value * tokens
            sums["entropy"] += float((entropy * mask).sum())
        sum_gradients_over_ranks(job)
        reduced = job.world.sum_floats({**sums, "_loss": loss_total})
        loss_total = reduced.pop("_loss")
        sums = Counter(reduced)
        grad_norm = torch.nn.utils.clip_grad_norm_(job.trainable(), MAX_GRAD_NORM)
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        weighted = {k: v / max(total_tokens, 1.0) for k, v in sums.items()}
        return {"loss": loss_total, "grad_norm": float(grad_norm), "lr": lr, **weighted, "_tokens": total_tokens}

    # --- one step -----------------------------------------------------------------------

    def step(self, step: int) -> dict[str, Any]:
        """Generate, verify, update; emit the step's trajectories and metrics.

        timing/generation + timing/scoring + timing/training make up timing/step (less the
        advantages' bookkeeping); tokens_per_second is over the whole step, as TRL reports
        it, and generation/tokens_per_second over the generation time alone.
        """
        self.job.monitor.start()
        self.job.heartbeat(step)
        started = time.perf_counter()
        rollouts, groups = self.collect(step)
        collected = time.perf_counter()
        batch = self.advantages(rollouts, groups)
        update = self.train_on(batch, step)
        finished = time.perf_counter()
        trained_tokens = update.pop("_tokens")
        self._emit_trajectories(step, rollouts, groups, batch)
        metrics = self._step_metrics(rollouts, groups, update)
        generated_tokens = sum(e.tokens_out for e in rollouts.episodes)
        metrics.update(
            {
                "timing/generation": rollouts.generation_seconds,
                "timing/scoring": rollouts.scoring_seconds,
                "timing/training": finished - collected,
                "timing/step": finished - started,
                "tokens_per_second": generated_tokens / max(finished - started, 1e-9),
                "generation/tokens_per_second": generated_tokens / max(rollouts.generation_seconds, 1e-9),
                "cost/device_seconds": finished - started,
                "cost/generated_tokens": float(generated_tokens),
                "cost/trained_tokens": trained_tokens,
                **self.job.monitor.sample(),
            }
        )
        self.job.events.metric(step, metrics, split="train")
        return metrics

    def _step_metrics(self, rollouts: Rollouts, groups: Sequence[int], update: dict[str, float]) -> dict[str, Any]:
        rewards = torch.tensor(_fill_all_groups(rollouts.rewards, self.group_size))
        _, stats = group_advantages_with_stats(rewards, self.group_size)
        episodes = rollouts.episodes
        lengths = [e.tokens_out for e in episodes]
        calls = [_tool_call_count(e) for e in episodes]
        failures = [_tool_failure_count(e) for e in episodes]
        metrics: dict[str, Any] = {**stats, **update}
        components: dict[str, list[float]] = {}
        for result in rollouts.results:
            for name, value in result.components.items():
                components.setdefault(name, []).append(float(value))
        metrics.update({f"rewards/{k}/mean": sum(v) / len(v) for k, v in sorted(components.items())})
        metrics.update(
            {
                "completions/mean_length": sum(lengths) / len(lengths),
                "completions/max_length": float(max(lengths)),
                "completions/clipped_ratio": sum(e.truncated for e in episodes) / len(episodes),
                "tools/call_frequency": sum(calls) / len(episodes),
                "tools/failure_frequency": sum(failures) / max(sum(calls), 1),
                "num_turns/mean": sum(e.num_turns for e in episodes) / len(episodes),
                "verifier_error_rate": sum(r.reward is None for r in rollouts.results) / len(episodes),
                "generation_batches": float(rollouts.rounds),
                "groups_trained": float(len(groups)),
            }
        )
        if self.cfg.beta <= 0:
            metrics.pop("kl", None)
        return metrics

    def _emit_trajectories(self, step: int, rollouts: Rollouts, groups: Sequence[int], batch: TrainBatch) -> None:
        advantage_of: dict[int, float] = {}
        g = self.group_size
        for position, group in enumerate(groups):
            for j in range(g):
                if batch.trained[position * g + j]:
                    advantage_of[group * g + j] = float(batch.advantages[position * g + j])
        seen: Counter[str] = Counter()
        for index, (episode, result) in enumerate(zip(rollouts.episodes, rollouts.results, strict=True)):
            sample_index = seen[episode.task.id]
            seen[episode.task.id] += 1
            self.job.events.trajectory(
                **trajectory_fields(
                    episode,
                    result,
                    step=step,
                    split="train",
                    sample_index=sample_index,
                    group_id=f"train-{step}-{index // g}",
                    advantage=advantage_of.get(index),
                )
            )

    # --- the run ------------------------------------------------------------------------

    def validate(self, step: int) -> dict[str, Any]:
        self.job.model.eval()
        tasks = self.job.data.split(self.cfg.eval_split)
        with self.progress.evaluation(len(tasks)) as report:
            metrics = evaluate_job(self.job, tasks, step=step, split=self.cfg.eval_split, progress=report)
        self.validation[step] = metrics
        return metrics

    def checkpoint(self, step: int, train_metrics: dict[str, Any]) -> None:
        metrics = prefixed(train_metrics, "train")
        if step in self.validation:
            metrics.update(prefixed(self.validation[step], "validation"))
        save_checkpoint(self.job, step, self.optimizer, self.scheduler, metrics)

    def run(self) -> dict[str, Any]:
        job, cfg = self.job, self.cfg
        start = resume(job, self.optimizer, self.scheduler)
        target = _held_out_target(job, cfg.held_out_eval) if cfg.held_out_eval else None
        self.progress = JobProgress(job, cfg.max_steps, start, cfg.num_prompts_per_step * self.group_size,
                                    held_out_tasks=len(job.data.split(target[0])) if target else 0)
        if start == 0 and cfg.eval_interval > 0:
            self.validate(0)
        progress = _ProgressBar(cfg.max_steps, start, shown=job.world.is_main)
        metrics: dict[str, Any] = {}
        for step in range(start + 1, cfg.max_steps + 1):
            metrics = self.step(step)
            if validation_due(cfg, step, cfg.max_steps):
                self.validate(step)
            if checkpoint_due(cfg, step, cfg.max_steps):
                self.checkpoint(step, metrics)
            self.progress.step_done(step)
            progress.update(step, metrics)
        progress.close()
        held_out = held_out_eval(job, cfg.max_steps, self.progress)
        return {"step": cfg.max_steps, "metrics": {**metrics, **held_out}}


def gathered_rollouts(job: Job, local: Rollouts) -> Rollouts:
    """Every rank's rollouts of one round, in rank (= prompt) order, on every rank.

    Times are the slowest rank's: that is how long the round kept the job waiting.
    """
    if not job.world.parallel:
        return local
    parts = job.world.gather(local)
    whole = Rollouts(rounds=1)
    for part in parts:
        whole.episodes += part.episodes
        whole.results += part.results
        whole.rewards += part.rewards
    whole.generation_seconds = max(part.generation_seconds for part in parts)
    whole.scoring_seconds = max(part.scoring_seconds for part in parts)
    return whole


def _fill_all_groups(rewards: Sequence[float], size: int) -> list[float]:
    return [r for group in _groups(rewards, size) for r in _group_rewards(group)]


def _tool_call_count(episode: Episode) -> int:
    return sum(len(t.get("tool_calls") or []) for t in episode.trajectory.assistant_turns())


def _tool_failure_count(episode: Episode) -> int:
    return sum(
        1
        for t in episode.trajectory.turns
        if t.get("role") == "tool" and str(t.get("content", "")).startswith("Error")
    )


def _held_out_target(job: Job, name: str) -> tuple[str, Verifier] | None:
    """`held_out_eval` names a split of the dataset, or an eval (a verifier name such as the
    seeds' `tool_call_eval`) to run on the dataset's held_out split."""
    if job.data.has(name):
        return name, job.verifier
    verifier_name = canonical_verifier_name(name)
    if verifier_name in VERIFIERS and job.data.has("held_out"):
        same = job.cfg.verifier is not None and canonical_verifier_name(job.cfg.verifier.name) == verifier_name
        return "held_out", job.verifier if same else get_verifier(verifier_name)
    return None


def held_out_eval(job: Job, step: int, progress: JobProgress | None = None) -> dict[str, Any]:
    """Measure the held-out set once after training, when the dataset has it."""
    name = job.cfg.held_out_eval
    if not name:
        return {}
    target = _held_out_target(job, name)
    if target is None:
        job.events.log(
            f"held_out_eval {name!r} is neither a split of {job.data.name} nor an eval to run on "
            "its held_out split; skipped",
            level="warning",
        )
        return {}
    split, verifier = target
    job.model.eval()
    trained_verifier, job.verifier = job.verifier, verifier
    try:
        tasks = job.data.split(split)
        if progress is None:
            metrics = evaluate_job(job, tasks, step=step, split=split)
        else:
            with progress.evaluation(len(tasks)) as report:
                metrics = evaluate_job(job, tasks, step=step, split=split, progress=report)
    finally:
        job.verifier = trained_verifier
    return prefixed(metrics, split)


class _ProgressBar:
    """step, reward and tokens/s on stderr: a tqdm bar on a terminal, plain lines otherwise.

    A step without a reward (SFT between validations) shows none rather than a made-up 0."""

    def __init__(self, total: int, start: int, *, shown: bool = True) -> None:
        self.bar = None
        self.total = total
        self.shown = shown  # one bar per job: data-parallel ranks other than 0 print nothing
        if shown and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, file=sys.stderr, unit="step")

    def update(self, step: int, metrics: dict[str, Any]) -> None:
        reward, speed = metrics.get("reward"), metrics.get("tokens_per_second", 0.0)
        shown = {"reward": f"{reward:.3f}"} if reward is not None else {}
        if self.bar is not None:
            self.bar.set_postfix(**shown, tok_s=f"{speed:.0f}", refresh=False)
            self.bar.update(step - self.bar.n)
            return
        if not self.shown:
            return
        fields = [f"step {step}/{self.total}", *(f"{k} {v}" for k, v in shown.items()),
                  f"loss {metrics.get('loss', 0.0):.4f}", f"tokens/s {speed:.1f}"]
        print(" ".join(fields), file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_grpo(job: Job) -> dict[str, Any]:
    return GRPOTrainer(job).run()
