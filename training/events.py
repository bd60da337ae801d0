"""The event log of a training process: RUN_DIR/events.jsonl, one JSON object per line.

The training process appends; the worker tails the file and ingests events into the
database in batches (DESIGN.md, "The training process contract"). Both sides live here
so that the format has one definition.

Every event carries:
  type     metric | trajectory | checkpoint | progress | log | done | error
  seq      1, 2, 3, ... in file order; a restarted process continues after the last one,
           so (run, seq) is a unique key and re-ingesting a line changes nothing
  time     Unix time in seconds (float)
  attempt  the job attempt that wrote it, when the writer was told (workers fence on it)
and, by type (fields marked ? are optional; any other keys pass through unchanged):
  metric      step, split, metrics {name: number | null}   -- one event per (step, split)
              holding every metric of that step; NaN and infinities become null because
              JSON has no spelling for them
  trajectory  task_id, turns, reward (null: verifier error), passed, step?, split?,
              sample_index?, group_id?, components?, failure_bucket?, flags?, tokens_in?,
              tokens_out?, latency_ms?, advantage?, truncated?
  checkpoint  step, path, kind (adapter | full), content_hash, metrics?
  progress    step, total, fraction
  log         message, level? (debug | info | warning | error)
  done        anything the job wants to summarise (e.g. step, metrics)
  error       message, traceback?

Writes are line-atomic: each event is one write() of the complete line to a file opened
with O_APPEND, so a reader sees whole lines or, at a crash, one torn last line; the
reader leaves a line without its newline for the next read, and a restarted writer cuts
such a torn tail off before appending.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

EVENTS_FILE = "events.jsonl"
EVENT_TYPES = ("metric", "trajectory", "checkpoint", "progress", "log", "done", "error")
LOG_LEVELS = ("debug", "info", "warning", "error")
CHECKPOINT_KINDS = ("adapter", "full")


class EventError(ValueError):
    """An event that does not follow the format, or an event file that cannot be read."""


# ---------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------

_INT = "integer"
_NUMBER = "number"
_STRING = "string"
_BOOL = "boolean"
_OBJECT = "object"
_ARRAY = "array"
_NULL = "null"

_ENVELOPE = {"type": (_STRING,), "seq": (_INT,), "time": (_NUMBER,)}
_ENVELOPE_OPTIONAL = {"attempt": (_INT, _NULL)}

# type -> (required fields, optional fields); each field lists the JSON types it accepts.
_FIELDS: dict[str, tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]] = {
    "metric": ({"step": (_INT,), "split": (_STRING,), "metrics": (_OBJECT,)}, {}),
    "trajectory": (
        {
            "task_id": (_STRING,),
            "turns": (_ARRAY,),
            "reward": (_NUMBER, _NULL),
            "passed": (_BOOL, _NULL),
        },
        {
            "step": (_INT, _NULL),
            "split": (_STRING,),
            "sample_index": (_INT,),
            "group_id": (_STRING, _INT, _NULL),
            "components": (_OBJECT,),
            "failure_bucket": (_STRING, _NULL),
            "flags": (_ARRAY,),
            "tokens_in": (_INT,),
            "tokens_out": (_INT,),
            "latency_ms": (_NUMBER,),
            "advantage": (_NUMBER, _NULL),
            "truncated": (_BOOL,),
        },
    ),
    "checkpoint": (
        {"step": (_INT,), "path": (_STRING,), "kind": (_STRING,), "content_hash": (_STRING,)},
        {"metrics": (_OBJECT,)},
    ),
    "progress": (
        {"step": (_INT,), "total": (_INT,), "fraction": (_NUMBER,)},
        {},
    ),
    "log": ({"message": (_STRING,)}, {"level": (_STRING,)}),
    "done": ({}, {"step": (_INT, _NULL), "metrics": (_OBJECT,)}),
    "error": ({"message": (_STRING,)}, {"traceback": (_STRING, _NULL)}),
}


def _json_type(value: Any) -> str:
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _INT
    if isinstance(value, float):
        return _NUMBER
    if isinstance(value, str):
        return _STRING
    if isinstance(value, Mapping):
        return _OBJECT
    if isinstance(value, list | tuple):
        return _ARRAY
    return type(value).__name__


def _check_field(kind: str, name: str, value: Any, accepted: tuple[str, ...]) -> None:
    actual = _json_type(value)
    if actual in accepted or (actual == _INT and _NUMBER in accepted):
        return
    raise EventError(
        f"{kind} event field '{name}' must be {' or '.join(accepted)}, got {actual} {value!r:.80}"
    )


def _check_values(event: dict[str, Any]) -> None:
    """Constraints beyond types: enumerations and metric values."""
    kind = event["type"]
    if kind == "checkpoint" and event["kind"] not in CHECKPOINT_KINDS:
        raise EventError(
            f"checkpoint event 'kind' must be one of {CHECKPOINT_KINDS}, got {event['kind']!r}"
        )
    if kind == "log" and event.get("level", "info") not in LOG_LEVELS:
        raise EventError(f"log event 'level' must be one of {LOG_LEVELS}, got {event['level']!r}")
    if kind == "metric":
        for name, value in event["metrics"].items():
            if not isinstance(name, str):
                raise EventError(f"metric names must be strings, got {name!r}")
            _check_field("metric", f"metrics.{name}", value, (_NUMBER, _NULL))


def validate_event(event: Mapping[str, Any]) -> None:
    """Raise EventError, naming the field, unless `event` follows the format above."""
    if not isinstance(event, Mapping):
        raise EventError(f"an event must be a JSON object, got {type(event).__name__}")
    kind = event.get("type")
    if kind not in EVENT_TYPES:
        raise EventError(f"unknown event type {kind!r}; expected one of {', '.join(EVENT_TYPES)}")
    required, optional = _FIELDS[kind]
    for name, accepted in {**_ENVELOPE, **required}.items():
        if name not in event:
            raise EventError(f"{kind} event is missing the field '{name}'")
        _check_field(kind, name, event[name], accepted)
    for name, accepted in {**_ENVELOPE_OPTIONAL, **optional}.items():
        if name in event:
            _check_field(kind, name, event[name], accepted)
    _check_values(dict(event))


# ---------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------


def _finite_or_none(value: float | int | None) -> float | int | None:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _recover_tail(path: Path) -> int:
    """Cut a torn last line (a crash mid-write) off `path` and return the last seq (0: none).

    Reads backwards from the end, so reopening a large event file costs one block.
    """
    if not path.exists():
        return 0
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        buffer, position = b"", size
        while position > 0:
            chunk = min(65536, position)
            position -= chunk
            f.seek(position)
            buffer = f.read(chunk) + buffer
            last_newline = buffer.rfind(b"\n")
            if last_newline == -1:
                continue
            line_start = buffer.rfind(b"\n", 0, last_newline) + 1
            if line_start == 0 and position > 0:
                continue  # the last complete line starts further back
            f.truncate(position + last_newline + 1)
            try:
                return int(json.loads(buffer[line_start:last_newline])["seq"])
            except (ValueError, KeyError, TypeError) as exc:
                raise EventError(
                    f"{path}: the last complete line is not an event ({exc}); move the file "
                    "aside to start a new event log"
                ) from exc
        f.truncate(0)  # nothing but one torn line
        return 0


class EventWriter:
    """Appends validated events to RUN_DIR/events.jsonl, continuing the seq of a previous run.

    One writer per run directory at a time (the job's current attempt); `fsync=True`
    makes every event durable before `emit` returns, at the price of a disk flush each.
    Safe to share between threads.
    """

    def __init__(
        self, run_dir: str | os.PathLike[str], *, attempt: int | None = None, fsync: bool = False
    ) -> None:
        self.path = Path(run_dir) / EVENTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.attempt = attempt
        self.fsync = fsync
        self.last_seq = _recover_tail(self.path)
        self._lock = threading.Lock()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(self, type_: str, **fields: Any) -> dict[str, Any]:
        """Validate and append one event; return it as written (with seq and time)."""
        with self._lock:
            event: dict[str, Any] = {"type": type_, "seq": self.last_seq + 1, "time": time.time()}
            if self.attempt is not None:
                event["attempt"] = self.attempt
            event.update(fields)
            validate_event(event)
            try:
                line = json.dumps(event, allow_nan=False, separators=(",", ":")) + "\n"
            except (TypeError, ValueError) as exc:
                raise EventError(f"{type_} event is not plain JSON: {exc}") from exc
            self._write_line(line.encode("utf-8"))
            self.last_seq += 1
        return event

    def _write_line(self, data: bytes) -> None:
        written = os.write(self._fd, data)
        while written < len(data):  # only on a full disk or a signal; finish the line
            written += os.write(self._fd, data[written:])
        if self.fsync:
            os.fsync(self._fd)

    def metric(
        self, step: int, metrics: Mapping[str, float | int | None], *, split: str = "train"
    ) -> dict[str, Any]:
        """All metrics of one step and split, e.g. metric(3, {"reward": 0.4}, split="train")."""
        return self.emit(
            "metric",
            step=step,
            split=split,
            metrics={name: _finite_or_none(value) for name, value in metrics.items()},
        )

    def trajectory(self, **fields: Any) -> dict[str, Any]:
        return self.emit("trajectory", **fields)

    def checkpoint(
        self,
        *,
        step: int,
        path: str,
        kind: str,
        content_hash: str,
        metrics: Mapping[str, float | int | None] | None = None,
    ) -> dict[str, Any]:
        extra = (
            {}
            if metrics is None
            else {"metrics": {k: _finite_or_none(v) for k, v in metrics.items()}}
        )
        return self.emit(
            "checkpoint", step=step, path=path, kind=kind, content_hash=content_hash, **extra
        )

    def progress(self, step: int, total: int, fraction: float | None = None) -> dict[str, Any]:
        """How far the job is: step of total, and the fraction of its work done (default step /
        total; a training job passes one that counts its evaluations too, training/runner.py)."""
        if fraction is None:
            fraction = step / total if total else 0.0
        return self.emit("progress", step=step, total=total, fraction=min(1.0, max(0.0, float(fraction))))

    def log(self, message: str, level: str = "info") -> dict[str, Any]:
        return self.emit("log", message=message, level=level)

    def done(self, **fields: Any) -> dict[str, Any]:
        return self.emit("done", **fields)

    def error(self, message: str, **fields: Any) -> dict[str, Any]:
        return self.emit("error", message=message, **fields)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class SilentEventWriter(EventWriter):
    """The event writer of a data-parallel rank other than 0: validates, writes nothing.

    Rank 0 owns RUN_DIR/events.jsonl (one writer per run directory); the other ranks run
    the same loop, and their events are checked as rank 0's are, so a bad event fails on
    every rank alike, but only rank 0's reach the file.
    """

    def __init__(self, *, attempt: int | None = None) -> None:  # noqa: D107 - no file, no super()
        self.attempt = attempt
        self.fsync = False
        self.last_seq = 0
        self._lock = threading.Lock()
        self._fd = -1

    def _write_line(self, data: bytes) -> None:
        return None


# ---------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------


def read_events(
    path: str | os.PathLike[str], from_offset: int = 0, max_bytes: int | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Complete events from byte `from_offset` on, and the offset to read from next time.

    A last line without its newline is still being written: it is not returned and the
    new offset stays before it. A missing file (the process has not started yet) reads
    as no events. `max_bytes` bounds one read for batch ingestion; a single line longer
    than that is still read whole.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below; a missing file is not an error
    except FileNotFoundError:
        return [], from_offset
    with f:
        f.seek(from_offset)
        data = f.read() if max_bytes is None else f.read(max_bytes)
        if max_bytes is not None and data and b"\n" not in data:
            data += f.readline()
    end = data.rfind(b"\n") + 1
    events = []
    offset = from_offset
    for line in data[:end].split(b"\n")[:-1]:
        try:
            events.append(json.loads(line))
        except ValueError as exc:
            raise EventError(f"{path}: the line at byte {offset} is not JSON ({exc})") from exc
        offset += len(line) + 1
    return events, from_offset + end
