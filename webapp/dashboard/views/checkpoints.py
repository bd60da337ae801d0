"""Checkpoints: every checkpoint with its metrics and gates, the aliases and their history,
promotion and rollback (owner), adapter downloads (viewer) and merged exports (editor).

The reads are webapp.runs.selectors.checkpoints' and the writes webapp.runs.services.promotion's,
the same functions the API calls; the promotion form validates with the API's PromoteIn schema.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.utils.text import slugify
from django.views.decorators.http import require_http_methods, require_POST
from pydantic import ValidationError

from webapp.api.schemas import PromoteIn
from webapp.common.pagination import CursorError, Page
from webapp.dashboard.views.common import breadcrumbs_for, has_page, query_without_after
from webapp.projects.models import ROLE_RANK, Project, Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404, role_in
from webapp.runs.models import Checkpoint, CheckpointAlias, Run
from webapp.runs.selectors.checkpoints import (
    AliasMoveRow,
    AliasRow,
    CheckpointRow,
    alias_get,
    alias_history,
    alias_list,
    alias_names,
    aliases_named,
    checkpoint_detail,
    checkpoint_table,
    checkpoints_with_run_and_project,
    runs_with_checkpoints,
)
from webapp.runs.selectors.failures import run_in_project
from webapp.runs.selectors.jobs import latest_finished_export
from webapp.runs.services.exports import (
    ExportRefused,
    checkpoint_export_start,
    folder_problem,
    latest_exports,
    local_folder,
)
from webapp.runs.services.paths import checkpoint_folder
from webapp.runs.services.promotion import (
    AliasConflict,
    GatesNotPassed,
    InvalidAliasName,
    alias_rollback,
    checkpoint_promote,
    promotion_check,
)

PAGE_SIZE = 50
ALIASES_PER_PAGE = 20  # each alias on the panel costs one query for its history
MOVES_IN_PANEL = 5
MOVES_PER_PAGE = 50
# The columns of the table: held-out and validation metrics that say whether a checkpoint is better.
MAIN_METRICS = (("success_rate", "success"), ("valid_json_rate", "valid JSON"), ("reward_mean", "reward"))
ZIP_BLOCK = 1024 * 1024

# Where a checkpoint's folder is, as far as this server can tell.


# ---------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricCell:
    """A held-out number and its change against the experiment's baseline (higher is better)."""

    value: float | None
    delta: float | None

    @property
    def delta_text(self) -> str:
        """Signed with a real minus sign, so the direction reads without the colour."""
        if self.delta is None:
            return ""
        if round(self.delta, 3) == 0:
            return "±0.000"
        return f"{self.delta:+.3f}".replace("-", "\u2212")

    @property
    def direction(self) -> str:
        if self.delta is None or round(self.delta, 3) == 0:
            return "flat"
        return "up" if self.delta > 0 else "down"


@dataclass(frozen=True)
class TableRow:
    checkpoint: CheckpointRow
    validation: list[float | None]
    held_out: list[MetricCell]
    failing_gates: list[str]
    folder: str
    export: dict | None


def _table_rows(project: Project, checkpoints: list[CheckpointRow]) -> list[TableRow]:
    exports = latest_exports(project, [c.id for c in checkpoints])
    rows = []
    for c in checkpoints:
        rows.append(TableRow(
            checkpoint=c,
            validation=[c.validation.get(name) for name, _ in MAIN_METRICS],
            held_out=[MetricCell(c.held_out.get(name), c.deltas.get(name)) for name, _ in MAIN_METRICS],
            failing_gates=[g.get("gate", "?") for g in c.gates.rows if not g.get("passed")],
            folder=c.folder,
            export=exports.get(c.id),
        ))
    return rows


def _run_filter(request: HttpRequest, project: Project) -> tuple[Run | None, str | None]:
    """The run of `?run=ID` (None for every run), or an error that says what was wrong."""
    raw = request.GET.get("run", "").strip()
    if not raw:
        return None, None
    if not raw.isdigit() or len(raw) > 18:
        return None, f"“{raw[:40]}” is not a run id; pick a run from the list."
    run = run_in_project(project, int(raw))
    if run is None:
        return None, f"There is no run {raw} in this project; pick a run from the list."
    return run, None


def _rank(user, project: Project) -> int:
    return ROLE_RANK.get(role_in(user, project), 0)


