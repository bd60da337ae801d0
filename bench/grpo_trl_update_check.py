"""Is our GRPO update the one TRL's GRPOTrainer computes, on the same batch? (trl needed)

    python bench/grpo_trl_update_check.py --init-checkpoint recipe-run/sft/checkpoints/step_20
    python bench/grpo_trl_update_check.py --tiny          # a tiny random model: checks it runs

bench/grpo_step.py compares the two trainers' rewards after training, where sampling noise
and prompt draws swamp small differences. This removes them: our trainer draws one generation
batch of the bench's configuration (4 prompts x 8 samples, 64 tokens, loss dapo, micro-batch 4)
and computes its advantages; then

- ours: `GRPOTrainer.train_on` runs the real update (shared prompts, micro-batches, the loss
  normaliser) with the optimizer's step and zeroing suspended, so the accumulated LoRA
  gradient stays readable and the weights do not move;
- TRL: the same rows, left-padded prompts and right-padded completions as TRL lays them out,
  go through TRL 1.16's `GRPOTrainer._compute_loss` in micro-batches of 4, each backward
  accumulating, with `num_items_in_batch` the batch's completion-token count as TRL's
  generation step sets it.

Both feed the same advantages, so TRL's own advantage code (unbiased std; ours is biased, a
constant factor that Adam cancels) is not part of the comparison. Dropout is switched off and
both run in fp32, so any gap beyond float rounding is a difference in the update. Exit 1 when
the relative gradient difference exceeds the tolerance.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from grpo_logprob_check import lora_gradient  # noqa: E402
from grpo_step import COMPLETION, GENERATIONS, PROMPTS, Ours, benchmark_tasks, no_adapters  # noqa: E402

import training.grpo as grpo_module  # noqa: E402
from training.grpo import pack  # noqa: E402
from training.runner import is_adapter_checkpoint  # noqa: E402

MICRO_BATCH = 4
TOLERANCE = 1e-3  # fp32: the shared-prompt path differs from full rows by ~1e-5 relative


def disable_dropout(model) -> None:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def our_gradient(trainer, batch) -> torch.Tensor:
    """The gradient our real update accumulates, read before any step (and no clipping)."""
    model = trainer.job.model
    model.zero_grad(set_to_none=True)
    optimizer = trainer.optimizer
    saved = optimizer.step, optimizer.zero_grad, grpo_module.MAX_GRAD_NORM
    optimizer.step = lambda *a, **k: None
    optimizer.zero_grad = lambda *a, **k: None
    grpo_module.MAX_GRAD_NORM = float("inf")
    try:
        trainer.train_on(batch)
    finally:
        optimizer.step, optimizer.zero_grad, grpo_module.MAX_GRAD_NORM = saved
    return lora_gradient(model)


def trl_inputs(episodes, advantages: torch.Tensor, pad_id: int, device) -> list[dict]:
    """TRL's layout per micro-batch: prompts left-padded, completions right-padded (as `pack`
    lays out full rows), split at the prompt boundary into TRL's input names."""
    total = float(sum(sum(e.completion_mask) for e in episodes))
    out = []
    for start in range(0, len(episodes), MICRO_BATCH):
        packed = pack(episodes[start : start + MICRO_BATCH], pad_id, device, share_prompts=False)
        width_p = packed["input_ids"].shape[1] - packed["completion_ids"].shape[1]
        out.append({
            "prompt_ids": packed["input_ids"][:, :width_p],
            "prompt_mask": packed["attention_mask"][:, :width_p],
            "completion_ids": packed["completion_ids"],
            "completion_mask": packed["completion_mask"].long(),
            "advantages": advantages[start : start + MICRO_BATCH].to(device),
            "num_items_in_batch": torch.tensor(total, device=device),
            "old_per_token_logps": None,
        })
    return out


def trl_trainer(model, tokenizer, tasks):
    from datasets import Dataset
    from trl import GRPOConfig
    from trl import GRPOTrainer as TRLGRPOTrainer

    trainer = TRLGRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=GRPOConfig(
            output_dir=tempfile.mkdtemp(prefix="bench-trl-check-"), max_steps=1,
            per_device_train_batch_size=MICRO_BATCH,
            gradient_accumulation_steps=PROMPTS * GENERATIONS // MICRO_BATCH,
            num_generations=GENERATIONS, max_completion_length=COMPLETION, beta=0.0,
            report_to=[], save_strategy="no", use_cpu=not torch.cuda.is_available(),
            bf16=False, gradient_checkpointing=False,
        ),
        train_dataset=Dataset.from_list([{"prompt": t.messages} for t in tasks[:PROMPTS]]),
        processing_class=tokenizer,
    )
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    return trainer


def trl_gradient(trainer, model, inputs: list[dict]) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    model.train()  # TRL's loss normaliser reads the train-mode branch, as in training
    for micro in inputs:
        trainer._compute_loss(model, micro).backward()
    return lora_gradient(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init-checkpoint", default=None, help="a LoRA checkpoint folder (e.g. the recipe's SFT)")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (smoke run)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.init_checkpoint and not is_adapter_checkpoint(Path(args.init_checkpoint)):
        parser.error(no_adapters("--init-checkpoint", args.init_checkpoint))
    try:
        import trl  # noqa: F401
    except ImportError:
        parser.error("this check needs TRL: pip install 'trl>=1.16' (the bench extra)")
    torch.manual_seed(args.seed)
    tasks, _ = benchmark_tasks(0)
    ours = Ours(tasks, args.tiny, 1e-4, MICRO_BATCH, False, args.init_checkpoint, args.seed)
    trainer = ours.trainer
    model = trainer.job.model
    disable_dropout(model)
    rollouts, groups = trainer.collect(1)
    batch = trainer.advantages(rollouts, groups)
    if float(batch.advantages.abs().sum()) == 0.0:  # every group all-equal: give each a gradient
        batch.advantages = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(batch.episodes))])
        print("every group's rewards were equal: using advantages +1/-1 by row instead")
    ours_grad = our_gradient(trainer, batch)
    tokenizer = trainer.job.tokenizer
    theirs = trl_trainer(model, tokenizer, tasks)
    trl_grad = trl_gradient(theirs, model, trl_inputs(batch.episodes, batch.advantages, trainer.pad_id,
                                                    next(model.parameters()).device))
    diff = float((ours_grad - trl_grad).norm() / trl_grad.norm().clamp(min=1e-30))
    cosine = float(torch.nn.functional.cosine_similarity(ours_grad, trl_grad, dim=0))
    tokens = int(sum(sum(e.completion_mask) for e in batch.episodes))
    print(f"{len(batch.episodes)} completions, {tokens} completion tokens, rewards "
          f"{[round(r, 2) for r in batch.rewards.tolist()]}")
    print(f"LoRA gradient norm: ours {float(ours_grad.norm()):.4e}, TRL {float(trl_grad.norm()):.4e}; "
          f"relative difference {diff:.2e}, cosine {cosine:.6f} (tolerance {TOLERANCE:g}): "
          f"{'the updates agree' if diff <= TOLERANCE else 'MISMATCH'}")
    sys.exit(0 if diff <= TOLERANCE else 1)


if __name__ == "__main__":
    main()
