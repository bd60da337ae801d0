"""Merged-model exports of LoRA checkpoints (a job of kind "export", run by workers/export.py),
and the one rule for which checkpoint folders this server may read: local folders inside the
data directory, symlinks resolved.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from webapp.projects.models import Project
from webapp.runs.models import Checkpoint, CheckpointKind, Job, JobState
from webapp.runs.services.jobs import job_create

PRESENT, GONE, ELSEWHERE = "present", "gone", "elsewhere"
ACTIVE_JOB_STATES = (JobState.QUEUED, JobState.CLAIMED, JobState.RUNNING)
KEEP_TOP_K_HINT = "training keeps only the best checkpoints of a run (keep_top_k) and deletes the others"


class ExportRefused(ValueError):
    """The checkpoint cannot be exported now; the message says why and what to do."""


def local_folder(location: str) -> tuple[Path | None, str]:
    """(folder, PRESENT) when `location` is an existing folder inside the data directory.

    Symlinks are resolved first, so a link that leads out of the data directory is refused
    like any other outside path: (None, ELSEWHERE). A folder inside it that no longer exists
    (training keeps only the top-k checkpoints) is (None, GONE).
    """
    text = location.removeprefix("file://")
    if "://" in text or "\x00" in text or not os.path.isabs(text):
        return None, ELSEWHERE
    try:
        root = Path(settings.DATA_DIR).resolve()
        folder = Path(text).resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return None, ELSEWHERE
    if folder == root or not folder.is_relative_to(root):
        return None, ELSEWHERE
    if not folder.is_dir():
        return None, GONE
    return folder, PRESENT


def latest_exports(project: Project, checkpoint_ids: list[int]) -> dict[int, dict]:
    """The newest export job of each checkpoint on the page: one query."""
    if not checkpoint_ids:
        return {}
    jobs = (Job.objects.filter(project=project, kind="export", payload__checkpoint_id__in=checkpoint_ids)
            .order_by("-id").values("id", "state", "progress", "error", "payload"))
    latest: dict[int, dict] = {}
    for job in jobs:
        latest.setdefault(job["payload"].get("checkpoint_id"), job)
    for job in latest.values():
        done = job["state"] == JobState.SUCCEEDED
        job["active"] = job["state"] in ACTIVE_JOB_STATES
        job["folder"] = local_folder(str(job["payload"].get("out", "")))[1] if done else None
    return latest


def export_folder_for(checkpoint: Checkpoint) -> Path:
    """Where the merged model of a checkpoint goes: inside its run's folder."""
    return Path(settings.CRUCIBLE_RUNS_DIR) / checkpoint.run.folder_name / "exports" / f"step_{checkpoint.step}"


def folder_problem(state: str, what: str, location: str, gone_hint: str = KEEP_TOP_K_HINT) -> str:
    if state == GONE:
        return f"The folder of {what} is gone ({location}): {gone_hint}."
    return (f"The folder of {what} is not in this server's data folder ({location}), so it cannot be downloaded "
            "from here; fetch it from where it is stored.")


def checkpoint_export_start(*, checkpoint: Checkpoint) -> Job:
    """Queue the merge of a LoRA checkpoint into its base model, unless it is running or done already."""
    what = f"checkpoint {checkpoint.pk} ({checkpoint.run.name}, step {checkpoint.step})"
    if checkpoint.kind != CheckpointKind.ADAPTER:
        raise ExportRefused(f"{what.capitalize()} holds full weights already: download it as it is.")
    folder, state = local_folder(checkpoint.storage_uri)
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
