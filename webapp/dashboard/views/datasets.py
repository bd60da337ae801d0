"""Datasets: versions with their counts and lineage, the task browser, one task, import with a
validation report, synthetic generation with a preview, split moves and exports.

Reads are webapp.datasets.selectors.datasets', writes the services beside them (imports, generation,
splits), the same functions the API and `manage.py import_tasks` call. Every string of a task
or an uploaded file is hostile text: templates escape it, nothing is `|safe`.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.files.uploadhandler import FileUploadHandler, SkipFile
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_http_methods, require_POST

from webapp.common.pagination import CursorError, Page
from webapp.common.timeline import pretty_json, request_text
from webapp.dashboard.views.common import breadcrumbs_for, query_without_after
from webapp.datasets.models import Lineage, Split, TaskDataset
from webapp.datasets.selectors.datasets import (
    SOURCES,
    SPLITS,
    FilterError,
    TaskFilter,
    dataset_choice,
    dataset_in_project,
    dataset_version,
    newest_versions,
    provenance_of,
    task_of,
    task_page,
    version_children,
    version_page,
)
from webapp.datasets.selectors.exports import EXPORT_FORMATS, export_filename, export_lines
from webapp.datasets.services.datasets import deleted_version_highs, new_dataset_name_problem
from webapp.datasets.services.generation import (
    ENVIRONMENTS,
    MAX_TASKS,
    PREVIEW_SIZE,
    GenerationError,
    default_roles,
    generate,
    generation_create,
    generation_spec,
    templates,
)
from webapp.datasets.services.imports import (
    FORMAT_CHOICES,
    ImportFileError,
    import_check,
    import_create,
    import_target,
    max_import_bytes,
    size_text,
    upload_discard,
    upload_get,
    upload_save_meta,
    upload_store,
)
from webapp.datasets.services.splits import SplitMoveError, dataset_split_move
from webapp.projects.models import Project, Role
from webapp.projects.selectors.access import get_project_or_404, has_role
from webapp.runs.selectors.dataset_delete import datasets_being_deleted, pending_dataset_deletion
from webapp.trajectories.selectors.trajectories import trajectories_of_task

PAGE_SIZE = 50
VERSIONS_PER_PAGE = 100
CATEGORIES_SHOWN = 3


# ---------------------------------------------------------------------------------------
# Shared bits
# ---------------------------------------------------------------------------------------


def _dataset_or_404(project: Project, dataset_id: int) -> TaskDataset:
    dataset = dataset_version(project, dataset_id)
    if dataset is None:
        raise Http404("No such dataset version in this project.")
    return dataset


def _crumbs(project: Project, *trail: tuple[str, str | None]):
    return breadcrumbs_for(project, ("Datasets", reverse("dashboard:dataset_list", args=[project.slug])), *trail)


def _dataset_choices(project: Project, selected) -> list[dict]:
    """The datasets a new version can be made of: the newest version of each, plus the version asked for
    (an older one makes a branch from it); each labelled with the version it will make."""
    newest = newest_versions(project)
    chosen = _int(selected)
    if chosen and all(d.pk != chosen for d in newest):
        extra = dataset_choice(project, chosen)
        if extra is not None:
            newest.append(extra)
    latest = {d.name: d.version for d in newest if d.name}
    for d in newest:
        latest[d.name] = max(latest[d.name], d.version)
    for name, deleted in deleted_version_highs(project, latest).items():  # numbers are never given twice
        latest[name] = max(latest[name], deleted)
    return [{"pk": str(d.pk), "label": f"{d.name} (v{d.version} → v{latest[d.name] + 1})"} for d in newest]


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def lineage_summary(dataset: TaskDataset) -> str:
    """How the version was made, in a few words (plain text; the template escapes it)."""
    detail = dataset.lineage_detail if isinstance(dataset.lineage_detail, dict) else {}
    if dataset.lineage == Lineage.IMPORT:
        parts = [f"from {detail.get('file') or 'a file'}"]
        if detail.get("format"):
            parts.append(f"({str(detail['format']).replace('_', ' ')})")
        if detail.get("rejected") or detail.get("duplicates"):
            parts.append(f"· {detail.get('rejected', 0)} rejected, {detail.get('duplicates', 0)} duplicates skipped")
        return " ".join(parts)
    if dataset.lineage == Lineage.GENERATION:
        held = len(detail.get("held_out_templates") or [])
        trained = len(detail.get("train_templates") or [])
        if not detail:
            return "synthetic generator"
        return (f"{detail.get('environment', '')} generator, seed {detail.get('seed')}, {detail.get('n')} tasks, "
                f"{trained} training + {held} held-out templates")
    if dataset.lineage == Lineage.TRAJECTORIES:
        return "tasks added from trajectories"
    if dataset.lineage == Lineage.EDIT:
        move = detail.get("split_move")
        if isinstance(move, dict):
            where = ", ".join(f"{k}={v}" for k, v in (move.get("filter") or {}).items()) or "every task"
            return f"moved {move.get('moved')} task(s) ({where}) to {move.get('to')}"
        return str(detail.get("note") or "edited")
    return ""


def _message_view(message) -> dict:
    """A message as role + text for the task page (text parts joined; anything else as JSON)."""
    if not isinstance(message, dict):
        return {"role": "?", "text": pretty_json(message)}
    content = message.get("content")
    if isinstance(content, list):
        text = "\n".join(p["text"] if isinstance(p, dict) and isinstance(p.get("text"), str)
                         else p if isinstance(p, str) else pretty_json(p) for p in content)
    elif content is None or isinstance(content, str):
        text = content or ""
    else:
        text = pretty_json(content)
    extra = {k: v for k, v in message.items() if k not in ("role", "content")}
    return {"role": str(message.get("role", "?")), "text": text, "extra": pretty_json(extra) if extra else ""}


def _truth_names(truth) -> str:
    if isinstance(truth, list):
        return ", ".join(str(c.get("name")) for c in truth if isinstance(c, dict))
    return "" if truth is None else "(custom)"


# ---------------------------------------------------------------------------------------
# The datasets page
# ---------------------------------------------------------------------------------------


@login_required
def dataset_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    error = ""
    try:
        page = version_page(project, after=request.GET.get("after") or None, limit=VERSIONS_PER_PAGE)
    except CursorError as exc:
        page, error = Page(items=[], next_cursor=None), str(exc)
    rows = []
    deleting = datasets_being_deleted(project.pk, [dataset.pk for dataset in page.items])
    for dataset in page.items:
        stats = dataset.stats or {}
        categories = list((stats.get("category") or {}).items())
        rows.append({
            "d": dataset, "stats": stats, "lineage": lineage_summary(dataset),
            "splits": [(s, (stats.get("split") or {}).get(s, 0)) for s in SPLITS],
            "categories": categories[:CATEGORIES_SHOWN], "more_categories": max(0, len(categories) - CATEGORIES_SHOWN),
            "sources": list((stats.get("source") or {}).items()), "deleting": dataset.pk in deleting,
        })
    context = {
        "project": project, "rows": rows, "page": page, "query": query_without_after(request), "error": error,
        "can_edit": has_role(request.user, project, Role.EDITOR),
        "breadcrumbs": breadcrumbs_for(project, ("Datasets", None)),
    }
    return render(request, "dashboard/datasets/list.html", context)


# ---------------------------------------------------------------------------------------
# One version: the task browser
# ---------------------------------------------------------------------------------------


def _filter_from(request: HttpRequest) -> tuple[TaskFilter, dict[str, str]]:
    try:
        return TaskFilter.from_query(request.GET), {}
    except FilterError as exc:
        clean = request.GET.copy()
        for name in exc.errors:
            clean.pop(name, None)
        return TaskFilter.from_query(clean), exc.errors


@login_required
def dataset_detail_page(request: HttpRequest, slug: str, dataset_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    dataset = _dataset_or_404(project, dataset_id)
    flt, errors = _filter_from(request)
    try:
        page = task_page(dataset, flt, after=request.GET.get("after") or None, limit=PAGE_SIZE)
    except CursorError as exc:
        page, errors = Page(items=[], next_cursor=None), {**errors, "after": str(exc)}
    rows = [{"t": t, "request": request_text(t.messages), "truth": _truth_names(t.ground_truth)} for t in page.items]
    stats = dataset.stats or {}
    context = {
        "project": project, "d": dataset, "stats": stats, "rows": rows, "page": page, "flt": flt, "errors": errors,
        "query": query_without_after(request), "filter_query": flt.as_query(),
        "lineage": lineage_summary(dataset), "children": version_children(dataset),
        "splits": SPLITS, "sources": SOURCES, "categories": list((stats.get("category") or {}).keys())[:300],
        "split_counts": [(s, (stats.get("split") or {}).get(s, 0)) for s in SPLITS],
        "export_formats": [(key, label) for key, (label, _) in EXPORT_FORMATS.items()],
        "can_edit": has_role(request.user, project, Role.EDITOR), "deletion_job": pending_dataset_deletion(dataset),
        "breadcrumbs": _crumbs(project, (f"{dataset.name} v{dataset.version}", None)),
    }
    return render(request, "dashboard/datasets/detail.html", context)


@login_required
def dataset_task_page(request: HttpRequest, slug: str, dataset_id: int, task_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    dataset = _dataset_or_404(project, dataset_id)
    task = task_of(dataset, task_id)
    if task is None:
        raise Http404("No such task in this dataset version.")
    metadata = {k: v for k, v in (task.metadata or {}).items() if k != "provenance"} \
        if isinstance(task.metadata, dict) else task.metadata
    tools = [{"name": t.get("name") or (t.get("function") or {}).get("name", "?"),
              "description": t.get("description") or (t.get("function") or {}).get("description", ""),
              "json": pretty_json(t)} if isinstance(t, dict) else {"name": "?", "description": "", "json": pretty_json(t)}
             for t in (task.tools if isinstance(task.tools, list) else [])]
    context = {
        "project": project, "d": dataset, "task": task, "tools": tools,
        "messages_list": [_message_view(m) for m in (task.messages if isinstance(task.messages, list) else [])],
        "truth": pretty_json(task.ground_truth), "metadata": pretty_json(metadata),
        "provenance": provenance_of(task), "trajectories": trajectories_of_task(task),
        "back_url": reverse("dashboard:dataset_detail", args=[slug, dataset.pk]),
        "breadcrumbs": _crumbs(project, (f"{dataset.name} v{dataset.version}",
                                         reverse("dashboard:dataset_detail", args=[slug, dataset.pk])),
                               (task.external_id, None)),
    }
    return render(request, "dashboard/datasets/task.html", context)


@login_required
def dataset_export(request: HttpRequest, slug: str, dataset_id: int, fmt: str) -> StreamingHttpResponse:
    """The version as Crucible JSONL or NeMo Gym JSONL, streamed (viewers may download)."""
    project = get_project_or_404(request.user, slug)
    dataset = _dataset_or_404(project, dataset_id)
    if fmt not in EXPORT_FORMATS:
        raise Http404("Export as crucible or nemo_gym.")
    response = StreamingHttpResponse(export_lines(dataset, fmt), content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(True, export_filename(dataset, fmt))
    response["X-Content-Type-Options"] = "nosniff"
    return response


@login_required
@require_POST
def dataset_split_view(request: HttpRequest, slug: str, dataset_id: int) -> HttpResponse:
    """Move the tasks the browser's filter matches to another split: a new version."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    dataset = _dataset_or_404(project, dataset_id)
    back = reverse("dashboard:dataset_detail", args=[slug, dataset.pk])
    to_split = request.POST.get("to_split", "")
    try:
        flt = TaskFilter.from_query(request.POST)
        successor, moved = dataset_split_move(dataset=dataset, flt=flt, to_split=to_split, actor=request.user)
    except (FilterError, SplitMoveError) as exc:
        messages.error(request, str(exc))
        return redirect(back)
    messages.success(request, f"Moved {moved} task(s) to {to_split}: "
                              f"{successor.name} v{successor.version} (v{dataset.version} is unchanged).")
    return redirect(reverse("dashboard:dataset_detail", args=[slug, successor.pk]))


