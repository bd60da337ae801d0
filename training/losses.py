"""GRPO-family losses as small pure functions over tensors.

Every function here takes tensors and returns tensors (plus a dict of float metrics where
a caller logs them); nothing reads a model, a config or a global. Formulas, defaults and
test vectors are those of REFERENCE.md ("GRPO family").

Shapes: B sequences, T completion positions, G completions per prompt. Masks are 1 for
tokens that are trained on (completion tokens, not tool outputs, not padding, nothing
after the first EOS) and 0 elsewhere; values at masked positions never reach the loss
or its gradient, so padding may hold anything, including -inf.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

LossType = Literal["grpo", "bnpo", "dapo", "dr_grpo", "gspo"]
RewardScale = Literal["group", "batch", "none"]

LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dapo", "dr_grpo", "gspo")
REWARD_SCALES: tuple[str, ...] = ("group", "batch", "none")


# ---------------------------------------------------------------------------------------
# Advantages
# ---------------------------------------------------------------------------------------


def _grouped(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """View flat rewards [B*G] as [B, G], with an error that says what is wrong."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B*G], got shape {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 (a group needs a spread), got {group_size}")
    if rewards.numel() % group_size:
        raise ValueError(
            f"{rewards.numel()} rewards do not split into groups of {group_size}; "
            "pass num_generations_per_prompt completions for every prompt"
        )
    return rewards.view(-1, group_size)


