"""The CPU recipe: baseline eval -> SFT -> GRPO from the SFT checkpoint -> held-out evals.

    python scripts/cpu_recipe.py --out recipe-run              # SmolLM2-135M-Instruct, offline
    python scripts/cpu_recipe.py --out /tmp/smoke --tiny       # a tiny random model, seconds

Tasks: workplace requests as one-call json_tool_call tasks (environments.json_tool_call_tasks).
The held_out split keeps only tasks of the generator's reworded templates: trained actions
asked for in request shapes never seen in training, --held-out of them. A second file holds
--novel-pairs tasks of the novel-pair templates, which ask to write a field no training task
writes; both checkpoints are evaluated on it too, in a column of its own. Every stage runs
the real command, `python -m training run --config ... --out ...`, so each number here can be reproduced by
hand from the configs written under --out. Prints a table of held-out success and wall time.
Running it again with the same --out keeps the stages that finished (change a stage's settings:
delete its folder, and those of the stages after it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from environments.json_tool_call_tasks import workplace_json_tasks  # noqa: E402
from environments.workplace.generator import NOVEL_PAIR_TEMPLATES, REWORDED_TEMPLATES  # noqa: E402
from training.events import read_events  # noqa: E402

BF16_CHOICES = {"auto": "auto", "on": True, "off": False}
SFT_SEQUENCES_PER_STEP = 16


def write_datasets(path: Path, novel_path: Path, args: argparse.Namespace) -> dict[str, int]:
    """Train / validation tasks of seen templates and held_out tasks of reworded templates in
    `path`; held_out tasks of novel-pair templates in `novel_path`."""
    wanted = args.held_out + args.novel_pairs
    tasks = workplace_json_tasks(3000, seed=args.seed, min_held_out=wanted * 2)
    train = [t for t in tasks if t.split == "train"][: args.train_tasks]
    validation = [t for t in tasks if t.split == "validation"][: args.validation_tasks]
    held_out = _held_out_of(tasks, REWORDED_TEMPLATES)[: args.held_out]
    novel = _held_out_of(tasks, NOVEL_PAIR_TEMPLATES)[: args.novel_pairs]
    _write_jsonl(path, train + validation + held_out)
    _write_jsonl(novel_path, novel)
    return {"train": len(train), "validation": len(validation), "held_out": len(held_out),
            "novel_pairs": len(novel)}


def _held_out_of(tasks: list, templates: frozenset[str]) -> list:
    return [t for t in tasks if t.split == "held_out" and t.metadata["template"] in templates]


def _write_jsonl(path: Path, tasks: list) -> None:
    with open(path, "w") as f:
        for task in tasks:
            f.write(json.dumps(task.to_dict()) + "\n")


def run_stage(name: str, config: dict, out: Path) -> tuple[dict, float]:
    """Run one `python -m training run` and return its last metric event and wall seconds."""
    run_dir = out / name
    finished = _finished_events(run_dir)
    if finished:  # a re-run of the recipe keeps stages that already finished
        seconds = finished[-1]["time"] - finished[0]["time"]
        print(f"  {name}: finished earlier ({seconds:.0f} s), kept", flush=True)
        return finished, seconds
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "run.json"
    config_path.write_text(json.dumps(config, indent=2))
    started = time.perf_counter()
    command = [sys.executable, "-m", "training", "run", "--config", str(config_path), "--out", str(run_dir)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(run_dir / "stderr.log", "w") as log:
        code = subprocess.call(command, cwd=REPO, env=env, stderr=log, stdout=log)
    seconds = time.perf_counter() - started
    events, _ = read_events(run_dir / "events.jsonl")
    if code != 0:
        errors = [e["message"] for e in events if e["type"] == "error"]
        raise SystemExit(f"stage {name} failed: {errors[-1] if errors else 'see ' + str(run_dir)}")
    print(f"  {name}: {seconds:.0f} s", flush=True)
    return events, seconds


def _finished_events(run_dir: Path) -> list[dict] | None:
    """The stage's events when an earlier recipe run finished it, else None."""
    path = run_dir / "events.jsonl"
    if not path.is_file():
        return None
    events, _ = read_events(path)
    return events if any(e["type"] == "done" for e in events) else None


def last_metrics(events: list[dict], split: str) -> dict:
    found = [e["metrics"] for e in events if e["type"] == "metric" and e["split"] == split]
    return found[-1] if found else {}


