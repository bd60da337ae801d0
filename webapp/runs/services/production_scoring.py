"""Logging an agent's real (production) runs into a project, then verifying them on the verify queue."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db import transaction

from webapp.projects.models import Project
from webapp.runs.models import Job
from webapp.runs.services.jobs import job_create
from webapp.trajectories.models import Trajectory, search_text_of_turns
from webapp.verifiers.models import Verifier

MAX_BATCH = 1000


class ProductionLogError(ValueError):
    """A batch that cannot be logged; the message says which item and what to fix."""


@dataclass(frozen=True)
class ProductionItem:
    """One logged run: `key` makes logging idempotent (the same key twice stores one row)."""

    key: str
    turns: list[dict]
    task: dict | None = None
    truncated: bool = False
    latency_ms: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0


@dataclass
class LogResult:
    trajectories: list[Trajectory]
    created: int
    job: Job | None


def _validate(items: list[ProductionItem]) -> None:
    if not items:
        raise ProductionLogError("No trajectories given: send at least one.")
    if len(items) > MAX_BATCH:
        raise ProductionLogError(f"{len(items)} trajectories in one request; send at most {MAX_BATCH} per request.")
    for i, item in enumerate(items):
        if not item.turns or not all(isinstance(t, dict) and "role" in t for t in item.turns):
            raise ProductionLogError(f"Item {i} ({item.key!r}): `turns` must be a non-empty list of chat messages with a role.")
        if item.task is not None and not isinstance(item.task.get("messages"), list):
            raise ProductionLogError(f"Item {i} ({item.key!r}): `task.messages` must be a list of chat messages.")


def _keyed_items(items: list[ProductionItem]) -> dict[str, ProductionItem]:
    """Items by key, in order; a key repeated in the batch is the same run logged twice: the first wins."""
    keyed: dict[str, ProductionItem] = {}
    for item in items:
        keyed.setdefault(item.key or uuid.uuid4().hex, item)
    return keyed


def _production_row(project: Project, key: str, item: ProductionItem) -> Trajectory:
    return Trajectory(
        project=project, task_key=key, split="production", source="production", turns=item.turns,
        search_text=search_text_of_turns(item.turns),
        task_snapshot=item.task, flags=["truncated"] if item.truncated else [], latency_ms=item.latency_ms,
        tokens_in=item.tokens_in, tokens_out=item.tokens_out,
    )


@transaction.atomic
def production_trajectories_log(
    *, project: Project, items: list[ProductionItem], verifier: Verifier | None = None
) -> LogResult:
    """Store the items (skipping keys already logged) and queue their verification.

    Idempotent by key, also under concurrency: the unique key (project, task_key) of
    production rows and ON CONFLICT DO NOTHING make a second copy impossible, and the
    project row's lock orders concurrent batches, so each one's `created` count and
    verify job cover exactly the rows it stored.
    """
    _validate(items)
    if verifier is not None and verifier.project_id != project.pk:
        raise ProductionLogError("The verifier belongs to another project.")
    Project.objects.select_for_update().filter(pk=project.pk).first()
    keys = [item.key or "" for item in items]
    keyed = _keyed_items(items)
    existing = set(
        Trajectory.objects.filter(project=project, source="production", task_key__in=list(keyed))
        .values_list("task_key", flat=True)
    )
    fresh_keys = [key for key in keyed if key not in existing]
    Trajectory.objects.bulk_create([_production_row(project, key, keyed[key]) for key in fresh_keys],
                                   ignore_conflicts=True)
    stored = {t.task_key: t for t in Trajectory.objects.filter(project=project, source="production",
                                                               task_key__in=list(keyed))}
    job = None
    version = verifier.latest_version if verifier is not None else None
    if version is not None and fresh_keys:
        job = job_create(project=project, kind="verify", payload={
            "verifier_version_id": version.pk, "trajectory_ids": [stored[key].pk for key in fresh_keys],
        })
    given = set(keys)
    generated = iter(key for key in keyed if key not in given)
    ordered = [stored[key] if key else stored[next(generated)] for key in keys]
    return LogResult(trajectories=ordered, created=len(fresh_keys), job=job)
