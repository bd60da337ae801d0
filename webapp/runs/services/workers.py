"""Worker registration: each Celery worker announces itself and heartbeats."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import QuerySet
from django.utils import timezone

from webapp.runs.models import WorkerNode

ALIVE_WITHIN = timedelta(seconds=90)


def worker_register(*, name: str, hostname: str, pid: int, queues: list[str], concurrency: int, gpus: list[dict]) -> WorkerNode:
    now = timezone.now()
    node, _ = WorkerNode.objects.update_or_create(
        name=name,
        defaults={"hostname": hostname, "pid": pid, "queues": queues, "concurrency": concurrency, "gpus": gpus,
                  "started_at": now, "heartbeat_at": now, "stopped_at": None},
    )
    return node


def worker_heartbeat(*, name: str, **announce) -> None:
    """Refresh the heartbeat; re-register (with `announce`) if the row was removed meanwhile."""
    if not WorkerNode.objects.filter(name=name).update(heartbeat_at=timezone.now(), stopped_at=None):
        worker_register(name=name, **announce)


def worker_stopped(*, name: str) -> None:
    WorkerNode.objects.filter(name=name).update(stopped_at=timezone.now())


def workers_alive() -> QuerySet[WorkerNode]:
    return WorkerNode.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=timezone.now() - ALIVE_WITHIN)
