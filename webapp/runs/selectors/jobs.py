"""Reads behind the jobs and workers page and its API: queues, jobs, workers.

The Job row is the source of truth for where work stands (DESIGN.md, "Jobs"), so these
read it directly: a row's heartbeat age and lease say whether its worker is still there
before the reaper acts. Every list is a keyset page and costs a fixed number of queries.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce
from django.utils import timezone

from webapp.common.pagination import Page, keyset_page
from webapp.common.rows import described
from webapp.projects.models import Project
from webapp.runs.models import ACTIVE_JOB_STATES, Job, JobState, WorkerNode
from webapp.runs.services.jobs import QUEUE_BY_KIND, gpus_needed
from webapp.runs.services.workers import ALIVE_WITHIN, workers_alive

# The queues DESIGN.md names; each is listed even when empty, so "nothing queued" shows.
KNOWN_QUEUES = tuple(sorted({"default", *QUEUE_BY_KIND.values()}))
JOB_STATES = tuple(JobState.values)


def _age_seconds(then: datetime | None, now: datetime) -> float | None:
    return None if then is None else (now - then).total_seconds()


# ---------------------------------------------------------------------------------------
# Queues
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueRow:
    """One queue: this project's jobs waiting in it and held by workers, and who listens on it.

    running counts claimed and running jobs (a worker holds both). workers_alive counts
    every alive worker consuming the queue, whatever project it serves: workers are shared.
    """

    queue: str
    queued: int
    running: int
    workers_alive: int


def queue_summary(project: Project) -> list[QueueRow]:
    """Per queue (the known ones first, then any other in use): counts in one grouped query,
    alive workers in a second."""
    counts = {
        row["queue"]: row
        for row in Job.objects.filter(project=project, state__in=[JobState.QUEUED, *ACTIVE_JOB_STATES])
        .values("queue")
        .annotate(queued=Count("id", filter=Q(state=JobState.QUEUED)),
                  running=Count("id", filter=Q(state__in=ACTIVE_JOB_STATES)))
        .order_by("queue")
    }
    listeners = Counter(q for queues in workers_alive().values_list("queues", flat=True) for q in (queues or []))
    names = [*KNOWN_QUEUES, *sorted(set(counts) - set(KNOWN_QUEUES))]
    return [
        QueueRow(queue=name, queued=counts.get(name, {}).get("queued", 0),
                 running=counts.get(name, {}).get("running", 0), workers_alive=listeners.get(name, 0))
        for name in names
    ]


# ---------------------------------------------------------------------------------------
# Jobs
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobRow:
    """A job as the jobs table shows it.

    heartbeat_age_seconds: since the worker last extended the lease (None before a claim).
    lease_seconds_left: until the reaper may re-queue it; negative once expired (the
    worker stopped heartbeating and the next sweep re-queues or fails it).
    """

    id: int
    kind: str
    queue: str
    state: str
    attempt: int
    max_attempts: int
    attempt_label: str
    progress: float
    error: str
    run_id: int | None
    run_name: str | None
    worker: str
    cancel_requested: bool
    history: list
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    heartbeat_age_seconds: float | None
    lease_expires_at: datetime | None
    lease_seconds_left: float | None
    processes: list[dict] = field(metadata=described(
        "A data-parallel job's ranks as its worker last reported them: rank, device, host, pid, step, time."))
    placement_problem: str | None = field(default=None, metadata=described(
        "Why no running worker can take this queued job (it needs more GPUs than any offers), or null."))
    subject: str | None = field(default=None, metadata=described(
        "What a job without a run works on, as its payload names it: the dataset version a dataset_delete "
        "job deletes (\"name v3\"), the experiment an experiment_delete job deletes, or null."))


class UnknownJobState(ValueError):
    """A state filter that no job can have (a client error: the message lists the states)."""


def job_list(project: Project, *, state: str | None = None, queue: str | None = None, kind: str | None = None,
             after: str | None = None, limit: int = 100, now: datetime | None = None) -> Page:
    """A keyset page of JobRow, newest first, in one query (run names joined; log tails and
    payloads left out: they can be large and the table does not show them).

    Raises UnknownJobState for a state filter outside JobState, CursorError for a foreign cursor.
    """
    if state and state not in JOB_STATES:
        raise UnknownJobState(f"Unknown job state {state!r}; use one of: {', '.join(JOB_STATES)}.")
    jobs = (Job.objects.filter(project=project).select_related("run").defer("log_tail", "payload", "run__config")
            .annotate(payload_run_name=KeyTextTransform("run_name", "payload"),
                      payload_subject=Coalesce(*(KeyTextTransform(key, "payload") for key in SUBJECT_KEYS))))
    for column, value in (("state", state), ("queue", queue), ("kind", kind)):
        if value:
            jobs = jobs.filter(**{column: value})
    page = keyset_page(jobs, ordering=["-created_at"], after=after, limit=limit)
    now = now or timezone.now()
    offers = _alive_queue_lists() if any(j.state == JobState.QUEUED and gpus_needed(j.queue) > 1
                                         for j in page.items) else []
    return Page(items=[job_row(j, now=now, offers=offers) for j in page.items], next_cursor=page.next_cursor)


def _alive_queue_lists() -> list[list[str]]:
    return [list(queues or []) for queues in workers_alive().values_list("queues", flat=True)]


def placement_problem(queue: str, alive_queues: list[list[str]]) -> str | None:
    """Why no alive worker fits a job of `queue`, or None (it fits one, or needs no GPUs).

    A worker offers G GPUs to one job by consuming Q.gpus2 .. Q.gpusG (workers/registration.py).
    """
    need = gpus_needed(queue)
    if need <= 1 or any(queue in queues for queues in alive_queues):
        return None
    base = queue.rpartition(".gpus")[0]
    largest = max((gpus_needed(q) for queues in alive_queues for q in queues if q.startswith(f"{base}.gpus")),
                  default=1 if any(base in queues for queues in alive_queues) else 0)
    return (f"No running worker offers {need} GPUs to one job: the most any {base} worker offers is {largest}. "
            f"Start a worker on the {base} queue on a host with {need} GPUs (it offers what CUDA sees, or "
            "CRUCIBLE_WORKER_GPUS), or lower the run's num_processes, or run it with device cpu.")


def job_placement_problem(job: Job) -> str | None:
    """placement_problem for one queued job (a run page), in one query when it needs GPUs."""
    if job.state != JobState.QUEUED or gpus_needed(job.queue) <= 1:
        return None
    return placement_problem(job.queue, _alive_queue_lists())


SUBJECT_KEYS = ("dataset_label", "experiment_name")
"""Payload keys that name what a run-less job works on (JobRow.subject), the first one present."""


def _payload_text(job: Job, *keys: str) -> str | None:
    """A name a run-less job's payload holds (a deletion: the run, dataset version or experiment is gone, or
    going): the list reads it as an annotation (payload_run_name, payload_subject), a single job from its
    payload."""
    annotated = "payload_run_name" if keys == ("run_name",) else "payload_subject"
    if hasattr(job, annotated):
        return getattr(job, annotated)
    payload = job.payload if "payload" not in job.get_deferred_fields() else {}
    names = [payload.get(key) for key in keys] if isinstance(payload, dict) else []
    return next((name for name in names if isinstance(name, str) and name), None)


def job_row(job: Job, *, now: datetime | None = None, offers: list[list[str]] | None = None) -> JobRow:
    """The table's row for one job (also the API's job detail, with the log tail added there)."""
    now = now or timezone.now()
    problem = None
    if job.state == JobState.QUEUED and gpus_needed(job.queue) > 1:
        problem = placement_problem(job.queue, offers if offers is not None else _alive_queue_lists())
    return JobRow(
        id=job.pk, kind=job.kind, queue=job.queue, state=job.state, attempt=job.attempt,
        max_attempts=job.max_attempts, attempt_label=f"{job.attempt}/{job.max_attempts}", progress=job.progress,
        error=job.error, run_id=job.run_id, run_name=job.run.name if job.run_id else _payload_text(job, "run_name"), worker=job.worker,
        cancel_requested=job.cancel_requested, history=job.history, created_at=job.created_at,
        started_at=job.started_at, finished_at=job.finished_at, heartbeat_at=job.heartbeat_at,
        heartbeat_age_seconds=_age_seconds(job.heartbeat_at, now), lease_expires_at=job.lease_expires_at,
        lease_seconds_left=None if job.lease_expires_at is None else (job.lease_expires_at - now).total_seconds(),
        processes=list(job.processes or []), placement_problem=problem,
        subject=None if job.run_id else _payload_text(job, *SUBJECT_KEYS),
    )


# ---------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerRow:
    """A Celery worker that announced itself.

    status: "alive" (heartbeat within ALIVE_SECONDS, not stopped), "stopped" (it shut down
    cleanly) or "lost" (no clean stop, heartbeat too old: killed, host gone, network cut).
    """

    name: str
    hostname: str
    pid: int
    queues: list
    concurrency: int
    gpus: list
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age_seconds: float
    stopped_at: datetime | None
    alive: bool
    status: str


# Workers heartbeat every CRUCIBLE_WORKER_HEARTBEAT_SECONDS (30 s by default,
# workers/registration.py); services.workers.ALIVE_WITHIN (90 s) tolerates two missed beats,
# e.g. a busy database, before a worker is shown lost. The same threshold as workers_alive().
ALIVE_SECONDS = ALIVE_WITHIN.total_seconds()


def worker_list(*, after: str | None = None, limit: int = 100, now: datetime | None = None) -> Page:
    """A keyset page of WorkerRow by name, one query. Workers are global, not per project."""
    page = keyset_page(WorkerNode.objects.all(), ordering=["name"], after=after, limit=limit)
    now = now or timezone.now()
    return Page(items=[worker_row(w, now=now) for w in page.items], next_cursor=page.next_cursor)


def worker_row(node: WorkerNode, *, now: datetime) -> WorkerRow:
    age = _age_seconds(node.heartbeat_at, now)
    alive = node.stopped_at is None and age <= ALIVE_SECONDS
    status = "alive" if alive else ("stopped" if node.stopped_at is not None else "lost")
    return WorkerRow(
        name=node.name, hostname=node.hostname, pid=node.pid, queues=node.queues, concurrency=node.concurrency,
        gpus=node.gpus, started_at=node.started_at, heartbeat_at=node.heartbeat_at, heartbeat_age_seconds=age,
        stopped_at=node.stopped_at, alive=alive, status=status,
    )


# ---------------------------------------------------------------------------------------
# Lookups for the pages' and endpoints' access checks
# ---------------------------------------------------------------------------------------


def all_jobs() -> QuerySet[Job]:
    """Every job, for webapp.projects.selectors.access.get_object_or_404_for_user to narrow to the caller's projects."""
    return Job.objects.all()


def jobs_with_run() -> QuerySet[Job]:
    """Every job with its run (job_row names it), for get_object_or_404_for_user to narrow to the caller's projects."""
    return Job.objects.select_related("run")


def queued_job_count(project: Project) -> int:
    """How many of the project's jobs wait in a queue (the overview's number)."""
    return project.jobs.filter(state=JobState.QUEUED).count()


def latest_finished_export(project: Project, checkpoint_id: int) -> Job | None:
    """The newest export job of this checkpoint that succeeded (its payload's `out` is the merged model's folder),
    or None when the checkpoint was never exported."""
    return (Job.objects.filter(project=project, kind="export", state=JobState.SUCCEEDED,
                               payload__checkpoint_id=checkpoint_id).order_by("-id").first())
