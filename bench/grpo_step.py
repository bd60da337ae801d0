"""Seconds per GRPO step: our trainer vs TRL's GRPOTrainer, same model, same batch, same reward.

    python bench/grpo_step.py                  # SmolLM2-135M, LoRA r 16, 4 prompts x 8, 64 tokens
    python bench/grpo_step.py --tiny --steps 3 # a tiny random model: checks the script runs
    python bench/grpo_step.py --init-checkpoint recipe-run/sft/checkpoints/step_60
                                               # both start from an SFT checkpoint's adapters

Configuration (issue 4): LoRA r 16, 4 prompts x 8 generations, max_completion_length 64,
beta 0, json_tool_call tasks over workplace tools and the json_tool_call verifier as the
reward, micro-batches of --micro-batch completions on both sides (TRL: per-device batch 8 x
4 accumulation steps = one generation batch of 32 per optimizer step) and bf16 autocast on
both sides where the hardware computes bf16 natively (--bf16 on/off overrides). The two trainers run in the same process, alternating in blocks of --block steps,
and the script prints the median seconds per step, generated tokens per second and peak
memory of each, and the ratio ours / TRL. TRL is needed only here; this script installs
nothing: without trl it measures ours and says how to add TRL (`pip install trl`).

The base model never writes the call format in 64 tokens, so from it both trainers see reward
0 and the reward comparison says nothing; --init-checkpoint starts both from the same LoRA
checkpoint (the CPU recipe's SFT stage writes one), where rewards vary within a group and
the comparison of rewards after N steps means something. Each trainer's training reward is
measured on the prompts it drew, so both policies are also evaluated greedily on the same
--eval-tasks validation tasks after training, and the starting weights before it: that is
the like-for-like reward comparison. --eval-tasks 0 skips the evaluations (a timing run).

A 20-step run from a checkpoint takes about two hours on a 2-core CPU, mostly TRL's. With
--save-adapters DIR both trainers' LoRA adapters are saved after every block (DIR/ours_step_N,
DIR/trl_step_N), so a run cut short still gives policies to compare:

    python bench/grpo_step.py --evaluate-adapters DIR/ours_step_10 DIR/trl_step_10

--dynamic-sampling N turns on DAPO's dynamic sampling in our trainer only (TRL's GRPOTrainer
has none), as the CPU recipe trains (N = 3 there); everything else stays the same on both
sides. A group whose 8 rewards are all equal gives no gradient, so it is dropped and more
prompts are generated, at most N generation rounds a step; the step time counts every round.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from environments.json_tool_call import JsonToolCallEnvironment, JsonToolCallVerifier  # noqa: E402
from environments.json_tool_call_tasks import workplace_json_tasks  # noqa: E402
from environments.types import Trajectory  # noqa: E402
from training.config import validate_run_config  # noqa: E402
from training.data import TaskSource  # noqa: E402
from training.events import EventWriter  # noqa: E402
from training.grpo import GRPOTrainer  # noqa: E402
from training.models import (  # noqa: E402
    bf16_supported,
    default_tokenizer,
    load_model_and_tokenizer,
    tiny_llama,
)
from training.runner import ADAPTER_CONFIG, build_job, is_adapter_checkpoint  # noqa: E402

PROMPTS, GENERATIONS, COMPLETION, LORA_R = 4, 8, 64, 16


class _Tasks(TaskSource):
    def __init__(self, tasks):
        self.tasks, self.max_tasks, self.name = tasks, None, "benchmark tasks"
        self.by_id = {t.id: t for t in tasks}


def peak_memory_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process-wide on CPU


def load(tiny: bool, init_checkpoint: str | None = None):
    """The base model, with a LoRA checkpoint's adapters on top (trainable) when given."""
    if tiny:
        tokenizer = default_tokenizer()
        model = tiny_llama(tokenizer)
    else:
        model, tokenizer = load_model_and_tokenizer("smollm2")
    if init_checkpoint is None:
        return model, tokenizer
    if not is_adapter_checkpoint(Path(init_checkpoint)):
        raise SystemExit(no_adapters("--init-checkpoint", init_checkpoint))
    from peft import PeftModel

    return PeftModel.from_pretrained(model, init_checkpoint, is_trainable=True), tokenizer


