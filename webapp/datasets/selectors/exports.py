"""Exporting a dataset version as Crucible JSONL or NeMo Gym JSONL, streamed.

The rows are read in keyset chunks (by id) and written a block of lines at a time, so a
version of a million tasks is never built in memory: the page and the API hand the generator to
a StreamingHttpResponse. A Crucible line is {"task", "trajectory": null, "result": null} (what
`python -m environments` and the import read back); a NeMo Gym line is a task row, the row that
was imported when the task came from a NeMo Gym file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import fields

from django.db.models import QuerySet

from environments import nemo_gym
from environments.types import Task as EnvTask
from webapp.datasets.models import Task, TaskDataset

EXPORT_COLUMNS = ("external_id", "messages", "tools", "ground_truth", "category", "split", "metadata")
CHUNK_ROWS = 2_000  # rows read per database round trip
LINES_PER_BLOCK = 200  # lines joined into one piece of the response


def env_task(row: Task, environment: str) -> EnvTask:
    """A stored task as the environments' Task value."""
    return EnvTask(id=row.external_id, messages=row.messages, tools=row.tools, ground_truth=row.ground_truth,
                   category=row.category, split=row.split, environment=environment, metadata=row.metadata)


_TASK_FIELDS = tuple(f.name for f in fields(EnvTask))


def _crucible_line(task: EnvTask) -> dict:
    """nemo_gym.crucible_record(task) without its deep copy (asdict): the values are only serialised."""
    return {"task": {name: getattr(task, name) for name in _TASK_FIELDS}, "trajectory": None, "result": None}


def _nemo_line(task: EnvTask) -> dict:
    """nemo_gym.task_to_task_row, with each ground-truth call's arguments in the text the imported row had
    (kept at import) when that text still decodes to the same arguments."""
    row = nemo_gym.task_to_task_row(task)
    meta = task.metadata.get("nemo_gym") if isinstance(task.metadata, dict) else None
    originals = meta.get("ground_truth_arguments") if isinstance(meta, dict) else None
    truth = row.get("ground_truth")
    if isinstance(originals, list) and isinstance(truth, list) and len(originals) == len(truth):
        for call, text in zip(truth, originals, strict=True):
            try:
                if isinstance(text, str) and json.loads(text) == json.loads(call["arguments"]):
                    call["arguments"] = text
            except (ValueError, TypeError, KeyError):
                continue
    return row


EXPORT_FORMATS: dict[str, tuple[str, Callable[[EnvTask], dict]]] = {
    "crucible": ("Crucible JSONL", _crucible_line),
    "nemo_gym": ("NeMo Gym JSONL", _nemo_line),
}


def export_lines(dataset: TaskDataset, fmt: str, tasks: QuerySet[Task] | None = None) -> Iterator[str]:
    """The version's tasks (or `tasks`, a queryset of them) as JSONL text, a block of lines at a time.

    Read a keyset chunk at a time (id > the last one sent, CHUNK_ROWS rows after a first chunk of one block),
    not through a server-side cursor: outside a transaction Django declares that cursor WITH HOLD, and
    PostgreSQL then reads the whole version before the first row is sent (1.3 s for 100,000 tasks).
    A version's tasks never change, so the chunks read one consistent version."""
    _, convert = EXPORT_FORMATS[fmt]
    rows = tasks if tasks is not None else Task.objects.filter(dataset=dataset)
    environment = dataset.environment
    block: list[str] = []
    last, size = 0, LINES_PER_BLOCK  # the first chunk one block long, so the download starts at once
    while True:
        chunk = list(rows.filter(id__gt=last).order_by("id").values_list("id", *EXPORT_COLUMNS)[:size])
        for _pk, external_id, messages, tools, truth, category, split, metadata in chunk:
            task = EnvTask(id=external_id, messages=messages, tools=tools, ground_truth=truth, category=category,
                           split=split, environment=environment, metadata=metadata)
            block.append(json.dumps(convert(task), ensure_ascii=False, separators=(",", ":")))
            if len(block) >= LINES_PER_BLOCK:
                yield "\n".join(block) + "\n"
                block = []
        if len(chunk) < size:
            break
        last, size = chunk[-1][0], CHUNK_ROWS
    if block:
        yield "\n".join(block) + "\n"


def export_filename(dataset: TaskDataset, fmt: str) -> str:
    """`<name>-v<version>.<format>.jsonl` with only safe characters (the name is anyone's text)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", dataset.name).strip("-.")[:80] or "dataset"
    return f"{stem}-v{dataset.version}.{fmt.replace('_', '-')}.jsonl"
