"""Reads of datasets shared by the pages and the API: versions with their counts, the task
browser's filter and keyset pages, one task with its provenance and the trajectories that ran it.

Counts come from each version's `stats` (computed once when the version is written: a version
never changes), so the datasets page costs the same with a million tasks as with ten. The task
browser's filter lives in the query string (`?split=held_out&category=email&text=invoice`);
`TaskFilter.from_query` is its one parser, and a bad value is a `FilterError` naming the parameter.
The text search matches the messages' text (Task.search_text, lower-cased): a trigram index
answers it on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from django.db.models import Count, Q, QuerySet

from webapp.common.pagination import Page, keyset_page
from webapp.common.timeline import request_text
from webapp.datasets.models import Source, Split, Task, TaskDataset
from webapp.datasets.services.datasets import ensure_stats
from webapp.projects.models import Project

TASK_ORDERING = ["id"]
VERSION_ORDERING = ["name", "-version"]
SPLITS = tuple(Split.values)
SOURCES = tuple(Source.values)
MAX_TEXT = 200
TASK_LIST_COLUMNS = ("id", "dataset_id", "external_id", "messages", "ground_truth", "category", "split", "source",
                     "origin_trajectory_id", "created_at")


class FilterError(ValueError):
    """A filter value that cannot be used; `errors` maps each parameter to what is wrong with it."""

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors.items()))


def _text(value: str, name: str, errors: dict[str, str], limit: int = MAX_TEXT) -> str:
    if "\x00" in value:
        errors[name] = "contains a NUL character; remove it"
        return ""
    if len(value) > limit:
        errors[name] = f"is longer than {limit} characters"
        return ""
    return value.strip()


def _choice(value: str, name: str, allowed: tuple[str, ...], errors: dict[str, str]) -> str:
    value = value.strip()
    if value and value not in allowed:
        errors[name] = f"{value[:40]!r} is not one of {', '.join(allowed)}"
        return ""
    return value


@dataclass(frozen=True)
class TaskFilter:
    """What the task browser shows; every field is a query parameter of the same name."""

    split: str = ""
    category: str = ""
    source: str = ""
    text: str = ""

    @classmethod
    def from_query(cls, query: Any) -> TaskFilter:
        """Parse a QueryDict or a plain dict; raises FilterError with one message per bad parameter."""
        def get(name: str) -> str:
            value = query.get(name) if hasattr(query, "get") else None
            return "" if value is None else str(value)

        errors: dict[str, str] = {}
        values = {
            "split": _choice(get("split"), "split", SPLITS, errors),
            "category": _text(get("category"), "category", errors, 64),
            "source": _choice(get("source"), "source", SOURCES, errors),
            "text": _text(get("text"), "text", errors),
        }
        if errors:
            raise FilterError(errors)
        return cls(**values)

    def as_query(self) -> dict[str, str]:
        return {name: value for name, value in asdict(self).items() if value}

    @property
    def is_empty(self) -> bool:
        return not self.as_query()


def filtered_tasks(dataset: TaskDataset, flt: TaskFilter) -> QuerySet[Task]:
    """The version's tasks that match `flt` (unordered; callers choose the order)."""
    rows = Task.objects.filter(dataset=dataset)
    exact = {"split": flt.split, "category": flt.category, "source": flt.source}
    rows = rows.filter(**{name: value for name, value in exact.items() if value})
    if flt.text:
        rows = rows.filter(search_text__contains=flt.text.lower())
    return rows


def task_page(dataset: TaskDataset, flt: TaskFilter, *, after: str | None, limit: int) -> Page:
    """One keyset page of the version's tasks in id order (the file's order); CursorError on a bad cursor."""
    rows = filtered_tasks(dataset, flt).only(*TASK_LIST_COLUMNS)
    return keyset_page(rows, ordering=TASK_ORDERING, after=after, limit=limit)


# ---------------------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------------------


def project_versions(project: Project) -> QuerySet[TaskDataset]:
    return TaskDataset.objects.filter(project=project).select_related("created_by", "parent")