def no_adapters(option: str, folder: str) -> str:
    return (f"{option} {folder} holds no LoRA adapters ({ADAPTER_CONFIG}); give a folder written "
            "by --save-adapters or a LoRA run's RUN_DIR/checkpoints/step_N")


class Ours:
    def __init__(
        self, tasks, tiny: bool, lr: float, micro_batch: int, bf16: bool, init: str | None = None,
        seed: int = 0, rollout_dropout: bool = False, dynamic_sampling: int = 0,
    ) -> None:
        """dynamic_sampling: 0 = off (TRL's behaviour), N = at most N generation rounds a step."""
        model, tokenizer = load(tiny, init)
        resample = ({"dynamic_sampling": True, "max_generation_batches": dynamic_sampling}
                    if dynamic_sampling else {"dynamic_sampling": False})
        cfg = validate_run_config({
            "kind": "grpo", "adapter": "lora", "lora_r": LORA_R, "lora_alpha": 2 * LORA_R,
            "num_prompts_per_step": PROMPTS, "num_generations_per_prompt": GENERATIONS,
            "max_completion_length": COMPLETION, "beta": 0.0, "learning_rate": lr,
            "lr_scheduler": "constant", "eval_interval": 0, "checkpoint_interval": 0,
            "micro_batch_size": micro_batch, "max_steps": 10_000, "bf16": bf16, "seed": seed,
            "rollout_dropout": rollout_dropout, **resample,
        })
        self.run_dir = tempfile.mkdtemp(prefix="bench-ours-")
        self.events = EventWriter(self.run_dir)
        job = build_job(cfg, self.run_dir, self.events, model=model, tokenizer=tokenizer,
                        environment=JsonToolCallEnvironment(), verifier=JsonToolCallVerifier(),
                        tasks=_Tasks(tasks))
        self.trainer = GRPOTrainer(job)
        self.step_number = 0
        self.generation_batches: list[int] = []  # generation rounds of each step

    def steps(self, n: int) -> list[tuple[float, float, float]]:
        """(seconds, generated tokens, mean reward) per step; with dynamic sampling the reward
        is over every sample generated, dropped groups included."""
        out = []
        for _ in range(n):
            self.step_number += 1
            started = time.perf_counter()
            metrics = self.trainer.step(self.step_number)
            out.append((time.perf_counter() - started, metrics["cost/generated_tokens"], metrics["reward"]))
            self.generation_batches.append(int(metrics["generation_batches"]))
            print_step("ours", self.step_number, out[-1],
                       f", {self.generation_batches[-1]} generation batches, "
                       f"{int(metrics['groups_trained'])} groups trained"
                       if self.trainer.cfg.dynamic_sampling else "")
        return out


