"""Turning failures into evals: selected trajectories become tasks of a dataset, linked to their source."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from environments.parsing import parse_tool_calls
from environments.types import Task as EnvTask
from webapp.datasets.models import Lineage, Source, Split, Task, TaskDataset
from webapp.datasets.services.datasets import dataset_create, dataset_new_version, task_content_hash
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
    rows = [
        Task(external_id=task.id, messages=task.messages, tools=task.tools, ground_truth=task.ground_truth,
             category=task.category, split=task.split, metadata=task.metadata, content_hash=digest,
             source=Source.PRODUCTION if trajectory.source == "production" else Source.HUMAN,
             origin_trajectory=trajectory)
        for trajectory, task, digest in new_tasks
    ]
    report.dataset = dataset_new_version(dataset=dataset, add=rows, actor=actor)
    report.created = len(rows)
    return report


class NewDatasetError(ValueError):
    """A name that cannot become a new dataset; the message says what to do instead."""


@transaction.atomic
def tasks_into_new_dataset(
    *, project, name: str, trajectories: list[Trajectory], split: str, actor
) -> EvalsReport:
    """A new dataset made of these trajectories' tasks (version 1 is created empty, version 2 holds
    the tasks, so its lineage says they came from trajectories); nothing is kept when none is usable."""
    name = name.strip()
    if not name or len(name) > 200 or "\x00" in name:
        raise NewDatasetError("Name the new dataset (1 to 200 characters).")
    if TaskDataset.objects.filter(project=project, name=name).exists():
        raise NewDatasetError(f"A dataset named {name!r} exists already: choose it in the list to add a version.")
    empty = dataset_create(project=project, name=name, tasks=[], actor=actor, source=Source.HUMAN,
                           description="Tasks turned from trajectories (failures into evals).",
                           lineage=Lineage.EDIT, lineage_detail={"note": "created empty, to receive trajectories"})
    report = tasks_from_trajectories(trajectories=trajectories, dataset=empty, split=split, actor=actor)
    if report.dataset is None:
        transaction.set_rollback(True)
    return report
