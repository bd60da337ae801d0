"""The workplace sandbox's data: five tables plus the company directory, copy-on-write.

A `BaseState` is loaded once (from Crucible's generated seed or from a folder of NeMo
Gym CSVs) and never mutated. A `Store` starts by sharing every table of its base and
copies a table (a dict of rows keyed by id) the first time it writes to it, and a row
the moment it changes it: a fresh sandbox costs a few dict references, which is what
makes thousands of verifications per second possible.

Values are kept as NeMo Gym keeps them (`pd.read_csv(dtype=str)`): strings, with
missing cells as None, ids as zero-padded 8-digit strings.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

NEMO_GYM_NOW = "2023-11-30 23:59:00"
"""NeMo Gym's hard-coded current time: sent emails are stamped with it."""


@dataclass(frozen=True)
class TableSchema:
    name: str
    columns: tuple[str, ...]
    id_column: str | None


TABLE_SCHEMAS: dict[str, TableSchema] = {
    s.name: s
    for s in (
        TableSchema(
            "emails",
            ("email_id", "inbox/outbox", "sender/recipient", "subject", "sent_datetime", "body"),
            "email_id",
        ),
        TableSchema(
            "calendar_events",
            ("event_id", "event_name", "participant_email", "event_start", "duration"),
            "event_id",
        ),
        TableSchema(
            "analytics_data",
            ("date_of_visit", "visitor_id", "page_views", "session_duration_seconds",
             "traffic_source", "user_engaged"),
            None,
        ),
        TableSchema(
            "project_tasks",
            ("task_id", "task_name", "assigned_to_email", "list_name", "due_date", "board"),
            "task_id",
        ),
        TableSchema(
            "customer_relationship_manager_data",
            ("customer_id", "assigned_to_email", "customer_name", "customer_email",
             "customer_phone", "last_contact_date", "product_interest", "status",
             "follow_up_by", "notes"),
            "customer_id",
        ),
    )
}
KEYED_TABLES = tuple(name for name, s in TABLE_SCHEMAS.items() if s.id_column)
"""The tables the tools can change, keyed by their id column (analytics data is read-only)."""

PLOTS = "plots"
"""The created plots (file paths): NeMo Gym's analytics state, compared like a table."""

Row = dict[str, Any]


@dataclass(frozen=True, eq=False)
class BaseState:
    """An immutable initial state. `key` names it (the folder or "seed"); caches use identity."""

    key: str
    tables: dict[str, dict[str, Row]]
    analytics: tuple[Row, ...]
    directory: tuple[str, ...]
    now: str = NEMO_GYM_NOW

    def today(self) -> str:
        return self.now[:10]

    def system_prompt(self) -> str:
        """The system message NeMo Gym puts before every workplace request."""
        when = datetime.fromisoformat(self.now)
        return (
            f"Today's date is {when:%A}, {when:%Y-%m-%d} and the current time is "
            f"{when:%H:%M:%S}. Remember the current date and time when answering queries. "
            "Meetings must not start before 9am or end after 6pm."
        )


def build_base_state(
    key: str,
    tables: dict[str, list[Row]],
    *,
    directory: list[str] | None = None,
    now: str = NEMO_GYM_NOW,
) -> BaseState:
    """A BaseState from plain rows; the directory defaults to the company's own addresses."""
    missing = [name for name in TABLE_SCHEMAS if name not in tables]
    if missing:
        raise ValueError(f"workplace state {key!r} lacks table(s) {missing}; all five are needed")
    keyed: dict[str, dict[str, Row]] = {}
    for name in KEYED_TABLES:
        id_column = TABLE_SCHEMAS[name].id_column
        rows = {row[id_column]: row for row in tables[name]}
        if len(rows) != len(tables[name]):
            raise ValueError(f"table {name!r} of {key!r} has duplicate {id_column} values")
        keyed[name] = rows
    datetime.fromisoformat(now)
    return BaseState(
        key=key,
        tables=keyed,
        analytics=tuple(tables["analytics_data"]),
        directory=tuple(directory if directory is not None else derive_directory(keyed)),
        now=now,
    )


def derive_directory(tables: dict[str, dict[str, Row]]) -> list[str]:
    """Employee addresses: every address the company's own tables mention.

    NeMo Gym ships its directory as a separate raw file; a folder of the five CSVs does
    not have it, so the directory is whatever addresses appear as email correspondents,
    meeting participants, task assignees and account owners, at the most common domain.
    """
    addresses: set[str] = set()
    for name, column in (
        ("emails", "sender/recipient"),
        ("calendar_events", "participant_email"),
        ("project_tasks", "assigned_to_email"),
        ("customer_relationship_manager_data", "assigned_to_email"),
    ):
        addresses.update(
            row[column].lower() for row in tables[name].values() if row.get(column)
        )
    domains: dict[str, int] = {}
    for address in addresses:
        domain = address.rpartition("@")[2]
        domains[domain] = domains.get(domain, 0) + 1
    if not domains:
        return []
    company = max(sorted(domains), key=lambda d: domains[d])
    return sorted(a for a in addresses if a.endswith("@" + company))