class Trl:
    """TRL's GRPOTrainer on the same prompts and reward, timed per step with a callback.

    One TRL trainer runs all its steps; every `block` steps (and after its last step) a
    callback hands the process to our trainer for as many steps, so the two alternate under
    the same load and both run `steps` steps whatever the block size.
    """

    def __init__(
        self, tasks, tiny: bool, lr: float, steps: int, block: int, ours: Ours | None,
        micro_batch: int, bf16: bool, init: str | None = None, save_dir: Path | None = None,
        seed: int = 0,
    ) -> None:
        from datasets import Dataset
        from peft import LoraConfig
        from transformers import TrainerCallback
        from trl import GRPOConfig
        from trl import GRPOTrainer as TRLGRPOTrainer

        model, tokenizer = load(tiny, init)
        verifier = JsonToolCallVerifier()
        by_id = {t.id: t for t in tasks}

        def reward(completions, task_id, **_):
            texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
            return [
                verifier.verify(by_id[i], Trajectory.from_completion(text)).reward
                for i, text in zip(task_id, texts, strict=True)
            ]

        rows = [{"prompt": t.messages, "task_id": t.id} for t in tasks]
        self.rows: list[list[float]] = []  # [seconds, generated tokens, reward] per step
        self.ours_rows: list[tuple[float, float, float]] = []
        self.memory = {"ours": 0.0, "trl": 0.0}
        self.ours, self.steps, self.save_dir = ours, steps, save_dir
        bench = self

        class TimeAndAlternate(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                bench._started = time.perf_counter()

            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and "reward" in logs and bench.rows:
                    tokens = logs.get("completions/mean_length", 0) * PROMPTS * GENERATIONS
                    bench.rows[-1][1:] = [tokens, logs["reward"]]

            def on_step_end(self, args, state, control, **kwargs):
                bench.rows.append([time.perf_counter() - bench._started, 0.0, 0.0])
                if len(bench.rows) > 1:  # TRL logs a step's reward after its step_end
                    print_step("trl", len(bench.rows) - 1, bench.rows[-2])
                bench.memory["trl"] = max(bench.memory["trl"], peak_memory_mb())
                if state.global_step % block == 0 or state.global_step == steps:
                    bench.hand_over(min(block, steps - len(bench.ours_rows)), kwargs["model"],
                                    state.global_step)

        self.trainer = TRLGRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=GRPOConfig(
                output_dir=tempfile.mkdtemp(prefix="bench-trl-"), max_steps=steps,
                per_device_train_batch_size=micro_batch,
                gradient_accumulation_steps=PROMPTS * GENERATIONS // micro_batch,
                num_generations=GENERATIONS,
                max_completion_length=COMPLETION, beta=0.0, learning_rate=lr, logging_steps=1,
                report_to=[], save_strategy="no", use_cpu=not torch.cuda.is_available(),
                lr_scheduler_type="constant", bf16=bf16, seed=seed,
                # TRL turns activation checkpointing on by default; micro-batches of 8 fit
                # without it, and it costs ~30% of a step, so TRL is timed at its fastest.
                gradient_checkpointing=False,
            ),
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            # A PeftModel from --init-checkpoint trains its own adapters; otherwise fresh ones.
            peft_config=None if init else LoraConfig(
                r=LORA_R, lora_alpha=2 * LORA_R, target_modules="all-linear", task_type="CAUSAL_LM"),
            callbacks=[TimeAndAlternate()],
        )

    def hand_over(self, n: int, trl_model, trl_step: int) -> None:
        """Our trainer's next n steps (none with --trl-only), with its own peak memory, then
        both policies saved."""
        if self.ours is not None:
            reset_peak_memory()
            self.ours_rows += self.ours.steps(n)
            self.memory["ours"] = max(self.memory["ours"], peak_memory_mb())
            reset_peak_memory()
        if self.save_dir is not None:
            save_adapters(trl_model, self.save_dir / f"trl_step_{trl_step}")
            if self.ours is not None:
                save_adapters(self.ours.trainer.job.model, self.save_dir / f"ours_step_{self.ours.step_number}")

    def run(self) -> None:
        self.trainer.train()
        print_step("trl", len(self.rows), self.rows[-1])


def save_adapters(model, folder: Path) -> None:
    """A trainer's LoRA adapters as a checkpoint folder that --init-checkpoint and
    --evaluate-adapters accept (peft's adapter_config.json + adapter_model.safetensors)."""
    model.save_pretrained(str(folder))
    print(f"saved adapters: {folder}", flush=True)


def evaluate_saved_adapters(folders: list[str], tiny: bool, validation, bf16: bool) -> None:
    """Greedy eval of saved adapters on the bench's validation tasks, one line each, then each
    folder after the first compared with the first task by task."""
    results = []
    for folder in folders:
        model, tokenizer = load(tiny, folder)
        metrics = evaluate_policy(model, tokenizer, validation, bf16)
        print_evaluation(Path(folder).name, metrics, len(validation), "saved adapters")
        results.append((Path(folder).name, metrics))
        del model
    (first, baseline), *others = results
    for name, metrics in others:
        print_comparison(name, metrics, first, baseline)


