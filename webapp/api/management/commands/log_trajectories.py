"""Log production trajectories from a JSONL file (one object per line, as the API takes them).

The file is read twice, streaming, so memory stays bounded whatever its size: first every
line is checked against the API's own schema and every bad line is reported with its
number and reason; then, only if all lines are good (or `--skip-bad-lines` says to leave
the bad ones out), the good lines are written in one transaction. A bad line therefore
never leaves half a file logged.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from pydantic import ValidationError

from webapp.api.schemas import ProductionTrajectoryIn
from webapp.projects.models import Project
from webapp.runs.services.production_scoring import (
    MAX_BATCH,
    ProductionItem,
    ProductionLogError,
    production_trajectories_log,
)

# Bad lines listed in the final summary (each one was already reported as it was found).
SUMMARY_LINES = 20


@dataclass
class FileCheck:
    """The outcome of the validation pass: how many lines held a trajectory, and which were bad."""

    good: int = 0
    bad: list[int] = field(default_factory=list)
    first_reasons: list[str] = field(default_factory=list)

    def add_bad(self, number: int, reason: str) -> str:
        self.bad.append(number)
        line = f"line {number}: {reason}"
        if len(self.first_reasons) < SUMMARY_LINES:
            self.first_reasons.append(line)
        return line


def _schema_error(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "line"
        parts.append(f"{where}: {error['msg']}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def line_item(raw: bytes) -> ProductionItem:
    """One line as a ProductionItem, or ValueError saying what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at position {exc.start})") from None
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object with `turns`, got {type(row).__name__}")
    try:
        return ProductionTrajectoryIn.model_validate(row).to_item()
    except ValidationError as exc:
        raise ValueError(_schema_error(exc)) from None


def numbered_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each non-blank line, counting every physical line."""
    with path.open("rb") as stream:
        for number, raw in enumerate(stream, 1):
            if raw.strip():
                yield number, raw


class Command(BaseCommand):
    help = ("Log an agent's production runs from a JSONL file into a project (idempotent by id); "
            "verified on the verify queue. Nothing is written if any line is bad, unless --skip-bad-lines.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="JSONL file, or - for standard input")
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--verifier", help="name of a verifier of the project that scores them")
        parser.add_argument("--skip-bad-lines", action="store_true",
                            help="log the good lines even when some are bad (the bad ones are listed)")

    def handle(self, *args, file: str, project: str, verifier: str | None, skip_bad_lines: bool,
               **options) -> None:
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"No project {project!r}.")
        chosen = None
        if verifier:
            chosen = target.verifiers.filter(name=verifier).first()
            if chosen is None:
                raise CommandError(f"No verifier named {verifier!r} in {project!r}.")
        with tempfile.TemporaryDirectory() as spool:
            path = self._readable_path(file, Path(spool))
            check = self._check(path)
            self._refuse_or_warn(check, skip_bad_lines)
            created = self._write(path, set(check.bad), target, chosen)
        skipped = f", {len(check.bad)} bad lines skipped" if check.bad else ""
        self.stdout.write(f"{check.good} lines read: {created} new trajectories logged, "
                          f"{check.good - created} already present{skipped}")

    def _readable_path(self, file: str, spool: Path) -> Path:
        """The file itself, or standard input spooled to disk (it is read twice)."""
        if file != "-":
            path = Path(file)
            if not path.is_file():
                raise CommandError(f"No file {file!r}.")
            return path
        path = spool / "stdin.jsonl"
        with path.open("wb") as out:
            shutil.copyfileobj(sys.stdin.buffer, out)
        return path

    def _check(self, path: Path) -> FileCheck:
        check = FileCheck()
        for number, raw in numbered_lines(path):
            try:
                line_item(raw)
            except ValueError as exc:
                self.stderr.write(check.add_bad(number, str(exc)))
            else:
                check.good += 1
        if not check.good and not check.bad:
            raise CommandError("The file holds no trajectories (every line is blank).")
        return check

    def _refuse_or_warn(self, check: FileCheck, skip_bad_lines: bool) -> None:
        if not check.bad:
            return
        listed = "\n".join(check.first_reasons) + ("\n..." if len(check.bad) > SUMMARY_LINES else "")
        if not skip_bad_lines:
            raise CommandError(f"{len(check.bad)} bad line(s); nothing was written. Fix them, or pass "
                               f"--skip-bad-lines to log the good lines and leave these out.\n{listed}")
        if not check.good:
            raise CommandError(f"Every line is bad; nothing was written.\n{listed}")

    @transaction.atomic
    def _write(self, path: Path, bad: set[int], project: Project, verifier) -> int:
        """Log the good lines batch by batch, all in one transaction: all of them or none."""
        created, batch = 0, []
        for number, raw in numbered_lines(path):
            if number in bad:
                continue
            batch.append(line_item(raw))
            if len(batch) == MAX_BATCH:
                created += self._log(batch, project, verifier)
                batch = []
        if batch:
            created += self._log(batch, project, verifier)
        return created

    def _log(self, batch: list[ProductionItem], project: Project, verifier) -> int:
        try:
            return production_trajectories_log(project=project, items=batch, verifier=verifier).created
        except ProductionLogError as exc:
            raise CommandError(str(exc)) from None