def version_page(project: Project, *, after: str | None, limit: int, name: str = "") -> Page:
    """Dataset versions by name, newest version first, with their counts (from `stats`)."""
    rows = project_versions(project).defer("description", "parent__description")
    if name:
        rows = rows.filter(name=name)
    page = keyset_page(rows, ordering=VERSION_ORDERING, after=after, limit=limit)
    for dataset in page.items:
        ensure_stats(dataset)
    return page


def dataset_version(project: Project, dataset_id: int) -> TaskDataset | None:
    dataset = project_versions(project).filter(pk=dataset_id).first()
    if dataset is not None:
        ensure_stats(dataset)
    return dataset


def newest_versions(project: Project) -> list[TaskDataset]:
    """The newest version of each dataset (imports and generation add a version to one of them)."""
    newest: dict[str, TaskDataset] = {}
    for dataset in (TaskDataset.objects.filter(project=project).order_by("name", "-version")
                    .only("id", "name", "version", "environment")):
        newest.setdefault(dataset.name, dataset)
    return list(newest.values())


def version_children(dataset: TaskDataset) -> list[TaskDataset]:
    return list(TaskDataset.objects.filter(parent=dataset).order_by("version").only("id", "name", "version",
                                                                                     "lineage"))


def task_of(dataset: TaskDataset, task_id: int) -> Task | None:
    return (Task.objects.filter(dataset=dataset, pk=task_id)
            .select_related("origin_trajectory").defer("search_text").first())



def provenance_of(task: Task) -> dict:
    """Where a task came from, as recorded when it was written (import file and line, generator
    template and seed) plus its source trajectory; {} when nothing was recorded."""
    metadata = task.metadata if isinstance(task.metadata, dict) else {}
    recorded = metadata.get("provenance")
    provenance = dict(recorded) if isinstance(recorded, dict) else {}
    if not provenance.get("template") and isinstance(metadata.get("template"), str):
        provenance["template"] = metadata["template"]  # the generator's own record
    if task.origin_trajectory_id:
        provenance["trajectory"] = task.origin_trajectory_id
    return provenance


# ---------------------------------------------------------------------------------------
# One version by id or name (for the pages' and endpoints' forms)
# ---------------------------------------------------------------------------------------


def all_datasets() -> QuerySet[TaskDataset]:
    """Every dataset version, for webapp.projects.selectors.access.get_object_or_404_for_user to narrow to the
    caller's projects (the API's /datasets/{id} endpoints)."""
    return TaskDataset.objects.all()


def dataset_in_project(project: Project, dataset_id: int | None) -> TaskDataset | None:
    """The project's dataset version with this id, or None (another project's is as absent as a missing one);
    without stats filled in, unlike dataset_version: for the version a form names as the parent or target."""
    return TaskDataset.objects.filter(project=project, pk=dataset_id).first()


def dataset_choice(project: Project, dataset_id: int) -> TaskDataset | None:
    """Id, name and version of the project's dataset version with this id: a form's dataset menu lists it
    beside the newest versions when it asks for an older one."""
    return TaskDataset.objects.filter(project=project, pk=dataset_id).only("id", "name", "version").first()


def newest_dataset_named(project: Project, name: str) -> TaskDataset | None:
    """The newest version of the project's dataset of that name, or None (tasks are added to it)."""
    return TaskDataset.objects.filter(project=project, name=name).order_by("-version").first()


def dataset_names(project: Project) -> list[str]:
    """The names of the project's datasets, each once, sorted (a form's choice of dataset to add to)."""
    return sorted(set(TaskDataset.objects.filter(project=project).values_list("name", flat=True)))


def first_dataset_names(project: Project, limit: int) -> list[str]:
    """The first `limit` names of the project's datasets in the database's name order, each once (an error names
    some that exist)."""
    return list(TaskDataset.objects.filter(project=project).order_by("name").values_list("name", flat=True)
                .distinct()[:limit])


def dataset_named_version(project: Project, name: str, version: int) -> TaskDataset | None:
    """Version `version` of the project's dataset of that name, or None."""
    return TaskDataset.objects.filter(project=project, name=name, version=version).first()


