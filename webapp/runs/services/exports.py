"""Merged-model exports of LoRA checkpoints (a job of kind "export", run by workers/export.py).

Which folders may be read is webapp.runs.services.paths' rule: only inside the checkpoint's own run folder.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from webapp.projects.models import Project
from webapp.runs.models import Checkpoint, CheckpointKind, Job, JobState, Run
from webapp.runs.services.jobs import job_create
from webapp.runs.services.paths import ELSEWHERE, GONE, PRESENT, inside_run_folder, weights_problem

__all__ = ["ELSEWHERE", "GONE", "PRESENT"]
ACTIVE_JOB_STATES = (JobState.QUEUED, JobState.CLAIMED, JobState.RUNNING)
KEEP_TOP_K_HINT = "training keeps only the best checkpoints of a run (keep_top_k) and deletes the others"


class ExportRefused(ValueError):
    """The checkpoint cannot be exported now; the message says why and what to do."""


def local_folder(location: str, run: Run) -> tuple[Path | None, str]:
    """(folder, PRESENT) when `location` is an existing folder inside `run`'s own folder.

    webapp.runs.services.paths decides (URI schemes, `..` and symlinks resolved first); (None,
    GONE) for such a folder that no longer exists, (None, ELSEWHERE) for any other path.
    """
    return inside_run_folder(run, location)


def latest_exports(project: Project, checkpoint_ids: list[int]) -> dict[int, dict]:
    """The newest export job of each checkpoint on the page: two queries.

    `folder` says whether a finished export's output is still there, inside its run's folder.
    """
    if not checkpoint_ids:
        return {}
    jobs = (Job.objects.filter(project=project, kind="export", payload__checkpoint_id__in=checkpoint_ids)
            .order_by("-id").values("id", "state", "progress", "error", "payload"))
    latest: dict[int, dict] = {}
    for job in jobs:
        latest.setdefault(job["payload"].get("checkpoint_id"), job)
    runs = {c.pk: c.run for c in Checkpoint.objects.filter(pk__in=list(latest)).select_related("run")}
    for checkpoint_id, job in latest.items():
        done = job["state"] == JobState.SUCCEEDED and checkpoint_id in runs
        job["active"] = job["state"] in ACTIVE_JOB_STATES
        job["folder"] = local_folder(str(job["payload"].get("out", "")), runs[checkpoint_id])[1] if done else None
    return latest


def export_folder_for(checkpoint: Checkpoint) -> Path:
    """Where the merged model of a checkpoint goes: inside its run's folder."""
    return Path(settings.CRUCIBLE_RUNS_DIR) / checkpoint.run.folder_name / "exports" / f"step_{checkpoint.step}"


def folder_problem(state: str, what: str, location: str, gone_hint: str = KEEP_TOP_K_HINT) -> str:
    """Why the folder of `what` cannot be read here (gone, or not in its run's folder) and what to do."""
    if state == GONE:
        return f"The folder of {what} is gone ({location}): {gone_hint}."
    return weights_problem(ELSEWHERE, what, location)


def checkpoint_export_start(*, checkpoint: Checkpoint) -> Job:
    """Queue the merge of a LoRA checkpoint into its base model, unless it is running or done already."""
    what = f"checkpoint {checkpoint.pk} ({checkpoint.run.name}, step {checkpoint.step})"
    if checkpoint.kind != CheckpointKind.ADAPTER:
        raise ExportRefused(f"{what.capitalize()} holds full weights already: download it as it is.")
    folder, state = local_folder(checkpoint.storage_uri, checkpoint.run)
    if folder is None:
        raise ExportRefused(f"Nothing was exported. {folder_problem(state, what, checkpoint.storage_uri)}")
    previous = latest_exports(checkpoint.run.project, [checkpoint.pk]).get(checkpoint.pk)
    if previous and previous["active"]:
        raise ExportRefused(f"The export of {what} is already under way (job {previous['id']}).")
    if previous and previous["folder"] == PRESENT:
        raise ExportRefused(f"{what.capitalize()} is exported already: download the merged model.")
    return job_create(project=checkpoint.run.project, kind="export",
                      payload={"checkpoint_id": checkpoint.pk, "run_id": checkpoint.run_id, "source": str(folder),
                               "out": str(export_folder_for(checkpoint))})