_CSV_FILES = {name: f"{name}.csv" for name in TABLE_SCHEMAS}
_DIRECTORY_FILE = "email_addresses.csv"


def _read_csv(path: Path, columns: tuple[str, ...]) -> list[Row]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = tuple(reader.fieldnames or ())
        absent = [c for c in columns if c not in header]
        if absent:
            raise ValueError(
                f"{path} lacks column(s) {absent}; NeMo Gym's schema for it is {list(columns)}"
            )
        return [{c: (row[c] if row[c] != "" else None) for c in columns} for row in reader]


def load_state_dir(path: str | Path, *, now: str = NEMO_GYM_NOW) -> BaseState:
    """A BaseState from a folder holding the five CSVs in NeMo Gym's schema.

    An optional `email_addresses.csv` (one address per line, no header, as in NeMo Gym's
    raw data) sets the company directory; without it the directory is derived.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"workplace state folder {folder} does not exist")
    absent = [f for f in _CSV_FILES.values() if not (folder / f).is_file()]
    if absent:
        raise FileNotFoundError(
            f"workplace state folder {folder} lacks {absent}; it needs all of "
            f"{sorted(_CSV_FILES.values())}"
        )
    tables = {
        name: _read_csv(folder / filename, TABLE_SCHEMAS[name].columns)
        for name, filename in _CSV_FILES.items()
    }
    directory = None
    if (folder / _DIRECTORY_FILE).is_file():
        lines = (folder / _DIRECTORY_FILE).read_text(encoding="utf-8").splitlines()
        directory = [line.strip().lower() for line in lines if line.strip()]
    return build_base_state(str(folder.resolve()), tables, directory=directory, now=now)


def write_state_dir(state: BaseState, path: str | Path) -> Path:
    """Write a BaseState as the five NeMo Gym CSVs plus the directory file."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    for name, schema in TABLE_SCHEMAS.items():
        rows = state.analytics if name == "analytics_data" else state.tables[name].values()
        with (folder / _CSV_FILES[name]).open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=schema.columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({c: "" if row.get(c) is None else row[c] for c in schema.columns})
    (folder / _DIRECTORY_FILE).write_text("".join(a + "\n" for a in state.directory), "utf-8")
    return folder


@lru_cache(maxsize=16)
def base_state(state_dir: str | None = None) -> BaseState:
    """The cached BaseState for a folder of CSVs, or Crucible's seed state when None."""
    if state_dir is None:
        from environments.workplace.seed import seed_state

        return seed_state()
    return load_state_dir(state_dir)


class Store:
    """Copy-on-write tables over a BaseState, with a record of what changed.

    touched[table]: ids whose row was written (updated, deleted or created) here.
    generated[table]: ids of rows created here (NeMo Gym gives them max id + 1).
    """

    __slots__ = ("base", "tables", "_owned", "touched", "generated", "plots")

    def __init__(self, base: BaseState) -> None:
        self.base = base
        self.tables: dict[str, dict[str, Row]] = dict(base.tables)
        self._owned: set[str] = set()
        self.touched: dict[str, set[str]] = {name: set() for name in KEYED_TABLES}
        self.generated: dict[str, set[str]] = {name: set() for name in KEYED_TABLES}
        self.plots: list[str] = []

    def _writable(self, table: str) -> dict[str, Row]:
        if table not in self._owned:
            self.tables[table] = dict(self.tables[table])
            self._owned.add(table)
        return self.tables[table]

    def update(self, table: str, row_id: str, values: Row) -> None:
        rows = self._writable(table)
        rows[row_id] = {**rows[row_id], **values}
        self.touched[table].add(row_id)

    def delete(self, table: str, row_id: str) -> None:
        del self._writable(table)[row_id]
        self.touched[table].add(row_id)

    def insert(self, table: str, row: Row) -> str:
        """Add a row under the next id (NeMo Gym: max id + 1, zero-padded to 8 digits)."""
        rows = self._writable(table)
        row_id = next_id(rows)
        row[TABLE_SCHEMAS[table].id_column] = row_id
        rows[row_id] = row
        self.touched[table].add(row_id)
        self.generated[table].add(row_id)
        return row_id

    def is_pristine(self, table: str) -> bool:
        return table not in self._owned

    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-serialisable lists of rows (plus the plots)."""
        data: dict[str, Any] = {name: list(self.tables[name].values()) for name in KEYED_TABLES}
        data["analytics_data"] = list(self.base.analytics)
        data[PLOTS] = list(self.plots)
        return data


def next_id(rows: dict[str, Row]) -> str:
    """NeMo Gym's rule: the largest id (compared as strings) plus one, zero-padded."""
    if not rows:
        return "00000000"
    return str(int(max(rows)) + 1).zfill(8)
