"""Importing a run trained elsewhere: a `python -m training run` folder into a project.

A team that trains on its own cluster by hand still gets the dashboards: `run_import` reads
RUN_DIR (events.jsonl, the run's config, its checkpoints' COMPLETE markers), creates a run
marked as imported (Run.import_key) and feeds every event through the same EventIngestor
the workers use, in batches. `run_import_zip` does the same for a zip of such a folder
(the upload page and the API), extracting only what the import reads, safely, into a
temporary folder under the data directory.

Identity and idempotency: the run is keyed by the folder's identity, sha256 of its first
event line (which holds the first event's seq and time to the microsecond, so two runs never
share it; the config is left out because where it is found varies: a zip may leave out the
checkpoint folders that hold it). Importing the same folder again, as a folder or as a zip,
finds that run, and the ingestor's natural keys skip every row that is already stored, so a
second import changes nothing and its report says so. A folder that grew meanwhile (the run
went on) adds only what is new.

Restarts: a run folder written by a resumed process holds the first process's events after
the resumed checkpoint and the second process's events for the same steps. Each process
starts with the log line "<kind> job on <device>" and, when it resumes, logs "resuming from
checkpoint step_N at step N"; events of an earlier process that a later one wrote again
(after its resume step, or all of them when it started from scratch) are skipped as
superseded, as the worker's `discard_superseded_rows` does for attempts.

All or nothing: the whole import is one transaction. An import that fails half way, or whose
request is killed (gunicorn's worker timeout raises SystemExit in the request; a killed process
drops its database connection), leaves no run row and no metric point, and importing the folder
again does the whole work. (Runs left incomplete by imports before this rule are found by their
folder's identity and completed the same way.) A folder without a single valid event creates
nothing.

Numbers: NaN, Infinity and numbers beyond a double's range are not JSON and the event writer
never writes them (it writes null). A line holding one anywhere (a metric, a trajectory's
components or flags, a checkpoint's metrics) is skipped as "bad values" with its line and the
path to the number, the rule the dataset import shares (webapp.common.strict_json); a config
holding one is reported and not used.

Damaged zips (a wrong CRC, a size header that lies, a truncated member) are refused with a
RunImportError that says the archive is damaged; the extraction folder is removed either way,
and folders left by a killed import are swept on the next one.

Big uploads off the request: an upload over `inline_max_bytes()` (the page automatically, the API
also on ?background=1) is kept in the data directory's imports area and imported by a "run_import"
job on the default queue (`run_import_enqueue`, then `run_import_archive` in the worker), so no
web timeout can stop it; the import itself is the same one transaction, so a killed job leaves
nothing and its re-run (the reaper re-queues it, or Retry) does the whole work. The report is
kept in the job's payload for its page.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from training.checkpoints import CHECKPOINTS_DIR, COMPLETE_MARKER, read_checkpoint
from training.events import EVENTS_FILE, EventError, validate_event
from webapp.common import strict_json
from webapp.datasets.models import TaskDataset
from webapp.projects.models import Project
from webapp.runs.models import Checkpoint, MetricPoint, ModelSpec, Run, RunKind, RunStatus
from webapp.runs.services.headlines import borrowers_headlines_refresh
from webapp.runs.services.ingest import EventIngestor
from webapp.runs.services.run_config import resolved_run_config, run_config_problems
from webapp.verifiers.models import VerifierVersion

__all__ = ["IMPORT_JOB_KIND", "ImportReport", "RunImportError", "UploadLimitHandler", "declared_too_large",
           "inline_max_bytes", "job_error_text", "report_from_dict", "run_import", "run_import_archive", "run_import_enqueue",
           "run_import_zip", "too_large_message"]

# Where the run's config may sit: the worker writes run.json; by hand people name it as they
# like, and every checkpoint folder holds the resolved config as run_config.json.
CONFIG_FILES = ("run.json", "run_config.json", "config.json")
CHECKPOINT_CONFIG = "run_config.json"
MAX_CONFIG_BYTES = 1024 * 1024
MAX_LINE_BYTES = 64 * 1024 * 1024
BATCH_EVENTS = 2000
BATCH_BYTES = 8 * 1024 * 1024
MAX_LISTED_SKIPS = 200
MAX_LISTED_CHECKPOINTS = 500
LOG_TAIL = 20
TEXT_LIMIT = 4000

# Uploads: the zip itself, what is extracted from it, and its shape. An upload is imported
# within its request (about 3 MB of events a second on PostgreSQL, 1 on SQLite), so these stay
# well inside a proxy's read timeout; larger runs go through `manage.py import_run`.
MAX_UPLOAD_BYTES = int(getattr(settings, "CRUCIBLE_RUN_IMPORT_MAX_UPLOAD_BYTES", 100 * 1024 ** 2))
MAX_EXTRACTED_BYTES = int(getattr(settings, "CRUCIBLE_RUN_IMPORT_MAX_EXTRACTED_BYTES", 1024 ** 3))
MAX_ZIP_ENTRIES = 100_000
NAME_LIMIT = 200  # Run.name
SCRATCH_KEEP_SECONDS = 24 * 3600  # extraction folders older than this were left by a killed import
MAX_COMPRESSION_RATIO = 200
"""A zip entry that inflates more than this (beyond its first megabyte) is treated as a zip bomb."""

INT32_MAX = 2**31 - 1
MAX_UNIX_TIME = 253402300800  # 10000-01-01
_START = re.compile(r"^(eval|sft|grpo|dpo) job on ")
_RESUME = re.compile(r"^resuming from checkpoint \S+ at step (\d+)\b")
_STEP_DIR = re.compile(r"^step_\d+$")
STORED_TYPES = ("metric", "trajectory", "checkpoint")


class RunImportError(ValueError):
    """The folder or zip cannot be imported; the message says what is wrong and what to do."""


# ---------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------


@dataclass
class SkippedLine:
    line: int
    reason: str


@dataclass
class CheckpointSeen:
    step: int
    storage_uri: str
    exists: bool
    metrics: int


@dataclass
class ImportReport:
    """What an import read, stored and skipped; `as_dict` for the API, `lines` for the command."""

    run_id: int | None = None
    run_name: str = ""
    created: bool = False
    kind: str = ""
    status: str = ""
    source: str = ""
    config_source: str = ""
    config_problems: list[str] = field(default_factory=list)
    lines: int = 0
    events: dict[str, int] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STORED_TYPES, 0))
    already_present: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STORED_TYPES, 0))
    superseded: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STORED_TYPES, 0))
    null_metric_values: int = 0
    restarts: int = 0
    skipped: list[SkippedLine] = field(default_factory=list)
    skipped_total: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    checkpoints: list[CheckpointSeen] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def nothing_new(self) -> bool:
        """Everything in the folder was already there (a second import of the same folder)."""
        return not self.created and not any(self.stored.values())

    @property
    def events_total(self) -> int:
        return sum(self.events.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "run_name": self.run_name, "created": self.created,
            "nothing_new": self.nothing_new, "kind": self.kind, "status": self.status, "source": self.source,
            "config_source": self.config_source, "config_problems": self.config_problems, "lines": self.lines,
            "events": self.events, "stored": self.stored, "already_present": self.already_present,
            "superseded": self.superseded, "null_metric_values": self.null_metric_values,
            "restarts": self.restarts,
            "skipped": [{"line": s.line, "reason": s.reason} for s in self.skipped],
            "skipped_total": self.skipped_total, "skipped_by_reason": self.skipped_by_reason,
            "checkpoints": [{"step": c.step, "storage_uri": c.storage_uri, "exists": c.exists, "metrics": c.metrics}
                            for c in self.checkpoints],
            "warnings": self.warnings, "error": self.error,
        }

    @classmethod
    def from_dict(cls, held: dict[str, Any]) -> ImportReport:
        """A report back from `as_dict` (kept in a session or a job's payload)."""
        known = {f.name for f in fields(cls)}
        data = {key: value for key, value in held.items() if key in known}
        data["skipped"] = [SkippedLine(**line) for line in data.get("skipped", [])]
        data["checkpoints"] = [CheckpointSeen(**seen) for seen in data.get("checkpoints", [])]
        return cls(**data)

    def lines_text(self) -> list[str]:
        """The report as plain lines (the import_run command prints them)."""
        head = "new run" if self.created else ("already imported: nothing new" if self.nothing_new
                                               else "already imported: added what was new")
        out = [f"Run #{self.run_id} {self.run_name!r} ({self.kind}, {self.status}): {head}",
               f"Source: {self.source}"]
        if self.config_source:
            out.append(f"Config: {self.config_source}" + ("" if self.config_problems else " (valid)"))
        else:
            out.append("Config: none found in the folder")
        out += [f"  config problem: {p}" for p in self.config_problems]
        read = ", ".join(f"{k} {v}" for k, v in sorted(self.events.items()))
        out.append(f"Lines: {self.lines}; events read: {self.events_total} ({read or 'none'})")
        names = {"metric": "metric points", "trajectory": "trajectories", "checkpoint": "checkpoints"}
        out.append("Stored: " + ", ".join(f"{names[k]} {self.stored[k]}" for k in STORED_TYPES))
        out.append("Already present (skipped): " + ", ".join(f"{names[k]} {self.already_present[k]}"
                                                           for k in STORED_TYPES))
        if any(self.superseded.values()):
            out.append(f"Superseded by a restarted process ({self.restarts} restart"
                       f"{'s' if self.restarts != 1 else ''}): "
                       + ", ".join(f"{k} events {self.superseded[k]}" for k in STORED_TYPES))
        if self.null_metric_values:
            out.append(f"Metric values without a number (NaN or infinite, written as null): "
                       f"{self.null_metric_values}, not stored")
        for c in self.checkpoints:
            out.append(f"Checkpoint step {c.step}: {c.storage_uri} "
                       f"({'exists' if c.exists else 'not found on this machine'}; {c.metrics} metrics)")
        if self.skipped_total:
            out.append(f"Skipped lines: {self.skipped_total}")
            out += [f"  line {s.line}: {s.reason}" for s in self.skipped]
            if self.skipped_total > len(self.skipped):
                out.append(f"  … and {self.skipped_total - len(self.skipped)} more")
        else:
            out.append("Skipped lines: none")
        out += [f"Warning: {w}" for w in self.warnings]
        if self.error:
            out.append(f"The run's error: {self.error}")
        return out


Progress = Callable[[int, int], None]
"""Called with (bytes read, total bytes) after every batch."""


# ---------------------------------------------------------------------------------------
# Reading the folder
# ---------------------------------------------------------------------------------------


@dataclass
class _Line:
    number: int
    raw: bytes | None  # None: longer than MAX_LINE_BYTES (not kept)
    length: int
    complete: bool  # ends with a newline


def _read_lines(path: Path) -> Iterator[_Line]:
    with open(path, "rb") as f:
        number = 0
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                length = len(raw)
                while True:  # skip the rest of an over-long line without holding it
                    chunk = f.readline(1 << 20)
                    length += len(chunk)
                    if not chunk or chunk.endswith(b"\n"):
                        break
                yield _Line(number, None, length, True)
                continue
            yield _Line(number, raw, len(raw), raw.endswith(b"\n"))


def _parse(raw: bytes) -> Any:
    """One event line; NonFiniteNumber (a ValueError naming the field) for NaN, Infinity and 1e400."""
    return strict_json.loads(raw)


@dataclass
class _Segment:
    """The events of one training process (a restart begins the next)."""

    first_line: int
    lines: int = 0
    resume_step: int | None = None
    terminal: tuple[str, str, float] | None = None  # (done | error, message, time)


@dataclass
class _Scan:
    first_line: bytes | None = None
    segments: list[_Segment] = field(default_factory=lambda: [_Segment(first_line=1)])
    kind_from_log: str = ""

    def thresholds(self) -> list[float | None]:
        """Per segment: events with a step above this were written again by a later process (None: none)."""
        out: list[float | None] = []
        for i in range(len(self.segments)):
            later = [-math.inf if s.resume_step is None else s.resume_step for s in self.segments[i + 1:]]
            out.append(min(later) if later else None)
        return out


def _scan(path: Path) -> _Scan:
    """First pass, cheap: the first line (identity), process restarts, and how each ended.

    Only lines that may be log, done or error events are parsed here.
    """
    scan = _Scan()
    for line in _read_lines(path):
        if line.raw is None or not line.raw.strip():
            continue
        if scan.first_line is None:
            scan.first_line = line.raw.strip()
        current = scan.segments[-1]
        if b'"log"' in line.raw or b'"done"' in line.raw or b'"error"' in line.raw:
            try:
                event = _parse(line.raw)
                validate_event(event)
            except (ValueError, RecursionError):
                event = None
            if event is not None and _storable_problem(event, line.raw) is not None:
                event = None  # skipped in the second pass too
            if event is not None and event["type"] == "log":
                message = event["message"]
                start = _START.match(message)
                if start:
                    scan.kind_from_log = scan.kind_from_log or start.group(1)
                    if current.lines:
                        current = _Segment(first_line=line.number)
                        scan.segments.append(current)
                    else:
                        current.first_line = line.number
                resume = _RESUME.match(message)
                if resume and current.resume_step is None:
                    current.resume_step = int(resume.group(1))
            elif event is not None and event["type"] in ("done", "error"):
                text = str(event.get("message") or "") if event["type"] == "error" else ""
                current.terminal = (event["type"], text, float(event["time"]))
        current.lines += 1
    return scan


def _read_config(run_dir: Path) -> tuple[dict, str, list[str]]:
    """(config, where it was found relative to the folder, problems reading it)."""
    candidates = [run_dir / name for name in CONFIG_FILES]
    checkpoints = sorted(
        (c for c in (read_checkpoint(p) for p in _checkpoint_dirs(run_dir)) if c is not None),
        key=lambda c: c.step, reverse=True)
    candidates += [c.path / CHECKPOINT_CONFIG for c in checkpoints]
    for path in candidates:
        if not path.is_file():
            continue
        where = path.relative_to(run_dir).as_posix()
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return {}, where, [f"{where} is larger than {MAX_CONFIG_BYTES // 1024} KB; it was not read"]
        try:
            data = strict_json.loads(path.read_bytes())
        except strict_json.NonFiniteNumber as exc:
            return {}, where, [f"{where}: {exc}; the run was imported without its config"]
        except (ValueError, RecursionError) as exc:
            return {}, where, [f"{where} is not valid JSON ({strict_json.error_text(exc)}); the run was imported "
                               "without its config"]
        if not isinstance(data, dict):
            return {}, where, [f"{where} is not a JSON object; the run was imported without its config"]
        return data, where, []
    return {}, "", []


def _checkpoint_dirs(run_dir: Path) -> list[Path]:
    root = run_dir / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and _STEP_DIR.match(p.name)]


