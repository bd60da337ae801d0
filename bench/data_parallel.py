"""GRPO step time and generated tokens/s at 1 and 2 (or more) processes of one job.

    python bench/data_parallel.py                       # SmolLM2-135M on the CPU, 1 and 2 processes
    python bench/data_parallel.py --model tiny --steps 3  # a tiny random model: checks the script runs
    python bench/data_parallel.py --device cuda --model smollm2-shape --processes 1 2 4
    python bench/data_parallel.py --model tiny --parallel fsdp   # the base sharded over the ranks

Each run is what a person or a worker starts, `python -m training run` with num_processes N
(torchrun is launched by it), on the same config otherwise: --prompts x --generations per
step, --completion tokens at most, LoRA, the json_tool_call verifier, no evaluations. The
script reads each run's events and prints the median of timing/step and of the step's
generated tokens per second over the steps after the first (compilation and caches warm
up in step 1), the speed-up over 1 process, and the config. Models: tiny,
smollm2-shape and qwen2.5-1.5b-shape are random weights of that shape (as in
`python -m training gpu-check`), smollm2 the offline SmolLM2-135M-Instruct, or a folder.
--parallel sets the config's `parallel` for the runs of more than one process (auto, ddp or
fsdp; 1 process is the same either way).

What limits the speed-up (docs/benchmarks.md): every rank waits for the slowest rank's
generation (a group that writes long completions holds the step), then for the gather of
the rollouts (a few MB of token ids) and one all-reduce of the LoRA gradients; on a CPU the
ranks also share the memory bandwidth and cores (--threads per process). fsdp adds an
all-gather of every layer's weights per forward pass (and again in backward), and every
rank steps through generation until the slowest rank's rows are done (synced_gpus), without
the shared prompt prefill of ddp's generation.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def run_config(model: str, tasks: Path, args: argparse.Namespace, processes: int) -> dict[str, Any]:
    return {"kind": "grpo", "model": model, "dataset": str(tasks), "environment": "json_tool_call",
            "device": args.device, "num_processes": processes, "parallel": args.parallel, "max_steps": args.steps,
            "num_prompts_per_step": args.prompts, "num_generations_per_prompt": args.generations,
            "max_completion_length": args.completion,
            "micro_batch_size": args.micro_batch or math.gcd(args.prompts * args.generations, 8),
            "eval_interval": 0, "checkpoint_interval": 0, "lr_scheduler": "constant", "seed": 0}


def write_tasks(folder: Path, count: int) -> Path:
    from environments.json_tool_call_tasks import workplace_json_tasks

    train = [t for t in workplace_json_tasks(max(400, count * 3), seed=0) if t.split == "train"][:count]
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in train))
    return path


def measure(config: dict[str, Any], out: Path, threads: int) -> dict[str, float]:
    """Run one job and return the medians of its steps after the first."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.json").write_text(json.dumps(config))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(threads)}
    result = subprocess.run([sys.executable, "-m", "training", "run", "--config", str(out / "run.json"),
                             "--out", str(out / "run")], cwd=REPO, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{config['num_processes']} process(es) failed:\n{result.stderr[-3000:]}")
    from training.events import read_events

    events, _ = read_events(out / "run" / "events.jsonl")
    steps = [e["metrics"] for e in events if e["type"] == "metric" and e["split"] == "train"]
    later = steps[1:] or steps
    return {
        "step_seconds": statistics.median(m["timing/step"] for m in later),
        "generation_seconds": statistics.median(m["timing/generation"] for m in later),
        "tokens_per_second": statistics.median(m["tokens_per_second"] for m in later),
        "generated_tokens": statistics.median(m["cost/generated_tokens"] for m in later),
    }


def table(results: dict[int, dict[str, float]]) -> str:
    base = results[min(results)]
    lines = ["| processes | s / step | generation s | generated tokens / s | speed-up |",
             "|---:|---:|---:|---:|---:|"]
    for processes, r in sorted(results.items()):
        lines.append(f"| {processes} | {r['step_seconds']:.2f} | {r['generation_seconds']:.2f} | "
                     f"{r['tokens_per_second']:.0f} | {base['step_seconds'] / r['step_seconds']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="tiny | smollm2-shape | qwen2.5-1.5b-shape | smollm2 | PATH")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--parallel", default="auto", choices=["auto", "ddp", "fsdp"],
                        help="how several processes share the work (the run config's parallel)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--completion", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=0, help="default: gcd(prompts x generations, 8)")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads per process (default: the cores shared evenly)")
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    if any(args.prompts % n for n in args.processes):
        parser.error("--prompts must be a multiple of every --processes value, so ranks hold equal shares")
    from training.gpu_check import prepare_model

    with tempfile.TemporaryDirectory() as scratch:
        root = args.out or Path(scratch)
        model = prepare_model(args.model, root / "model", args.device)
        tasks = write_tasks(root, args.prompts * (args.steps + 1))
        results = {}
        for processes in args.processes:
            threads = args.threads or max(1, (os.cpu_count() or 1) // processes)
            results[processes] = measure(run_config(model, tasks, args, processes), root / f"p{processes}", threads)
            print(f"{processes} process(es): {results[processes]['step_seconds']:.2f} s/step", file=sys.stderr)
    print(f"model {args.model}, device {args.device}, parallel {args.parallel}, "
          f"{args.prompts} prompts x {args.generations} generations, "
          f"{args.completion} tokens, {args.steps} steps (median of steps 2..{args.steps}), "
          f"{os.cpu_count()} cores")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