# ---------------------------------------------------------------------------------------
# Import: upload -> report -> create version / cancel
# ---------------------------------------------------------------------------------------


class SizeLimitHandler(FileUploadHandler):
    """Drops an uploaded file once it passes the limit (the rest is read and thrown away, never kept)."""

    def __init__(self, limit: int, request=None):
        super().__init__(request)
        self.limit = limit
        self.too_large = False

    def receive_data_chunk(self, raw_data, start):
        if start + len(raw_data) > self.limit:
            self.too_large = True
            raise SkipFile
        return raw_data

    def file_complete(self, file_size):
        return None


def _import_form(request: HttpRequest, project: Project, *, values: dict, errors: dict, status: int = 200):
    context = {
        "project": project, "values": values, "errors": errors, "formats": FORMAT_CHOICES, "splits": SPLITS,
        "datasets": _dataset_choices(project, values.get("dataset")), "max_size": size_text(max_import_bytes()),
        "breadcrumbs": _crumbs(project, ("Import", None)),
    }
    return render(request, "dashboard/datasets/import.html", context, status=status)


def _unreadable_upload(exc: MultiPartParserError) -> str:
    return (f"The upload could not be read ({exc}): the browser sent a broken multipart body. Choose the file "
            "again and resend the form.")


@login_required
@csrf_exempt  # the upload handler must be in place before the CSRF check reads the body; checked below
def dataset_import_page(request: HttpRequest, slug: str) -> HttpResponse:
    # Access first, before anything reads the body: a stranger gets the 404 whatever they send.
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    limiter = SizeLimitHandler(max_import_bytes(), request)
    request.upload_handlers.insert(0, limiter)
    if request.method == "POST":
        try:
            request.POST  # noqa: B018 - parse the multipart body here, where a broken one can be answered
        except MultiPartParserError as exc:
            values = {"format": "auto", "split": Split.TRAIN, "dataset": ""}
            return _import_form(request, project, values=values, errors={"file": _unreadable_upload(exc)},
                                status=400)
    return _dataset_import(request, project, limiter)