def dataset_versions_by_name(project: Project, limit: int) -> list[TaskDataset]:
    """The project's dataset versions by name then newest version, at most `limit` (a form's dataset menu)."""
    return list(TaskDataset.objects.filter(project=project).order_by("name", "-version")[:limit])


def dataset_version_rows(project: Project, limit: int) -> list[dict]:
    """{"id", "name", "version"} of the project's dataset versions by name then newest version, at most `limit`."""
    return list(TaskDataset.objects.filter(project=project).order_by("name", "-version")
                .values("id", "name", "version")[:limit])


# ---------------------------------------------------------------------------------------
# One task by id, or a few by a search (the verifier playground)
# ---------------------------------------------------------------------------------------


def project_task(project: Project, task_id: int | None) -> Task | None:
    """The task with this id of one of the project's datasets, with its dataset, or None."""
    return Task.objects.filter(dataset__project=project, pk=task_id).select_related("dataset").first()


def _matching(dataset: TaskDataset, query: str) -> QuerySet[Task]:
    """The version's tasks whose id or category is `query`, or whose messages' text holds it (Task.search_text and
    its trigram index on PostgreSQL, with the (dataset, external_id) and (dataset, category, id) indexes, so a
    million-task version is not scanned); every task when `query` is empty."""
    tasks = Task.objects.filter(dataset=dataset)
    if query:
        tasks = tasks.filter(Q(external_id=query) | Q(category=query) | Q(search_text__contains=query.lower()))
    return tasks.order_by("id")


def tasks_matching(dataset: TaskDataset, query: str, limit: int) -> list[Task]:
    """The version's first `limit` tasks by id matching `query` (see _matching). Only id, external_id, category
    and split are loaded."""
    return list(_matching(dataset, query).only("id", "external_id", "category", "split")[:limit])


REQUEST_CHARS = 200  # of a task's request kept for a menu (the menu shows about 80)


@dataclass(frozen=True)
class TaskOption:
    """One task of a menu (the playground's task picker): its id, its request on one line, category and split."""

    pk: int
    external_id: str
    request: str
    category: str
    split: str


def task_option(task: Task) -> TaskOption:
    request = " ".join(request_text(task.messages).split())[:REQUEST_CHARS]
    return TaskOption(pk=task.pk, external_id=task.external_id, request=request, category=task.category,
                      split=task.split)


def task_options(dataset: TaskDataset, query: str, limit: int) -> tuple[list[TaskOption], bool]:
    """The version's first `limit` tasks by id matching `query` (see _matching) as menu options with their
    request, and whether more match: one indexed read of limit + 1 rows, whatever the version's size."""
    rows = list(_matching(dataset, query).only("id", "external_id", "category", "split", "messages")[:limit + 1])
    return [task_option(t) for t in rows[:limit]], len(rows) > limit


# ---------------------------------------------------------------------------------------
# The dataset a run trained elsewhere used, found by its task ids (run imports)
# ---------------------------------------------------------------------------------------

TASK_ID_SAMPLE = 500  # task ids looked up to find an imported run's dataset (one indexed query)


def dataset_holding_task_ids(project_id: int, task_ids: Iterable[str], *, name_hint: str = "") -> TaskDataset | None:
    """The project's dataset version that holds most of these task ids (at least half of up to TASK_ID_SAMPLE of
    them), or None: a run trained elsewhere names its tasks only by id. Ties go to the version whose name is
    `name_hint` (the run config's dataset file name, without its extension), then to the newest version."""
    keys = sorted({str(k) for k in task_ids if k})[:TASK_ID_SAMPLE]
    if not keys:
        return None
    counts = (Task.objects.filter(dataset__project_id=project_id, external_id__in=keys).order_by()
              .values("dataset_id").annotate(found=Count("external_id", distinct=True)))
    found = {row["dataset_id"]: row["found"] for row in counts if row["found"] * 2 >= len(keys)}
    if not found:
        return None
    versions = TaskDataset.objects.filter(pk__in=found)
    hint = name_hint.strip().lower()
    return max(versions, key=lambda d: (found[d.pk], d.name.lower() == hint, d.version, d.pk))