def reset_peak_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def print_step(name: str, number: int, row, extra: str = "") -> None:
    """One line a step as it finishes, so a long CPU run shows where it is."""
    seconds, tokens, reward = row
    print(f"{name} step {number}: {seconds:.1f} s, {tokens:.0f} tokens, reward {reward:.3f}{extra}", flush=True)


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def summary(name: str, rows: list[tuple[float, float, float]], memory: float) -> float:
    """Median seconds a step, tokens/s, peak memory, and the reward early and late in the run.

    Rewards are compared over the first and last five steps (one step's 32 samples are noisy)."""
    seconds = statistics.median(r[0] for r in rows)
    tokens_per_s = sum(r[1] for r in rows) / sum(r[0] for r in rows)
    rewards = [r[2] for r in rows]
    print(f"{name:<6} median {seconds:7.2f} s/step  {tokens_per_s:8.1f} tokens/s  "
          f"peak memory {memory:8.0f} MB  reward: first 5 steps {mean(rewards[:5]):.3f}, "
          f"last 5 steps {mean(rewards[-5:]):.3f}, all {len(rows)} steps {mean(rewards):.3f}")
    return seconds


class _Outcomes:
    """Takes evaluate()'s trajectory events and keeps whether each task passed."""

    def __init__(self) -> None:
        self.passed: dict[str, bool] = {}

    def trajectory(self, **fields) -> None:
        self.passed[fields["task_id"]] = bool(fields["passed"])

    def metric(self, *args, **kwargs) -> None:
        pass


def evaluate_policy(model, tokenizer, tasks, bf16: bool) -> dict:
    """Greedy success and mean reward of a trained policy on fixed tasks, the same for both,
    and which tasks it solved (for the paired comparison of two policies).

    Training rewards are measured on whatever prompts each trainer drew, so they say little
    about which policy is better; this is the like-for-like "reward after N steps"."""
    from training.agent_loop import AgentLoopConfig
    from training.evaluate import EvalSettings, evaluate
    from training.rollout import HFGenerateEngine

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.eval()
    engine = HFGenerateEngine(model, tokenizer, device, autocast=bf16)
    outcomes = _Outcomes()
    metrics = evaluate(engine, tokenizer, JsonToolCallEnvironment(), JsonToolCallVerifier(), tasks,
                       EvalSettings(max_new_tokens=COMPLETION), agent=AgentLoopConfig(max_turns=1),
                       events=outcomes)
    return {"success_rate": metrics["success_rate"], "reward_mean": metrics["reward_mean"],
            "passed": [outcomes.passed[t.id] for t in tasks]}


