"""What deleting a run would take with it, and what stops it: the confirmation page, the API and the job read this.

A run goes together with the evaluation runs of its checkpoints (they measured nothing else, and
their rows point at its checkpoints); everything else that points at it keeps it, and says so:

- a job of the run (or of one of its evaluations, an export of its checkpoints, a re-verification
  of its trajectories) that is queued or running: cancel it first;
- a checkpoint that an alias points at or once pointed at: the promotion record (who moved
  production where, and the rollbacks) keeps the run;
- a run trained from one of its checkpoints (an SFT -> GRPO chain): delete that run first;
- an experiment stage: the experiment's gate record reads its runs;
- a verifier check drawn from its outputs: the check is the verifier version's evidence;
- human reviews of its trajectories, when the person is not an owner: labels are other people's work.

Counts are one query each, none of them a scan of the run's trajectories (the step rollups hold their
number), so the plan costs about the same at a million trajectories.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db.models import Q, QuerySet, Sum

from webapp.projects.models import Role
from webapp.projects.selectors.access import has_role
from webapp.runs.models import (
    AliasMove,
    Checkpoint,
    CheckpointAlias,
    Job,
    JobState,
    MetricPoint,
    Run,
    RunKind,
    RunStatus,
)
from webapp.trajectories.models import Rescore, Review, StepRollup
from webapp.verifiers.models import VerifierCheck

RUN_DELETE_JOB_KIND = "run_delete"
OPEN_JOB_STATES = (JobState.QUEUED, JobState.CLAIMED, JobState.RUNNING)
FOLDER_WALK_LIMIT = 100_000
"""Files counted for the size shown before a deletion; a folder with more says "at least"."""


@dataclass(frozen=True)
class FolderSize:
    files: int
    bytes: int
    complete: bool = True


@dataclass(frozen=True)
class RunDeletePlan:
    """The run, the evaluation runs that go with it, what they hold, and why it cannot go now (if so)."""

    run: Run
    evaluations: list[Run]
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
        return [self.run.pk, *(r.pk for r in self.evaluations)]

    @property
    def allowed(self) -> bool:
        return not self.blockers and self.pending_job is None

    def as_dict(self) -> dict:
        return {
            "run_id": self.run.pk, "run_name": self.run.name,
            "evaluations": [{"id": r.pk, "name": r.name} for r in self.evaluations],
            "trajectories": self.trajectories, "reviews": self.reviews, "metric_points": self.metric_points,
            "checkpoints": self.checkpoints, "jobs": self.jobs,
            "folder_files": self.folder.files, "folder_bytes": self.folder.bytes,
            "folder_size_complete": self.folder.complete,
            "blockers": list(self.blockers), "pending_job_id": self.pending_job.pk if self.pending_job else None,
        }


def run_evaluations(run: Run) -> list[Run]:
    """The evaluation runs of the run's checkpoints, and of theirs (an evaluation has none, but a chain
    is followed all the same); training runs started from them are not here (they block instead)."""
    return evaluations_of([run.pk])


def evaluations_of(run_ids: list[int]) -> list[Run]:
    """The evaluation runs of these runs' checkpoints (and of theirs), not among `run_ids`, in id order."""
    found: list[Run] = []
    frontier = list(run_ids)
    seen = set(run_ids)
    while frontier:
        children = list(Run.objects.filter(parent_checkpoint__run_id__in=frontier, kind=RunKind.EVAL)
                        .exclude(pk__in=seen).order_by("id"))
        found.extend(children)
        seen.update(c.pk for c in children)
        frontier = [c.pk for c in children]
    return found


def trajectory_count(run_ids: list[int]) -> int:
    """The runs' trajectories, from their step rollups (kept exact by every write: EventIngestor counts only
    rows it inserted, a resume takes its steps off both): a sum over steps, where COUNT(*) would read a
    million index entries (0.4 s at 1,000,000 on PostgreSQL)."""
    return StepRollup.objects.filter(run_id__in=run_ids).aggregate(n=Sum("count"))["n"] or 0