def _identity(first_line: bytes) -> str:
    return hashlib.sha256(b"crucible run import v1\0" + first_line).hexdigest()


def _kind(config: dict, scan: _Scan, report: ImportReport) -> str:
    kinds = set(RunKind.values)
    if config.get("kind") in kinds:
        return config["kind"]
    if scan.kind_from_log:
        return scan.kind_from_log
    report.warnings.append("neither the config nor the event log names the run's kind; it was imported as eval")
    return RunKind.EVAL


# ---------------------------------------------------------------------------------------
# Checking one event beyond the format: what the database could not store
# ---------------------------------------------------------------------------------------


def _float_ok(value: Any) -> bool:
    if value is None or isinstance(value, float):
        return True
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _storable_problem(event: dict, raw: bytes) -> str | None:
    """Why the database could not store this valid event (None: it can)."""
    attempt = event.get("attempt")
    if attempt is not None and not 1 <= attempt <= INT32_MAX:
        return f"'attempt' must be between 1 and {INT32_MAX}, got {attempt}"
    moment = event["time"]
    if not (isinstance(moment, int | float) and math.isfinite(moment) and 0 <= moment < MAX_UNIX_TIME):
        return f"'time' must be Unix seconds after 1970, got {moment!r:.40}"
    step = event.get("step")
    if step is not None and not -INT32_MAX - 1 <= step <= INT32_MAX:
        return f"'step' {step} is out of range"
    kind = event["type"]
    if kind in ("metric", "checkpoint") and b"\\u0000" in raw:
        return "the event holds a NUL character (\\u0000), which the database cannot store"
    if kind == "metric":
        if len(event["split"]) > 32:
            return f"'split' must be at most 32 characters, got {len(event['split'])}"
        if not all(_float_ok(v) for v in event["metrics"].values()):
            return "a metric value is too large for a floating-point number"
    elif kind == "trajectory":
        for name in ("sample_index", "tokens_in", "tokens_out"):
            value = event.get(name)
            if value is not None and not 0 <= value <= INT32_MAX:
                return f"'{name}' must be between 0 and {INT32_MAX}, got {value}"
        for name in ("reward", "advantage", "latency_ms"):
            if not _float_ok(event.get(name)):
                return f"'{name}' is too large for a floating-point number"
    elif kind == "checkpoint":
        if not event["path"] or len(event["path"]) > 1000:
            return "'path' must be 1 to 1000 characters"
        if len(event["content_hash"]) > 64:
            return "'content_hash' must be at most 64 characters"
    if b"\\ud" in raw or b"\\uD" in raw:
        try:
            json.dumps(event, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return "the event holds a lone UTF-16 surrogate (\\udXXX), which the database cannot store"
    return None


# ---------------------------------------------------------------------------------------
# Checkpoint locations
# ---------------------------------------------------------------------------------------


def _inside_data_dir(path: str) -> bool:
    try:
        return Path(path).resolve().is_relative_to(Path(settings.DATA_DIR).resolve())
    except (OSError, RuntimeError, ValueError):
        return True


def _checkpoint_location(event: dict, run_dir: Path, *, folder_kept: bool, trusted: bool) -> tuple[str, bool]:
    """(storage_uri, exists) for a checkpoint event.

    The checkpoint folders are not copied: the original path is recorded. When the folder was
    moved and the import reads it in place, its step_N folder inside the imported folder is
    recorded instead. An upload may not point into this server's data directory (where other
    projects' checkpoints live, which the download page serves): such a path is recorded as
    `imported://<path>`, which no page treats as a local folder.
    """
    original = event["path"]
    absolute = os.path.isabs(original)
    if not trusted and absolute and _inside_data_dir(original):
        return f"imported://{original}", False
    if absolute and os.path.isdir(original):
        return original, True
    local = run_dir / CHECKPOINTS_DIR / f"step_{event['step']}"
    if folder_kept and local.is_dir() and (local / COMPLETE_MARKER).is_file():
        return str(local.resolve()), True
    return original, False


def _parent_checkpoint(project: Project, config: dict) -> Checkpoint | None:
    """The checkpoint of this project the run started from: the one imported with the path the
    config's `init_checkpoint` names (as recorded, or as `imported://` for an upload's), newest first.

    An evaluation of a checkpoint, or a GRPO run from an SFT checkpoint, imported after the run
    that saved it is so tied to it, as if it had been started from it here; imported before
    it, it stays unlinked (import the runs in the order they ran).
    """
    path = config.get("init_checkpoint")
    if not isinstance(path, str) or not path or len(path) > 1000:
        return None
    return (Checkpoint.objects.filter(run__project=project, storage_uri__in=[path, f"imported://{path}"])
            .order_by("-id").first())


def _folder_exists(uri: str) -> bool:
    return "://" not in uri and os.path.isabs(uri) and os.path.isdir(uri)


# ---------------------------------------------------------------------------------------
# The import
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunLinks:
    """The project's rows a new imported run is tied to, when the caller knows them.

    dataset: the tasks the run trained or evaluated on, so its trajectories find their task
    (the inspector's prompt, re-verify, categories, the sanity check). verifier_version and
    model: what the run's pages and a re-verify use. The start checkpoint needs no link: it is
    found by the path the run's config names (`init_checkpoint`), see _parent_checkpoint.
    """

    dataset: TaskDataset | None = None
    verifier_version: VerifierVersion | None = None
    model: ModelSpec | None = None


def run_import(
    *, project: Project, run_dir: Path | str, actor, name: str | None = None, source: str | None = None,
    folder_kept: bool = True, trusted: bool = True, progress: Progress | None = None, links: RunLinks | None = None,
) -> ImportReport:
    """Import a `python -m training run` folder into `project`; see the module docstring.

    `folder_kept` False: `run_dir` is a temporary extraction (checkpoints are never looked up
    in it). `trusted` False: the folder came from an upload (see _checkpoint_location).
    `links`: rows of this project a newly created run is tied to (an existing run keeps its own).
    Raises RunImportError when the folder cannot be imported; whatever stops it, nothing is left written.
    """
    run_dir = Path(run_dir)
    events_path = _events_file(run_dir)
    total_bytes = events_path.stat().st_size
    scan = _scan(events_path)
    if scan.first_line is None:
        raise RunImportError(f"{events_path} holds no events (only empty lines): the run wrote nothing yet; "
                             "import the folder once the training process has written events.")
    config, config_source, config_problems = _read_config(run_dir)
    report = ImportReport(source=source or str(run_dir), config_source=config_source)
    report.kind = _kind(config, scan, report)
    if config:
        config_problems += [f"{key}: {message}" for key, message in
                            run_config_problems(config, kind=report.kind).items()]
    report.config_problems = config_problems
    report.restarts = len(scan.segments) - 1
    key = _identity(scan.first_line)
    state = _ImportState(project=project, actor=actor, key=key, config=config, report=report,
                         name=(name or "").strip()[:NAME_LIMIT] or run_dir.resolve().name[:NAME_LIMIT] or "imported run",
                         status=_outcome(scan)[0], links=links or RunLinks())
    with transaction.atomic():  # all or nothing, even when the request running it is killed
        _import_events(state, events_path, run_dir, scan, folder_kept=folder_kept, trusted=trusted,
                       progress=progress)
    if progress is not None:
        progress(total_bytes, total_bytes)
    return report


def _import_events(state: _ImportState, events_path: Path, run_dir: Path, scan: _Scan, *, folder_kept: bool,
                   trusted: bool, progress: Progress | None) -> None:
    """Read the event log and store its events through the ingestor, in batches (inside run_import's transaction)."""
    report = state.report
    total_bytes = events_path.stat().st_size
    thresholds = scan.thresholds()
    starts = [segment.first_line for segment in scan.segments]
    batch: list[dict] = []
    batch_bytes = 0
    done_bytes = 0
    read_types: Counter[str] = Counter()
    for line in _read_lines(events_path):
        done_bytes += line.length
        report.lines = line.number
        event = _valid_event(line, report)
        if event is None:
            continue
        kind = event["type"]
        read_types[kind] += 1
        state.clock(event)
        if kind in STORED_TYPES:
            threshold = thresholds[max(0, bisect.bisect_right(starts, line.number) - 1)]
            step = event.get("step")
            if threshold is not None and (threshold == -math.inf or step is None or step > threshold):
                report.superseded[kind] += 1
                continue
        state.see(event)
        if kind == "checkpoint":
            uri, exists = _checkpoint_location(event, run_dir, folder_kept=folder_kept, trusted=trusted)
            event = {**event, "path": uri}
            state.checkpoint(event, exists)
        if kind in STORED_TYPES:
            batch.append(event)
            batch_bytes += line.length
        if len(batch) >= BATCH_EVENTS or batch_bytes >= BATCH_BYTES:
            state.flush(batch)
            batch, batch_bytes = [], 0
            if progress is not None:
                progress(done_bytes, total_bytes)
    report.events = dict(sorted(read_types.items()))
    if not state.any_event:
        listed = "; ".join(f"line {s.line}: {s.reason}" for s in report.skipped[:3])
        raise RunImportError(f"{events_path} holds no valid event ({listed}): nothing was imported. "
                             "Is it the events.jsonl of `python -m training run`?")
    state.flush(batch)
    state.finish(scan)


def _events_file(run_dir: Path) -> Path:
    if not run_dir.exists():
        raise RunImportError(f"{run_dir} does not exist: give the folder that `python -m training run "
                             "--out RUN_DIR` wrote (it holds events.jsonl).")
    if not run_dir.is_dir():
        hint = (" It is a zip file: import it as a zip (manage.py import_run accepts .zip files, or upload it on "
                "the Import a run page)." if zipfile.is_zipfile(run_dir) else "")
        raise RunImportError(f"{run_dir} is not a folder: give the run folder that `python -m training run "
                             f"--out RUN_DIR` wrote.{hint}")
    path = run_dir / EVENTS_FILE
    if not path.is_file():
        nested = sorted(p.parent for p in run_dir.glob(f"*/{EVENTS_FILE}"))[:3]
        hint = f" Did you mean {', '.join(str(p) for p in nested)}?" if nested else ""
        raise RunImportError(f"{run_dir} holds no {EVENTS_FILE}: it is not a run folder of `python -m training "
                             f"run --out RUN_DIR`, or the run has not started.{hint}")
    if path.stat().st_size == 0:
        raise RunImportError(f"{path} is empty: the run wrote no events yet; nothing to import.")
    return path


def _skip(report: ImportReport, line: int, category: str, reason: str) -> None:
    report.skipped_total += 1
    report.skipped_by_reason[category] = report.skipped_by_reason.get(category, 0) + 1
    if len(report.skipped) < MAX_LISTED_SKIPS:
        report.skipped.append(SkippedLine(line, f"{category}: {reason}"[:500]))


def _valid_event(line: _Line, report: ImportReport) -> dict | None:
    """The line's event, or None after recording why it is skipped (blank lines are ignored)."""
    if line.raw is None:
        _skip(report, line.number, "too long", f"{line.length} bytes, over the {MAX_LINE_BYTES} byte limit "
                                                "for one event")
        return None
    if not line.raw.strip():
        return None
    try:
        event = _parse(line.raw)
    except UnicodeDecodeError as exc:
        _skip(report, line.number, "malformed JSON", strict_json.error_text(exc))
        return None
    except strict_json.NonFiniteNumber as exc:
        _skip(report, line.number, "bad values", str(exc))
        return None
    except (ValueError, RecursionError) as exc:
        if not line.complete:
            _skip(report, line.number, "incomplete last line", "the process stopped in the middle of writing it")
        else:
            _skip(report, line.number, "malformed JSON", strict_json.error_text(exc))
        return None
    if not isinstance(event, dict):
        _skip(report, line.number, "malformed JSON", f"an event must be a JSON object, got {type(event).__name__}")
        return None
    try:
        validate_event(event)
    except EventError as exc:
        text = str(exc)
        _skip(report, line.number, "unknown type" if text.startswith("unknown event type") else "bad values", text)
        return None
    problem = _storable_problem(event, line.raw)
    if problem is not None:
        _skip(report, line.number, "bad values", problem)
        return None
    return event


def _outcome(scan: _Scan) -> tuple[str, str, str]:
    """(status, the run's error message, a note) from how the last training process ended."""
    terminal = scan.segments[-1].terminal
    if terminal is not None and terminal[0] == "done":
        return RunStatus.SUCCEEDED, "", ""
    if terminal is not None:
        return RunStatus.FAILED, terminal[1][:TEXT_LIMIT], ""
    return RunStatus.FAILED, "", (
        "The event log ends without a done or error event: the training process was stopped, or was still "
        "running when the folder was imported. Import the folder again once it has finished to add the rest.")


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(float(seconds), tz=UTC)


@dataclass
class _ImportState:
    """The run being imported and what the events said about it so far."""

    project: Project
    actor: Any
    key: str
    config: dict
    report: ImportReport
    name: str
    status: str
    links: RunLinks = field(default_factory=RunLinks)
    run: Run | None = None
    ingestor: EventIngestor | None = None
    any_event: bool = False
    first_time: float | None = None
    last_time: float | None = None
    log_tail: list[dict] = field(default_factory=list)
    before: dict[str, int] = field(default_factory=dict)
    trajectories_read: int = 0
    metric_values: int = 0
    checkpoints_read: int = 0

    def clock(self, event: dict) -> None:
        self.any_event = True
        moment = float(event["time"])
        self.first_time = moment if self.first_time is None else min(self.first_time, moment)
        self.last_time = moment if self.last_time is None else max(self.last_time, moment)

    def see(self, event: dict) -> None:
        kind = event["type"]
        if kind == "log":
            self.log_tail = [*self.log_tail[-(LOG_TAIL - 1):],
                             {"level": str(event.get("level", "info")), "message": event["message"][:TEXT_LIMIT]}]
        elif kind == "metric":
            values = event["metrics"].values()
            nulls = sum(1 for v in values if v is None)
            self.metric_values += len(values) - nulls
            self.report.null_metric_values += nulls
        elif kind == "trajectory":
            self.trajectories_read += 1

    def checkpoint(self, event: dict, exists: bool) -> None:
        self.checkpoints_read += 1
        if len(self.report.checkpoints) < MAX_LISTED_CHECKPOINTS:
            self.report.checkpoints.append(CheckpointSeen(
                step=event["step"], storage_uri=event["path"], exists=exists, metrics=len(event.get("metrics") or {})))

    def _stored_checkpoints(self) -> None:
        """Report each checkpoint where it is stored: an earlier import's row wins over this import's path."""
        stored = dict(Checkpoint.objects.filter(run=self.run, step__in=[c.step for c in self.report.checkpoints])
                      .values_list("step", "storage_uri"))
        for seen in self.report.checkpoints:
            uri = stored.get(seen.step, seen.storage_uri)
            if uri != seen.storage_uri:
                seen.storage_uri, seen.exists = uri, _folder_exists(uri)

    def _counts(self) -> dict[str, int]:
        run = self.run
        return {"metric": MetricPoint.objects.filter(run=run).count(),
                "checkpoint": Checkpoint.objects.filter(run=run).count()}

    def _open_run(self) -> None:
        """Find the run of an earlier import of this folder, or create it (with the first batch)."""
        run = Run.objects.filter(project=self.project, import_key=self.key).first()
        if run is None:
            try:
                with transaction.atomic():
                    run = Run.objects.create(
                        project=self.project, name=self.name, kind=self.report.kind, config=self.config,
                        resolved_config=resolved_run_config(self.config, kind=self.report.kind) if self.config else None,
                        status=self.status, model=self.links.model or self._model(), created_by=self.actor,
                        dataset=self.links.dataset, verifier_version=self.links.verifier_version,
                        parent_checkpoint=_parent_checkpoint(self.project, self.config), import_key=self.key,
                        import_info={"source": self.report.source, "imported_at": timezone.now().isoformat(),
                                     "imported_by": getattr(self.actor, "username", "") or "", "complete": False},
                    )
                self.report.created = True
            except IntegrityError:  # imported concurrently by someone else a moment ago
                run = Run.objects.get(project=self.project, import_key=self.key)
        elif run.resolved_config is None and self.config:  # imported before launched configs were kept
            run.resolved_config = resolved_run_config(self.config, kind=run.kind)
            if run.resolved_config is not None:
                run.save(update_fields=["resolved_config"])
        self.run = run
        self.ingestor = EventIngestor(run, attempt=1)
        self.report.run_id, self.report.run_name, self.report.kind = run.pk, run.name, run.kind
        self.before = self._counts()

    def _model(self) -> ModelSpec | None:
        """The project's model the config names (its local folder or hub id), if it has one."""
        spec = self.config.get("model")
        if not isinstance(spec, str) or not spec:
            return None
        return ModelSpec.objects.filter(project=self.project).filter(Q(local_path=spec) | Q(hf_id=spec)).first()

    def flush(self, batch: list[dict]) -> None:
        if self.run is None:
            self._open_run()
        if not batch:
            return
        result = self.ingestor.ingest(batch)
        self.report.stored["trajectory"] += result.trajectories

    def finish(self, scan: _Scan) -> None:
        after = self._counts()
        report = self.report
        report.stored["metric"] = after["metric"] - self.before["metric"]
        report.stored["checkpoint"] = after["checkpoint"] - self.before["checkpoint"]
        report.already_present = {
            "metric": max(0, self.metric_values - report.stored["metric"]),
            "trajectory": max(0, self.trajectories_read - report.stored["trajectory"]),
            "checkpoint": max(0, self.checkpoints_read - report.stored["checkpoint"]),
        }
        terminal = scan.segments[-1].terminal
        status, error, note = _outcome(scan)
        if note:
            report.warnings.append(note)
        report.status, report.error = status, error
        self._stored_checkpoints()
        missing = [c.step for c in report.checkpoints if not c.exists]
        if missing:
            report.warnings.append(
                f"{len(missing)} checkpoint folder{'s were' if len(missing) != 1 else ' was'} not found on this "
                f"machine (step{'s' if len(missing) != 1 else ''} " + ", ".join(map(str, missing[:20])) + ("…" if len(missing) > 20 else "")
                + "): removed by the run's keep_top_k retention, or left on the machine that trained. Their metrics "
                "are recorded; evaluating, exporting or promoting one needs its folder on this server's storage "
                "(copy the run folder there and import it from there).")
        run = self.run
        run.refresh_from_db()
        # The run keeps the config it was created with; so does what the page says about it.
        config_facts = ({"config_source": report.config_source, "config_problems": report.config_problems[:50]}
                        if report.created else {})
        info = {
            **run.import_info, "complete": True, **config_facts, "error": error, "note": note,
            "log_tail": self.log_tail, "restarts": report.restarts, "events": report.events,
            "missing_checkpoints": missing[:MAX_LISTED_CHECKPOINTS],
        }
        started = _time(self.first_time) if self.first_time is not None else None
        finished_at = terminal[2] if terminal is not None else self.last_time
        finished = _time(finished_at) if finished_at is not None else None
        changed = {name: value for name, value in (("status", status), ("import_info", info), ("started_at", started),
                                                   ("finished_at", finished)) if getattr(run, name) != value}
        if changed:
            for name, value in changed.items():
                setattr(run, name, value)
            run.save(update_fields=list(changed))
        if "status" in changed:
            borrowers_headlines_refresh([run.pk])
        report.run_name = run.name


# ---------------------------------------------------------------------------------------
# Zips
# ---------------------------------------------------------------------------------------


def _entry_problem(name: str) -> str | None:
    if "\x00" in name or "\\" in name:
        return "holds a backslash or NUL character"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "is an absolute path"
    if ".." in PurePosixPath(name).parts:
        return "climbs out of the folder with '..'"
    return None


def _wanted(relative: PurePosixPath) -> bool:
    """What the import reads: the event log, a config, and each checkpoint's marker and config."""
    parts = relative.parts
    if len(parts) == 1:
        return parts[0] in (EVENTS_FILE, *CONFIG_FILES)
    return (len(parts) == 3 and parts[0] == CHECKPOINTS_DIR and bool(_STEP_DIR.match(parts[1]))
            and parts[2] in (COMPLETE_MARKER, CHECKPOINT_CONFIG))


def _zip_root(infos: list[zipfile.ZipInfo]) -> PurePosixPath:
    found = [PurePosixPath(i.filename) for i in infos
             if not i.is_dir() and PurePosixPath(i.filename).name == EVENTS_FILE]
    if not found:
        raise RunImportError(
            f"The zip holds no {EVENTS_FILE}: it is not a run folder. Zip the folder that `python -m training run "
            "--out RUN_DIR` wrote, e.g. `cd $(dirname RUN_DIR) && zip -r run.zip $(basename RUN_DIR)`.")
    depth = min(len(p.parts) for p in found)
    shallowest = sorted(p.parent for p in found if len(p.parts) == depth)
    if len(shallowest) > 1:
        names = ", ".join(f"{p.as_posix() or '.'}/" for p in shallowest[:5])
        raise RunImportError(f"The zip holds several run folders ({names}): put one run folder in each zip.")
    return shallowest[0]


def extract_run_zip(archive: str | os.PathLike[str] | IO[bytes], dest: Path) -> tuple[Path, str]:
    """Extract what the import reads from a zip of a run folder into `dest`.

    Returns the extracted run folder and the run folder's name inside the zip ("" when the
    zip holds the folder's files at its top).

    Refuses the whole zip, before writing anything, for unsafe paths (absolute, '..'),
    links, encrypted entries, too many entries, a total over MAX_EXTRACTED_BYTES or an
    entry that inflates like a zip bomb; while extracting, the bytes actually written are
    counted against the sizes the zip declared. Checkpoint weights are not extracted.
    """
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise RunImportError(f"This is not a zip file, or the zip is damaged ({exc}): zip the run folder "
                             "(zip -r run.zip RUN_DIR) and upload the .zip.") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_ZIP_ENTRIES:
            raise RunImportError(f"The zip holds {len(infos)} entries, more than {MAX_ZIP_ENTRIES}: zip only the "
                                 "run folder (its events.jsonl, config and checkpoints/).")
        for info in infos:
            problem = _entry_problem(info.filename)
            if problem is not None:
                raise RunImportError(f"The zip was refused: the entry {info.filename[:200]!r} {problem}. Zip the run "
                                     "folder itself: `cd $(dirname RUN_DIR) && zip -r run.zip $(basename RUN_DIR)`.")
            if stat.S_ISLNK(info.external_attr >> 16):
                raise RunImportError(f"The zip was refused: the entry {info.filename[:200]!r} is a symbolic link. "
                                     "Zip the run folder without links (zip -r without -y).")
        root = _zip_root(infos)
        chosen: list[tuple[zipfile.ZipInfo, PurePosixPath]] = []
        for info in infos:
            path = PurePosixPath(info.filename)
            if info.is_dir() or not path.is_relative_to(root):
                continue
            relative = path.relative_to(root)
            if _wanted(relative):
                chosen.append((info, relative))
        declared = sum(info.file_size for info, _ in chosen)
        if declared > MAX_EXTRACTED_BYTES:
            raise RunImportError(
                f"The run folder is too large to import from an upload: its event log and configs hold "
                f"{declared / 1024 ** 2:.0f} MB uncompressed, over the limit of {MAX_EXTRACTED_BYTES / 1024 ** 2:.0f} MB."
                " Import it on the server with `manage.py import_run RUN_DIR --project SLUG` instead.")
        for info, _ in chosen:
            if info.flag_bits & 0x1:
                raise RunImportError(f"The zip was refused: {info.filename[:200]!r} is encrypted. Upload a zip "
                                     "without a password.")
            if info.file_size > 1024 ** 2 and info.file_size > MAX_COMPRESSION_RATIO * max(1, info.compress_size):
                raise RunImportError(
                    f"The zip was refused: {info.filename[:200]!r} inflates {info.file_size // max(1, info.compress_size)}"
                    f" times ({info.file_size} bytes from {info.compress_size}), which looks like a zip bomb.")
        folder = dest / "run"
        folder.mkdir(parents=True)
        written = 0
        for info, relative in chosen:
            target = folder.joinpath(*relative.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                written += _extract_entry(zf, info, target, room=MAX_EXTRACTED_BYTES - written)
            except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError) as exc:
                raise RunImportError(_damaged(info, exc)) from None
    return folder, root.name


def _extract_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, *, room: int) -> int:
    """Write one entry to `target`, checking the bytes against what the zip declares; returns how many."""
    entry = crc = 0
    with zf.open(info) as src, open(target, "wb") as out:
        while block := src.read(1 << 20):
            entry += len(block)
            crc = zlib.crc32(block, crc)
            if entry > info.file_size or entry > room:
                raise RunImportError(f"The zip was refused: {info.filename[:200]!r} inflates beyond the size "
                                     "it declares, which looks like a zip bomb.")
            out.write(block)
    if entry != info.file_size:
        raise EOFError(f"it declares {info.file_size} bytes but holds {entry}")
    if crc != info.CRC:
        raise zipfile.BadZipFile("its CRC-32 checksum does not match its bytes")
    return entry


