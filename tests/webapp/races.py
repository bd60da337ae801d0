"""Concurrent contenders for the race tests: one barrier, a thread each, their own connections."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection


def race(count: int, action: Callable[[int], Any]) -> list[Any]:
    """Run `action(i)` in `count` threads released together; each closes its own connection.

    A contender that raised leaves its exception in its slot, so the test can say what it raised.
    """
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def contender(i: int) -> None:
        from django.db import connection as thread_connection

        try:
            barrier.wait()
            results[i] = action(i)
        except Exception as exc:  # noqa: BLE001 - reported by the test that reads the results
            results[i] = exc
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def needs_postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the race needs concurrent writers (PostgreSQL); SQLite serialises every write")
