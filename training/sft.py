"""Supervised fine-tuning (LoRA or full) on demonstrations; loss on assistant tokens only.

Demonstrations come from the tasks' ground truth, rendered as the assistant turn the model
should produce in its own tool-call format (training.prompts: ChatFormat.sft_target), or
from reviewed trajectories (sft_source "reviewed"), whose tool outputs are masked out of
the loss the way the agent loop masks them. The loss is the token-level cross-entropy
averaged over every assistant token of the optimizer step, so gradient accumulation gives
the update of one large batch.

`run_supervised` is the step loop shared with DPO: seeded epoch order (a pure function of
the step, so a resumed run sees the same batches), accumulation, clipping, validation,
checkpoints and resume.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from environments.json_tool_call import expected_calls
from environments.types import Task
from training.data import DataError
from training.evaluate import evaluate_job
from training.grpo import _ProgressBar, completion_logprobs, forward_passes, pack
from training.models import autocast_context
from training.prompts import ChatFormat, clip_prompt
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
    save_checkpoint,
    sum_gradients_over_ranks,
    validation_due,
)


@dataclass
class TokenSequence:
    """A prompt and what follows it; completion_mask is 1 on tokens the model should learn."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)

    def add(self, ids: Sequence[int], trained: bool) -> None:
        self.completion_ids += list(ids)
        self.completion_mask += [int(trained)] * len(ids)


# ---------------------------------------------------------------------------------------
# Demonstrations
# ---------------------------------------------------------------------------------------


