"""Keeping Trajectory.search_text whole: the turns' text plus, for trajectories whose turns hold no
user turn (a training run's), the request of their task."""

from __future__ import annotations

from django.db.models import QuerySet

from webapp.trajectories.models import Trajectory, search_text_of_turns

BATCH = 2000


def search_text_refresh(trajectories: QuerySet[Trajectory]) -> int:
    """Recompute the search text of `trajectories` from their turns and their task's messages, in batches
    (an imported run may hold many); the count updated."""
    updated, batch = 0, []
    rows = trajectories.select_related("task").only("id", "turns", "task__messages").order_by("id")
    for row in rows.iterator(chunk_size=BATCH):
        row.search_text = search_text_of_turns(row.turns, row.task.messages if row.task else None)
        batch.append(row)
        if len(batch) >= BATCH:
            updated += Trajectory.objects.bulk_update(batch, ["search_text"])
            batch = []
    return updated + (Trajectory.objects.bulk_update(batch, ["search_text"]) if batch else 0)