def _damaged(info: zipfile.ZipInfo, exc: BaseException) -> str:
    detail = str(exc) or type(exc).__name__
    return (f"The zip is damaged: {info.filename[:200]!r} cannot be read whole ({detail[:200]}). It was cut short "
            "or changed after it was made (a wrong checksum or a size that does not match). Nothing was imported: "
            "zip the run folder again (zip -r run.zip RUN_DIR) and upload the new zip.")


def import_scratch_dir() -> Path:
    """Where uploads are extracted: under the data directory, one fresh folder per import."""
    root = Path(settings.DATA_DIR) / "tmp" / "run-imports"
    root.mkdir(parents=True, exist_ok=True)
    _sweep_scratch(root)
    return Path(tempfile.mkdtemp(prefix="import-", dir=root))


def _sweep_scratch(root: Path) -> None:
    """Remove extraction folders a killed import left behind (its `finally` never ran)."""
    cutoff = time.time() - SCRATCH_KEEP_SECONDS
    for item in root.iterdir():
        try:
            if item.name.startswith("import-") and item.lstat().st_mtime < cutoff:
                shutil.rmtree(item, ignore_errors=True)
        except OSError:
            continue


def run_import_zip(
    *, project: Project, archive: str | os.PathLike[str] | IO[bytes], actor, name: str | None = None,
    archive_name: str = "", trusted: bool = False, progress: Progress | None = None,
) -> ImportReport:
    """Import a zip of a run folder (see extract_run_zip); the extraction is deleted afterwards.

    `trusted`: the zip comes from the server's own disk (the import_run command), not an upload.
    """
    label = archive_name or (str(archive) if isinstance(archive, str | os.PathLike) else "uploaded zip")
    scratch = import_scratch_dir()
    try:
        folder, root_name = extract_run_zip(archive, scratch)
        default_name = root_name or PurePosixPath(label).name.removesuffix(".zip") or "imported run"
        report = run_import(project=project, run_dir=folder, actor=actor, name=name or default_name,
                            source=f"zip {label}", folder_kept=False, trusted=trusted, progress=progress)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report


