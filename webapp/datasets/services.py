"""Dataset writes: import tasks with content hashes, deduplicated within a dataset."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from django.db import transaction
from django.db.models import Max

from environments.types import Task as EnvTask
from webapp.datasets.models import Source, Split, Task, TaskDataset
from webapp.projects.models import Project


def task_content_hash(task: EnvTask) -> str:
    """What makes two tasks the same: the prompt, the tools and the expected answer."""
    body = json.dumps([task.messages, task.tools, task.ground_truth], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


@transaction.atomic
def dataset_create(
    *, project: Project, name: str, tasks: Iterable[EnvTask], actor, environment: str = "",
    source: str = Source.SYNTHETIC, description: str = "",
) -> TaskDataset:
    """A new version of dataset `name` holding these tasks (duplicates by content are skipped)."""
    version = (TaskDataset.objects.filter(project=project, name=name).aggregate(v=Max("version"))["v"] or 0) + 1
    parent = TaskDataset.objects.filter(project=project, name=name, version=version - 1).first()
    dataset = TaskDataset.objects.create(
        project=project, name=name, version=version, environment=environment,
        description=description, parent=parent, created_by=actor,
    )
    rows, seen = [], set()
    for task in tasks:
        digest = task_content_hash(task)
        if digest in seen:
            continue
        seen.add(digest)
        split = task.split if task.split in Split.values else Split.TRAIN
        rows.append(Task(
            dataset=dataset, external_id=str(task.id), messages=task.messages, tools=task.tools,
            ground_truth=task.ground_truth, category=task.category, split=split, source=source,
            metadata=task.metadata, content_hash=digest,
        ))
    Task.objects.bulk_create(rows, batch_size=500)
    dataset.content_hash = dataset_content_hash(seen)
    dataset.save(update_fields=["content_hash"])
    return dataset


def dataset_content_hash(task_hashes: Iterable[str]) -> str:
    """A dataset's identity: the SHA-256 of its tasks' hashes in sorted order."""
    return hashlib.sha256("".join(sorted(task_hashes)).encode()).hexdigest()


@transaction.atomic
def dataset_new_version(*, dataset: TaskDataset, add: list[Task], actor) -> TaskDataset:
    """The next version of `dataset`: its tasks plus `add` (unsaved Task rows without a dataset)."""
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
    for task in add:
        task.dataset = successor
    Task.objects.bulk_create(copies + add, batch_size=1000)
    successor.content_hash = dataset_content_hash(t.content_hash for t in copies + add)
    successor.save(update_fields=["content_hash"])
    return successor
