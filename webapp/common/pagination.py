"""Keyset pagination for every list, pages and API alike: `?after=<cursor>`, never OFFSET.

OFFSET makes the database walk past every skipped row, so page 1,000 of a million
trajectories costs a thousand pages. A keyset cursor holds the sort values of the last
row shown, and the next page starts strictly after it, which an index answers directly.

The cursor is opaque to clients (URL-safe base64 of JSON) and carries the ordering it
was made for, so a cursor from one sort is refused under another instead of skipping
rows. Sort fields must be non-null; the primary key is always the last tie-breaker.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

MAX_PAGE = 500
_NOT_OURS = "The `after` cursor is not one this list gave out; start again from the first page."


class CursorError(ValueError):
    """A cursor that was not made by this list or this ordering."""


@dataclass(frozen=True)
class Page:
    items: list
    next_cursor: str | None

    @property
    def has_next(self) -> bool:
        return self.next_cursor is not None


def _ordering_with_pk(ordering: list[str]) -> list[str]:
    fields = [f for f in ordering if f.lstrip("-") not in ("id", "pk")]
    last = next((f for f in ordering if f.lstrip("-") in ("id", "pk")), None)
    descending = (last or ordering[0] if ordering else "-id").startswith("-")
    return [*fields, "-id" if descending else "id"]


def _plain(value: Any) -> Any:
    return {"dt": value.isoformat()} if isinstance(value, datetime) else value


def _restore(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"dt"}:
        return datetime.fromisoformat(value["dt"])
    return value


def encode_cursor(ordering: list[str], row: Any) -> str:
    values = [_plain(getattr(row, field.lstrip("-"))) for field in ordering]
    raw = json.dumps({"o": ordering, "v": values}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, ordering: list[str]) -> list[Any]:
    """The sort values in `cursor`, or CursorError when it is not a cursor of this ordering."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        values = data["v"]
        if data["o"] != ordering or not isinstance(values, list) or len(values) != len(ordering):
            raise CursorError("The cursor belongs to another sort order; start again from the first page.")
        return [_restore(v) for v in values]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        if isinstance(exc, CursorError):
            raise
        raise CursorError(_NOT_OURS) from None


def _after(ordering: list[str], values: list[Any]) -> Q:
    """Rows strictly after `values` in `ordering`: (a > x) or (a = x and b > y) or ..."""
    condition = Q()
    for i, field in enumerate(ordering):
        name = field.lstrip("-")
        step = Q(**{f"{name}__{'lt' if field.startswith('-') else 'gt'}": values[i]})
        for earlier, value in zip(ordering[:i], values[:i], strict=True):
            step &= Q(**{earlier.lstrip("-"): value})
        condition |= step
    return condition


def _rows_after(rows: QuerySet, ordering: list[str], values: list[Any]) -> QuerySet:
    """rows after the cursor's values; CursorError when a value cannot be one of its field's (a cursor
    of the right ordering made by hand: text for a number, a date that is not one, an id past bigint).

    Django checks each value as it builds the filter; what PostgreSQL would only refuse when the
    query runs (an integer past bigint, text with a NUL) is checked here.
    """
    try:
        filtered = rows.filter(_after(ordering, values))
    except (ValueError, TypeError, ValidationError, OverflowError):
        raise CursorError(_NOT_OURS) from None
    if any(_out_of_database_range(v) for v in values):
        raise CursorError(_NOT_OURS)
    return filtered


def _out_of_database_range(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not -2**63 <= value < 2**63
    return isinstance(value, str) and "\x00" in value


def keyset_page(queryset: QuerySet, *, ordering: list[str], after: str | None, limit: int) -> Page:
    """One page of `queryset` in `ordering` (the primary key appended), starting after the cursor."""
    ordering = _ordering_with_pk(ordering)
    limit = max(1, min(limit, MAX_PAGE))
    rows = queryset.order_by(*ordering)
    if after:
        rows = _rows_after(rows, ordering, decode_cursor(after, ordering))
    items = list(rows[: limit + 1])
    more = len(items) > limit
    items = items[:limit]
    return Page(items=items, next_cursor=encode_cursor(ordering, items[-1]) if more and items else None)