@csrf_protect
def _dataset_import(request: HttpRequest, project: Project, limiter: SizeLimitHandler) -> HttpResponse:
    slug = project.slug
    if request.method != "POST":
        values = {"format": "auto", "split": Split.TRAIN, "dataset": request.GET.get("dataset", "")}
        return _import_form(request, project, values=values, errors={})
    form = request.POST
    values = {key: form.get(key, "") for key in ("name", "dataset", "format", "split", "description")}
    errors: dict[str, str] = {}
    uploaded = request.FILES.get("file")
    if limiter.too_large:
        errors["file"] = (f"The file is over the {size_text(max_import_bytes())} limit: split it into smaller files "
                          "and import them one after the other.")
    elif uploaded is None:
        errors["file"] = "Choose a JSONL file to upload."
    try:
        target = import_target(project=project, name=values["name"], parent_id=_int(values["dataset"]),
                               format=values["format"], default_split=values["split"],
                               description=values["description"])
    except ImportFileError as exc:
        errors.setdefault(exc.field, str(exc))
    if errors:
        return _import_form(request, project, values=values, errors=errors, status=422)
    try:
        upload = upload_store(uploaded.chunks(), filename=uploaded.name, project=project, user=request.user,
                              declared_size=uploaded.size)
    except ImportFileError as exc:
        return _import_form(request, project, values=values, errors={exc.field: str(exc)}, status=422)
    try:
        report = import_check(upload.path, target=target, filename=upload.filename)
    except ImportFileError as exc:
        upload_discard(upload)
        return _import_form(request, project, values=values, errors={exc.field: str(exc)}, status=422)
    upload_save_meta(upload, report=report.to_dict(), target={
        "name": target.name, "dataset": target.parent.pk if target.parent else None, "format": target.format,
        "split": target.default_split, "description": target.description})
    return redirect(reverse("dashboard:dataset_import_report", args=[slug, upload.token]))


