"""Celery signal handlers that keep the WorkerNode table current."""

from __future__ import annotations

import logging
import os
import socket
import threading

from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown

logger = logging.getLogger(__name__)
HEARTBEAT_SECONDS = float(os.environ.get("CRUCIBLE_WORKER_HEARTBEAT_SECONDS", "30"))
_stop = threading.Event()


def detect_gpus() -> list[dict]:
    """GPU model and memory when torch with CUDA is installed; [] otherwise (web-only installs have no torch)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return [
        {"name": torch.cuda.get_device_name(i), "memory_mb": torch.cuda.get_device_properties(i).total_memory // 2**20}
        for i in range(torch.cuda.device_count())
    ]


def worker_gpu_count() -> int:
    """GPUs this worker offers to one job: CRUCIBLE_WORKER_GPUS, else the count CUDA sees."""
    configured = os.environ.get("CRUCIBLE_WORKER_GPUS", "").strip()
    if configured:
        try:
            count = int(configured)
        except ValueError:
            raise ValueError(f"CRUCIBLE_WORKER_GPUS must be a whole number of GPUs, got {configured!r}") from None
        if count < 0:
            raise ValueError(f"CRUCIBLE_WORKER_GPUS must be >= 0, got {count}")
        return count
    return len(detect_gpus())


def capacity_queues(queues: list[str], gpus: int) -> list[str]:
    """The multi-GPU queues a worker with `gpus` GPUs consumes beside `queues` (Q.gpus2 .. Q.gpusG)."""
    from webapp.runs.services.jobs import gpu_queue

    return [gpu_queue(q, n) for q in queues if ".gpus" not in q for n in range(2, gpus + 1)]


@celeryd_after_setup.connect
def _consume_capacity_queues(sender, instance, **_kwargs) -> None:
    """Subscribe to the queues of jobs that need 2..G GPUs, so only workers they fit receive them."""
    queues = instance.app.amqp.queues
    consumed = sorted((queues.consume_from or {}).keys())
    for name in capacity_queues(consumed, worker_gpu_count()):
        queues.select_add(name)


@worker_ready.connect
def _on_worker_ready(sender, **_kwargs) -> None:
    from webapp.runs.services.workers import worker_register

    consumer = sender
    name = consumer.hostname
    queues = sorted((consumer.app.amqp.queues.consume_from or {}).keys())
    announce = {"hostname": socket.gethostname(), "pid": os.getpid(), "queues": queues,
                "concurrency": int(consumer.pool.limit or 1) if consumer.pool else 1, "gpus": detect_gpus()}
    try:
        worker_register(name=name, **announce)
    except Exception:  # registration is for display; never stop a worker over it
        logger.exception("could not register worker %s", name)
    threading.Thread(target=_heartbeat_loop, args=(name, announce), name="worker-heartbeat", daemon=True).start()


def _heartbeat_loop(name: str, announce: dict) -> None:
    from django.db import connection

    from webapp.runs.services.workers import worker_heartbeat

    while not _stop.wait(HEARTBEAT_SECONDS):
        try:
            worker_heartbeat(name=name, **announce)
        except Exception:
            logger.exception("worker heartbeat failed")
        finally:
            connection.close()


@worker_shutdown.connect
def _on_worker_shutdown(sender=None, **_kwargs) -> None:
    from webapp.runs.services.workers import worker_stopped

    _stop.set()
    if sender is not None:
        try:
            worker_stopped(name=sender.hostname)
        except Exception:
            logger.exception("could not mark worker stopped")
