"""Dataset writes: versions of task sets with content hashes, deduplicated within a version.

A version is never changed once written: importing, generating, adding trajectories or moving
splits makes the next version. Writes stream: tasks are inserted in batches, a parent's tasks
are copied inside the database (INSERT ... SELECT), and the version's hash and counts are read
back in order, so a version of a million tasks is never held in memory.

Imports, generation and split moves build on these (webapp.datasets.services.imports, .generation,
.splits); exports read (webapp.datasets.selectors.exports).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from itertools import islice

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Max, QuerySet
from django.db.models.functions import Collate
from django.utils import timezone

from environments.types import Task as EnvTask
from webapp.datasets.models import Lineage, Source, Split, Task, TaskDataset, search_text_of
from webapp.projects.models import AuditEvent, Project

INSERT_BATCH = 2_000
# Which lineage a version gets when its maker does not say (the source of its new tasks).
_LINEAGE_OF_SOURCE = {Source.SYNTHETIC: Lineage.GENERATION, Source.IMPORTED: Lineage.IMPORT,
                      Source.HUMAN: Lineage.IMPORT, Source.PRODUCTION: Lineage.IMPORT}


def task_content_hash(task: EnvTask) -> str:
    """What makes two tasks the same: the prompt, the tools and the expected answer."""
    body = json.dumps([task.messages, task.tools, task.ground_truth], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


def task_row(task: EnvTask, *, source: str, content_hash: str | None = None) -> Task:
    """An unsaved Task row for `task` (its dataset is set by the service that writes it)."""
    split = task.split if task.split in Split.values else Split.TRAIN
    return Task(
        external_id=str(task.id), messages=task.messages, tools=task.tools, ground_truth=task.ground_truth,
        category=task.category, split=split, source=source, metadata=task.metadata,
        content_hash=content_hash or task_content_hash(task), search_text=search_text_of(task.messages),
    )


class DatasetConflict(ValueError):
    """Another request wrote this dataset name (or this version) first: nothing of this one was written.

    Two requests that make the same new dataset, or the next version of the same one, at the same
    moment both find the same free version number; the database's unique (project, name, version)
    lets one through and the other gets this, never a 500 and never a silent extra version."""


def _create_version(**fields) -> TaskDataset:
    """TaskDataset.objects.create, with the unique-version race answered as DatasetConflict."""
    try:
        with transaction.atomic():
            return TaskDataset.objects.create(**fields)
    except IntegrityError:
        raise DatasetConflict(
            f"Version {fields['version']} of the dataset {fields['name']!r} was created by another request at the "
            "same moment: nothing was written. Look at the datasets list, then retry (as a new version of it, or "
            "under another name).") from None


DATASET_DELETED_ACTION = "dataset.delete"
"""The audit action of a deleted version (webapp.runs.services.dataset_delete writes it with name and version)."""


def deleted_version_highs(project: Project, names: Iterable[str]) -> dict[str, int]:
    """For each of these dataset names, the highest version number a deleted version had, from the audit log:
    a number once given is never given again, so "v3" names one set of tasks for good."""
    events = (AuditEvent.objects.filter(project=project, action=DATASET_DELETED_ACTION,
                                        target_type="datasets.taskdataset", data__name__in=list(names))
              .values_list("data__name", "data__version"))
    highs: dict[str, int] = {}
    for name, version in events:
        if isinstance(name, str) and isinstance(version, int) and not isinstance(version, bool):
            highs[name] = max(highs.get(name, 0), version)
    return highs


def _next_version(project: Project, name: str) -> int:
    kept = TaskDataset.objects.filter(project=project, name=name).aggregate(v=Max("version"))["v"] or 0
    return max(kept, deleted_version_highs(project, [name]).get(name, 0)) + 1


_COPY_COLUMNS = ("dataset_id", "external_id", "messages", "tools", "ground_truth", "category", "split", "source",
                 "metadata", "content_hash", "search_text", "origin_trajectory_id", "created_at")


def _insert(dataset: TaskDataset, rows: Iterable[Task]) -> int:
    """Insert unsaved rows into `dataset` in batches (COPY on PostgreSQL); returns how many."""
    count = 0
    iterator = iter(rows)
    while batch := list(islice(iterator, INSERT_BATCH)):
        for row in batch:
            row.dataset = dataset
            if not row.search_text:
                row.search_text = search_text_of(row.messages)
        if connection.vendor == "postgresql":
            _copy(batch)
        else:
            Task.objects.bulk_create(batch, batch_size=INSERT_BATCH)
        count += len(batch)
    return count


def _copy(batch: list[Task]) -> None:
    """COPY the rows in (Django's bulk INSERT spends most of its time quoting the JSON on the client)."""
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor, cursor.cursor.copy(
            f"COPY {Task._meta.db_table} ({', '.join(_COPY_COLUMNS)}) FROM STDIN") as copy:
        for row in batch:
            copy.write_row((
                row.dataset_id, row.external_id, json.dumps(row.messages), json.dumps(row.tools),
                None if row.ground_truth is None else json.dumps(row.ground_truth), row.category, row.split,
                row.source, json.dumps(row.metadata), row.content_hash, row.search_text, row.origin_trajectory_id,
                now))


@transaction.atomic
def dataset_create(
    *, project: Project, name: str, tasks: Iterable[EnvTask], actor, environment: str = "",
    source: str = Source.SYNTHETIC, description: str = "", lineage: str = "", lineage_detail: dict | None = None,
    new: bool = False,
) -> TaskDataset:
    """A new version of dataset `name` holding these tasks (duplicates by content are skipped).

    `new`: the caller asked for a new dataset (an import or a generation under a new name), so a
    name that exists by now, made meanwhile by someone else, is a DatasetConflict rather than its
    next version."""
    if new and TaskDataset.objects.filter(project=project, name=name).exists():
        raise DatasetConflict(f"A dataset named {name!r} was created meanwhile (by another request): nothing was "
                              "written. Add to it as its next version, or pick another name.")
    version = 1 if new else _next_version(project, name)
    parent = None if new else TaskDataset.objects.filter(project=project, name=name, version=version - 1).first()
    dataset = _create_version(
        project=project, name=name, version=version, environment=environment,
        description=description, parent=parent, created_by=actor,
        lineage=lineage or _LINEAGE_OF_SOURCE.get(source, ""), lineage_detail=lineage_detail or {},
    )
    seen: set[str] = set()

    def rows() -> Iterator[Task]:
        for task in tasks:
            digest = task_content_hash(task)
            if digest in seen:
                continue
            seen.add(digest)
            yield task_row(task, source=source, content_hash=digest)

    _insert(dataset, rows())
    dataset.content_hash = dataset_content_hash(seen)
    dataset.stats = version_stats(dataset)
    dataset.save(update_fields=["content_hash", "stats"])
    return dataset


def dataset_content_hash(task_hashes: Iterable[str]) -> str:
    """A dataset's identity: the SHA-256 of its tasks' hashes in sorted order."""
    return hashlib.sha256("".join(sorted(task_hashes)).encode()).hexdigest()


def stored_content_hash(dataset: TaskDataset) -> str:
    """dataset_content_hash of the stored tasks, read in hash order from the database (bounded memory)."""
    digest = hashlib.sha256()
    hashes = Task.objects.filter(dataset=dataset).values_list("content_hash", flat=True)
    # Byte order, as Python's sorted(): PostgreSQL's "C" collation (a locale could order otherwise).
    order = Collate("content_hash", "C") if connection.vendor == "postgresql" else "content_hash"
    for value in hashes.order_by(order).iterator(chunk_size=10_000):
        digest.update(value.encode())
    return digest.hexdigest()


def version_stats(dataset: TaskDataset) -> dict:
    """Task counts of a version, in all and by split, category and source (one aggregate query)."""
    stats: dict = {"tasks": 0, "split": {}, "category": {}, "source": {}}
    groups = (Task.objects.filter(dataset=dataset).order_by().values("split", "category", "source")
              .annotate(n=Count("id")))
    for group in groups:
        stats["tasks"] += group["n"]
        for key in ("split", "category", "source"):
            stats[key][group[key]] = stats[key].get(group[key], 0) + group["n"]
    for key in ("split", "category", "source"):
        stats[key] = dict(sorted(stats[key].items(), key=lambda item: (-item[1], item[0])))
    return stats


def copy_tasks(source: TaskDataset, target: TaskDataset, *, move: QuerySet | None = None, to_split: str = "") -> int:
    """Copy every task of `source` into `target` inside the database, in id order; the tasks of
    `move` (a queryset of `source`'s tasks) get split `to_split`. Returns how many were copied."""
    table = Task._meta.db_table
    split_sql, split_params = "split", []
    if move is not None:
        sub_sql, sub_params = move.order_by().values("id").query.sql_with_params()
        split_sql, split_params = f"CASE WHEN id IN ({sub_sql}) THEN %s ELSE split END", [*sub_params, to_split]
    columns = ("external_id, messages, tools, ground_truth, category, source, metadata, content_hash, "
               "search_text, origin_trajectory_id")
    sql = (f"INSERT INTO {table} (dataset_id, created_at, split, {columns}) "
           f"SELECT %s, %s, {split_sql}, {columns} FROM {table} WHERE dataset_id = %s ORDER BY id")
    with connection.cursor() as cursor:
        cursor.execute(sql, [target.pk, connection.ops.adapt_datetimefield_value(timezone.now()), *split_params,
                             source.pk])
        return cursor.rowcount


@transaction.atomic
def dataset_new_version(
    *, dataset: TaskDataset, add: Iterable[Task], actor, lineage: str | None = None,
    lineage_detail: dict | None = None, move: QuerySet | None = None, to_split: str = "",
) -> TaskDataset:
    """The next version of `dataset`: its tasks plus `add` (unsaved Task rows without a dataset).

    `move` (a queryset of `dataset`'s tasks) with `to_split` changes those tasks' split in the copy.
    The lineage defaults to "trajectories" when an added task has a source trajectory, else "edit".
    """
    if lineage is None:
        add = list(add)
        lineage = Lineage.TRAJECTORIES if any(t.origin_trajectory_id for t in add) else Lineage.EDIT
    successor = _create_version(
        project=dataset.project, name=dataset.name, version=_next_version(dataset.project, dataset.name),
        environment=dataset.environment, description=dataset.description, parent=dataset, created_by=actor,
        lineage=lineage, lineage_detail=lineage_detail or {},
    )
    copy_tasks(dataset, successor, move=move, to_split=to_split)
    _insert(successor, add)
    successor.content_hash = stored_content_hash(successor)
    successor.stats = version_stats(successor)
    successor.save(update_fields=["content_hash", "stats"])
    return successor


def ensure_stats(dataset: TaskDataset) -> dict:
    """A version's counts; versions written before counts were kept get them now (once)."""
    if not dataset.stats:
        dataset.stats = version_stats(dataset)
        TaskDataset.objects.filter(pk=dataset.pk).update(stats=dataset.stats)
    return dataset.stats


NAME_MAX = 200  # TaskDataset.name


def new_dataset_name_problem(project: Project, name: str) -> str | None:
    """Why `name` cannot name a new dataset of the project (empty, too long, taken), or None."""
    return dataset_name_format_problem(name) or dataset_name_taken(project, name)


def dataset_name_format_problem(name: str) -> str | None:
    """Why `name` is no dataset name at all (empty, too long, a NUL), or None: a bad field (the API's 422)."""
    if not name:
        return "Name the new dataset, or choose a dataset to add a version to."
    if len(name) > NAME_MAX or "\x00" in name:
        return f"A dataset name has at most {NAME_MAX} characters (and no NUL)."
    return None


def dataset_name_taken(project: Project, name: str) -> str | None:
    """What to do when another dataset of the project has `name`, or None. A conflict with what the
    project holds, not a bad field: the API answers 409, as it does when a concurrent request wins."""
    if TaskDataset.objects.filter(project=project, name=name).exists():
        return (f"A dataset named {name!r} exists already: choose it under “Add to dataset” to make its next "
                "version, or pick another name.")
    return None
