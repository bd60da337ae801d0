"""Moving tasks between train, validation and held_out: the tasks a filter matches get another
split in a new version (the version they were in is left as it was: runs keep what they used)."""

from __future__ import annotations

from webapp.datasets.models import Lineage, Split, TaskDataset
from webapp.datasets.selectors.datasets import TaskFilter, filtered_tasks
from webapp.datasets.services.datasets import dataset_new_version


class SplitMoveError(ValueError):
    """A move that would change nothing or cannot be made; `field` names the form field."""

    def __init__(self, message: str, field: str = "to_split"):
        self.field = field
        super().__init__(message)


def dataset_split_move(*, dataset: TaskDataset, flt: TaskFilter, to_split: str, actor) -> tuple[TaskDataset, int]:
    """A new version of `dataset` where the tasks matching `flt` are in `to_split`; returns it and how many moved."""
    if to_split not in Split.values:
        raise SplitMoveError(f"{str(to_split)[:40]!r} is not a split: choose {', '.join(Split.values)}.")
    moving = filtered_tasks(dataset, flt).exclude(split=to_split)
    moved = moving.count()
    if moved == 0:
        what = "the filter matches no task" if not filtered_tasks(dataset, flt).exists() else \
            f"every task the filter matches is in {to_split} already"
        raise SplitMoveError(f"Nothing to move: {what}.")
    detail = {"split_move": {"filter": flt.as_query(), "to": to_split, "moved": moved}}
    successor = dataset_new_version(dataset=dataset, add=[], actor=actor, lineage=Lineage.EDIT,
                                    lineage_detail=detail, move=moving, to_split=to_split)
    return successor, moved
