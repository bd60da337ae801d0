"""Tasks for a job: read the dataset's Task JSONL, pick a split, cap its size.

A dataset file holds environments.types.Task rows (Task.to_dict) or NeMo Gym task rows;
each row's `split` says where it belongs. Without a dataset file the environment's built-in
task set is used (json_tool_call: workplace requests as one-call tasks; workplace: the
generated workplace tasks).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from environments.types import Task

BUILTIN_TASK_COUNT = 3000
BUILTIN_SEED = 0


class DataError(ValueError):
    """The dataset cannot serve the job; the message says which file and what to change."""


def _task_from_row(row: dict[str, Any], path: Path, line: int) -> Task:
    if "responses_create_params" in row:
        from environments.nemo_gym import task_row_to_task

        return task_row_to_task(row)
    if "id" not in row or "messages" not in row:
        raise DataError(
            f"{path}:{line}: a task row needs 'id' and 'messages' (environments.types.Task) "
            "or 'responses_create_params' (NeMo Gym)"
        )
    return Task.from_dict(row)


def load_tasks(path: str | Path) -> list[Task]:
    """Every task of a JSONL file, in file order; blank lines are skipped."""
    file = Path(path)
    if not file.is_file():
        raise DataError(f"dataset file {file} does not exist; check 'dataset' in the run config")
    tasks = []
    with open(file, encoding="utf-8") as f:
        for number, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except ValueError as exc:
                raise DataError(f"{file}:{number}: not a JSON object ({exc})") from exc
            tasks.append(_task_from_row(row, file, number))
    if not tasks:
        raise DataError(f"dataset file {file} holds no tasks")
    return tasks


def builtin_tasks(environment: str) -> list[Task]:
    """The environment's own task set, for runs without a dataset file."""
    if environment == "json_tool_call":
        from environments.json_tool_call_tasks import workplace_json_tasks

        return workplace_json_tasks(BUILTIN_TASK_COUNT, BUILTIN_SEED)
    if environment == "workplace":
        from environments.workplace.generator import generate_tasks

        return generate_tasks(BUILTIN_TASK_COUNT, BUILTIN_SEED)
    raise DataError(
        f"environment {environment!r} has no built-in task set; set 'dataset' to a Task JSONL file"
    )


def select_split(
    tasks: Sequence[Task], split: str, *, max_tasks: int | None = None, source: str = "dataset"
) -> list[Task]:
    """Tasks of one split (at most max_tasks, in order); an empty split is an error."""
    chosen = [t for t in tasks if t.split == split]
    if not chosen:
        present = Counter(t.split for t in tasks)
        listing = ", ".join(f"{name!r} ({n})" for name, n in sorted(present.items()))
        raise DataError(
            f"{source} has no tasks in split {split!r} (splits present: {listing}); "
            "change the split in the run config or add tasks to that split"
        )
    return chosen[:max_tasks] if max_tasks is not None else chosen


def has_split(tasks: Sequence[Task], split: str) -> bool:
    return any(t.split == split for t in tasks)


class TaskSource:
    """The tasks of one run, loaded once and served by split."""

    def __init__(self, dataset: str | None, environment: str, max_tasks: int | None) -> None:
        self.max_tasks = max_tasks
        if dataset is not None:
            self.tasks = load_tasks(dataset)
            self.name = f"dataset file {dataset}"
        else:
            self.tasks = builtin_tasks(environment)
            self.name = f"the built-in {environment} task set"
        self.by_id = {t.id: t for t in self.tasks}

    def split(self, name: str) -> list[Task]:
        return select_split(self.tasks, name, max_tasks=self.max_tasks, source=self.name)

    def has(self, name: str) -> bool:
        return has_split(self.tasks, name)
