"""Cancelling and retrying a run (both act on its latest job), and its tags and note (pages and API share these)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from django.db import transaction

from webapp.common.bounds import unstorable_text_reason
from webapp.projects.services.projects import audit_log
from webapp.runs.models import (
    FINAL_JOB_STATES,
    MAX_RUN_TAGS,
    RUN_NOTE_LENGTH,
    RUN_TAG_CHARACTERS,
    RUN_TAG_LENGTH,
    Job,
    JobState,
    Run,
    run_tag_key,
)
from webapp.runs.selectors.runs import run_latest_job
from webapp.runs.services.jobs import job_request_cancel, job_retry

RETRYABLE_JOB_STATES = (JobState.FAILED, JobState.CANCELLED)


class RunActionError(ValueError):
    """The run cannot be cancelled or retried now; the message says why."""


def run_cancel(*, run: Run) -> Job:
    """Cancel the run's job: at once if queued, at the worker's next heartbeat if running."""
    job = run_latest_job(run)
    if job is None or job.state in FINAL_JOB_STATES:
        state = f"its latest job has already {job.state}" if job else "it has no job"
        raise RunActionError(f"Run {run.pk} has nothing to cancel: {state}.")
    try:
        return job_request_cancel(job=job)
    except ValueError as exc:
        raise RunActionError(str(exc)) from None


def run_retry(*, run: Run) -> Job:
    """Queue the run's failed or cancelled job again; it resumes from its last checkpoint."""
    job = run_latest_job(run)
    if job is None or job.state not in RETRYABLE_JOB_STATES:
        state = f"its latest job is {job.state}" if job else "it has no job"
        raise RunActionError(f"Run {run.pk} cannot be retried: {state}; only a failed or cancelled run can be "
                             "retried.")
    try:
        return job_retry(job=job)
    except ValueError as exc:
        raise RunActionError(str(exc)) from None


# ---------------------------------------------------------------------------------------
# Tags and note
# ---------------------------------------------------------------------------------------

_TAG_CHARACTER = re.compile(rf"[ {RUN_TAG_CHARACTERS}]")
TAG_RULE = (f"a tag is 1 to {RUN_TAG_LENGTH} letters, digits, spaces (inside) or - _ . : /, and a run has at most "
            f"{MAX_RUN_TAGS}")


class RunAnnotationError(ValueError):
    """Tags or a note that cannot be saved; `errors` maps each field (tags, note) to what is wrong and what to do."""

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors.items()))


def run_tags_from_text(text: str) -> list[str]:
    """The tags of a form's text box: separated by commas or new lines, blank pieces left out (not yet checked)."""
    return [piece for piece in re.split(r"[,\n]", text) if piece.strip()]


def _tag_problem(raw: object, position: int) -> tuple[str | None, str | None]:
    """(the tag as stored, None) or (None, what is wrong with the tag at this position of the list)."""
    if not isinstance(raw, str):
        return None, f"tag {position + 1} is not text; send each tag as a string"
    reason = unstorable_text_reason(raw)
    if reason:
        return None, f"tag {position + 1} {reason}"
    shown = " ".join(raw.split())
    if not shown:
        return None, f"tag {position + 1} is empty; leave it out or type a word"
    quoted = repr(shown if len(shown) <= 50 else shown[:50] + "…")
    if len(shown) > RUN_TAG_LENGTH:
        return None, f"{quoted} is {len(shown)} characters long; shorten it to at most {RUN_TAG_LENGTH}"
    bad = sorted({ch for ch in shown if not _TAG_CHARACTER.fullmatch(ch)})
    if bad:
        listed = " ".join(repr(ch) for ch in bad[:5])
        return None, (f"{quoted} has characters a tag cannot hold ({listed}); use letters, digits, spaces inside "
                      "and - _ . : /")
    return run_tag_key(shown), None


def run_tags_check(tags: Sequence[object]) -> list[str]:
    """The tags as stored (trimmed, inner spaces as one, lower case, duplicates dropped, order kept), or
    RunAnnotationError naming `tags` with every problem found."""
    if isinstance(tags, str | bytes) or not isinstance(tags, Sequence):
        raise RunAnnotationError({"tags": "send a list of tags, e.g. [\"baseline\", \"lr sweep\"]"})
    kept: list[str] = []
    problems: list[str] = []
    for position, raw in enumerate(tags):
        tag, problem = _tag_problem(raw, position)
        if problem:
            problems.append(problem)
        elif tag not in kept:
            kept.append(tag)
    if problems:
        raise RunAnnotationError({"tags": "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)"
                                                                     if len(problems) > 5 else "")})
    if len(kept) > MAX_RUN_TAGS:
        raise RunAnnotationError({"tags": f"{len(kept)} tags given; a run has at most {MAX_RUN_TAGS}, remove "
                                          f"{len(kept) - MAX_RUN_TAGS}"})
    return kept


def run_note_check(note: object) -> str:
    """The note as stored (line ends as \\n, outer blank space trimmed), or RunAnnotationError naming `note`."""
    if not isinstance(note, str):
        raise RunAnnotationError({"note": "send the note as text"})
    reason = unstorable_text_reason(note)
    if reason:
        raise RunAnnotationError({"note": f"the note {reason}"})
    cleaned = note.replace("\r\n", "\n").replace("\r", "\n").strip()
    if len(cleaned) > RUN_NOTE_LENGTH:
        raise RunAnnotationError({"note": f"the note is {len(cleaned):,} characters long; shorten it to at most "
                                          f"{RUN_NOTE_LENGTH:,}"})
    return cleaned


def run_annotate(*, run: Run, actor, tags: Sequence[object] | None = None, note: object | None = None) -> Run:
    """Set the run's tags, its note, or both (None leaves one as it is), audited.

    Both are checked before anything is written, and every problem comes back at once in
    RunAnnotationError.errors (by field), so a refused request changes nothing.
    """
    errors: dict[str, str] = {}
    changes: dict[str, object] = {}
    for name, value, check in (("tags", tags, run_tags_check), ("note", note, run_note_check)):
        if value is None:
            continue
        try:
            changes[name] = check(value)
        except RunAnnotationError as exc:
            errors.update(exc.errors)
    if errors:
        raise RunAnnotationError(errors)
    if not changes:
        return run
    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(**changes)
        for name, value in changes.items():
            setattr(run, name, value)
        data = {"tags": changes["tags"]} if "tags" in changes else {}
        if "note" in changes:
            data["note_length"] = len(changes["note"])
        audit_log(project=run.project, actor=actor, action="run.annotate", target=run, data=data)
    return run
