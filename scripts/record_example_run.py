"""Record the demo's example run: the full CPU recipe, packed for `crucible_setup` to import.

    python scripts/record_example_run.py --recipe-dir /tmp/example-recipe --record   # ~2 h on 2 cores
    python scripts/record_example_run.py --recipe-dir /tmp/example-recipe            # pack an existing one

--record runs `scripts/cpu_recipe.py` with RECIPE_FLAGS: the recipe at its documented settings
(docs/training.md, "The CPU recipe"), so the example shows the run that learns. Then every stage
folder is packed into webapp/runs/services/example_run_archive/cpu-recipe-example.tar.xz with only
what the import reads (events.jsonl, run.json, each checkpoint's COMPLETE marker and
run_config.json: no weights) and the recipe's tasks.jsonl (the example's dataset, so every
trajectory has its task), and manifest.json records the flags, the date, the task counts and
each stage's final metrics. `crucible_setup` imports it into the demo project
(webapp/runs/services/example_run.py). The novel-pair evaluations are not packed: they use
a second task file and are reported in docs/training.md only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from training.checkpoints import CHECKPOINTS_DIR, COMPLETE_MARKER  # noqa: E402
from training.events import EVENTS_FILE  # noqa: E402

OUT_DIR = REPO / "webapp" / "runs" / "services" / "example_run_archive"
ARCHIVE = OUT_DIR / "cpu-recipe-example.tar.xz"
STAGES = ("baseline", "sft", "grpo", "sft_held_out", "grpo_held_out", "sft_validation", "grpo_validation")
RECIPE_FLAGS: list[str] = []  # the documented settings: 1,000 train tasks, 60 SFT steps, 20 GRPO steps
TASKS_FILE = "tasks.jsonl"
CONFIG_FILES = ("run.json", "run_config.json", "config.json")
CHECKPOINT_FILES = (COMPLETE_MARKER, "run_config.json")


def stage_files(stage_dir: Path) -> list[Path]:
    """What the import reads from one run folder."""
    files = [stage_dir / name for name in (EVENTS_FILE, *CONFIG_FILES) if (stage_dir / name).is_file()]
    checkpoints = stage_dir / CHECKPOINTS_DIR
    if checkpoints.is_dir():
        for step in sorted(checkpoints.glob("step_*")):
            files += [step / name for name in CHECKPOINT_FILES if (step / name).is_file()]
    return files


def final_metrics(events_path: Path) -> dict:
    """The last metric event of each split (what the tables and the manifest show)."""
    last: dict[str, dict] = {}
    for line in events_path.read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "metric":
            last[event.get("split", "train")] = {"step": event.get("step"), **event["metrics"]}
    return last


def split_counts(tasks: Path) -> dict[str, int]:
    """How many of the recipe's tasks are in each split."""
    counts: dict[str, int] = {}
    for line in tasks.read_text().splitlines():
        if line.strip():
            split = json.loads(line).get("split", "train")
            counts[split] = counts.get(split, 0) + 1
    return dict(sorted(counts.items()))


def pack(recipe_dir: Path, out_dir: Path = OUT_DIR, flags: list[str] | None = None) -> dict:
    """Write out_dir/cpu-recipe-example.tar.xz and out_dir/manifest.json from the recipe's folders
    (`flags`: what the recipe was run with, RECIPE_FLAGS unless said)."""
    archive = out_dir / ARCHIVE.name
    out_dir.mkdir(parents=True, exist_ok=True)
    flags = RECIPE_FLAGS if flags is None else flags
    manifest: dict = {"recorded_with": ["python", "scripts/cpu_recipe.py", "--out", "RUN", *flags],
                      "packed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "stages": {}}
    with tarfile.open(archive, "w:xz", preset=9) as tar:
        for stage in STAGES:
            folder = recipe_dir / stage
            if not (folder / EVENTS_FILE).is_file():
                raise SystemExit(f"{folder} has no {EVENTS_FILE}: record the recipe first (--record)")
            for path in stage_files(folder):
                info = tar.gettarinfo(str(path), arcname=f"{stage}/{path.relative_to(folder).as_posix()}")
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with path.open("rb") as f:
                    tar.addfile(info, f)
            manifest["stages"][stage] = final_metrics(folder / EVENTS_FILE)
        tasks = recipe_dir / TASKS_FILE
        if not tasks.is_file():
            raise SystemExit(f"{tasks} is missing: the recipe writes it first; record the recipe again (--record)")
        info = tar.gettarinfo(str(tasks), arcname=TASKS_FILE)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        with tasks.open("rb") as f:
            tar.addfile(info, f)
        manifest["tasks"] = split_counts(tasks)
    manifest["archive_bytes"] = archive.stat().st_size
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe-dir", type=Path, required=True, help="the recipe's --out folder")
    parser.add_argument("--record", action="store_true", help="run the recipe first (keeps finished stages)")
    parser.add_argument("--recorded-with", default=None,
                        help="the recipe's flags, when the folder was recorded with others than RECIPE_FLAGS "
                             "(one string, e.g. \"--train-tasks 400 --sft-steps 24\"); written to the manifest")
    args = parser.parse_args()
    if args.record:
        subprocess.run([sys.executable, str(REPO / "scripts" / "cpu_recipe.py"), "--out", str(args.recipe_dir),
                        *RECIPE_FLAGS], check=True)
    manifest = pack(args.recipe_dir, flags=None if args.recorded_with is None else args.recorded_with.split())
    buffer = io.StringIO()
    for stage, splits in manifest["stages"].items():
        for split, metrics in splits.items():
            rate = metrics.get("success_rate", metrics.get("reward"))
            print(f"{stage:<16} {split:<10} step {metrics.get('step')}: "
                  f"{'success' if 'success_rate' in metrics else 'reward'} {rate}", file=buffer)
    print(buffer.getvalue() + f"{ARCHIVE.relative_to(REPO)}: {manifest['archive_bytes']:,} bytes")


if __name__ == "__main__":
    main()