@login_required
def checkpoint_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    run, error = _run_filter(request, project)
    page = Page(items=[], next_cursor=None)
    if error is None:
        try:
            page = checkpoint_table(project, run=run, after=request.GET.get("after") or None, limit=PAGE_SIZE)
        except CursorError as exc:
            error = str(exc)
    rank = _rank(request.user, project)
    rows = _table_rows(project, page.items)
    context = {
        "project": project, "rows": rows, "page": page, "query": query_without_after(request),
        "run": run, "filter_error": error, "metric_labels": [label for _, label in MAIN_METRICS],
        "can_promote": rank >= ROLE_RANK[Role.OWNER], "can_export": rank >= ROLE_RANK[Role.EDITOR],
        "exports_active": any(r.export and r.export["active"] for r in rows),
        "run_links": has_page("dashboard:run_detail"), "experiment_links": has_page("dashboard:experiment_detail"),
    }
    if request.htmx:
        return render(request, "dashboard/checkpoints/_checkpoint_rows.html", context)
    context.update(
        _alias_panel(project, request.GET.get("alias_after") or None),
        runs=_runs_with_checkpoints(project, run),
        filtered=bool(run or error or request.GET.get("after")),
        breadcrumbs=breadcrumbs_for(project, ("Checkpoints", None)),
        **_empty_state_action(project),
    )
    return render(request, "dashboard/checkpoints/checkpoint_list.html", context)


def _runs_with_checkpoints(project: Project, selected: Run | None) -> list[dict]:
    """The run filter's choices: the latest 200 runs that saved a checkpoint, and the selected one."""
    runs = runs_with_checkpoints(project, limit=200)
    if selected is not None and all(r["id"] != selected.pk for r in runs):
        runs.insert(0, {"id": selected.pk, "name": selected.name})
    return runs


def _empty_state_action(project: Project) -> dict:
    if has_page("dashboard:run_list"):
        return {"start_url": reverse("dashboard:run_list", args=[project.slug]), "start_label": "Go to runs"}
    return {"start_url": reverse("dashboard:job_list", args=[project.slug]), "start_label": "Go to jobs"}


# ---------------------------------------------------------------------------------------
# Aliases
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AliasPanelEntry:
    """An alias on the panel: where it points and its latest moves."""

    alias: AliasRow
    moves: Page  # of AliasMoveRow, newest first

    @property
    def rollback_target(self) -> AliasMoveRow | None:
        """The latest move, when it has an earlier holder to go back to (alias_rollback's rule)."""
        latest = self.moves.items[0] if self.moves.items else None
        return latest if latest is not None and latest.from_checkpoint_id is not None else None


def _alias_panel(project: Project, after: str | None) -> dict:
    """Aliases by name, each with its latest moves: two queries plus one per alias shown."""
    try:
        aliases = alias_list(project, after=after, limit=ALIASES_PER_PAGE)
    except CursorError as exc:
        return {"aliases": [], "alias_page": Page(items=[], next_cursor=None), "alias_error": str(exc)}
    objects = aliases_named(project, [r.name for r in aliases.items])
    entries = [AliasPanelEntry(row, alias_history(objects[row.name], limit=MOVES_IN_PANEL))
               for row in aliases.items if row.name in objects]
    return {"aliases": entries, "alias_page": aliases}