# ---------------------------------------------------------------------------------------
# Uploads (the page and the API)
# ---------------------------------------------------------------------------------------


class UploadLimitHandler(FileUploadHandler):
    """Stops a multipart upload as soon as it passes `limit` bytes (nothing more is stored)."""

    def __init__(self, request=None, limit: int | None = None) -> None:
        super().__init__(request)
        self.limit = MAX_UPLOAD_BYTES if limit is None else limit
        self.received = 0
        self.exceeded = False

    def receive_data_chunk(self, raw_data, start):
        self.received += len(raw_data)
        if self.received > self.limit:
            self.exceeded = True
            raise StopUpload(connection_reset=False)
        return raw_data

    def file_complete(self, file_size):
        return None


def too_large_message(limit: int | None = None) -> str:
    limit = MAX_UPLOAD_BYTES if limit is None else limit
    return (f"The zip is larger than the upload limit of {limit / 1024 ** 2:.0f} MB. Import a run this large on the "
            "server: `manage.py import_run RUN_DIR --project SLUG`.")


def declared_too_large(request, limit: int | None = None) -> bool:
    """The request says up front that its body is over the limit (a little room for the form's other fields)."""
    limit = MAX_UPLOAD_BYTES if limit is None else limit
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0) > limit + 64 * 1024
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------
# Big uploads: an import job (the page and the API)
# ---------------------------------------------------------------------------------------