def reviews_of(run_ids: list[int]) -> QuerySet[Review]:
    """Verdicts on the runs' trajectories and preferences that name one of them on either side."""
    return Review.objects.filter(Q(trajectory__run_id__in=run_ids) | Q(preferred_over__run_id__in=run_ids))


def open_jobs_touching(project_id: int, run_ids: list[int]) -> QuerySet[Job]:
    """Queued or running jobs that read or write these runs: their own, exports of their checkpoints,
    re-verifications of their trajectories (a deletion job is not one of them)."""
    rescores = list(Rescore.objects.filter(run_id__in=run_ids).values_list("pk", flat=True))
    touching = Q(run_id__in=run_ids) | Q(kind="export", payload__run_id__in=run_ids)
    if rescores:
        touching |= Q(kind="rescore", payload__rescore_id__in=rescores)
    return (Job.objects.filter(project_id=project_id, state__in=OPEN_JOB_STATES).filter(touching)
            .exclude(kind=RUN_DELETE_JOB_KIND).order_by("id"))


def open_deletions(project_id: int) -> QuerySet[Job]:
    """The project's deletion jobs that are queued or running (their payload names the run)."""
    return Job.objects.filter(project_id=project_id, kind=RUN_DELETE_JOB_KIND, state__in=OPEN_JOB_STATES)


def pending_deletion(run: Run) -> Job | None:
    """The deletion job already queued or running for this run, if any."""
    return open_deletions(run.project_id).filter(payload__run_id=run.pk).order_by("id").first()


def runs_being_deleted(project_id: int, run_ids: list[int]) -> set[int]:
    """Which of these runs have a deletion job queued or running (the runs table marks them), in one query."""
    if not run_ids:
        return set()
    named = open_deletions(project_id).filter(payload__run_id__in=run_ids).values_list("payload__run_id", flat=True)
    return {run_id for run_id in named if isinstance(run_id, int)}


def run_files_folder(run: Run) -> Path:
    """The run's folder as named under the runs directory, not resolved: a link there is the link, and a
    deletion removes the link, never what it points at (paths.run_folder is the resolved one, for reads)."""
    return Path(settings.CRUCIBLE_RUNS_DIR) / run.folder_name


def folder_size(path: Path, *, limit: int = FOLDER_WALK_LIMIT) -> FolderSize:
    """Files and bytes under `path` (links not followed, a link as `path` counts nothing), stopping after
    `limit` files."""
    files = size = 0
    if path.is_symlink():
        return FolderSize(files=0, bytes=0)
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                size += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            files += 1
            if files >= limit:
                return FolderSize(files=files, bytes=size, complete=False)
    return FolderSize(files=files, bytes=size)