def group_advantages_with_stats(
    rewards: torch.Tensor,
    group_size: int,
    scale: RewardScale = "group",
    eps: float = 1e-4,
    leave_one_out: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Advantages for G completions per prompt, plus the reward metrics of the step.

    A = (R - baseline) / (std + eps). The baseline is the group mean, or with
    `leave_one_out` the mean of the other G-1 rewards of the group (NeMo RL's option,
    which removes a sample's own reward from its baseline). The divisor is the group std
    (scale "group", TRL's default), the std of all rewards in the batch ("batch"), or 1
    ("none", Dr. GRPO). Stds use Bessel's correction, as torch.std and TRL do.

    Metrics: reward (mean), reward_std (mean of the group stds), frac_reward_zero_std
    (share of groups whose rewards are all equal: they carry no learning signal and are
    what DAPO's dynamic sampling drops).
    """
    if scale not in REWARD_SCALES:
        raise ValueError(f"scale must be one of {REWARD_SCALES}, got {scale!r}")
    grouped = _grouped(rewards, group_size)  # (B, G)
    group_std = grouped.std(dim=1, keepdim=True)  # (B, 1)
    if leave_one_out:
        baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)  # (B, G)
    else:
        baseline = grouped.mean(dim=1, keepdim=True)  # (B, 1)
    centred = grouped - baseline  # (B, G)
    if scale == "group":
        advantages = centred / (group_std + eps)
    elif scale == "batch":
        advantages = centred / (rewards.std() + eps)
    else:
        advantages = centred
    zero_std = torch.isclose(group_std, torch.zeros_like(group_std))
    stats = {
        "reward": rewards.mean().item(),
        "reward_std": group_std.mean().item(),
        "frac_reward_zero_std": zero_std.float().mean().item(),
    }
    return advantages.reshape(-1), stats


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    scale: RewardScale = "group",
    eps: float = 1e-4,
    leave_one_out: bool = False,
) -> torch.Tensor:
    """Advantages [B*G] for rewards [B*G]; see group_advantages_with_stats."""
    advantages, _ = group_advantages_with_stats(rewards, group_size, scale, eps, leave_one_out)
    return advantages


def groups_with_spread(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Bool [B]: True for groups whose rewards differ (DAPO dynamic sampling keeps these)."""
    group_std = _grouped(rewards, group_size).std(dim=1)
    return ~torch.isclose(group_std, torch.zeros_like(group_std))


# ---------------------------------------------------------------------------------------
# Per-token terms
# ---------------------------------------------------------------------------------------


def k3_kl(ref_logp: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(policy || ref), per token: exp(d) - d - 1, d = ref - logp.

    Non-negative, unbiased, and low variance; GRPO (and NeMo RL's KL penalty) use it.
    """
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


def soft_overlong_penalty(
    lengths: torch.Tensor | Sequence[int], max_len: int, buffer: int
) -> torch.Tensor:
    """DAPO's soft overlong punishment, added to the reward of each completion.

    0 up to max_len - buffer tokens, then a linear ramp down to -1 at max_len, and -1
    beyond: the model learns to finish before the hard cut instead of being truncated.
    """
    if not 0 < buffer <= max_len:
        raise ValueError(f"buffer must be in (0, max_len={max_len}], got {buffer}")
    lengths = torch.as_tensor(lengths, dtype=torch.float32)
    free = max_len - buffer
    return ((free - lengths) / buffer).clamp(min=-1.0, max=0.0)


def _clipped_objective(
    ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-min(r*A, clip(r)*A) and where the clip bound (low for A<0, high for A>0) was active."""
    clipped_ratio = ratio.clamp(1 - eps_low, 1 + eps_high)
    loss = -torch.min(ratio * advantages, clipped_ratio * advantages)
    low_clipped = (ratio < 1 - eps_low) & (advantages < 0)
    high_clipped = (ratio > 1 + eps_high) & (advantages > 0)
    return loss, low_clipped, high_clipped


def _zero_untrained(values: torch.Tensor, trained: torch.Tensor) -> torch.Tensor:
    return torch.where(trained, values, torch.zeros_like(values))


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


# ---------------------------------------------------------------------------------------
# The policy loss
# ---------------------------------------------------------------------------------------


def _check_shapes(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logp: torch.Tensor | None,
) -> None:
    if logp.dim() != 2:
        raise ValueError(f"logp must be [B, T], got shape {tuple(logp.shape)}")
    for name, tensor in (("old_logp", old_logp), ("mask", mask), ("ref_logp", ref_logp)):
        if tensor is not None and tensor.shape != logp.shape:
            raise ValueError(
                f"{name} must have the shape of logp {tuple(logp.shape)}, got {tuple(tensor.shape)}"
            )
    if advantages.numel() != logp.shape[0]:
        raise ValueError(
            f"advantages must hold one value per sequence ({logp.shape[0]}), "
            f"got shape {tuple(advantages.shape)}"
        )


def _sequence_level_terms(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float,
    eps_high: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """GSPO: one ratio s_i = exp(mean_t log r) per sequence, clipped at sequence level."""
    lengths = mask.sum(dim=1).clamp(min=1.0)  # (B,)
    seq_ratio = torch.exp((log_ratio * mask).sum(dim=1) / lengths)  # (B,)
    loss, low, high = _clipped_objective(seq_ratio, advantages, eps_low, eps_high)  # (B,)
    return loss, low, high, lengths


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: LossType = "dapo",
    eps_low: float = 0.2,
    eps_high: float | None = None,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped policy-gradient loss of one (micro-)batch, aggregated as `loss_type` says.

    logp, old_logp, ref_logp, mask: [B, T] (log-probs from logits / sampling temperature).
    advantages: [B]. eps_high defaults to eps_low (TRL); DAPO's clip-higher sets it larger.
    beta > 0 adds beta * k3(ref_logp, logp) per token (per sequence for gspo).

    Aggregation (l = per-token term, M = mask, |o_i| = trained tokens of sequence i):
      grpo     mean_i(sum_t l*M / |o_i|)        length-biased, kept for comparison
      bnpo     sum l*M / sum M                  over this micro-batch
      dapo     sum l*M / num_items_in_batch     trained tokens of the whole generation
               batch; pass it under gradient accumulation (default: sum M, i.e. one
               micro-batch), then sum the micro-batch losses without further scaling
      dr_grpo  sum l*M / (B * max_completion_length)   (default: T)
      gspo     mean_i of one clipped sequence-level term
    num_items_in_batch is read by dapo only. For the other types under gradient
    accumulation the caller divides each micro-batch loss by the number of micro-batches.

    Metrics (floats): clip_ratio/low_mean, clip_ratio/high_mean, clip_ratio/region_mean
    (share of trained tokens, or sequences for gspo, where a clip bound was active) and
    kl (mean k3 over trained tokens) when beta > 0.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if beta > 0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp (log-probs of the reference policy)")
    _check_shapes(logp, old_logp, advantages, mask, ref_logp)
    eps_high = eps_low if eps_high is None else eps_high
    mask = mask.to(logp.dtype)
    trained = mask.bool()
    advantages = advantages.reshape(-1).to(logp.dtype)  # (B,)
    # Zero the untrained positions first (torch.where, not a product), so that -inf or NaN
    # in padding can reach neither the loss nor, through 0 * inf, its gradient.
    logp = _zero_untrained(logp, trained)
    log_ratio = logp - _zero_untrained(old_logp, trained)  # (B, T)
    kl_per_token = None
    if beta > 0:
        kl_per_token = k3_kl(_zero_untrained(ref_logp, trained), logp) * mask  # (B, T)

    if loss_type == "gspo":
        seq_loss, low, high, lengths = _sequence_level_terms(
            log_ratio, advantages, mask, eps_low, eps_high
        )
        if kl_per_token is not None:
            seq_loss = seq_loss + beta * kl_per_token.sum(dim=1) / lengths
        loss = seq_loss.mean()
        clip_weights = torch.ones_like(seq_loss)
    else:
        ratio = torch.exp(log_ratio)  # (B, T)
        token_loss, low, high = _clipped_objective(ratio, advantages[:, None], eps_low, eps_high)
        if kl_per_token is not None:
            token_loss = token_loss + beta * kl_per_token
        token_loss = token_loss * mask  # (B, T)
        loss = _aggregate(token_loss, mask, loss_type, max_completion_length, num_items_in_batch)
        clip_weights = mask

    with torch.no_grad():
        metrics = {
            "clip_ratio/low_mean": _masked_mean(low.to(mask.dtype), clip_weights).item(),
            "clip_ratio/high_mean": _masked_mean(high.to(mask.dtype), clip_weights).item(),
            "clip_ratio/region_mean": _masked_mean(
                (low | high).to(mask.dtype), clip_weights
            ).item(),
        }
        if kl_per_token is not None:
            metrics["kl"] = _masked_mean(kl_per_token, mask).item()
    return loss, metrics


def _aggregate(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    max_completion_length: int | None,
    num_items_in_batch: int | float | torch.Tensor | None,
) -> torch.Tensor:
    """Reduce masked per-token terms [B, T] to a scalar with the normaliser of loss_type."""
    total = token_loss.sum()
    if loss_type == "grpo":
        lengths = mask.sum(dim=1).clamp(min=1.0)
        return (token_loss.sum(dim=1) / lengths).mean()
    if loss_type == "bnpo":
        return total / mask.sum().clamp(min=1.0)
    if loss_type == "dapo":
        normaliser = mask.sum() if num_items_in_batch is None else num_items_in_batch
        normaliser = torch.as_tensor(normaliser, dtype=total.dtype, device=total.device)
        return total / normaliser.clamp(min=1.0)
    length = token_loss.shape[1] if max_completion_length is None else max_completion_length
    return total / (token_loss.shape[0] * length)
