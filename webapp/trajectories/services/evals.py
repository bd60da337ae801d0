"""Turning failures into evals: selected trajectories become tasks of a dataset, linked to their source."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Max

from environments.parsing import parse_tool_calls
from environments.types import Task as EnvTask
from webapp.datasets.models import Source, Split, Task, TaskDataset
from webapp.datasets.services import task_content_hash
from webapp.trajectories.models import Trajectory
from webapp.trajectories.services.verification import env_task_of


@dataclass
class EvalsReport:
    dataset: TaskDataset | None = None
    created: int = 0
    duplicates: int = 0
    skipped: list[dict] = field(default_factory=list)


def _ground_truth(trajectory: Trajectory, task: EnvTask) -> list[dict] | None:
    """A reviewer's corrected output wins; else the source task's own ground truth."""
    review = trajectory.reviews.exclude(corrected_output="").order_by("-updated_at").first()
    if review is not None:
        parsed = parse_tool_calls(review.corrected_output, task.tool_specs() or None, mode="lenient")
        if parsed.calls and not parsed.errors:
            return [{"name": c.name, "arguments": c.arguments} for c in parsed.calls]
    return task.ground_truth


@transaction.atomic
def tasks_from_trajectories(
    *, trajectories: list[Trajectory], dataset: TaskDataset, split: str, actor
) -> EvalsReport:
    """A new version of `dataset` with the old tasks plus one task per usable trajectory."""
    if split not in Split.values:
        raise ValueError(f"Unknown split {split!r}: choose one of {', '.join(Split.values)}.")
    report = EvalsReport()
    existing = set(dataset.tasks.values_list("content_hash", flat=True))
    new_tasks: list[tuple[Trajectory, EnvTask, str]] = []
    for trajectory in trajectories:
        task = env_task_of(trajectory)
        if task is None:
            report.skipped.append({"trajectory": trajectory.pk, "reason": "no task was stored with this trajectory"})
            continue
        truth = _ground_truth(trajectory, task)
        if not truth:
            report.skipped.append({"trajectory": trajectory.pk,
                                   "reason": "no ground truth: add a corrected output in review first"})
            continue
        candidate = EnvTask(id=f"from-trajectory-{trajectory.pk}", messages=task.messages, tools=task.tools,
                            ground_truth=truth, category=task.category, split=split,
                            metadata={**task.metadata, "origin_trajectory": trajectory.pk})
        digest = task_content_hash(candidate)
        if digest in existing:
            report.duplicates += 1
            continue
        existing.add(digest)
        new_tasks.append((trajectory, candidate, digest))
    if not new_tasks:
        return report
    report.dataset = _next_version_with(dataset, new_tasks, actor)
    report.created = len(new_tasks)
    return report


def _next_version_with(dataset: TaskDataset, new_tasks: list[tuple[Trajectory, EnvTask, str]], actor) -> TaskDataset:
    import hashlib

    version = (TaskDataset.objects.filter(project=dataset.project, name=dataset.name)
               .aggregate(v=Max("version"))["v"] or 0) + 1
    successor = TaskDataset.objects.create(
        project=dataset.project, name=dataset.name, version=version, environment=dataset.environment,
        description=dataset.description, parent=dataset, created_by=actor,
    )
    copies = [
        Task(dataset=successor, external_id=t.external_id, messages=t.messages, tools=t.tools,
             ground_truth=t.ground_truth, category=t.category, split=t.split, source=t.source, metadata=t.metadata,
             content_hash=t.content_hash, origin_trajectory_id=t.origin_trajectory_id)
        for t in dataset.tasks.all().iterator(chunk_size=1000)
    ]
    copies += [
        Task(dataset=successor, external_id=task.id, messages=task.messages, tools=task.tools,
             ground_truth=task.ground_truth, category=task.category, split=task.split, source=Source.PRODUCTION
             if trajectory.source == "production" else Source.HUMAN, metadata=task.metadata, content_hash=digest,
             origin_trajectory=trajectory)
        for trajectory, task, digest in new_tasks
    ]
    Task.objects.bulk_create(copies, batch_size=1000)
    hashes = sorted(c.content_hash for c in copies)
    successor.content_hash = hashlib.sha256("".join(hashes).encode()).hexdigest()
    successor.save(update_fields=["content_hash"])
    return successor
