"""Celery signal handlers that keep the WorkerNode table current."""

from __future__ import annotations

import logging
import os
import socket
import threading

from celery.signals import worker_ready, worker_shutdown

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