def held_out_by_template(datasets: list[Path], stages: dict[str, list[dict]]) -> list[str]:
    """Lines of a per-template table: passed / total for each held-out eval stage.

    The overall rate hides which request shapes transfer; this is the table the README keeps."""
    template_of = {}
    for dataset in datasets:
        with open(dataset) as f:
            for line in f:
                task = json.loads(line)
                template_of[task["id"]] = task.get("metadata", {}).get("template", "?")
    counts: dict[str, dict[str, list[int]]] = {}
    for stage, events in stages.items():
        for event in events:
            if event["type"] == "trajectory":
                cell = counts.setdefault(template_of.get(event["task_id"], "?"), {}).setdefault(stage, [0, 0])
                cell[0] += bool(event["passed"])
                cell[1] += 1
    lines = [f"{'held-out template':<32}" + "".join(f"{stage:>18}" for stage in stages)]
    for template in sorted(counts):
        cells = [counts[template].get(stage, [0, 0]) for stage in stages]
        lines.append(f"{template:<32}" + "".join(f"{f'{p} / {n}':>18}" for p, n in cells))
    return lines


def _rate(metrics: dict | None) -> str:
    return f"{metrics.get('success_rate', 0):.1%}" if metrics else "-"


def final_checkpoint(events: list[dict]) -> str:
    return [e["path"] for e in events if e["type"] == "checkpoint"][-1]


def tiny_model(out: Path) -> str:
    from training.models import default_tokenizer, tiny_llama

    folder = out / "tiny-model"
    if not (folder / "config.json").is_file():
        tokenizer = default_tokenizer()
        tiny_llama(tokenizer).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return str(folder)


