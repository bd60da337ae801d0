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
    dataset.content_hash = hashlib.sha256("".join(sorted(seen)).encode()).hexdigest()
    dataset.save(update_fields=["content_hash"])
    return dataset
