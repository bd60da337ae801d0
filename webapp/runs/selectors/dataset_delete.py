"""What deleting a dataset version would take with it, and what keeps it: its page, the API and the job read this.

A version goes with its tasks. What keeps it, each said with what to do:

- a run that used it (training, evaluation, baseline, imported): a run's record names the tasks it
  trained on or measured, and its trajectories link them; delete those runs first;
- an experiment on it: the experiment's gate record reads its held-out tasks;
- a deletion of it already queued.

Later versions made from it (a split move, an edit, an import or generation into a new version) hold
copies of their tasks, so they stay; they lose only the link to their parent and say instead which
version it was. This lives on the runs floor (not in webapp.datasets) because runs, experiments and
jobs are what it has to ask about.

Counts are a handful of indexed queries: the task count is the version's own stats (a version never
changes once written), so the plan costs the same at a million tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import QuerySet

from webapp.datasets.models import Task, TaskDataset
from webapp.runs.models import Experiment, Job, Run
from webapp.runs.selectors.run_delete import OPEN_JOB_STATES

DATASET_DELETE_JOB_KIND = "dataset_delete"
NAMES_SHOWN = 5


def dataset_label(dataset: TaskDataset) -> str:
    """How a version is named in messages and on the Jobs page: "name v3"."""
    return f"{dataset.name} v{dataset.version}"


@dataclass(frozen=True)
class DatasetDeletePlan:
    """The version, what goes with it, the later versions that lose their parent link, and what keeps it."""

    dataset: TaskDataset
    tasks: int
    later_versions: list[TaskDataset]
    runs: int
    experiments: int
    blockers: list[str] = field(default_factory=list)
    pending_job: Job | None = None

    @property
    def allowed(self) -> bool:
        return not self.blockers and self.pending_job is None

    def as_dict(self) -> dict:
        return {
            "dataset_id": self.dataset.pk, "name": self.dataset.name, "version": self.dataset.version,
            "content_hash": self.dataset.content_hash, "tasks": self.tasks,
            "later_versions": [{"id": d.pk, "name": d.name, "version": d.version} for d in self.later_versions],
            "runs": self.runs, "experiments": self.experiments,
            "blockers": list(self.blockers), "pending_job_id": self.pending_job.pk if self.pending_job else None,
        }


def open_dataset_deletions(project_id: int) -> QuerySet[Job]:
    """The project's dataset deletion jobs that are queued or running (their payload names the version)."""
    return Job.objects.filter(project_id=project_id, kind=DATASET_DELETE_JOB_KIND, state__in=OPEN_JOB_STATES)


def pending_dataset_deletion(dataset: TaskDataset) -> Job | None:
    """The deletion job already queued or running for this version, if any."""
    return open_dataset_deletions(dataset.project_id).filter(payload__dataset_id=dataset.pk).order_by("id").first()


def datasets_being_deleted(project_id: int, dataset_ids: list[int]) -> set[int]:
    """Which of these versions have a deletion job queued or running (the datasets list marks them), in one query."""
    if not dataset_ids:
        return set()
    named = (open_dataset_deletions(project_id).filter(payload__dataset_id__in=dataset_ids)
             .values_list("payload__dataset_id", flat=True))
    return {dataset_id for dataset_id in named if isinstance(dataset_id, int)}


def task_count(dataset: TaskDataset) -> int:
    """The version's tasks: its stats (written once with the version, which never changes), else a count."""
    stats = dataset.stats if isinstance(dataset.stats, dict) else {}
    counted = stats.get("tasks")
    if isinstance(counted, int) and not isinstance(counted, bool) and counted >= 0:
        return counted
    return Task.objects.filter(dataset_id=dataset.pk).count()


def _names(rows: list, label) -> str:
    shown = ", ".join(label(row) for row in rows[:NAMES_SHOWN])
    return shown + (" and more" if len(rows) > NAMES_SHOWN else "")


def _blockers(dataset: TaskDataset, runs: int, experiments: int) -> list[str]:
    blockers: list[str] = []
    if runs:
        first = list(Run.objects.filter(dataset_id=dataset.pk).only("pk", "name").order_by("id")[:NAMES_SHOWN + 1])
        blockers.append(f"{runs} run{'s' if runs != 1 else ''} used this version: "
                        f"{_names(first, lambda r: f'#{r.pk} {r.name!r}')}. A run's record names the tasks it trained "
                        "on or measured; delete those runs first (the runs table filters by dataset).")
    if experiments:
        first = list(Experiment.objects.filter(dataset_id=dataset.pk).only("pk", "name").order_by("id")
                     [:NAMES_SHOWN + 1])
        blockers.append(f"Experiment{'s' if experiments != 1 else ''} {_names(first, lambda e: repr(e.name))} "
                        f"{'are' if experiments != 1 else 'is'} on this version: an experiment's gate record reads "
                        "its held-out tasks, so the version stays. Delete the experiment first, with its runs (its "
                        "page has Delete…).")
    return blockers


def dataset_delete_plan(dataset: TaskDataset) -> DatasetDeletePlan:
    """What deleting `dataset` would remove and, when it cannot be deleted now, why."""
    runs = Run.objects.filter(dataset_id=dataset.pk).count()
    experiments = Experiment.objects.filter(dataset_id=dataset.pk).count()
    return DatasetDeletePlan(
        dataset=dataset, tasks=task_count(dataset),
        later_versions=list(TaskDataset.objects.filter(parent_id=dataset.pk).order_by("name", "version")),
        runs=runs, experiments=experiments, blockers=_blockers(dataset, runs, experiments),
        pending_job=pending_dataset_deletion(dataset),
    )
