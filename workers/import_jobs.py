"""Job handler for "run_import": a run zip uploaded through the page or the API, imported off the request.

The upload was kept in the data directory's imports area (webapp.runs.services.run_import
.run_import_enqueue); this imports it in the one transaction `run_import` uses, so a killed
attempt leaves no row and the next attempt (re-queued by the reaper, or a Retry) does the whole
work. Progress is the share of the event log read; a cancel stops at the next batch and the
transaction rolls back. The report is kept in the job's payload for its page, then the zip is
removed.
"""

from __future__ import annotations

from webapp.runs.models import Job
from webapp.runs.services.jobs import job_record_result
from webapp.runs.services.run_import import IMPORT_JOB_KIND, discard_archive, run_import_archive
from workers.runner import JobContext, handler


def _progress(ctx: JobContext):
    """Progress after each batch; a log line at each tenth of the event log, not one per batch."""
    logged = {"tenth": -1}

    def report(done: int, total: int) -> None:
        if done < total:  # the last call comes after the commit: nothing left to stop then
            ctx.check()  # cancelled or lease lost: raise inside the transaction, which rolls back
        fraction = done / total if total else 1.0
        ctx.set_progress(fraction)
        if int(fraction * 10) > logged["tenth"]:
            logged["tenth"] = int(fraction * 10)
            ctx.log(f"read {done / 1024 ** 2:.1f} of {total / 1024 ** 2:.1f} MB of events")

    return report


@handler(IMPORT_JOB_KIND)
def run_import_job(ctx: JobContext) -> None:
    project = Job.objects.select_related("project").get(pk=ctx.job_id).project
    ctx.log(f"importing {ctx.payload.get('archive_name') or 'the uploaded zip'}")
    report = run_import_archive(project=project, payload=ctx.payload, progress=_progress(ctx))
    job_record_result(job_id=ctx.job_id, attempt=ctx.attempt, result=report.as_dict())
    discard_archive(ctx.payload)
    ctx.log(f"imported into run #{report.run_id} {report.run_name!r}: "
            + ", ".join(f"{kind} {n}" for kind, n in report.stored.items()) + " stored")
