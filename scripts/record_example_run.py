"""Record the demo's example run: a short CPU recipe, packed for `crucible_setup` to import.

    python scripts/record_example_run.py --recipe-dir /tmp/example-recipe --record   # ~40 min on 2 cores
    python scripts/record_example_run.py --recipe-dir /tmp/example-recipe            # pack an existing one

--record runs `scripts/cpu_recipe.py` with RECIPE_FLAGS (the recipe's own stages, fewer steps
and tasks than its headline run so it records in well under an hour). Then every stage folder
is packed into webapp/runs/services/example_run_archive/cpu-recipe-example.tar.xz with only what the import
reads (events.jsonl, run.json, each checkpoint's COMPLETE marker and run_config.json: no
weights), and manifest.json records the flags, the date and each stage's final metrics.
`crucible_setup` imports it into the demo project (webapp/runs/services/example_run.py).
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
RECIPE_FLAGS = ["--train-tasks", "400", "--validation-tasks", "20", "--held-out", "60", "--novel-pairs", "0",
                "--sft-steps", "24", "--grpo-steps", "4"]
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


def pack(recipe_dir: Path, out_dir: Path = OUT_DIR) -> dict:
    """Write out_dir/cpu-recipe-example.tar.xz and out_dir/manifest.json from the recipe's folders."""
    archive = out_dir / ARCHIVE.name
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"recorded_with": ["python", "scripts/cpu_recipe.py", "--out", "RUN", *RECIPE_FLAGS],
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
    manifest["archive_bytes"] = archive.stat().st_size
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe-dir", type=Path, required=True, help="the recipe's --out folder")
    parser.add_argument("--record", action="store_true", help="run the recipe first (keeps finished stages)")
    args = parser.parse_args()
    if args.record:
        subprocess.run([sys.executable, str(REPO / "scripts" / "cpu_recipe.py"), "--out", str(args.recipe_dir),
                        *RECIPE_FLAGS], check=True)
    manifest = pack(args.recipe_dir)
    buffer = io.StringIO()
    for stage, splits in manifest["stages"].items():
        for split, metrics in splits.items():
            rate = metrics.get("success_rate", metrics.get("reward"))
            print(f"{stage:<16} {split:<10} step {metrics.get('step')}: "
                  f"{'success' if 'success_rate' in metrics else 'reward'} {rate}", file=buffer)
    print(buffer.getvalue() + f"{ARCHIVE.relative_to(REPO)}: {manifest['archive_bytes']:,} bytes")


if __name__ == "__main__":
    main()
