"""Does our fast GRPO path compute what the slow one does, on the real model and real samples?

    python bench/grpo_logprob_check.py --init-checkpoint recipe-run/sft/checkpoints/step_60
    python bench/grpo_logprob_check.py --tiny          # a tiny random model: checks it runs

Two speed-ups change how numbers are computed, not what they should be: generation prefills
each prompt once into a preallocated cache, and the update runs each distinct prompt once
and scores its G completions on that prompt's cache. This script draws one real generation
batch of bench/grpo_step.py's configuration (4 prompts x 8 samples, 64 tokens), then for
every group it prints:

- the largest gap between the log-probs recorded at generation and the trainer's log-probs
  of the same tokens, with the shared prompt and with every row in full;
- the relative difference between the LoRA gradients of the two update paths (the DAPO loss
  with advantages +1/-1 by row, so that no group is left without a gradient).

Both run in eval mode (no dropout) and in fp32 unless --bf16 on, so any gap beyond float
rounding is a bug. The exit status is 1 when a gap exceeds the tolerance.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from grpo_step import GENERATIONS, Ours, benchmark_tasks, no_adapters  # noqa: E402

from training.grpo import completion_logprobs, pack  # noqa: E402
from training.losses import policy_loss  # noqa: E402
from training.models import autocast_context  # noqa: E402
from training.runner import is_adapter_checkpoint  # noqa: E402

# fp32: rounding differences between a cached and a full forward are ~1e-5 in log-prob.
TOLERANCE = {False: {"logp": 1e-3, "grad": 1e-3}, True: {"logp": 0.1, "grad": 0.05}}


def generation_logprobs(episodes, like: torch.Tensor) -> torch.Tensor:
    """(b, C) log-probs recorded while sampling, aligned with the trainer's."""
    out = torch.zeros_like(like)
    for row, episode in enumerate(episodes):
        recorded = episode.completion_logprobs
        out[row, : len(recorded)] = torch.tensor(recorded, dtype=out.dtype)
    return out


def lora_gradient(model) -> torch.Tensor:
    """Every trainable parameter's gradient in one float64 vector (zeros where none arrived,
    so two vectors always line up parameter by parameter)."""
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).flatten().double()
        for p in model.parameters() if p.requires_grad
    ])


def check_group(model, episodes, pad_id: int, bf16: bool) -> dict[str, float]:
    """Log-prob gaps of both update paths against generation, and their gradient difference."""
    device = next(model.parameters()).device  # the job's device: a GPU where there is one
    advantages = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(episodes))], device=device)
    gaps, gradients = {}, {}
    for share in (True, False):
        model.zero_grad(set_to_none=True)
        packed = pack(episodes, pad_id, device, share_prompts=share)
        with autocast_context(device, bf16):
            logp, _ = completion_logprobs(model, packed, 1.0)
        mask = packed["completion_mask"]
        gap = (logp.detach() - generation_logprobs(episodes, logp.detach())).abs() * mask
        gaps[share] = float(gap.max())
        loss, _ = policy_loss(logp, logp.detach(), advantages, mask, loss_type="dapo")
        loss.backward()
        gradients[share] = lora_gradient(model)
    shared, full = gradients[True], gradients[False]
    return {
        "logp_gap_shared": gaps[True],
        "logp_gap_full": gaps[False],
        "grad_rel_diff": float((shared - full).norm() / full.norm().clamp(min=1e-30)),
        "grad_norm": float(full.norm()),
        "tokens": int(sum(sum(e.completion_mask) for e in episodes)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init-checkpoint", default=None, help="a LoRA checkpoint folder (e.g. the recipe's SFT)")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (smoke run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bf16", choices=("on", "off"), default="off",
                        help="bf16 autocast for generation and scoring (looser tolerance)")
    args = parser.parse_args()
    if args.init_checkpoint and not is_adapter_checkpoint(Path(args.init_checkpoint)):
        parser.error(no_adapters("--init-checkpoint", args.init_checkpoint))  # before the model loads
    bf16 = args.bf16 == "on"
    torch.manual_seed(args.seed)
    tasks, _ = benchmark_tasks(0)
    ours = Ours(tasks, args.tiny, 1e-4, GENERATIONS, bf16, args.init_checkpoint, args.seed)
    trainer = ours.trainer
    rollouts, _ = trainer.collect(1)
    model = trainer.job.model
    model.eval()
    tolerance = TOLERANCE[bf16]
    worst = {"logp": 0.0, "grad": 0.0}
    for group in range(len(rollouts.episodes) // GENERATIONS):
        episodes = rollouts.episodes[group * GENERATIONS : (group + 1) * GENERATIONS]
        found = check_group(model, episodes, trainer.pad_id, bf16)
        rewards = rollouts.rewards[group * GENERATIONS : (group + 1) * GENERATIONS]
        print(f"group {group}: {found['tokens']} tokens, reward {sum(rewards) / len(rewards):.3f}; "
              f"max |logp - generation logp| shared prompt {found['logp_gap_shared']:.2e}, "
              f"full rows {found['logp_gap_full']:.2e}; LoRA gradient shared vs full: relative "
              f"difference {found['grad_rel_diff']:.2e} (norm {found['grad_norm']:.3e})", flush=True)
        worst["logp"] = max(worst["logp"], found["logp_gap_shared"], found["logp_gap_full"])
        worst["grad"] = max(worst["grad"], found["grad_rel_diff"])
    ok = worst["logp"] <= tolerance["logp"] and worst["grad"] <= tolerance["grad"]
    print(f"worst log-prob gap {worst['logp']:.2e} (tolerance {tolerance['logp']:g}), worst gradient "
          f"difference {worst['grad']:.2e} (tolerance {tolerance['grad']:g}), bf16 {args.bf16}: "
          f"{'the fast paths agree with the plain ones' if ok else 'MISMATCH'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
