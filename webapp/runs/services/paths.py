"""The one rule for which files of a run this server opens: only those inside that run's folder.

A checkpoint row's `storage_uri` is text written by the training process, or by a run
import from a folder someone else wrote. That text may be a `file://` URI, hold `..`, lead
through a symlink, be relative, or name another project's run folder or someone's pending
upload. Every place that serves (download), exports or loads (a job's init_checkpoint) a
checkpoint's files asks `checkpoint_folder`, and opens only the resolved path it returns:
the path is normalised first (URI scheme, `..`, symlinks) and then accepted only when it
lies strictly inside DATA_DIR/runs/<that run's folder>. Anything else is kept as text for
the record and never opened.

Model folders on this machine follow the same idea: `model_root_folder` accepts a folder
only under the model roots the operator configured (CRUCIBLE_MODEL_ROOTS).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.conf import settings

from webapp.runs.models import Checkpoint, Run

PRESENT, GONE, ELSEWHERE = "present", "gone", "elsewhere"


def local_path(location: str) -> Path | None:
    """The absolute, resolved local path `location` names, or None when it names none.

    `file:` URIs (file:///x, file://localhost/x, percent-encoded) become their path; any
    other scheme (s3://, imported://, http://) is not local; a relative path, a NUL or a
    symlink loop names nothing. `..` and symlinks are resolved, so the answer is where an
    open() of the path would land.
    """
    text = str(location).strip()
    if not text or "\x00" in text:
        return None
    if "://" in text or text.lower().startswith("file:"):
        parts = urlsplit(text)
        if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
            return None
        text = unquote(parts.path)
        if "\x00" in text:
            return None
    if not os.path.isabs(text):
        return None
    try:
        return Path(text).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a name too long
        return None


def strictly_inside(path: Path, root: Path) -> bool:
    """Whether resolved `path` lies below resolved `root` (the root itself is not inside)."""
    return path != root and path.is_relative_to(root)


def run_folder(run: Run) -> Path:
    """Where the run's files live on this server: DATA_DIR/runs/<pk>-<storage key>."""
    return (Path(settings.CRUCIBLE_RUNS_DIR) / run.folder_name).resolve()


def inside_run_folder(run: Run, location: str) -> tuple[Path | None, str]:
    """(folder, PRESENT) when `location` is an existing folder strictly inside the run's own folder.

    (None, GONE) for such a folder that no longer exists (training keeps only the top-k
    checkpoints); (None, ELSEWHERE) for every other location, whatever its form.
    """
    path = local_path(location)
    if path is None:
        return None, ELSEWHERE
    if not strictly_inside(path, run_folder(run)):
        return None, ELSEWHERE
    if not path.is_dir():
        return None, GONE
    return path, PRESENT


def checkpoint_folder(checkpoint: Checkpoint) -> tuple[Path | None, str]:
    """The checkpoint's folder if this server may open it (see inside_run_folder), and its state."""
    return inside_run_folder(checkpoint.run, checkpoint.storage_uri)


def weights_problem(state: str, what: str, location: str) -> str:
    """Why the files of `what` at `location` cannot be used here, and what to do instead."""
    if state == GONE:
        return (f"The folder of {what} is gone ({location}): training keeps only the best checkpoints of a run "
                "(keep_top_k) and deletes the others.")
    return (f"The weights of {what} are not on this server: its folder ({location}) is not in its run's folder "
            "in this server's data folder, so it is kept as a record only. Fetch them from where they are stored.")


def model_roots() -> list[Path]:
    """The folders under which a registered model may be a folder on this machine (resolved)."""
    roots = []
    for root in settings.CRUCIBLE_MODEL_ROOTS:
        path = local_path(str(root))
        if path is not None:
            roots.append(path)
    return roots


def model_root_folder(location: str) -> Path | None:
    """The resolved path of `location` when it lies strictly inside one of the model roots, else None."""
    path = local_path(os.path.expanduser(location))
    if path is None:
        return None
    return path if any(strictly_inside(path, root) for root in model_roots()) else None