def _count(text: str) -> int:
    """A task count for argparse: a whole number, zero or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of tasks (0 or more), got {text!r}")
    return int(text)


def training_stages(args: argparse.Namespace) -> tuple[dict, dict]:
    """The SFT and GRPO stages' own settings (the experiments' Learning preset is these at the defaults)."""
    sft = {
        "kind": "sft", "max_steps": args.sft_steps, "num_epochs": 10,
        "micro_batch_size": args.sft_micro_batch,
        "gradient_accumulation_steps": SFT_SEQUENCES_PER_STEP // args.sft_micro_batch,
        "learning_rate": args.sft_lr,
        "lr_scheduler": "cosine", "warmup_steps": min(5, args.sft_steps),
        "eval_interval": 0, "checkpoint_interval": 0,
    }
    grpo = {
        "kind": "grpo", "algorithm": "dapo",
        "max_steps": args.grpo_steps, "num_prompts_per_step": args.grpo_prompts,
        "num_generations_per_prompt": args.grpo_generations, "micro_batch_size": 8,
        "learning_rate": args.grpo_lr, "lr_scheduler": "constant",
        "temperature": 1.0, "max_generation_batches": 3, "eval_interval": 0,
        "checkpoint_interval": 0,
    }
    return sft, grpo


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The recipe's options (docs/training.md lists them)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tiny", action="store_true", help="tiny random model, tiny sizes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-tasks", type=int, default=1000)
    parser.add_argument("--validation-tasks", type=int, default=50)
    parser.add_argument("--held-out", type=_count, default=200,
                        help="held-out tasks of the reworded templates (the headline number)")
    parser.add_argument("--novel-pairs", type=_count, default=100,
                        help="held-out tasks of the novel-pair templates (0 skips those evals)")
    parser.add_argument("--sft-steps", type=int, default=60)
    parser.add_argument("--sft-lr", type=float, default=1e-3, help="SFT learning rate (LoRA)")
    parser.add_argument("--sft-micro-batch", type=int, choices=(1, 2, 4, 8, 16), default=4,
                        help="SFT sequences per forward pass; 16 per optimizer step whatever the value "
                             "(fp32 on CPU: 8 held ~20 GB, 4 about half that)")
    parser.add_argument("--skip-baseline", action="store_true",
                        help="do not evaluate the base model (it scores 0%% and takes ~9 min in fp32)")
    parser.add_argument("--grpo-steps", type=int, default=20)
    parser.add_argument("--grpo-lr", type=float, default=1e-4, help="GRPO learning rate (LoRA)")
    parser.add_argument("--grpo-prompts", type=int, default=3, help="prompts per GRPO step")
    parser.add_argument("--grpo-generations", type=int, default=8, help="samples per prompt (the group)")
    parser.add_argument("--max-completion-length", type=int, default=96)
    parser.add_argument("--bf16", choices=("auto", "on", "off"), default="auto",
                        help="bf16 autocast: auto = only where the CPU computes bf16 natively "
                             "(AVX512-BF16/AMX: about half the step time; emulated: several times slower)")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.tiny:
        args.train_tasks, args.validation_tasks, args.held_out, args.novel_pairs = 16, 4, 8, min(args.novel_pairs, 4)
        args.sft_steps, args.grpo_steps, args.max_completion_length = 2, 2, 8
    args.out.mkdir(parents=True, exist_ok=True)
    dataset, novel_dataset = args.out / "tasks.jsonl", args.out / "tasks_novel_pairs.jsonl"
    sizes = write_datasets(dataset, novel_dataset, args)
    print(f"tasks: {sizes}", flush=True)
    for name, asked in (("held_out", args.held_out), ("novel_pairs", args.novel_pairs)):
        if sizes[name] < asked:
            print(f"warning: only {sizes[name]} {name} tasks could be generated for --seed {args.seed}, "
                  f"not the {asked} asked for; the results cover those {sizes[name]}", flush=True)
    model = tiny_model(args.out) if args.tiny else args.model
    common = {
        "model": model, "dataset": str(dataset), "environment": "json_tool_call",
        "device": "cpu", "bf16": BF16_CHOICES[args.bf16], "seed": args.seed,
        "max_completion_length": args.max_completion_length,
    }
    held_out = {**common, "kind": "eval", "eval_split": "held_out"}

    baseline, t_base = ([], 0.0) if args.skip_baseline else run_stage("baseline", held_out, args.out)
    sft_settings, grpo_settings = training_stages(args)
    sft, t_sft = run_stage("sft", {**common, **sft_settings}, args.out)
    sft_checkpoint = final_checkpoint(sft)
    grpo, t_grpo = run_stage("grpo", {**common, **grpo_settings, "init_checkpoint": sft_checkpoint}, args.out)
    sft_eval, t_sft_eval = run_stage("sft_held_out", {**held_out, "init_checkpoint": sft_checkpoint}, args.out)
    grpo_eval, t_grpo_eval = run_stage(
        "grpo_held_out", {**held_out, "init_checkpoint": final_checkpoint(grpo)}, args.out
    )
    # The same checkpoints on the validation split: request templates seen in training.
    seen = {**common, "kind": "eval", "eval_split": "validation"}
    sft_seen, _ = run_stage("sft_validation", {**seen, "init_checkpoint": sft_checkpoint}, args.out)
    grpo_seen, _ = run_stage("grpo_validation", {**seen, "init_checkpoint": final_checkpoint(grpo)}, args.out)
    # Held-out tasks that write a field no training task writes: a harder step, reported apart.
    novel = {**held_out, "dataset": str(novel_dataset)}
    sft_novel, grpo_novel = [], []
    if sizes["novel_pairs"]:
        sft_novel, _ = run_stage("sft_novel_pairs", {**novel, "init_checkpoint": sft_checkpoint}, args.out)
        grpo_novel, _ = run_stage("grpo_novel_pairs", {**novel, "init_checkpoint": final_checkpoint(grpo)},
                                  args.out)

    rows = [] if args.skip_baseline else [
        ("baseline (base model)", last_metrics(baseline, "held_out"), t_base, None, None),
    ]
    rows += [
        ("after SFT", last_metrics(sft_eval, "held_out"), t_sft_eval, last_metrics(sft_seen, "validation"),
         last_metrics(sft_novel, "held_out")),
        ("after SFT + GRPO", last_metrics(grpo_eval, "held_out"), t_grpo_eval,
         last_metrics(grpo_seen, "validation"), last_metrics(grpo_novel, "held_out")),
    ]
    print(f"\nheld-out tasks: {sizes['held_out']} (trained actions in request shapes never trained on); "
          f"validation: {sizes['validation']} (seen templates); novel pairs: {sizes['novel_pairs']} "
          f"(fields no training task writes)")
    print(f"{'model':<24}{'success':>9}{'valid_json':>12}{'right_tool':>12}{'unsafe':>8}{'eval s':>8}"
          f"{'validation':>12}{'novel pairs':>13}")
    for name, metrics, seconds, seen_metrics, novel_metrics in rows:
        print(
            f"{name:<24}{metrics.get('success_rate', 0):>9.1%}{metrics.get('valid_json_rate') or 0:>12.1%}"
            f"{metrics.get('correct_tool_rate') or 0:>12.1%}{metrics.get('unsafe_action_rate') or 0:>8.1%}"
            f"{seconds:>8.0f}{_rate(seen_metrics):>12}{_rate(novel_metrics):>13}"
        )
    print()
    per_template = held_out_by_template([dataset, novel_dataset], {
        "after SFT": sft_eval + sft_novel, "after SFT + GRPO": grpo_eval + grpo_novel})
    for line in per_template:
        print(line)
    print(f"training wall time: SFT {t_sft:.0f} s ({args.sft_steps} steps), GRPO {t_grpo:.0f} s ({args.grpo_steps} steps)")


if __name__ == "__main__":
    main()
