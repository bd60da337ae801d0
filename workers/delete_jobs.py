"""Job handlers for "run_delete" and "dataset_delete": a run (with its evaluations) or a dataset version
(with its tasks) deleted off the request.

webapp.runs.services.run_delete and .dataset_delete do the work in one transaction; these hand it the
attempt's checks (a cancel or a lost lease between two statements rolls the whole deletion back) and
progress, and keep the report in the job's payload for its page and the API.
"""

from __future__ import annotations

from webapp.runs.models import Job
from webapp.runs.selectors.dataset_delete import DATASET_DELETE_JOB_KIND
from webapp.runs.selectors.run_delete import RUN_DELETE_JOB_KIND
from webapp.runs.services.dataset_delete import dataset_delete_execute
from webapp.runs.services.jobs import job_record_result
from webapp.runs.services.run_delete import run_delete_execute
from workers.runner import JobContext, handler


def _progress(ctx: JobContext):
    def progress(name: str, fraction: float) -> None:
        ctx.set_progress(fraction)
        ctx.log(f"{name} done")

    return progress


def _project_id(ctx: JobContext) -> int:
    return Job.objects.values_list("project_id", flat=True).get(pk=ctx.job_id)


@handler(RUN_DELETE_JOB_KIND)
def run_delete_job(ctx: JobContext) -> None:
    ctx.log(f"deleting run #{ctx.payload.get('run_id')} {ctx.payload.get('run_name', '')!r}")
    report = run_delete_execute(project_id=_project_id(ctx), payload=ctx.payload, check=ctx.check,
                                progress=_progress(ctx))
    job_record_result(job_id=ctx.job_id, attempt=ctx.attempt, result=report.as_dict())
    if report.already_gone:
        ctx.log("the run was gone already: nothing to delete")
        return
    removed = ", ".join(f"{name} {n}" for name, n in report.removed.items() if n)
    ctx.log(f"deleted {len(report.runs)} run(s): {removed or 'no rows beside the runs'}; "
            f"{report.freed_bytes / 1024 ** 2:.1f} MB of files freed")
    for problem in report.folder_errors:
        ctx.log(f"left on disk: {problem}")


@handler(DATASET_DELETE_JOB_KIND)
def dataset_delete_job(ctx: JobContext) -> None:
    ctx.log(f"deleting dataset #{ctx.payload.get('dataset_id')} {ctx.payload.get('dataset_label', '')!r}")
    report = dataset_delete_execute(project_id=_project_id(ctx), payload=ctx.payload, check=ctx.check,
                                    progress=_progress(ctx))
    job_record_result(job_id=ctx.job_id, attempt=ctx.attempt, result=report.as_dict())
    if report.already_gone:
        ctx.log("the dataset version was gone already: nothing to delete")
        return
    removed = ", ".join(f"{name} {n}" for name, n in report.removed.items() if n)
    ctx.log(f"deleted {report.label}: {removed}")