@login_required
@require_http_methods(["GET", "POST"])
def dataset_import_report_page(request: HttpRequest, slug: str, token: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    upload = upload_get(token, project=project, user=request.user)
    if upload is None or upload.report is None:
        messages.error(request, "That import is gone (confirmed, cancelled or over a day old): upload the file again.")
        return redirect(reverse("dashboard:dataset_import", args=[slug]))
    report = upload.report
    saved = upload.meta.get("target") or {}
    if request.method == "POST":
        if request.POST.get("action") == "cancel":
            upload_discard(upload)
            messages.info(request, f"Import of {upload.filename} cancelled: nothing was written.")
            return redirect(reverse("dashboard:dataset_list", args=[slug]))
        try:
            target = import_target(project=project, name=saved.get("name", ""), parent_id=saved.get("dataset"),
                                   format=saved.get("format", "auto"), default_split=saved.get("split", ""),
                                   description=saved.get("description", ""))
            dataset, written = import_create(upload.path, project=project, target=target, actor=request.user,
                                             filename=upload.filename)
        except ImportFileError as exc:
            messages.error(request, str(exc))
            return redirect(reverse("dashboard:dataset_import_report", args=[slug, token]))
        upload_discard(upload)
        messages.success(request, f"Created {dataset.name} v{dataset.version}: {written.accepted} task(s) imported, "
                                  f"{written.rejected_count} rejected, {written.duplicate_count} duplicates skipped.")
        return redirect(reverse("dashboard:dataset_detail", args=[slug, dataset.pk]))
    parent = dataset_in_project(project, report.parent_id) if report.parent_id else None
    context = {
        "project": project, "report": report, "upload": upload, "parent": parent, "token": token,
        "breadcrumbs": _crumbs(project, ("Import", reverse("dashboard:dataset_import", args=[slug])),
                               (upload.filename, None)),
    }
    return render(request, "dashboard/datasets/import_report.html", context)


# ---------------------------------------------------------------------------------------
# Generate: form -> preview -> create
# ---------------------------------------------------------------------------------------


ROLES = (("train", "train"), ("held_out", "held out"), ("off", "off"))


@login_required
@require_http_methods(["GET", "POST"])
def dataset_generate_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    defaults = default_roles()
    if request.method == "POST":
        form = request.POST
        values = {key: form.get(key, "") for key in ("environment", "n", "seed", "name", "dataset", "description")}
        roles = {name: form.get(f"role_{name}", "off") for name in defaults}
    else:
        parent = _int(request.GET.get("dataset"))
        values = {"environment": "workplace", "n": "50", "seed": "0", "name": "", "dataset": str(parent or ""),
                  "description": ""}
        roles = dict(defaults)
    errors: dict[str, str] = {}
    preview, report = [], None
    if request.method == "POST":
        spec = None
        try:
            spec = generation_spec(environment=values["environment"], n=values["n"], seed=values["seed"],
                                   train_templates=[t for t, r in roles.items() if r == "train"],
                                   held_out_templates=[t for t, r in roles.items() if r == "held_out"])
        except GenerationError as exc:
            errors.update(exc.errors)
        parent = None
        if values["dataset"]:
            parent = dataset_in_project(project, _int(values["dataset"]))
            if parent is None:
                errors["dataset"] = "No such dataset version in this project."
        elif form.get("action") == "create":
            problem = new_dataset_name_problem(project, values["name"].strip())
            if problem:
                errors["name"] = problem
        if spec is not None and not errors:
            try:
                if form.get("action") == "create":
                    dataset, report = generation_create(project=project, spec=spec, actor=request.user,
                                                        name=values["name"].strip(), parent=parent,
                                                        description=values["description"][:10_000])
                    messages.success(request, f"Created {dataset.name} v{dataset.version}: {report.accepted} generated "
                                              f"task(s) ({report.ground_truth_failed} drafts refused by the ground-truth"
                                              f" check, {report.duplicates} duplicates dropped).")
                    return redirect(reverse("dashboard:dataset_detail", args=[slug, dataset.pk]))
                tasks, report = generate(spec)
                preview = [{"task": t, "request": request_text(t.messages), "truth": pretty_json(t.ground_truth)}
                           for t in tasks[:PREVIEW_SIZE]]
            except GenerationError as exc:
                errors.update(exc.errors)
    context = {
        "project": project, "values": values, "errors": errors, "environments": ENVIRONMENTS, "max_tasks": MAX_TASKS,
        "templates": [{"t": t, "role": roles.get(t.name, "off")} for t in templates()], "roles": ROLES,
        "datasets": _dataset_choices(project, values.get("dataset")), "preview": preview, "report": report,
        "breadcrumbs": _crumbs(project, ("Generate", None)),
    }
    return render(request, "dashboard/datasets/generate.html", context, status=422 if errors else 200)
