"""Importing task files: a validation report first, the new version only when asked.

One service for the import page, the API and `manage.py import_tasks`:

- `import_check(path, ...)` reads a Crucible JSONL or NeMo Gym JSONL file (the format found from
  its rows, or chosen) and reports, without writing anything: rows accepted, rows rejected with
  their line number and the reason, duplicates skipped by content hash (within the file and
  against the parent version), counts by split and category. A file that is not UTF-8, not
  JSONL, empty or too large is an `ImportFileError` with a message that says what to do.
- `import_create(path, ...)` reads the file again the same way and writes the new version in one
  transaction: the parent's tasks (when adding to a dataset) plus the accepted rows, each with
  its provenance (file and line) in `metadata["provenance"]`.

Numbers: a row holding NaN, Infinity or a number beyond a double's range (1e400) anywhere (its
task, tools, ground truth, metadata) is rejected with its line and the path to that number
(webapp.common.strict_json, the rule the run import shares); the report and the write read
the file the same way, so what the report accepts is what gets written.

NeMo Gym rows: the task row format carries `ground_truth`, the expected calls that the workplace
verifier replays to score an answer. A row without it (or with null, as a task without an expected
answer exports) is accepted, since a verifier that needs no expected answer (an LLM judge) can
still score it, but the report warns with the count and the lines: the workplace verifier cannot.

Between the report and "create version" the page keeps the uploaded file in the data directory
(`upload_store`), under a random token tied to the user and the project; cancel deletes it.

Every string of a file is hostile text: it is stored as data, shown escaped, never used as a path.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from environments import nemo_gym
from environments.types import Task as EnvTask
from environments.types import ToolSpec
from webapp.common import strict_json
from webapp.common.bounds import json_problem
from webapp.datasets.models import Lineage, Source, Split, Task, TaskDataset
from webapp.datasets.services.datasets import (
    DatasetConflict,
    dataset_create,
    dataset_name_format_problem,
    dataset_name_taken,
    dataset_new_version,
    task_content_hash,
    task_row,
)
from webapp.projects.models import Project

FORMATS = ("crucible", "nemo_gym")
FORMAT_CHOICES = (("auto", "Detect from the rows"), ("crucible", "Crucible JSONL"), ("nemo_gym", "NeMo Gym JSONL"))
DEFAULT_MAX_BYTES = 200 * 1024 * 1024
MAX_LISTED = 500  # rejected rows and duplicates listed in a report (all are counted)
PARENT_CHECK_BATCH = 1_000
UPLOAD_KEEP_SECONDS = 24 * 3600
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{24}$")
EXTERNAL_ID_MAX = 200  # Task.external_id
CATEGORY_MAX = 64  # Task.category


def max_import_bytes() -> int:
    """The upload size limit: settings.CRUCIBLE_IMPORT_MAX_BYTES, else CRUCIBLE_IMPORT_MAX_MB (default 200 MB)."""
    configured = getattr(settings, "CRUCIBLE_IMPORT_MAX_BYTES", None)
    if configured:
        return int(configured)
    try:
        return int(float(os.environ.get("CRUCIBLE_IMPORT_MAX_MB", "")) * 1024 * 1024) or DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES


def size_text(size: int) -> str:
    return f"{size / 1024 / 1024:.0f} MB" if size >= 1024 * 1024 else f"{size / 1024:.0f} KB"


class ImportFileError(ValueError):
    """The file as a whole cannot be imported (too large, not UTF-8, not JSONL, empty); `field` names
    the form field the message belongs beside."""

    def __init__(self, message: str, field: str = "file"):
        self.field = field
        super().__init__(message)


class ImportConflict(ImportFileError):
    """The new dataset's name is taken, before this request or by another at the same moment, or another
    request made the same version at the same moment (the API answers 409)."""


class RowError(ValueError):
    """One row that cannot become a task; the message is the reason shown in the report."""


# ---------------------------------------------------------------------------------------
# What an import is asked to do, and its report
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportTarget:
    """Where the accepted rows go: a new dataset `name`, or a new version of `parent` (its tasks plus them)."""

    name: str = ""
    parent: TaskDataset | None = None
    format: str = "auto"
    default_split: str = Split.TRAIN
    description: str = ""
    environment: str = ""

    @property
    def dataset_name(self) -> str:
        return self.parent.name if self.parent is not None else self.name


def import_target(*, project: Project, name: str = "", parent_id: int | None = None, format: str = "auto",  # noqa: A002
                  default_split: str = "", description: str = "", environment: str = "") -> ImportTarget:
    """Check what the form or the request asks for; ImportFileError names the field that is wrong."""
    format = (format or "auto").strip()  # noqa: A001
    if format not in ("auto", *FORMATS):
        raise ImportFileError(f"Unknown format {format[:40]!r}: choose auto, crucible or nemo_gym.", "format")
    default_split = (default_split or Split.TRAIN).strip()
    if default_split not in Split.values:
        raise ImportFileError(f"{default_split[:40]!r} is not a split: choose {', '.join(Split.values)}.", "split")
    name = (name or "").strip()
    parent = None
    if parent_id:
        parent = TaskDataset.objects.filter(project=project, pk=parent_id).first()
        if parent is None:
            raise ImportFileError("No such dataset version in this project.", "dataset")
    else:
        problem = dataset_name_format_problem(name)
        if problem:
            raise ImportFileError(problem, "name")
        taken = dataset_name_taken(project, name)
        if taken:
            raise ImportConflict(taken, "name")
    if len(description) > 10_000 or "\x00" in description:
        raise ImportFileError("The description has at most 10,000 characters (and no NUL).", "description")
    return ImportTarget(name=name, parent=parent, format=format, default_split=default_split,
                        description=description.strip(), environment=(environment or "").strip()[:64])


@dataclass
class ImportReport:
    """What an import found (or wrote): the numbers a person checks before creating the version."""

    filename: str = ""
    size: int = 0
    format: str = ""
    lines: int = 0  # non-empty lines read
    accepted: int = 0
    rejected_count: int = 0
    duplicate_count: int = 0
    rejected: list[dict] = field(default_factory=list)  # {"line", "reason"}, the first MAX_LISTED
    duplicates: list[dict] = field(default_factory=list)  # {"line", "reason"}
    splits: dict[str, int] = field(default_factory=dict)
    categories: dict[str, int] = field(default_factory=dict)
    environment: str = ""
    target: str = ""  # the dataset name
    parent_id: int | None = None
    parent_version: int | None = None
    parent_tasks: int = 0
    no_ground_truth_count: int = 0  # accepted NeMo Gym rows without ground_truth
    no_ground_truth: list[int] = field(default_factory=list)  # their lines, the first MAX_LISTED
    dataset_id: int | None = None  # once written
    version: int | None = None
    seconds: float = 0.0

    @property
    def rows_per_second(self) -> float:
        return self.lines / self.seconds if self.seconds else 0.0

    @property
    def more_rejected(self) -> int:
        return self.rejected_count - len(self.rejected)

    @property
    def more_duplicates(self) -> int:
        return self.duplicate_count - len(self.duplicates)

    @property
    def warnings(self) -> list[str]:
        """What was accepted but deserves a look before the version is used."""
        out = []
        if self.no_ground_truth_count:
            lines = ", ".join(map(str, self.no_ground_truth[:20])) + ("…" if self.no_ground_truth_count > 20 else "")
            out.append(f"{self.no_ground_truth_count} accepted NeMo Gym row(s) have no ground_truth (line(s) {lines}): "
                       "the workplace verifier replays the expected calls of ground_truth to score an answer and "
                       "cannot score these tasks; an LLM-judge verifier can. Add ground_truth to the rows (a list of "
                       "{\"name\", \"arguments\"} calls) if the workplace verifier is to score them.")
        return out

    @property
    def total_after(self) -> int:
        return self.parent_tasks + self.accepted

    def to_dict(self) -> dict:
        return {**asdict(self), "warnings": self.warnings}

    @classmethod
    def from_dict(cls, data: dict) -> ImportReport:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def _reject(self, line: int, reason: str) -> None:
        self.rejected_count += 1
        if len(self.rejected) < MAX_LISTED:
            self.rejected.append({"line": line, "reason": reason})

    def _duplicate(self, line: int, reason: str) -> None:
        self.duplicate_count += 1
        if len(self.duplicates) < MAX_LISTED:
            self.duplicates.append({"line": line, "reason": reason})


# ---------------------------------------------------------------------------------------
# Reading the file
# ---------------------------------------------------------------------------------------


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of the non-empty lines; ImportFileError when a line is not UTF-8."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a UTF-8 byte order mark
            if number == 1 and raw.startswith((b"\x1f\x8b", b"PK\x03\x04")):
                raise ImportFileError("The file is compressed (gzip or zip): decompress it and upload the .jsonl "
                                      "file itself.")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ImportFileError(
                    f"The file is not UTF-8 text: line {number} has a byte that is not UTF-8 (0x{raw[exc.start]:02x} "
                    f"at column {exc.start + 1}). Save it as UTF-8 and upload it again.") from None
            if text.strip():
                yield number, text


def _detect(row: Any) -> str | None:
    if not isinstance(row, dict):
        return None
    if "responses_create_params" in row:
        return "nemo_gym"
    if "task" in row or "messages" in row:
        return "crucible"
    return None


def _keys(row: dict) -> str:
    names = sorted(str(k)[:40] for k in row)[:8]
    return ", ".join(names) if names else "none"


def _crucible_task(row: Any, default_split: str) -> EnvTask:
    if not isinstance(row, dict):
        raise RowError(f"not a JSON object but a JSON {type(row).__name__}")
    data = row.get("task", row if "messages" in row else None)
    if data is None:
        hint = " (a NeMo Gym row: choose the NeMo Gym format)" if "responses_create_params" in row else ""
        raise RowError(f"wrong schema for a Crucible row: expected {{\"task\": {{...}}}} or a task with id and "
                       f"messages; found keys {_keys(row)}{hint}")
    if not isinstance(data, dict):
        raise RowError("wrong schema for a Crucible row: \"task\" is not an object")
    if "id" not in data:
        raise RowError("the task has no id")
    task = EnvTask.from_dict(data)
    if "split" not in data:
        task.split = default_split
    if task.environment is None:
        task.environment = ""
    return task


def _nemo_task(row: Any, default_split: str) -> EnvTask:
    if not isinstance(row, dict):
        raise RowError(f"not a JSON object but a JSON {type(row).__name__}")
    if "responses_create_params" not in row:
        hint = " (a Crucible row: choose the Crucible format)" if ("task" in row or "messages" in row) else ""
        raise RowError(f"wrong schema for a NeMo Gym row: no responses_create_params; found keys {_keys(row)}{hint}")
    try:
        task = nemo_gym.task_row_to_task(row)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RowError(f"not a valid NeMo Gym row: {exc}") from None
    task.split = default_split
    truth = row.get("ground_truth")
    if isinstance(truth, list) and truth and all(isinstance(c, dict) and isinstance(c.get("arguments"), str)
                                                 for c in truth):
        # The arguments' text as written: PostgreSQL's jsonb reorders the keys of the decoded objects,
        # and the export gives this text back when it still says the same (a row out is the row in).
        task.metadata["nemo_gym"]["ground_truth_arguments"] = [c["arguments"] for c in truth]
    return task


def _check_task(task: EnvTask) -> str | None:
    """Why a parsed task cannot be stored or used, or None."""
    if isinstance(task.id, bool) or not isinstance(task.id, str | int) or str(task.id).strip() == "":
        return "the task id must be a non-empty string or a number"
    task.id = str(task.id)
    if len(task.id) > EXTERNAL_ID_MAX:
        return f"the task id is longer than {EXTERNAL_ID_MAX} characters"
    if not isinstance(task.messages, list) or not task.messages:
        return "messages must be a non-empty list of {\"role\", \"content\"} objects"
    for index, message in enumerate(task.messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return f"messages[{index}] is not an object with a role"
        if not isinstance(message.get("content"), str | list | type(None)):
            return f"messages[{index}].content must be text (or a list of parts)"
    if not isinstance(task.tools, list):
        return "tools must be a list of tool schemas"
    for index, tool in enumerate(task.tools):
        try:
            spec = ToolSpec.from_dict(tool)
        except (KeyError, TypeError, AttributeError):
            return f"tools[{index}] is not a tool schema with a name"
        if not isinstance(spec.name, str) or not spec.name:
            return f"tools[{index}] has no name"
    if not isinstance(task.category, str):
        return "category must be text"
    if len(task.category) > CATEGORY_MAX:
        return f"category is longer than {CATEGORY_MAX} characters"
    if task.split not in Split.values:
        return f"split {str(task.split)[:40]!r} is not one of {', '.join(Split.values)}"
    if not isinstance(task.metadata, dict):
        return "metadata must be an object"
    if not isinstance(task.environment, str):
        return "environment must be text"
    parts = [task.id, task.messages, task.tools, task.ground_truth, task.category, task.metadata]
    if _maybe_unstorable(parts):
        problem = json_problem(parts)
        if problem:
            return "cannot be stored: " + problem.replace("[0]", "id", 1)
    return None


def _maybe_unstorable(value: Any) -> bool:
    """A quick look for what the database refuses (a NUL, a lone surrogate); json_problem says where, but
    walking every value of every row costs a third of an import."""
    text = json.dumps(value, ensure_ascii=False)
    if "\\u0000" in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@dataclass
class _Row:
    line: int
    task: EnvTask
    digest: str


def _parse(path: Path, target: ImportTarget, report: ImportReport) -> Iterator[_Row]:
    """Rows that parse and validate (not yet checked for duplicates); the rest go to the report."""
    chosen = None if target.format == "auto" else target.format
    objects = 0
    first_bad: tuple[int, str] | None = None
    for number, text in _lines(path):
        report.lines += 1
        try:
            row = strict_json.loads(text)
        except strict_json.NonFiniteNumber as exc:
            if isinstance(exc.value, dict):  # a JSON object, refused for one of its numbers
                objects += 1
                chosen = chosen or _detect(exc.value)
                report.format = chosen or report.format
            else:
                first_bad = first_bad or (number, text)
            report._reject(number, str(exc))
            continue
        except (ValueError, RecursionError) as exc:
            first_bad = first_bad or (number, text)
            report._reject(number, f"not valid JSON ({strict_json.error_text(exc)})")
            continue
        if not isinstance(row, dict):
            first_bad = first_bad or (number, text)
            report._reject(number, f"not a JSON object but a JSON {type(row).__name__}")
            continue
        objects += 1
        if chosen is None:
            chosen = _detect(row)
            if chosen is not None:
                report.format = chosen
        try:
            if chosen is None:
                raise RowError(f"neither a Crucible nor a NeMo Gym row; found keys {_keys(row)}")
            task = (_nemo_task if chosen == "nemo_gym" else _crucible_task)(row, target.default_split)
            problem = _check_task(task)
            if problem:
                raise RowError(problem)
        except RowError as exc:
            report._reject(number, str(exc))
            continue
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # from_dict on odd shapes
            report._reject(number, f"malformed task ({type(exc).__name__}: {str(exc)[:200]})")
            continue
        try:
            digest = task_content_hash(task)
        except (TypeError, ValueError) as exc:
            report._reject(number, f"cannot be hashed ({str(exc)[:200]})")
            continue
        yield _Row(number, task, digest)
    report.format = chosen or report.format
    if report.lines == 0:
        raise ImportFileError("The file is empty: a JSONL file has one JSON object per line.")
    if objects == 0:
        line, text = first_bad or (1, "")
        hint = (" It looks like one JSON array: write one object per line (JSONL)."
                if text.lstrip().startswith("[") else "")
        raise ImportFileError(f"The file is not JSONL: no line is a JSON object (line {line} is not).{hint}")
    if chosen is None:
        raise ImportFileError("Neither a Crucible nor a NeMo Gym file: no row has \"task\" or \"messages\" "
                              "(Crucible) or \"responses_create_params\" (NeMo Gym).", "format")


def _accepted_rows(path: Path, target: ImportTarget, report: ImportReport) -> Iterator[_Row]:
    """The rows to import, in file order: parsed, valid, new in the file and new to the parent."""
    seen: dict[bytes, int] = {}
    pending: list[_Row] = []
    parent = target.parent

    def flush() -> Iterator[_Row]:
        known: set[str] = set()
        if parent is not None and pending:
            known = set(Task.objects.filter(dataset=parent, content_hash__in=[r.digest for r in pending])
                        .values_list("content_hash", flat=True))
        for row in pending:
            if row.digest in known:
                report._duplicate(row.line, f"already in {parent.name} v{parent.version} (same content hash)")
                continue
            report.accepted += 1
            if report.format == "nemo_gym" and row.task.ground_truth is None:
                report.no_ground_truth_count += 1
                if len(report.no_ground_truth) < MAX_LISTED:
                    report.no_ground_truth.append(row.line)
            report.splits[row.task.split] = report.splits.get(row.task.split, 0) + 1
            report.categories[row.task.category] = report.categories.get(row.task.category, 0) + 1
            yield row
        pending.clear()

    environments: Counter[str] = Counter()
    for row in _parse(path, target, report):
        key = bytes.fromhex(row.digest)[:16]
        if key in seen:
            report._duplicate(row.line, f"duplicate of line {seen[key]} (same content hash)")
            continue
        seen[key] = row.line
        environments[row.task.environment or ""] += 1
        pending.append(row)
        if len(pending) >= PARENT_CHECK_BATCH:
            yield from flush()
    yield from flush()
    found = [name for name, _ in environments.most_common() if name]
    report.environment = (parent.environment if parent is not None and parent.environment
                          else target.environment or (found[0] if found else ""))
    report.splits = dict(sorted(report.splits.items(), key=lambda item: (-item[1], item[0])))
    report.categories = dict(sorted(report.categories.items(), key=lambda item: (-item[1], item[0])))


def _new_report(path: Path, target: ImportTarget, filename: str) -> ImportReport:
    size = path.stat().st_size
    if size > max_import_bytes():
        raise ImportFileError(f"The file is {size_text(size)}, over the {size_text(max_import_bytes())} limit: "
                              "split it into smaller files and import them one after the other.")
    parent = target.parent
    return ImportReport(
        filename=filename or path.name, size=size, format="" if target.format == "auto" else target.format,
        target=target.dataset_name, parent_id=parent.pk if parent else None,
        parent_version=parent.version if parent else None,
        parent_tasks=(parent.stats or {}).get("tasks", parent.tasks.count()) if parent else 0,
    )


def import_check(path: str | Path, *, target: ImportTarget, filename: str = "") -> ImportReport:
    """The validation report of a file; nothing is written. ImportFileError for a file that cannot be read."""
    path = Path(path)
    started = time.perf_counter()
    report = _new_report(path, target, filename)
    for _ in _accepted_rows(path, target, report):
        pass
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _provenance(row: _Row, report: ImportReport) -> dict:
    return {"kind": "import", "file": report.filename[:200], "line": row.line, "format": report.format}


def import_create(path: str | Path, *, project: Project, target: ImportTarget, actor,
                  filename: str = "") -> tuple[TaskDataset, ImportReport]:
    """Write the accepted rows as a new version, in one transaction; the report says what was written.

    The file is read again (a version made since the report is the parent's newest state, and the
    duplicates are checked against it). ImportFileError when no row can be imported: nothing is written."""
    path = Path(path)
    started = time.perf_counter()
    report = _new_report(path, target, filename)

    def tasks() -> Iterator[tuple[EnvTask, str]]:
        for row in _accepted_rows(path, target, report):
            row.task.metadata = {**row.task.metadata, "provenance": _provenance(row, report)}
            yield row.task, row.digest

    detail = {"file": report.filename[:200], "format": target.format, "size": report.size}
    try:
        with transaction.atomic():
            if target.parent is not None:
                dataset = dataset_new_version(
                    dataset=target.parent, actor=actor, lineage=Lineage.IMPORT, lineage_detail=detail,
                    add=(task_row(task, source=Source.IMPORTED, content_hash=digest) for task, digest in tasks()))
            else:
                dataset = dataset_create(
                    project=project, name=target.name, tasks=(task for task, _ in tasks()), actor=actor,
                    environment=target.environment, source=Source.IMPORTED, description=target.description,
                    lineage=Lineage.IMPORT, lineage_detail=detail, new=True)
            if report.accepted == 0:
                raise _NothingToImport
            detail.update({"format": report.format, "rows": report.accepted, "rejected": report.rejected_count,
                           "duplicates": report.duplicate_count})
            dataset.lineage_detail = detail
            dataset.environment = dataset.environment or report.environment
            dataset.save(update_fields=["lineage_detail", "environment"])
    except _NothingToImport:
        raise ImportFileError("No row of the file can be imported (see the rejected rows and duplicates): "
                              "nothing was written.") from None
    except DatasetConflict as exc:
        raise ImportConflict(str(exc), "name") from None
    except IntegrityError:
        raise ImportConflict("Another version of this dataset was created at the same time: nothing was "
                             "written; check the report again and retry.", "name") from None
    report.dataset_id, report.version = dataset.pk, dataset.version
    report.seconds = round(time.perf_counter() - started, 3)
    return dataset, report


class _NothingToImport(Exception):
    """Raised inside the transaction so an import with no accepted row leaves nothing behind."""


# ---------------------------------------------------------------------------------------
# Uploads kept between the report and "create version"
# ---------------------------------------------------------------------------------------


@dataclass
class Upload:
    token: str
    path: Path
    meta: dict

    @property
    def filename(self) -> str:
        return self.meta.get("filename", "")

    @property
    def report(self) -> ImportReport | None:
        data = self.meta.get("report")
        return ImportReport.from_dict(data) if data else None


def _upload_dir() -> Path:
    folder = Path(settings.DATA_DIR) / "imports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _sweep(folder: Path) -> None:
    """Forget uploads nobody confirmed or cancelled within a day."""
    cutoff = time.time() - UPLOAD_KEEP_SECONDS
    for item in folder.iterdir():
        try:
            if item.stat().st_mtime < cutoff:
                item.unlink()
        except OSError:
            continue


def upload_store(chunks: Iterable[bytes], *, filename: str, project: Project, user,
                 declared_size: int | None = None) -> Upload:
    """Keep an uploaded file in the data directory under a new token; ImportFileError when it is too large."""
    limit = max_import_bytes()
    if declared_size is not None and declared_size > limit:
        raise ImportFileError(f"The file is {size_text(declared_size)}, over the {size_text(limit)} limit: split "
                              "it into smaller files and import them one after the other.")
    folder = _upload_dir()
    _sweep(folder)
    token = secrets.token_urlsafe(18)
    path = folder / f"{token}.jsonl"
    size = 0
    try:
        with path.open("wb") as handle:
            for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise ImportFileError(f"The file is over the {size_text(limit)} limit: split it into smaller "
                                          "files and import them one after the other.")
                handle.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    meta = {"project": project.pk, "user": user.pk, "filename": (filename or "upload.jsonl")[:200],
            "size": size, "created": time.time()}
    (folder / f"{token}.json").write_text(json.dumps(meta))
    return Upload(token=token, path=path, meta=meta)


def upload_get(token: str, *, project: Project, user) -> Upload | None:
    """The upload with this token if this user made it in this project (else None: never someone else's)."""
    if not isinstance(token, str) or not _TOKEN.match(token):
        return None
    folder = _upload_dir()
    path, meta_path = folder / f"{token}.jsonl", folder / f"{token}.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("project") != project.pk or meta.get("user") != user.pk or not path.exists():
        return None
    return Upload(token=token, path=path, meta=meta)


def upload_save_meta(upload: Upload, **values: Any) -> None:
    upload.meta.update(values)
    (upload.path.parent / f"{upload.token}.json").write_text(json.dumps(upload.meta))


def upload_discard(upload: Upload) -> None:
    upload.path.unlink(missing_ok=True)
    (upload.path.parent / f"{upload.token}.json").unlink(missing_ok=True)
