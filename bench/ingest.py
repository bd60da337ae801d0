"""Ingestion benchmark: trajectories/s from an events file into the database.

Compares the batch path the workers use (EventIngestor: COPY + INSERT … ON CONFLICT
on PostgreSQL, bulk inserts elsewhere, with rollups) with one ORM save per row.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test python bench/ingest.py --n 50000

Creates a scratch project, prints the numbers, and deletes the project again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.config.settings.local")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402

from training.events import EventWriter, read_events  # noqa: E402
from webapp.projects.services.projects import project_create  # noqa: E402
from webapp.runs.models import Run  # noqa: E402
from webapp.runs.services.ingest import EventIngestor  # noqa: E402
from webapp.trajectories.models import Trajectory  # noqa: E402

TURN_TEXT = ("Looking up the calendar for next week. " * 60)[:2000]  # ~2 KB of model output per trajectory


def write_events(path: Path, n: int) -> None:
    with EventWriter(path, attempt=1) as writer:
        for i in range(n):
            writer.trajectory(
                task_id=f"task-{i // 8}", sample_index=i % 8, step=i // 4096, split="train", group_id=f"g{i // 8}",
                turns=[{"role": "user", "content": "Schedule a sync with Ana"},
                       {"role": "assistant", "content": TURN_TEXT}],
                reward=float(i % 3 == 0), passed=i % 3 == 0, failure_bucket=None if i % 3 == 0 else "wrong_arguments",
                components={"valid_json": 1.0, "correct_tool": float(i % 2)}, tokens_in=120, tokens_out=60,
                latency_ms=35.0,
            )


def batch_ingest(run: Run, path: Path) -> tuple[int, float]:
    ingestor = EventIngestor(run, attempt=1)
    offset, total = 0, 0
    started = time.perf_counter()
    while True:
        events, offset = read_events(path / "events.jsonl", offset, max_bytes=16 * 1024 * 1024)
        if not events:
            break
        total += ingestor.ingest(events).trajectories
    return total, time.perf_counter() - started


def per_row_ingest(run: Run, path: Path, limit: int) -> tuple[int, float]:
    events, _ = read_events(path / "events.jsonl")
    started = time.perf_counter()
    for event in events[:limit]:
        Trajectory(project_id=run.project_id, run=run, task_key=event["task_id"], step=event["step"],
                   split=event["split"], sample_index=event["sample_index"], group_id=event["group_id"],
                   turns=event["turns"], reward=event["reward"], passed=event["passed"],
                   failure_bucket=event["failure_bucket"] or "", components=event["components"],
                   tokens_in=event["tokens_in"], tokens_out=event["tokens_out"], latency_ms=event["latency_ms"]).save()
    return min(limit, len(events)), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000, help="trajectories for the batch path")
    parser.add_argument("--per-row", type=int, default=3_000, help="trajectories for the per-row path")
    args = parser.parse_args()

    user, _ = get_user_model().objects.get_or_create(username="bench-ingest")
    project = project_create(name="bench ingest", owner=user)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp)
            write_events(path, args.n)
            size_mb = (path / "events.jsonl").stat().st_size / 2**20
            batch_run = Run.objects.create(project=project, name="batch", kind="grpo")
            n_batch, t_batch = batch_ingest(batch_run, path)
            row_run = Run.objects.create(project=project, name="per-row", kind="grpo")
            n_row, t_row = per_row_ingest(row_run, path, args.per_row)
        batch_rate, row_rate = n_batch / t_batch, n_row / t_row
        print(json.dumps({
            "database": connection.vendor,
            "events_file_mb": round(size_mb, 1),
            "batch": {"trajectories": n_batch, "seconds": round(t_batch, 2), "per_second": round(batch_rate)},
            "per_row_orm": {"trajectories": n_row, "seconds": round(t_row, 2), "per_second": round(row_rate)},
            "speedup": round(batch_rate / row_rate, 1),
        }, indent=2))
    finally:
        project.delete()
        user.delete()


if __name__ == "__main__":
    main()