def _encode(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def conversation_sequence(
    tokenizer: Any,
    env: Any,
    task: Task,
    turns: Sequence[dict[str, Any]],
    style: str = "auto",
    max_prompt_tokens: int | None = None,
) -> TokenSequence:
    """Tokens of task prompt + turns: assistant text and its end-of-turn token trained on,
    the template's tool-result text (and the next assistant header) not. The prompt is
    left-truncated to max_prompt_tokens exactly as rollouts truncate it."""
    chat = ChatFormat.create(tokenizer, env.tools(task), style)
    history = [dict(m) for m in task.messages]
    prompt_ids, _ = clip_prompt(_encode(tokenizer, chat.prompt(history)), max_prompt_tokens)
    sequence = TokenSequence(prompt_ids)
    eos = tokenizer.eos_token or ""
    pending_tools: list[dict[str, Any]] = []
    last_assistant = ""
    for turn in turns:
        role = turn.get("role")
        if role == "tool":
            pending_tools.append(turn)
            continue
        if role != "assistant":
            continue
        if pending_tools:
            between = chat.tool_turn_text(history, pending_tools)
            between = between.removeprefix(eos)  # the assistant's end-of-turn is already there
            sequence.add(_encode(tokenizer, between), trained=False)
            history += [{"role": "assistant", "content": last_assistant}, *pending_tools]
            pending_tools = []
        last_assistant = str(turn.get("content") or "")
        sequence.add(_encode(tokenizer, last_assistant + eos), trained=True)
    if not any(sequence.completion_mask):
        raise DataError(f"task {task.id!r}: the demonstration has no assistant turn to learn from")
    return sequence


def ground_truth_sequence(
    tokenizer: Any, env: Any, task: Task, max_prompt_tokens: int | None = None
) -> TokenSequence:
    """The task's expected call(s) as the assistant's answer in the model's format."""
    chat = ChatFormat.create(tokenizer, env.tools(task))
    target = chat.sft_target(expected_calls(task))
    return conversation_sequence(
        tokenizer, env, task, [{"role": "assistant", "content": target}],
        max_prompt_tokens=max_prompt_tokens,
    )


def _row_task(row: dict[str, Any], tasks_by_id: dict[str, Task], where: str) -> Task:
    if isinstance(row.get("task"), dict):
        return Task.from_dict(row["task"])
    task_id = row.get("task_id")
    if task_id not in tasks_by_id:
        raise DataError(
            f"{where}: task_id {task_id!r} is not in the dataset; give the row a 'task' "
            "object or use a dataset that holds the task"
        )
    return tasks_by_id[task_id]


def read_jsonl(path: str | Path, what: str) -> list[tuple[str, dict[str, Any]]]:
    """(location, row) for every row of a JSONL file, with errors that name the line."""
    file = Path(path)
    if not file.is_file():
        raise DataError(f"{what} file {file} does not exist; check the run config")
    rows = []
    for number, text in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if text.strip():
            try:
                rows.append((f"{file}:{number}", json.loads(text)))
            except ValueError as exc:
                raise DataError(f"{file}:{number}: not JSON ({exc})") from exc
    if not rows:
        raise DataError(f"{what} file {file} holds no rows")
    return rows


def reviewed_sequences(job: Job) -> list[TokenSequence]:
    """Demonstrations from reviewed trajectories: rows {task_id | task, turns}."""
    sequences = []
    for where, row in read_jsonl(job.cfg.reviewed_trajectories, "reviewed_trajectories"):
        task = _row_task(row, job.data.by_id, where)
        turns = row.get("turns") or (row.get("trajectory") or {}).get("turns") or []
        if not any(isinstance(t, dict) and t.get("role") == "assistant" for t in turns):
            raise DataError(
                f"{where}: no assistant turn to imitate; a row needs 'turns' (or "
                "'trajectory': {'turns': ...}) with at least one assistant message"
            )
        sequences.append(
            conversation_sequence(
                job.tokenizer, job.env, task, turns, max_prompt_tokens=job.cfg.max_prompt_length
            )
        )
    return sequences


def sft_sequences(job: Job) -> list[TokenSequence]:
    if job.cfg.sft_source == "reviewed":
        return reviewed_sequences(job)
    tasks = job.data.split(job.cfg.train_split)
    limit = job.cfg.max_prompt_length
    return [ground_truth_sequence(job.tokenizer, job.env, t, limit) for t in tasks]


# ---------------------------------------------------------------------------------------
# The shared supervised step loop
# ---------------------------------------------------------------------------------------

MicroLoss = Callable[[list[Any], list[Any]], tuple[torch.Tensor, dict[str, float], int]]
"""(micro-batch items, all items of the step) -> (loss scaled for accumulation, metrics
already weighted so that summing over micro-batches gives the step's value, tokens)."""

MicroPasses = Callable[[list[Any]], int]
"""micro-batch items -> the forward passes its loss makes (grpo.forward_passes), which fsdp's
ranks must make together (runner.micro_batches)."""


def step_items(items: Sequence[Any], step: int, per_step: int, seed: int) -> list[Any]:
    """The items of optimizer step `step` (1-based): consecutive slices of seeded epochs."""
    n = len(items)
    chosen = []
    for position in range((step - 1) * per_step, step * per_step):
        epoch, index = divmod(position, n)
        order = list(range(n))
        random.Random(seed * 7919 + epoch).shuffle(order)
        chosen.append(items[order[index]])
    return chosen


def total_steps(cfg: Any, n_items: int) -> int:
    per_step = cfg.micro_batch_size * cfg.gradient_accumulation_steps
    return max(1, min(cfg.max_steps, cfg.num_epochs * math.ceil(n_items / per_step)))


def _item_length(item: Any) -> int:
    return getattr(item, "length", 0)


def run_supervised(
    job: Job, items: Sequence[Any], micro_loss: MicroLoss, micro_passes: MicroPasses | None = None
) -> dict[str, Any]:
    """Optimizer steps over `items` with validation, checkpoints, progress and resume."""
    cfg = job.cfg
    total = total_steps(cfg, len(items))
    per_step = cfg.micro_batch_size * cfg.gradient_accumulation_steps
    optimizer, scheduler = make_optimizer(job, total)
    validation: dict[int, dict[str, Any]] = {}

    def validate(step: int) -> None:
        job.model.eval()
        tasks = job.data.split(cfg.eval_split)
        with tracker.evaluation(len(tasks)) as report:
            validation[step] = evaluate_job(job, tasks, step=step, split=cfg.eval_split, progress=report)

    start = resume(job, optimizer, scheduler)
    tracker = JobProgress(job, total, start, per_step)
    job.events.log(f"{cfg.kind}: {len(items)} examples, {total} optimizer steps")
    if start == 0 and cfg.eval_interval > 0:
        validate(0)
    progress = _ProgressBar(total, start, shown=job.world.is_main)
    metrics: dict[str, Any] = {}
    for step in range(start + 1, total + 1):
        job.monitor.start()
        job.heartbeat(step)
        started = time.perf_counter()
        job.model.train()
        # Similar lengths share a micro-batch (less padding); every micro-loss divides by
        # the whole step's token count, so the grouping does not change the gradient. A
        # data-parallel rank trains on its share of the micro-batches; gradients and metrics
        # are then summed over ranks (training/distributed.py). Under fsdp the ranks run
        # micro-batches of equal forward passes together, and a rank with fewer runs a
        # filler whose loss is multiplied by 0 (runner.micro_batches).
        batch = sorted(step_items(items, step, per_step, cfg.seed), key=_item_length)
        starts = range(0, len(batch), cfg.micro_batch_size)
        sums: Counter[str] = Counter()
        tokens = 0
        passes = None
        if job.lockstep and micro_passes is not None:
            passes = [micro_passes(batch[first : first + cfg.micro_batch_size]) for first in starts]
        for index, trains in micro_batches(job, len(starts), passes):
            first = starts[index]
            with micro_batch_rng(job, step, index), autocast_context(job.device, job.autocast):
                loss, micro_metrics, micro_tokens = micro_loss(
                    batch[first : first + cfg.micro_batch_size], batch
                )
            if not trains:
                (loss * 0.0).backward()
                continue
            loss.backward()
            sums.update(micro_metrics)
            tokens += micro_tokens
        sum_gradients_over_ranks(job)
        reduced = job.world.sum_floats({**sums, "_tokens": float(tokens)})
        tokens = int(reduced.pop("_tokens"))
        sums = Counter(reduced)
        grad_norm = torch.nn.utils.clip_grad_norm_(job.trainable(), MAX_GRAD_NORM)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - started
        metrics = {
            **sums,
            "grad_norm": float(grad_norm),
            "lr": lr,
            "epoch": step * per_step / len(items),
            "tokens_per_second": tokens / max(seconds, 1e-9),
            "timing/step": seconds,
            "timing/training": seconds,
            "cost/device_seconds": seconds,
            "cost/trained_tokens": float(tokens),
            **job.monitor.sample(),
        }
        job.events.metric(step, metrics, split="train")
        if validation_due(cfg, step, total):
            validate(step)
        if checkpoint_due(cfg, step, total):
            checkpoint_metrics = prefixed(metrics, "train")
            if step in validation:
                checkpoint_metrics.update(prefixed(validation[step], "validation"))
            save_checkpoint(job, step, optimizer, scheduler, checkpoint_metrics)
        tracker.step_done(step)
        success = validation.get(step, {}).get("success_rate")
        progress.update(step, {**metrics, **({"reward": success} if success is not None else {})})
    progress.close()
    return {"step": total, "metrics": metrics}


# ---------------------------------------------------------------------------------------
# SFT
# ---------------------------------------------------------------------------------------


def sft_micro_loss(job: Job, pad_id: int) -> MicroLoss:
    """Cross-entropy on trained tokens, normalised by the trained tokens of the whole step."""

    def micro_loss(micro: list[TokenSequence], batch: list[TokenSequence]) -> tuple[torch.Tensor, dict[str, float], int]:
        step_tokens = sum(sum(s.completion_mask) for s in batch)
        packed = pack(micro, pad_id, job.device)
        logp, _ = completion_logprobs(job.model, packed, 1.0)  # (b, C)
        mask = packed["completion_mask"]  # (b, C)
        loss = -(logp * mask).sum() / max(step_tokens, 1)
        return loss, {"loss": float(loss.detach())}, int(mask.sum())

    return micro_loss


def run_sft(job: Job) -> dict[str, Any]:
    sequences = sft_sequences(job)
    pad_id = job.tokenizer.pad_token_id
    return run_supervised(job, sequences, sft_micro_loss(job, pad_id), lambda micro: forward_passes(job.model, micro))
