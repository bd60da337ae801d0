"""What deleting rows in bulk shares (a run, a dataset version): the refusal and the set-wise DELETE.

A deletion that can reach a million rows never goes through Django's collector, which loads every
row it cascades to in Python; it is a sequence of `DELETE ... WHERE` statements in foreign-key
order inside one transaction, and the database's own (deferred) foreign keys refuse the commit if
a reference was missed, so nothing is ever half deleted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from django.contrib.auth import get_user_model
from django.db import router
from django.db.models import QuerySet


class DeleteRefused(ValueError):
    """The row cannot be deleted (now, or by this person); the message says why and what to do.

    `status` is the HTTP status a page or the API answers with: 409 when something keeps the row,
    422 when the confirmation typed was not the one asked for.
    """

    def __init__(self, message: str, *, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


@dataclass(kw_only=True)
class DeletionReport:
    """What a deletion job removed (rows by statement, seconds by statement and for the commit), kept in the
    job's payload["result"]; `already_gone`: an earlier attempt had committed, nothing was left to remove."""

    removed: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    already_gone: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(kw_only=True)
class FilesDeletionReport(DeletionReport):
    """A deletion of runs: which runs went, and what their folders freed on disk (or could not remove)."""

    runs: list[dict] = field(default_factory=list)
    freed_bytes: int = 0
    folder_errors: list[str] = field(default_factory=list)


def raw_delete(rows: QuerySet) -> int:
    """One DELETE ... WHERE statement for `rows`, without Django's collector; the caller has removed or
    unlinked whatever points at them already. Returns the number of rows deleted."""
    return rows._raw_delete(router.db_for_write(rows.model)) or 0


Statement = Callable[[], int]


def run_statements(steps: list[tuple[str, Statement]], *, check: Callable[[], None],
                   progress: Callable[[str, float], None]) -> tuple[dict[str, int], dict[str, float]]:
    """Run (name, statement) pairs in order inside the caller's transaction: `check` before each (a cancelled or
    stale attempt raises there and the transaction rolls back), `progress` after each with the share done (the
    last share is left for what follows the commit). Returns the rows each removed and its seconds."""
    removed: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for done, (name, statement) in enumerate(steps):
        check()
        started = time.perf_counter()
        removed[name] = statement()
        seconds[name] = round(time.perf_counter() - started, 3)
        progress(name, (done + 1) / (len(steps) + 1))
    return removed, seconds


def actor_of(actor_id: object):
    """The user a job's payload names (who asked for the deletion), or None when gone or never named."""
    return get_user_model().objects.filter(pk=actor_id).first() if isinstance(actor_id, int) else None
