"""DPO from preference pairs; the reference policy is the same model with adapters disabled.

Pairs file (config `preference_pairs`), one JSON object per line:
    {"task_id": "...", "chosen": <trajectory>, "rejected": <trajectory>}
where a trajectory is {"turns": [...]} (the trajectory event / Trajectory.to_dict shape) or
plain assistant text; "task" (a Task dict) may replace "task_id". Loss (Rafailov et al.):
-log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))) with pi / ref the summed log-probs of
the assistant tokens. Metrics use TRL's names (rewards/chosen, rewards/rejected,
rewards/accuracies, rewards/margins, logps/chosen, logps/rejected).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from training.data import DataError
from training.grpo import completion_logprobs, forward_passes, pack
from training.runner import Job
from training.sft import TokenSequence, _row_task, conversation_sequence, read_jsonl, run_supervised


@dataclass
class Pair:
    chosen: TokenSequence
    rejected: TokenSequence

    @property
    def length(self) -> int:
        return max(self.chosen.length, self.rejected.length)


def _turns(value: Any, where: str, side: str) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    if isinstance(value, dict) and isinstance(value.get("turns"), list):
        return value["turns"]
    raise DataError(f"{where}: '{side}' must be assistant text or an object with 'turns'")


def load_pairs(job: Job) -> list[Pair]:
    pairs = []
    for where, row in read_jsonl(job.cfg.preference_pairs, "preference_pairs"):
        if "chosen" not in row or "rejected" not in row:
            raise DataError(f"{where}: a preference pair needs 'chosen' and 'rejected'")
        task = _row_task(row, job.data.by_id, where)
        sides = [
            conversation_sequence(
                job.tokenizer,
                job.env,
                task,
                _turns(row[side], where, side),
                max_prompt_tokens=job.cfg.max_prompt_length,
            )
            for side in ("chosen", "rejected")
        ]
        pairs.append(Pair(*sides))
    return pairs


def sequence_logps(model: Any, sequences: list[TokenSequence], pad_id: int, device: torch.device) -> torch.Tensor:
    """Summed log-probs of the trained (assistant) tokens of each sequence, (n,)."""
    packed = pack(sequences, pad_id, device)
    logp, _ = completion_logprobs(model, packed, 1.0)  # (n, C)
    return (logp * packed["completion_mask"]).sum(dim=1)


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-pair sigmoid DPO loss (n,) and the implicit rewards beta * (pi - ref)."""
    chosen_reward = beta * (policy_chosen - ref_chosen)  # (n,)
    rejected_reward = beta * (policy_rejected - ref_rejected)  # (n,)
    losses = -F.logsigmoid(chosen_reward - rejected_reward)
    return losses, {"chosen": chosen_reward.detach(), "rejected": rejected_reward.detach()}


def _reference_logps(job: Job, sequences: list[TokenSequence], pad_id: int) -> torch.Tensor:
    with torch.no_grad():
        if job.is_lora:
            with job.model.disable_adapter():
                return sequence_logps(job.model, sequences, pad_id, job.device)
        return sequence_logps(job.reference, sequences, pad_id, job.device)


def dpo_micro_loss(job: Job, pad_id: int):
    beta = job.cfg.dpo_beta

    def micro_loss(micro: list[Pair], batch: list[Pair]) -> tuple[torch.Tensor, dict[str, float], int]:
        sequences = [p.chosen for p in micro] + [p.rejected for p in micro]
        n = len(micro)
        policy = sequence_logps(job.model, sequences, pad_id, job.device)  # (2n,)
        reference = _reference_logps(job, sequences, pad_id)  # (2n,)
        losses, rewards = dpo_loss(policy[:n], policy[n:], reference[:n], reference[n:], beta)
        share = n / len(batch)  # this micro-batch's part of the step's mean
        margin = rewards["chosen"] - rewards["rejected"]
        metrics = {
            "loss": float(losses.mean().detach()) * share,
            "rewards/chosen": float(rewards["chosen"].mean()) * share,
            "rewards/rejected": float(rewards["rejected"].mean()) * share,
            "rewards/accuracies": float((margin > 0).float().mean()) * share,
            "rewards/margins": float(margin.mean()) * share,
            "logps/chosen": float(policy[:n].mean().detach()) * share,
            "logps/rejected": float(policy[n:].mean().detach()) * share,
        }
        tokens = sum(sum(s.completion_mask) for s in sequences)
        return losses.mean() * share, metrics, tokens

    return micro_loss


def run_dpo(job: Job) -> dict[str, Any]:
    pairs = load_pairs(job)
    def passes(micro: list[Pair]) -> int:  # the policy's; the reference makes the same ones
        return forward_passes(job.model, [p.chosen for p in micro] + [p.rejected for p in micro])

    return run_supervised(job, pairs, dpo_micro_loss(job, job.tokenizer.pad_token_id), passes)
