"""Job handlers for "run_delete", "experiment_delete" and "dataset_delete": a run (with its evaluations),
an experiment (with all its runs) or a dataset version (with its tasks) deleted off the request.

webapp.runs.services.run_delete, .experiment_delete and .dataset_delete do the work in one transaction;
these hand it the attempt's checks (a cancel or a lost lease between two statements rolls the whole
deletion back) and progress, and keep the report in the job's payload for its page and the API.
"""

from __future__ import annotations

from collections.abc import Callable

from webapp.common.deletion import DeletionReport
from webapp.runs.models import Job
from webapp.runs.selectors.dataset_delete import DATASET_DELETE_JOB_KIND
from webapp.runs.selectors.experiment_delete import EXPERIMENT_DELETE_JOB_KIND
from webapp.runs.selectors.run_delete import RUN_DELETE_JOB_KIND
from webapp.runs.services.dataset_delete import dataset_delete_execute
from webapp.runs.services.experiment_delete import experiment_delete_execute
from webapp.runs.services.jobs import job_record_result
from webapp.runs.services.run_delete import run_delete_execute
from workers.runner import JobContext, handler


def _progress(ctx: JobContext):
    def progress(name: str, fraction: float) -> None:
        ctx.set_progress(fraction)
        ctx.log(f"{name} done")

    return progress


def _removed(report: DeletionReport) -> str:
    return ", ".join(f"{name} {n}" for name, n in report.removed.items() if n) or "no rows"


def _delete(ctx: JobContext, execute, subject: str, summary: Callable[[DeletionReport], str]) -> None:
    """Run one deletion with the attempt's checks and progress; keep its report in the job and say what went."""
    ctx.log(f"deleting {subject}")
    project_id = Job.objects.values_list("project_id", flat=True).get(pk=ctx.job_id)
    report = execute(project_id=project_id, payload=ctx.payload, check=ctx.check, progress=_progress(ctx))
    job_record_result(job_id=ctx.job_id, attempt=ctx.attempt, result=report.as_dict())
    if report.already_gone:
        ctx.log(f"{subject} was gone already: nothing to delete")
        return
    ctx.log(summary(report))
    for problem in getattr(report, "folder_errors", []):
        ctx.log(f"left on disk: {problem}")


def _freed(report) -> str:
    return f"{report.freed_bytes / 1024 ** 2:.1f} MB of files freed"


@handler(RUN_DELETE_JOB_KIND)
def run_delete_job(ctx: JobContext) -> None:
    _delete(ctx, run_delete_execute, f"run #{ctx.payload.get('run_id')} {ctx.payload.get('run_name', '')!r}",
            lambda report: f"deleted {len(report.runs)} run(s): {_removed(report)}; {_freed(report)}")


@handler(EXPERIMENT_DELETE_JOB_KIND)
def experiment_delete_job(ctx: JobContext) -> None:
    subject = f"experiment #{ctx.payload.get('experiment_id')} {ctx.payload.get('experiment_name', '')!r}"
    _delete(ctx, experiment_delete_execute, subject,
            lambda report: f"deleted the experiment and {len(report.runs)} run(s): {_removed(report)}; "
                           f"{_freed(report)}")


@handler(DATASET_DELETE_JOB_KIND)
def dataset_delete_job(ctx: JobContext) -> None:
    subject = f"dataset version #{ctx.payload.get('dataset_id')} {ctx.payload.get('dataset_label', '')!r}"
    _delete(ctx, dataset_delete_execute, subject, lambda report: f"deleted {report.label}: {_removed(report)}")
