"""End-state comparison with NeMo Gym's semantics, and a readable diff of two end states.

Two sandboxes started from the same base are equal when every table holds the same rows
once strings are lower-cased (except status, list_name and board, where case matters),
and the same plots were created. Rows that existed in the base are matched by id. Rows a
replay created are matched by content (as a multiset, ignoring their ids): generated ids
depend only on creation order, so creating the same two events in the other order is the
same outcome. Read-only calls and call order therefore do not matter, as in NeMo Gym.

Only rows either side wrote are examined, so comparing costs time in proportion to the
calls made, not to the size of the tables.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from environments.workplace.state import KEYED_TABLES, PLOTS, TABLE_SCHEMAS, Row, Store

CASE_SENSITIVE_COLUMNS = frozenset({"status", "list_name", "board"})


def _cell(value: Any, column: str) -> Any:
    if isinstance(value, str) and column not in CASE_SENSITIVE_COLUMNS:
        return value.lower()
    return value


def canonical(row: Row | None, table: str) -> tuple | None:
    """A row as compared: every column but the id, strings lower-cased except a few."""
    if row is None:
        return None
    schema = TABLE_SCHEMAS[table]
    return tuple(
        _cell(row.get(column), column) for column in schema.columns if column != schema.id_column
    )


def _seeded_row(store: Store, table: str, row_id: str) -> Row | None:
    """The row holding a base id, unless the id now belongs to a row created here."""
    if row_id in store.generated[table]:
        return None
    return store.tables[table].get(row_id)


def _generated_rows(store: Store, table: str) -> list[Row]:
    rows = store.tables[table]
    return [rows[i] for i in sorted(store.generated[table]) if i in rows]


@dataclass
class TableChanges:
    """What one replay did to one table, relative to the base."""

    changed_ids: set[str] = field(default_factory=set)
    deleted_ids: set[str] = field(default_factory=set)
    created: int = 0


def changes(store: Store) -> dict[str, TableChanges]:
    """Per table: base rows changed or deleted, and how many rows were created."""
    result: dict[str, TableChanges] = {}
    for table in KEYED_TABLES:
        if store.is_pristine(table):
            continue
        base = store.base.tables[table]
        entry = TableChanges(created=sum(1 for _ in _generated_rows(store, table)))
        for row_id in store.touched[table]:
            if row_id not in base:
                continue
            now = _seeded_row(store, table, row_id)
            if now is None:
                entry.deleted_ids.add(row_id)
                entry.changed_ids.add(row_id)
            elif canonical(now, table) != canonical(base[row_id], table):
                entry.changed_ids.add(row_id)
        if entry.changed_ids or entry.created:
            result[table] = entry
    if store.plots:
        result[PLOTS] = TableChanges(created=len(store.plots))
    return result


def states_equal(predicted: Store, expected: Store) -> bool:
    """NeMo Gym's verdict: the two end states are the same (see the module docstring)."""
    for table in KEYED_TABLES:
        if predicted.tables[table] is expected.tables[table]:
            continue
        for row_id in predicted.touched[table] | expected.touched[table]:
            if canonical(_seeded_row(predicted, table, row_id), table) != canonical(
                _seeded_row(expected, table, row_id), table
            ):
                return False
        if _generated_counter(predicted, table) != _generated_counter(expected, table):
            return False
    return _plot_counter(predicted) == _plot_counter(expected)


def _generated_counter(store: Store, table: str) -> Counter:
    return Counter(canonical(row, table) for row in _generated_rows(store, table))


def _plot_counter(store: Store) -> Counter:
    return Counter(path.lower() for path in store.plots)


def state_diff(predicted: Store, expected: Store) -> dict[str, Any]:
    """How the predicted end state differs from the expected one, per table.

    added: rows only the predicted state has; removed: rows only the expected state has;
    changed: rows both have (same base id) whose compared columns differ, with each
    differing column's expected and predicted value. Empty when the states are equal.
    """
    diff: dict[str, Any] = {}
    for table in KEYED_TABLES:
        if predicted.tables[table] is expected.tables[table]:
            continue
        entry = _table_diff(predicted, expected, table)
        if any(entry.values()):
            diff[table] = entry
    extra = _plot_counter(predicted) - _plot_counter(expected)
    lacking = _plot_counter(expected) - _plot_counter(predicted)
    if extra or lacking:
        diff[PLOTS] = {
            "added": sorted(extra.elements()), "removed": sorted(lacking.elements()), "changed": [],
        }
    return diff


def _table_diff(predicted: Store, expected: Store, table: str) -> dict[str, list]:
    id_column = TABLE_SCHEMAS[table].id_column
    added: list[Row] = []
    removed: list[Row] = []
    changed: list[dict[str, Any]] = []
    for row_id in sorted(predicted.touched[table] | expected.touched[table]):
        mine = _seeded_row(predicted, table, row_id)
        theirs = _seeded_row(expected, table, row_id)
        if canonical(mine, table) == canonical(theirs, table):
            continue
        if theirs is None:
            added.append(dict(mine))
        elif mine is None:
            removed.append(dict(theirs))
        else:
            columns = {
                column: {"expected": theirs.get(column), "predicted": mine.get(column)}
                for column in TABLE_SCHEMAS[table].columns
                if _cell(mine.get(column), column) != _cell(theirs.get(column), column)
            }
            changed.append({id_column: row_id, "columns": columns})
    unmatched = Counter(canonical(r, table) for r in _generated_rows(expected, table))
    for row in _generated_rows(predicted, table):
        key = canonical(row, table)
        if unmatched[key] > 0:
            unmatched[key] -= 1
        else:
            added.append(dict(row))
    for row in _generated_rows(expected, table):
        key = canonical(row, table)
        if unmatched[key] > 0:
            unmatched[key] -= 1
            removed.append(dict(row))
    return {"added": added, "removed": removed, "changed": changed}
