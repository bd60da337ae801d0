"""Database access for test helpers that also run where pytest-django blocks it (a fixture's teardown).

tests/conftest.py hands over pytest-django's blocker at the start of the session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

_blocker = None


def remember_blocker(blocker) -> None:
    global _blocker
    _blocker = blocker


@contextlib.contextmanager
def database_access() -> Iterator[None]:
    """The database, also from a module fixture's teardown (inside a test it is open already)."""
    if _blocker is None:
        yield
        return
    with _blocker.unblock():
        yield
