"""API for checkpoints, aliases and the experiments list: reads for scripts and dashboards.

Every list answers `{"items": [...], "next": CURSOR or null}`, as GET /projects/{slug}/runs
does: pass `next` as `?after=` for the following page (keyset pagination, never OFFSET;
`limit` is clamped to 1..500). A cursor this list did not give out is a 400 with a message.
Writes (promote, rollback, create an experiment) stay in webapp/api/experiments.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ninja import Router, Schema
from ninja.errors import HttpError
from pydantic import Field

from webapp.api.derived import schema_of
from webapp.api.experiments import router as experiments_router
from webapp.api.schemas import ErrorOut, ExperimentOut
from webapp.common.bounds import CursorText, RowId, Text
from webapp.common.pagination import CursorError, Page
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.runs.selectors.checkpoints import (
    AliasMoveRow,
    AliasRow,
    CheckpointRow,
    alias_get,
    alias_history,
    alias_list,
    checkpoint_detail,
    checkpoint_table,
    checkpoints_with_run,
    experiment_list,
)
from webapp.runs.selectors.failures import run_in_project

router = Router(tags=["checkpoints"])

Cursor = CursorText(1000)


# ---------------------------------------------------------------------------------------
# Paging
# ---------------------------------------------------------------------------------------


def next_field() -> Any:
    """The `next` field of every page schema."""
    return Field(description="Pass as `after` for the next page; null on the last page.")


def paged(read: Callable[..., Page], **kwargs: Any) -> dict:
    """The body of a list: a selector's keyset Page as {items, next}; a foreign cursor is a 400."""
    try:
        page = read(**kwargs)
    except CursorError as exc:
        raise HttpError(400, str(exc)) from None
    return {"items": page.items, "next": page.next_cursor}


# ---------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------


CheckpointRowOut = schema_of(CheckpointRow, "CheckpointRowOut")
AliasRowOut = schema_of(AliasRow, "AliasRowOut")
AliasMoveOut = schema_of(AliasMoveRow, "AliasMoveOut")


class ExperimentRowOut(ExperimentOut):
    candidate_run_id: int | None
    candidate_step: int | None
    created_by: str | None
    created_at: datetime
    finished_at: datetime | None


class CheckpointPageOut(Schema):
    items: list[CheckpointRowOut]
    next: str | None = next_field()


class AliasPageOut(Schema):
    items: list[AliasRowOut]
    next: str | None = next_field()


class AliasMovePageOut(Schema):
    items: list[AliasMoveOut]
    next: str | None = next_field()


class ExperimentPageOut(Schema):
    items: list[ExperimentRowOut]
    next: str | None = next_field()


# ---------------------------------------------------------------------------------------
# Endpoints
# ---------------------------------------------------------------------------------------


@router.get("/projects/{slug}/checkpoints", response={200: CheckpointPageOut, 400: ErrorOut})
def list_checkpoints(request, slug: str, run_id: RowId | None = None,
                     after: Cursor | None = None, limit: int = 50):
    """Checkpoints newest first (or one run's, highest step first) with validation and held-out
    metrics, deltas against the experiment's baseline, gate verdict, aliases and retention."""
    project = get_project_or_404(request.user, slug)
    run = None
    if run_id is not None:
        run = run_in_project(project, run_id)
        if run is None:
            raise HttpError(404, f"No run {run_id} in this project.")
    return paged(checkpoint_table, project=project, run=run, after=after, limit=limit)


@router.get("/checkpoints/{checkpoint_id}", response=CheckpointRowOut)
def get_checkpoint(request, checkpoint_id: int):
    """One checkpoint's row, gate status included (the verdict promotion will apply)."""
    checkpoint = get_object_or_404_for_user(checkpoints_with_run(), request.user,
                                            project_field="run__project", pk=checkpoint_id)
    return checkpoint_detail(checkpoint)


@router.get("/projects/{slug}/aliases", response={200: AliasPageOut, 400: ErrorOut})
def list_aliases(request, slug: str, after: Cursor | None = None, limit: int = 100):
    """Aliases by name: where each points and its latest move."""
    project = get_project_or_404(request.user, slug)
    return paged(alias_list, project=project, after=after, limit=limit)


@router.get("/projects/{slug}/aliases/{name}/history", response={200: AliasMovePageOut, 400: ErrorOut})
def list_alias_history(request, slug: str, name: Text(64), after: Cursor | None = None,
                       limit: int = 50):
    """An alias's moves, newest first: who, when, from, to, rollback, forced, reason."""
    project = get_project_or_404(request.user, slug)
    alias = alias_get(project, name)
    if alias is None:
        raise HttpError(404, f"No alias {name!r} in this project.")
    return paged(alias_history, alias=alias, after=after, limit=limit)


def list_experiments(request, slug: str, after: Cursor | None = None, limit: int = 50):
    """Experiments newest first with their stages, gates and candidate."""
    project = get_project_or_404(request.user, slug)
    return paged(experiment_list, project=project, after=after, limit=limit)


# POST /projects/{slug}/experiments lives on the experiments router. django-ninja gives each
# router its own URL pattern per path, so a GET for the same path on this router would never
# be reached (the first pattern answers 405). The GET is therefore added to that router.
experiments_router.add_api_operation("/projects/{slug}/experiments", ["GET"], list_experiments,
                                     response={200: ExperimentPageOut, 400: ErrorOut})