@login_required
def alias_history_page(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """One alias's whole history, keyset-paged; under htmx only the rows (the panel's "older moves")."""
    project = get_project_or_404(request.user, slug)
    alias = alias_get(project, name)
    if alias is None:
        raise Http404(f"No alias {name!r} in this project.")
    error = None
    try:
        moves = alias_history(alias, after=request.GET.get("after") or None, limit=MOVES_PER_PAGE)
    except CursorError as exc:
        moves, error = Page(items=[], next_cursor=None), str(exc)
    context = {"project": project, "alias": alias, "alias_name": alias.name, "moves": moves,
               "history_error": error}
    if request.htmx:
        return render(request, "dashboard/checkpoints/_alias_moves.html", context)
    list_url = reverse("dashboard:checkpoint_list", args=[slug])
    context["breadcrumbs"] = breadcrumbs_for(project, ("Checkpoints", list_url), (f"Alias {alias.name}", None))
    return render(request, "dashboard/checkpoints/alias_history.html", context)


@login_required
@require_POST
def alias_rollback_view(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.OWNER)
    alias = alias_get(project, name)
    if alias is None:
        raise Http404(f"No alias {name!r} in this project.")
    back = reverse("dashboard:checkpoint_list", args=[slug]) + f"#alias-{alias.name}"
    try:
        reason = PromoteIn.model_validate({"reason": request.POST.get("reason", "")}).reason.strip()
    except ValidationError as exc:
        messages.error(request, f"Alias {alias.name!r} was not rolled back: the reason {_first_message(exc)}.")
        return redirect(back)
    try:
        alias = alias_rollback(alias=alias, actor=request.user, reason=reason)
    except AliasConflict as exc:
        messages.error(request, str(exc))
        return redirect(back)
    target = alias.checkpoint
    messages.success(request, f"Alias {alias.name!r} rolled back to checkpoint {target.pk} "
                              f"({target.run.name}, step {target.step}).")
    return redirect(back)


def _first_message(exc: ValidationError) -> str:
    return _clean_message(exc.errors()[0]["msg"])


def _clean_message(message: str) -> str:
    return message.removeprefix("Value error, ").removeprefix("text ")


# ---------------------------------------------------------------------------------------
# Promotion
# ---------------------------------------------------------------------------------------


def _checkpoint_for(request: HttpRequest, slug: str, checkpoint_id: int, minimum: str) -> Checkpoint:
    return get_object_or_404_for_user(checkpoints_with_run_and_project(), request.user, minimum,
                                      project_field="run__project", pk=checkpoint_id, run__project__slug=slug)


def _promotion_errors(checkpoint: Checkpoint, data: dict, actor) -> tuple[CheckpointAlias | None, dict[str, str]]:
    """Promote as the form asks; else the errors by field ("alias", "reason", "force", "form")."""
    try:
        body = PromoteIn.model_validate(data)
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "form"
            message = _clean_message(error["msg"])
            errors.setdefault(field, f"{message[:1].upper()}{message[1:]}.")
        return None, errors
    try:
        return checkpoint_promote(checkpoint=checkpoint, alias=body.alias, actor=actor, reason=body.reason.strip(),
                                  force=body.force), {}
    except (InvalidAliasName, AliasConflict) as exc:  # a bad name, or the alias is there already
        return None, {"alias": str(exc)}
    except GatesNotPassed as exc:  # or WeightsAbsent: the same force-with-reason overrides both
        if body.force:
            return None, {"reason": str(exc)}
        problems = "; and ".join(promotion_check(checkpoint).problems)
        errors = {"force": f"{problems[:1].upper()}{problems[1:]}: tick “Promote anyway” to promote it regardless."}
        if not body.reason.strip():
            errors["reason"] = ("A reason is required to promote without passed gates or without the weights on "
                                "this server; it is kept in the history.")
        return None, errors


@login_required
@require_http_methods(["GET", "POST"])
def checkpoint_promote_page(request: HttpRequest, slug: str, checkpoint_id: int) -> HttpResponse:
    checkpoint = _checkpoint_for(request, slug, checkpoint_id, Role.OWNER)
    project = checkpoint.run.project
    form = {"alias": "production", "reason": "", "force": False}
    errors: dict[str, str] = {}
    if request.method == "POST":
        form = {"alias": request.POST.get("alias", "").strip(), "reason": request.POST.get("reason", ""),
                "force": request.POST.get("force") == "on"}
        alias, errors = _promotion_errors(checkpoint, form, request.user)
        if alias is not None:
            messages.success(request, f"Alias {alias.name!r} now points at checkpoint {checkpoint.pk} "
                                      f"({checkpoint.run.name}, step {checkpoint.step}).")
            return redirect(reverse("dashboard:checkpoint_list", args=[slug]) + f"#alias-{alias.name}")
    row = checkpoint_detail(checkpoint)
    check = promotion_check(checkpoint)
    list_url = reverse("dashboard:checkpoint_list", args=[slug])
    context = {
        "project": project, "checkpoint": row, "status": check.gates, "weights": check.weights,
        "needs_force": check.needs_force, "form": form,
        "errors": errors, "alias_names": alias_names(project, limit=200),
        "metrics": [(name, row.baseline.get(name), value, MetricCell(value, row.deltas.get(name)))
                    for name, value in sorted(row.held_out.items())],
        "breadcrumbs": breadcrumbs_for(project, ("Checkpoints", list_url),
                                       (f"Promote {row.run_name} · step {row.step}", None)),
    }
    return render(request, "dashboard/checkpoints/promote.html", context, status=400 if errors else 200)


# ---------------------------------------------------------------------------------------
# Downloads
# ---------------------------------------------------------------------------------------


class _Chunks:
    """A write-only, unseekable file for ZipFile: what it writes is handed out piece by piece."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data = b"".join(self._parts)
        self._parts.clear()
        return data


def _regular_files(folder: Path) -> Iterator[Path]:
    """Every plain file under `folder`, sorted; symlinks (to files or folders) are not followed."""
    for current, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(current, d)))
        for name in sorted(files):
            path = Path(current, name)
            if not path.is_symlink() and path.is_file():
                yield path


def zip_stream(folder: Path, prefix: str) -> Iterator[bytes]:
    """The folder as a zip archive, produced a block at a time (never the whole archive in memory)."""
    sink = _Chunks()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for path in _regular_files(folder):
            try:
                source = open(path, "rb")  # noqa: SIM115 - closed below; the file may vanish meanwhile
            except FileNotFoundError:
                continue
            with source:
                big = os.fstat(source.fileno()).st_size >= zipfile.ZIP64_LIMIT // 2
                arcname = f"{prefix}/{path.relative_to(folder).as_posix()}"
                with archive.open(arcname, "w", force_zip64=big) as target:
                    while block := source.read(ZIP_BLOCK):
                        target.write(block)
                        if data := sink.take():
                            yield data
            if data := sink.take():
                yield data
    if data := sink.take():
        yield data


def _zip_response(folder: Path, name: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(zip_stream(folder, name), content_type="application/zip")
    response["Content-Disposition"] = content_disposition_header(True, f"{name}.zip")
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _unavailable(request: HttpRequest, project: Project, title: str, message: str) -> HttpResponse:
    list_url = reverse("dashboard:checkpoint_list", args=[project.slug])
    context = {"project": project, "title": title, "message": message, "list_url": list_url,
               "breadcrumbs": breadcrumbs_for(project, ("Checkpoints", list_url), (title, None))}
    return render(request, "dashboard/checkpoints/unavailable.html", context, status=404)


def _archive_name(checkpoint: Checkpoint, suffix: str = "") -> str:
    return f"{slugify(checkpoint.run.name) or 'run'}-{checkpoint.run_id}-step{checkpoint.step}{suffix}"


@login_required
def checkpoint_download(request: HttpRequest, slug: str, checkpoint_id: int) -> HttpResponse:
    checkpoint = _checkpoint_for(request, slug, checkpoint_id, Role.VIEWER)
    folder, state = checkpoint_folder(checkpoint)
    if folder is None:
        what = f"checkpoint {checkpoint.pk} ({checkpoint.run.name}, step {checkpoint.step})"
        return _unavailable(request, checkpoint.run.project, "Checkpoint not available",
                            folder_problem(state, what, checkpoint.storage_uri))
    return _zip_response(folder, _archive_name(checkpoint))


# ---------------------------------------------------------------------------------------
# Merged exports (a job of kind "export", run by workers/export.py)
# ---------------------------------------------------------------------------------------


@login_required
@require_POST
def checkpoint_export(request: HttpRequest, slug: str, checkpoint_id: int) -> HttpResponse:
    checkpoint = _checkpoint_for(request, slug, checkpoint_id, Role.EDITOR)
    try:
        job = checkpoint_export_start(checkpoint=checkpoint)
    except ExportRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Export of checkpoint {checkpoint.pk} ({checkpoint.run.name}, step "
                                  f"{checkpoint.step}) queued as job {job.pk}; the merged model will be in "
                                  f"{job.payload['out']}.")
    return redirect(reverse("dashboard:checkpoint_list", args=[slug]))


@login_required
def checkpoint_export_download(request: HttpRequest, slug: str, checkpoint_id: int) -> HttpResponse:
    checkpoint = _checkpoint_for(request, slug, checkpoint_id, Role.VIEWER)
    project = checkpoint.run.project
    job = latest_finished_export(project, checkpoint.pk)
    what = f"the merged model of checkpoint {checkpoint.pk} ({checkpoint.run.name}, step {checkpoint.step})"
    if job is None:
        return _unavailable(request, project, "Merged model not available",
                            f"There is no finished export of checkpoint {checkpoint.pk}: export it first.")
    location = str(job.payload.get("out", ""))
    folder, state = local_folder(location, checkpoint.run)
    if folder is None:
        return _unavailable(request, project, "Merged model not available",
                            folder_problem(state, what, location, "it was deleted; export the checkpoint again"))
    return _zip_response(folder, _archive_name(checkpoint, "-merged"))