IMPORT_JOB_KIND = "run_import"
ARCHIVE_FILE = re.compile(r"^run-import-[A-Za-z0-9_-]{16,64}\.zip$")
ARCHIVE_KEEP_SECONDS = 7 * 24 * 3600  # an upload whose job never ran (cancelled while queued) is swept after this
INLINE_MAX_BYTES = 2 * 1024 ** 2


def report_from_dict(held: dict[str, Any]) -> ImportReport:
    return ImportReport.from_dict(held)


def inline_max_bytes() -> int:
    """Uploads up to this size are imported within the request; larger ones by a job.

    2 MB of zip is about 10-20 MB of events (JSONL compresses 5-10 times), a few seconds on
    PostgreSQL (about 3 MB of events a second) and under 20 on SQLite: inside any web timeout,
    and the page answers with the report at once as before. CRUCIBLE_RUN_IMPORT_INLINE_MAX_BYTES
    changes it (0: every upload goes through a job).
    """
    return int(getattr(settings, "CRUCIBLE_RUN_IMPORT_INLINE_MAX_BYTES", INLINE_MAX_BYTES))


def import_archive_dir() -> Path:
    """The data directory's imports area for run zips waiting for their job."""
    folder = Path(settings.DATA_DIR) / "imports" / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _sweep_archives(folder: Path) -> None:
    cutoff = time.time() - ARCHIVE_KEEP_SECONDS
    for item in folder.iterdir():
        try:
            if item.is_file() and item.stat().st_mtime < cutoff:
                item.unlink()
        except OSError:
            continue


