"""What deleting an experiment would take with it, and what keeps it: its page, the API and the job read this.

An experiment goes with all its stage runs (baseline, SFT, GRPO, held-out evaluation, regression
stages) and the evaluation runs of their checkpoints: its gate record is made of them, and a run
of it could not be deleted alone. What keeps the runs keeps the experiment (webapp.runs.selectors
.run_delete.deletion_blockers: a job working on one of them, a promoted checkpoint, a run trained
from one of them outside the experiment, a verifier check drawn from their outputs, reviews for a
non-owner), and so does a stage still running: cancel it first, the experiment then ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import QuerySet

from webapp.runs.models import Experiment, ExperimentState, Job, Run
from webapp.runs.selectors.run_delete import (
    OPEN_JOB_STATES,
    FolderSize,
    deletion_blockers,
    evaluations_of,
    held_run_ids,
    holdings_of,
)

EXPERIMENT_DELETE_JOB_KIND = "experiment_delete"


@dataclass(frozen=True)
class ExperimentDeletePlan:
    """The experiment, the runs that go with it, what they hold, and why it cannot go now (if so)."""

    experiment: Experiment
    runs: list[Run]
    trajectories: int
    reviews: int
    metric_points: int
    checkpoints: int
    jobs: int
    folder: FolderSize
    blockers: list[str] = field(default_factory=list)
    pending_job: Job | None = None

    @property
    def run_ids(self) -> list[int]:
        return [run.pk for run in self.runs]

    @property
    def allowed(self) -> bool:
        return not self.blockers and self.pending_job is None

    def as_dict(self) -> dict:
        return {
            "experiment_id": self.experiment.pk, "name": self.experiment.name, "state": self.experiment.state,
            "runs": [{"id": r.pk, "name": r.name, "kind": r.kind, "stage": r.stage} for r in self.runs],
            "trajectories": self.trajectories, "reviews": self.reviews, "metric_points": self.metric_points,
            "checkpoints": self.checkpoints, "jobs": self.jobs,
            "folder_files": self.folder.files, "folder_bytes": self.folder.bytes,
            "folder_size_complete": self.folder.complete,
            "blockers": list(self.blockers), "pending_job_id": self.pending_job.pk if self.pending_job else None,
        }


def open_experiment_deletions(project_id: int) -> QuerySet[Job]:
    """The project's experiment deletion jobs that are queued or running (their payload names the experiment)."""
    return Job.objects.filter(project_id=project_id, kind=EXPERIMENT_DELETE_JOB_KIND, state__in=OPEN_JOB_STATES)


def pending_experiment_deletion(experiment: Experiment) -> Job | None:
    """The deletion job already queued or running for this experiment, if any."""
    return (open_experiment_deletions(experiment.project_id).filter(payload__experiment_id=experiment.pk)
            .order_by("id").first())


def experiments_being_deleted(project_id: int, experiment_ids: list[int]) -> set[int]:
    """Which of these experiments have a deletion job queued or running (the list marks them), in one query."""
    if not experiment_ids:
        return set()
    named = (open_experiment_deletions(project_id).filter(payload__experiment_id__in=experiment_ids)
             .values_list("payload__experiment_id", flat=True))
    return {experiment_id for experiment_id in named if isinstance(experiment_id, int)}


def experiment_runs(experiment: Experiment) -> list[Run]:
    """Its stage runs, then the evaluation runs of their checkpoints that are not stages themselves."""
    stages = list(Run.objects.filter(experiment_id=experiment.pk).order_by("id"))
    return [*stages, *evaluations_of([run.pk for run in stages])]


def _running_blocker(experiment: Experiment) -> list[str]:
    if experiment.state != ExperimentState.RUNNING:
        return []
    return [f"Experiment {experiment.name!r} is still running: cancel the job of its running stage (on its run's page or "
            "the Jobs page); the experiment then ends as failed and can be deleted."]


def experiment_delete_plan(experiment: Experiment, *, actor=None) -> ExperimentDeletePlan:
    """What deleting `experiment` would remove and, when it cannot be deleted now, why (`actor` None: no role
    rule)."""
    runs = experiment_runs(experiment)
    held = holdings_of(runs)
    blockers = [*_running_blocker(experiment),
                *deletion_blockers(experiment.project, held_run_ids(runs), held["reviews"], actor,
                                   experiment_id=experiment.pk)]
    return ExperimentDeletePlan(experiment=experiment, runs=runs, **held, blockers=blockers,
                                pending_job=pending_experiment_deletion(experiment))
