"""Log production trajectories from a JSONL file (one object per line, as the API takes them)."""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from webapp.projects.models import Project
from webapp.trajectories.services.production import (
    MAX_BATCH,
    ProductionItem,
    ProductionLogError,
    production_trajectories_log,
)


def _item(line_number: int, row: dict) -> ProductionItem:
    if not isinstance(row, dict) or "turns" not in row:
        raise CommandError(f"line {line_number}: expected an object with `turns` (and optionally id, task).")
    return ProductionItem(key=str(row.get("id") or ""), turns=row["turns"], task=row.get("task"),
                          truncated=bool(row.get("truncated")), latency_ms=row.get("latency_ms"),
                          tokens_in=int(row.get("tokens_in") or 0), tokens_out=int(row.get("tokens_out") or 0))


class Command(BaseCommand):
    help = "Log an agent's production runs into a project (idempotent by id); verified on the verify queue."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="JSONL file, or - for standard input")
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--verifier", help="name of a verifier of the project that scores them")

    def handle(self, *args, file: str, project: str, verifier: str | None, **options) -> None:
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"No project {project!r}.")
        chosen = None
        if verifier:
            chosen = target.verifiers.filter(name=verifier).first()
            if chosen is None:
                raise CommandError(f"No verifier named {verifier!r} in {project!r}.")
        stream = sys.stdin if file == "-" else open(file)  # noqa: SIM115 - closed below
        try:
            items = []
            for number, line in enumerate(stream, 1):
                if line.strip():
                    try:
                        items.append(_item(number, json.loads(line)))
                    except json.JSONDecodeError as exc:
                        raise CommandError(f"line {number}: not JSON ({exc.msg}).") from None
        finally:
            if stream is not sys.stdin:
                stream.close()
        created = 0
        for start in range(0, len(items), MAX_BATCH):
            try:
                result = production_trajectories_log(project=target, items=items[start:start + MAX_BATCH],
                                                     verifier=chosen)
            except ProductionLogError as exc:
                raise CommandError(str(exc)) from None
            created += result.created
        self.stdout.write(f"{created} new trajectories logged, {len(items) - created} already present")