def _keep_upload(upload: IO[bytes], folder: Path) -> str:
    """Write the upload under a fresh random name (whole, or not at all); returns the file name."""
    name = f"run-import-{secrets.token_urlsafe(18)}.zip"
    partial = folder / f".{name}.part"
    try:
        with open(partial, "wb") as out:
            chunks = upload.chunks() if hasattr(upload, "chunks") else iter(lambda: upload.read(1 << 20), b"")
            for chunk in chunks:
                out.write(chunk)
        os.replace(partial, folder / name)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return name


def run_import_enqueue(*, project: Project, upload: IO[bytes], actor, name: str | None = None,
                       archive_name: str = "") -> Any:
    """Keep the uploaded zip in the imports area and queue a job that imports it; returns the Job.

    The job's payload names the file, never a path: the worker looks it up in the imports area.
    """
    from webapp.runs.services.jobs import job_create

    folder = import_archive_dir()
    _sweep_archives(folder)
    filename = _keep_upload(upload, folder)
    try:
        with transaction.atomic():
            return job_create(project=project, kind=IMPORT_JOB_KIND, payload={
                "archive": filename, "archive_name": (archive_name or "upload.zip")[:NAME_LIMIT],
                "name": (name or "")[:NAME_LIMIT], "actor_id": getattr(actor, "pk", None)})
    except BaseException:
        (folder / filename).unlink(missing_ok=True)
        raise