def _names(runs, limit: int = 5) -> str:
    shown = [f"#{r.pk} {r.name!r}" for r in runs[:limit]]
    more = len(runs) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def deletion_blockers(project, run_ids: list[int], reviews: int, actor, *, experiment_id: int | None = None,
                      ) -> list[str]:
    """Why these runs cannot go together now, each with what to do (`actor` None: no role rule). The runs of
    experiment `experiment_id` (when the experiment goes with them) are not kept by being its stages."""
    blockers: list[str] = []
    jobs = list(open_jobs_touching(project.pk, run_ids)[:6])
    if jobs:
        listed = ", ".join(f"job {j.pk} ({j.kind}, {j.state})" for j in jobs[:5])
        blockers.append(f"Jobs are still working on it: {listed}. Cancel them (on the run page or the Jobs page) "
                        "and delete it once they have stopped.")
    checkpoints = Checkpoint.objects.filter(run_id__in=run_ids)
    aliases = list(CheckpointAlias.objects.filter(checkpoint__in=checkpoints).select_related("checkpoint")
                   .order_by("name"))
    if aliases:
        listed = ", ".join(f"{a.name!r} (step {a.checkpoint.step})" for a in aliases)
        blockers.append(f"Its checkpoints are promoted: {listed}. Point the alias at another checkpoint first; "
                        "even then the promotion history keeps the run.")
    elif AliasMove.objects.filter(Q(checkpoint__in=checkpoints) | Q(previous_checkpoint__in=checkpoints)).exists():
        blockers.append("One of its checkpoints was promoted once: the promotion history (who moved which alias "
                        "where, and the rollbacks) keeps the run, so it cannot be deleted.")
    children = list(Run.objects.filter(parent_checkpoint__run_id__in=run_ids).exclude(pk__in=run_ids)
                    .order_by("id")[:6])
    if children:
        blockers.append(f"Runs were trained from its checkpoints: {_names(children)}. Delete those runs first.")
    staged = (Run.objects.filter(pk__in=run_ids, experiment__isnull=False).exclude(experiment_id=experiment_id)
              .select_related("experiment").order_by("id").first())
    if staged is not None:
        blockers.append(f"Run #{staged.pk} {staged.name!r} is the {staged.stage or 'a'} stage of experiment "
                        f"{staged.experiment.name!r}: an experiment keeps its runs (its gate record reads them); delete the "
                        "experiment instead, with all its runs (its page has Delete…).")
    checks = list(VerifierCheck.objects.filter(run_id__in=run_ids).select_related("version__verifier")
                  .order_by("id")[:5])
    if checks:
        listed = ", ".join(f"#{c.pk} of {c.version.verifier.name} v{c.version.version}" for c in checks)
        blockers.append(f"Verifier checks were drawn from its outputs: {listed}. A check is its verifier "
                        "version's evidence, so the run stays.")
    if reviews and actor is not None and not has_role(actor, project, Role.OWNER):
        blockers.append(f"People reviewed its trajectories ({reviews} review{'s' if reviews != 1 else ''}): only "
                        "an owner of the project can delete labels. Ask one to delete it.")
    return blockers


def run_delete_plan(run: Run, *, actor=None) -> RunDeletePlan:
    """What deleting `run` would remove and, when it cannot be deleted now, why (`actor` None: no role rule)."""
    evaluations = run_evaluations(run)
    held = holdings_of([run, *evaluations])
    return RunDeletePlan(
        run=run, evaluations=evaluations, **held,
        blockers=deletion_blockers(run.project, held_run_ids([run, *evaluations]), held["reviews"], actor),
        pending_job=pending_deletion(run),
    )


def held_run_ids(runs: list[Run]) -> list[int]:
    return [r.pk for r in runs]


def holdings_of(runs: list[Run]) -> dict:
    """What these runs hold, as the plans' fields: trajectories, reviews of them, metric points, checkpoints,
    jobs, and their folders' size (a handful of indexed counts; the trajectories from the step rollups)."""
    run_ids = held_run_ids(runs)
    folders = [folder_size(run_files_folder(r)) for r in runs]
    return {
        "trajectories": trajectory_count(run_ids), "reviews": reviews_of(run_ids).count(),
        "metric_points": MetricPoint.objects.filter(run_id__in=run_ids).count(),
        "checkpoints": Checkpoint.objects.filter(run_id__in=run_ids).count(),
        "jobs": Job.objects.filter(run_id__in=run_ids).count(),
        "folder": FolderSize(files=sum(f.files for f in folders), bytes=sum(f.bytes for f in folders),
                             complete=all(f.complete for f in folders)),
    }


ENDED_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.DRAFT)
"""The statuses a clean-up may choose from: a run that is queued or running is never a candidate."""


def ended_runs_before(project, *, before, statuses: list[str], kinds: list[str], name_contains: str,
                      limit: int) -> list[Run]:
    """The project's ended runs created before `before`, oldest first, filtered by status, kind and a name
    fragment (each empty: any), at most `limit` (`manage.py delete_runs` chooses among them)."""
    runs = Run.objects.filter(project=project, created_at__lt=before,
                              status__in=[s for s in statuses or ENDED_STATUSES if s in ENDED_STATUSES])
    if kinds:
        runs = runs.filter(kind__in=kinds)
    if name_contains:
        runs = runs.filter(name__icontains=name_contains)
    return list(runs.select_related("project").order_by("created_at", "id")[:limit])
