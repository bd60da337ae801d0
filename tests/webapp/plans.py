"""PostgreSQL's plan of a query a page runs, for the tests that hold a page to its index."""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection
from django.test.utils import CaptureQueriesContext


def plan_without_sort(read: Callable[[], object], query_marker: str) -> str:
    """EXPLAIN of the one query `read()` runs that contains `query_marker`, planned with sorting and
    sequential scans turned off: a query that an index serves in order shows that index and no Sort
    node; one that none serves shows a Sort node (the planner can only penalise it, not avoid it)."""
    with CaptureQueriesContext(connection) as queries:
        read()
    (sql,) = [q["sql"] for q in queries.captured_queries if query_marker in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())
