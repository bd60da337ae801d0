"""Keyset pagination: every row exactly once, in order, whatever the sort; foreign cursors refused."""

from __future__ import annotations

import base64
import json

import pytest

from webapp.common.pagination import CursorError, keyset_page
from webapp.runs.models import Run


@pytest.fixture
def runs(project_team):
    project = project_team["project"]
    kinds = ["grpo", "sft", "eval"]
    return [Run.objects.create(project=project, name=f"run {i % 4}", kind=kinds[i % 3]) for i in range(23)]


def _walk(queryset, ordering, limit):
    seen, cursor = [], None
    while True:
        page = keyset_page(queryset, ordering=ordering, after=cursor, limit=limit)
        seen.extend(page.items)
        if not page.has_next:
            return seen
        cursor = page.next_cursor


@pytest.mark.parametrize("ordering", [["-id"], ["id"], ["name"], ["-name"], ["kind", "-name"], ["-created_at"]])
def test_walking_the_pages_yields_every_row_once_in_order(runs, ordering):
    everything = Run.objects.all()
    walked = _walk(everything, ordering, limit=5)
    expected = list(everything.order_by(*ordering, "-id" if ordering[0].startswith("-") else "id"))
    assert [r.pk for r in walked] == [r.pk for r in expected]
    assert len(walked) == 23


def test_a_cursor_of_another_ordering_or_garbage_is_refused(runs):
    page = keyset_page(Run.objects.all(), ordering=["name"], after=None, limit=5)
    with pytest.raises(CursorError, match="another sort order"):
        keyset_page(Run.objects.all(), ordering=["-name"], after=page.next_cursor, limit=5)
    for junk in ("!!!", "e30", "bm90IGpzb24"):
        with pytest.raises(CursorError):
            keyset_page(Run.objects.all(), ordering=["name"], after=junk, limit=5)


def test_the_last_page_has_no_cursor_and_limits_are_clamped(runs):
    page = keyset_page(Run.objects.all(), ordering=["-id"], after=None, limit=10**9)
    assert len(page.items) == 23 and page.next_cursor is None
    assert len(keyset_page(Run.objects.all(), ordering=["-id"], after=None, limit=0).items) == 1


def _forged(ordering: list[str], values: list) -> str:
    return base64.urlsafe_b64encode(json.dumps({"o": ordering, "v": values}).encode()).decode().rstrip("=")


@pytest.mark.parametrize(("ordering", "values"), [
    (["-created_at", "-id"], ["2020", 1]),  # not a date
    (["name", "id"], ["run 1", {"a": 1}]),  # not an id
    (["name", "id"], ["run 1", "seven"]),
    (["name", "id"], ["run 1", 10**30]),  # past bigint: PostgreSQL would refuse it only when the query runs
    (["name", "id"], ["run \u0000 1", 3]),  # PostgreSQL text holds no NUL
    (["-id"], [1.5e400]),
])
def test_a_cursor_of_the_right_ordering_with_values_of_the_wrong_kind_is_refused(runs, ordering, values):
    """A cursor made by hand (the ordering copied, the values not this list's) is refused, not a server error."""
    with pytest.raises(CursorError, match="not one this list gave out"):
        keyset_page(Run.objects.all(), ordering=ordering[:-1] or ordering, after=_forged(ordering, values), limit=5)