def _archive_path(payload: dict) -> Path:
    filename = str(payload.get("archive", ""))
    if not ARCHIVE_FILE.match(filename):
        raise RunImportError("This import job names no uploaded zip: upload the zip again on the Import a run page.")
    path = import_archive_dir() / filename
    if not path.is_file():
        raise RunImportError("The uploaded zip of this import is gone (imported already, or removed after "
                             f"{ARCHIVE_KEEP_SECONDS // 86400} days): upload it again on the Import a run page.")
    return path


def job_error_text(job: Any) -> str:
    """An import job's error as the inline import says it (without the exception's class name)."""
    error = job.error or ""
    prefix = f"{RunImportError.__name__}: "
    return error[len(prefix):] if error.startswith(prefix) else error


def discard_archive(payload: dict) -> None:
    """Remove the job's uploaded zip (after a finished import, or one that can never succeed)."""
    filename = str(payload.get("archive", ""))
    if ARCHIVE_FILE.match(filename):
        (import_archive_dir() / filename).unlink(missing_ok=True)


def run_import_archive(*, project: Project, payload: dict, progress: Progress | None = None) -> ImportReport:
    """The worker's half of an import job: import the kept zip (one transaction) and report.

    A RunImportError (damaged zip, not a run) removes the zip: importing it again cannot succeed.
    Anything else keeps it, so a retry of the job can finish the work.
    """
    from django.contrib.auth import get_user_model

    actor = get_user_model().objects.filter(pk=payload.get("actor_id")).first()
    try:
        path = _archive_path(payload)
        report = run_import_zip(project=project, archive=path, actor=actor, name=payload.get("name") or None,
                                archive_name=str(payload.get("archive_name") or "upload.zip"), progress=progress)
    except RunImportError:
        discard_archive(payload)
        raise
    return report