def print_evaluation(name: str, metrics: dict, n: int, when: str = "after training") -> None:
    solved = "".join("1" if p else "0" for p in metrics["passed"])
    print(f"{name:<6} {when}, greedy on {n} validation tasks: success "
          f"{metrics['success_rate']:.1%}, mean reward {metrics['reward_mean']:.3f}, "
          f"solved (task order) {solved}")


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value: the chance of a split at least this uneven between
    the tasks one policy gained and lost against another, if either were equally likely."""
    n = gained + lost
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1)) / 2**n
    return min(1.0, 2 * tail)


def print_comparison(name: str, metrics: dict, against: str, other: dict) -> None:
    """Tasks `name` solves that `against` does not (gained) and the reverse (lost)."""
    pairs = list(zip(metrics["passed"], other["passed"], strict=True))
    gained = sum(mine and not theirs for mine, theirs in pairs)
    lost = sum(theirs and not mine for mine, theirs in pairs)
    print(f"{name} vs {against}: gained {gained}, lost {lost} of {len(pairs)} tasks, "
          f"McNemar exact p = {mcnemar_exact(gained, lost):.3g}")


def benchmark_tasks(eval_tasks: int) -> tuple[list, list]:
    """Training prompts from 600 generated tasks, and eval_tasks validation tasks.

    The generator's output for a larger count starts with its output for a smaller one, so
    the training pool stays the one earlier measurements drew from, and the first 28
    validation tasks are the ones they were evaluated on; more are generated for a larger
    --eval-tasks (seen templates, never a training request)."""
    train = [t for t in workplace_json_tasks(600, seed=0) if t.split == "train"]
    generated = 600
    while True:
        validation = [t for t in workplace_json_tasks(generated, seed=0) if t.split == "validation"]
        if len(validation) >= eval_tasks or generated >= 64_000:
            break
        generated *= 2
    if len(validation) < eval_tasks:
        raise SystemExit(f"--eval-tasks {eval_tasks}: the generator gave only {len(validation)} "
                         "validation tasks; ask for fewer")
    return train, validation[:eval_tasks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per trainer")
    parser.add_argument("--block", type=int, default=5, help="steps before switching trainer")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (smoke run)")
    parser.add_argument("--micro-batch", type=int, default=8, choices=(1, 2, 4, 8, 16, 32),
                        help="completions per forward/backward, both trainers")
    parser.add_argument("--bf16", choices=("auto", "on", "off"), default="auto",
                        help="bf16 autocast on both sides: auto = where the hardware computes bf16 "
                             "natively (on CPUs without AVX512-BF16/AMX it is emulated and slower)")
    parser.add_argument("--init-checkpoint", default=None,
                        help="a LoRA checkpoint folder both trainers start from (e.g. the recipe's SFT)")
    parser.add_argument("--eval-tasks", type=int, default=50,
                        help="after training, evaluate both policies greedily on this many validation "
                             "tasks (the same ones); 0: skip")
    parser.add_argument("--save-adapters", type=Path, default=None, metavar="DIR",
                        help="save both trainers' LoRA adapters after every block to DIR/ours_step_N "
                             "and DIR/trl_step_N (a run cut short can still be evaluated)")
    parser.add_argument("--evaluate-adapters", nargs="+", default=None, metavar="DIR",
                        help="train nothing: evaluate these saved adapter folders greedily on the "
                             "--eval-tasks validation tasks and exit")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of both trainers' sampling, prompt order and initial RNG (repeat a "
                             "run with other seeds to see how much one run's reward says)")
    parser.add_argument("--rollout-dropout", action="store_true",
                        help="our trainer samples with LoRA dropout active, as TRL does (it generates "
                             "in train mode); off: ours samples in eval mode")
    parser.add_argument("--dynamic-sampling", type=int, default=0, metavar="N",
                        help="our trainer only (TRL has none): drop groups whose rewards are all "
                             "equal and generate more, at most N generation rounds a step (the CPU "
                             "recipe's 3); 0 (default): off, the same configuration on both sides")
    parser.add_argument("--trl-only", action="store_true",
                        help="train TRL's side alone (e.g. more seeds of it for the reward comparison)")
    parser.add_argument("--ours-only", action="store_true",
                        help="time our trainer only, even where trl is installed (TRL's side takes "
                             "about five times as long on a CPU)")
    args = parser.parse_args()
    if args.eval_tasks < 0:
        parser.error(f"--eval-tasks must be 0 (no evaluation) or more, got {args.eval_tasks}")
    if args.evaluate_adapters and args.eval_tasks == 0:
        parser.error("--evaluate-adapters needs validation tasks: give --eval-tasks 1 or more")
    folders = [("--init-checkpoint", args.init_checkpoint)] if args.init_checkpoint else []
    folders += [("--evaluate-adapters", folder) for folder in args.evaluate_adapters or []]
    for option, folder in folders:  # before minutes of model loading, not after
        if not is_adapter_checkpoint(Path(folder)):
            parser.error(no_adapters(option, folder))
    if args.save_adapters is not None and args.save_adapters.exists() and any(args.save_adapters.iterdir()):
        parser.error(f"--save-adapters {args.save_adapters} is not empty; give a new folder, so that "
                     "one run's adapters are not mixed with another's")
    if args.trl_only and args.ours_only:
        parser.error("--trl-only and --ours-only exclude each other; give at most one")
    if args.dynamic_sampling < 0:
        parser.error(f"--dynamic-sampling must be 0 (off) or a number of generation rounds, "
                     f"got {args.dynamic_sampling}")
    if args.dynamic_sampling and args.trl_only:
        parser.error("--dynamic-sampling is our trainer's (TRL has none); it means nothing with --trl-only")
    if args.steps < 1 or args.block < 1:
        parser.error(f"--steps and --block must be 1 or more, got {args.steps} and {args.block}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args.bf16 = bf16_supported(device) if args.bf16 == "auto" else args.bf16 == "on"
    torch.manual_seed(args.seed)
    tasks, validation = benchmark_tasks(args.eval_tasks)
    if args.evaluate_adapters:
        evaluate_saved_adapters(args.evaluate_adapters, args.tiny, validation, args.bf16)
        return
    have_trl = not args.ours_only and importlib.util.find_spec("trl") is not None
    if args.trl_only and not have_trl:
        parser.error("--trl-only needs trl: `pip install 'trl>=1.16'` (the bench extra)")
    if not have_trl and not args.ours_only:
        print("trl is not installed: measuring our trainer only. For the comparison run "
              "`pip install trl` in this environment and run the script again.")
    ours = None if args.trl_only else Ours(
        tasks, args.tiny, args.lr, args.micro_batch, args.bf16, args.init_checkpoint, args.seed,
        args.rollout_dropout, args.dynamic_sampling)
    trl = Trl(tasks, args.tiny, args.lr, args.steps, args.block, ours, args.micro_batch, args.bf16,
              args.init_checkpoint, args.save_adapters, args.seed) if have_trl else None
    # Both trainers start from the same weights: this is the starting point of either.
    start_model, tokenizer = ((ours.trainer.job.model, ours.trainer.job.tokenizer) if ours is not None
                              else (trl.trainer.model, trl.trainer.processing_class))
    before = evaluate_policy(start_model, tokenizer, validation, args.bf16) if validation else None
    memory = {"ours": 0.0, "trl": 0.0}
    trl_rows: list[tuple[float, float, float]] = []
    if trl is not None:
        trl.run()
        ours_rows, memory = trl.ours_rows, trl.memory
        trl_rows = [tuple(r) for r in trl.rows]
    else:
        ours_rows = []
        while len(ours_rows) < args.steps:
            ours_rows += ours.steps(min(args.block, args.steps - len(ours_rows)))
            if args.save_adapters is not None:
                save_adapters(ours.trainer.job.model, args.save_adapters / f"ours_step_{ours.step_number}")
        memory["ours"] = peak_memory_mb()
    print(f"device: {'cuda' if torch.cuda.is_available() else 'cpu'}, {PROMPTS} prompts x "
          f"{GENERATIONS} generations, max_completion_length {COMPLETION}, LoRA r {LORA_R}, beta 0, "
          f"micro-batch {args.micro_batch}, bf16 {'on' if args.bf16 else 'off'}, seed {args.seed}, "
          f"our rollout dropout {'on' if args.rollout_dropout else 'off'}, our dynamic sampling "
          f"{f'up to {args.dynamic_sampling} generation batches a step' if args.dynamic_sampling else 'off'}, "
          f"from {args.init_checkpoint or 'the base model with fresh adapters'}")
    seconds = {}
    if ours_rows:
        seconds["ours"] = summary("ours", ours_rows, memory["ours"])
        if args.dynamic_sampling:
            print(f"ours   generation batches a step: mean {mean(ours.generation_batches):.2f}, "
                  f"at most {args.dynamic_sampling} (dynamic sampling)")
    if trl_rows:
        seconds["trl"] = summary("trl", trl_rows, memory["trl"])
    if len(seconds) == 2:
        print(f"ratio ours / trl (median s/step): {seconds['ours'] / seconds['trl']:.2f} (target <= 0.7)")
    if validation:
        print_evaluation("start", before, len(validation), "before training (the starting weights)")
        after = {}
        if ours is not None:
            after["ours"] = evaluate_policy(ours.trainer.job.model, tokenizer, validation, args.bf16)
        if trl is not None:
            after["trl"] = evaluate_policy(trl.trainer.model, tokenizer, validation, args.bf16)
        for name, metrics in after.items():
            print_evaluation(name, metrics, len(validation))
        for name, metrics in after.items():
            print_comparison(name, metrics, "start", before)
        if len(after) == 2:
            print_comparison("ours", after["ours"], "trl", after["trl"])
    if not torch.cuda.is_available():
        print("note: on CPU peak memory is the process's peak RSS, shared by both trainers")


if __name__ == "__main__":
    main()
