"""Deleting a big run: seconds to delete a run of N trajectories (with its reviews, queue items, metrics),
while another run of the project stays whole.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/crucible_bench python bench/run_delete.py --n 1000000

Fills a scratch project through the workers' write path (bench/ingest.py's events, EventIngestor: COPY
on PostgreSQL), times the plan the delete page shows (run_delete_plan) and the job's deletion
(run_delete_execute: one transaction of set-wise statements, then the folder), checks that the other
run lost nothing, and for contrast times Django's own `Run.delete()` (its collector loads every row
it cascades to) on a smaller run. Prints JSON; deletes the scratch project again.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ingest  # noqa: E402  (sets Django up, as every bench script does)
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402

from webapp.projects.services.projects import project_create  # noqa: E402
from webapp.runs.models import MetricPoint, Run  # noqa: E402
from webapp.runs.selectors.run_delete import run_delete_plan, run_files_folder  # noqa: E402
from webapp.runs.services.run_delete import run_delete_execute  # noqa: E402
from webapp.trajectories.models import QueueItem, Review, ReviewQueue, Trajectory  # noqa: E402


def filled_run(project, name: str, n: int) -> Run:
    """A run of n trajectories (~2 KB of output each) and a metric point per step, ingested with COPY."""
    run = Run.objects.create(project=project, name=name, kind="grpo")
    with tempfile.TemporaryDirectory() as tmp:
        ingest.write_events(Path(tmp), n)
        ingest.batch_ingest(run, Path(tmp))
    steps = sorted(set(Trajectory.objects.filter(run=run).values_list("step", flat=True)))
    MetricPoint.objects.bulk_create([MetricPoint(run=run, step=s, split="train", name="reward", value=0.5)
                                     for s in steps])
    folder = run_files_folder(run) / "checkpoints" / "step_1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_model.safetensors").write_bytes(b"\0" * (8 * 2 ** 20))
    return run


def reviewed(project, run: Run, user, count: int) -> None:
    """`count` verdicts on the run's trajectories, each the item of a review queue."""
    queue = ReviewQueue.objects.create(project=project, name=f"bench {run.pk}")
    ids = list(Trajectory.objects.filter(run=run).order_by("id").values_list("pk", flat=True)[:count])
    items = QueueItem.objects.bulk_create([QueueItem(queue=queue, position=i, trajectory_id=pk)
                                           for i, pk in enumerate(ids)])
    Review.objects.bulk_create([Review(trajectory_id=pk, reviewer=user, verdict="agree", item=item)
                                for pk, item in zip(ids, items, strict=True)])


def rows(run_id: int) -> int:
    return Trajectory.objects.filter(run_id=run_id).count()


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000, help="trajectories of the run deleted")
    parser.add_argument("--other", type=int, default=50_000, help="trajectories of the run that stays")
    parser.add_argument("--reviews", type=int, default=2_000, help="reviews of the deleted run's trajectories")
    parser.add_argument("--orm", type=int, default=20_000, help="trajectories of the run Django's delete() removes")
    args = parser.parse_args()

    user, _ = get_user_model().objects.get_or_create(username="bench-run-delete")
    project = project_create(name="bench run delete", owner=user)
    try:
        (doomed, fill_seconds) = timed(lambda: filled_run(project, "doomed", args.n))
        keeper = filled_run(project, "keeper", args.other)
        reviewed(project, doomed, user, args.reviews)
        keeper_rows = rows(keeper.pk)
        plan, plan_seconds = timed(lambda: run_delete_plan(doomed, actor=user))
        report, delete_seconds = timed(lambda: run_delete_execute(
            project_id=project.pk, payload={"run_id": doomed.pk, "run_name": doomed.name, "actor_id": user.pk}))
        rss_after_delete = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert rows(doomed.pk) == 0 and rows(keeper.pk) == keeper_rows, "the deletion touched the wrong rows"
        small = filled_run(project, "orm", args.orm)
        _, orm_seconds = timed(lambda: Run.objects.get(pk=small.pk).delete())
        shutil.rmtree(run_files_folder(small))  # Django's delete() leaves the files
        rss_after_orm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        run_delete_execute(project_id=project.pk, payload={"run_id": keeper.pk, "actor_id": user.pk})
        print(json.dumps({
            "database": connection.vendor,
            "fill": {"trajectories": args.n, "seconds": round(fill_seconds, 1)},
            "plan": {"seconds": round(plan_seconds, 3), "trajectories": plan.trajectories, "reviews": plan.reviews,
                     "folder_bytes": plan.folder.bytes},
            "delete": {"seconds": round(delete_seconds, 2), "rows_per_second": round(args.n / delete_seconds),
                       "removed": report.removed, "step_seconds": report.seconds, "freed_bytes": report.freed_bytes},
            "kept_run_rows_intact": keeper_rows,
            "django_collector_delete": {"trajectories": args.orm, "seconds": round(orm_seconds, 2),
                                        "rows_per_second": round(args.orm / orm_seconds)},
            "peak_rss_mb": {"after_fill_and_delete": round(rss_after_delete / 1024),
                            "after_django_delete": round(rss_after_orm / 1024)},
        }, indent=2))
    finally:
        project.delete()
        user.delete()


if __name__ == "__main__":
    main()
