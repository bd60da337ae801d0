"""Runs: the table, one run's live dashboard, and the comparison of several runs."""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.common.pagination import CursorError, Page
from webapp.dashboard.views.common import (
    breadcrumbs_for,
    has_page,
    query_without_after,
    run_ids_from_text,
)
from webapp.projects.models import Role
from webapp.projects.selectors.access import (
    get_object_or_404_for_user,
    get_project_or_404,
    has_role,
)
from webapp.runs.models import (
    ACTIVE_JOB_STATES,
    MAX_RUN_TAGS,
    RUN_NOTE_LENGTH,
    RUN_TAG_LENGTH,
    Run,
    RunKind,
    RunStatus,
)
from webapp.runs.selectors.jobs import job_placement_problem
from webapp.runs.selectors.metric_direction import metric_direction
from webapp.runs.selectors.run_delete import pending_deletion, runs_being_deleted
from webapp.runs.selectors.runs import (
    CONFIG_COLUMNS,
    CONFIG_SORT_PREFIX,
    DEFAULT_RUN_SORT,
    HEADLINE_METRICS,
    METRIC_SORTS,
    RUN_SORT_LABELS,
    ConfigColumn,
    Headline,
    RunDetail,
    config_cell,
    config_columns,
    config_defaulted,
    config_sort_column,
    headline_cell,
    launched_config,
    metric_best,
    metric_latest,
    metric_names,
    run_detail,
    run_headline_cells,
    run_latest_jobs,
    run_list,
    run_sparklines,
    run_tag_filter,
    run_tags_in_use,
    runs_by_id_in,
    runs_for_run_page,
)
from webapp.runs.selectors.seed_groups import SeedGroup, seed_groups, spread
from webapp.runs.services.run_delete import MAX_RUNS_AT_ONCE
from webapp.runs.services.runs import (
    RunActionError,
    RunAnnotationError,
    run_annotate,
    run_cancel,
    run_retry,
    run_tags_from_text,
)

FILTERS = ("kind", "status", "dataset", "model", "creator", "experiment", "text")
MAX_COMPARE = 10


@dataclass(frozen=True)
class Panel:
    """One chart of the run page: metric names of one split, drawn together."""

    title: str
    split: str
    names: list[str]
    band: str = ""
    step_link: bool = False


# System metrics (training/system_metrics.py): host and GPU memory, CPU and GPU utilisation.
SYSTEM_MEMORY = ["system/memory_rss_mb", "system/gpu_memory_allocated_mb", "system/gpu_memory_peak_mb",
                 "system/gpu_memory_reserved_mb"]
SYSTEM_UTILISATION = ["system/cpu_percent", "system/gpu_utilization_percent"]

# The run page's panels, in UI.md's order. A panel appears when the run recorded any of its
# metrics; prefixes (ending in "/") gather every metric that starts with them.
PANEL_SPECS: list[tuple[str, str, list[str], str, bool]] = [
    ("Reward (mean ± std over the batch)", "train", ["reward"], "reward_std", True),
    ("Reward components", "train", ["rewards/"], "", True),
    ("Validation success", "validation", ["success_rate", "reward_mean"], "", False),
    ("Validation behaviour rates", "validation",
     ["valid_json_rate", "correct_tool_rate", "correct_arguments_rate", "unsafe_action_rate", "truncation_rate"],
     "", False),
    ("Held-out", "held_out", ["success_rate", "valid_json_rate", "unsafe_action_rate"], "", False),
    ("Loss and gradient norm", "train", ["loss", "grad_norm"], "", True),
    ("KL to the reference", "train", ["kl"], "", True),
    ("Clip ratios", "train", ["clip_ratio/"], "", True),
    ("Entropy", "train", ["entropy"], "", True),
    ("Completion length", "train", ["completions/mean_length", "completions/max_length"], "", True),
    ("Truncated completions", "train", ["completions/clipped_ratio"], "", True),
    ("Groups with no reward spread (no gradient)", "train", ["frac_reward_zero_std"], "", True),
    ("Tool calls", "train", ["tools/call_frequency", "tools/failure_frequency", "num_turns/mean"], "", True),
    ("Throughput (tokens/s)", "train", ["tokens_per_second", "generation/"], "", True),
    ("Time per step (s)", "train", ["timing/"], "", True),
    ("Learning rate", "train", ["lr"], "", True),
    *(spec for split in ("train", "validation", "held_out") for spec in (
        (f"System: memory, MiB ({split})", split, SYSTEM_MEMORY, "", split == "train"),
        (f"System: utilisation, % ({split})", split, SYSTEM_UTILISATION, "", split == "train"),
    )),
    ("Evaluation time (s)", "validation", ["timing/"], "", False),
    ("Evaluation throughput (tokens/s)", "validation", ["generation/"], "", False),
]


def _matching(names: set[str], wanted: list[str]) -> list[str]:
    found: list[str] = []
    for want in wanted:
        found += sorted(n for n in names if n.startswith(want)) if want.endswith("/") else [want] * (want in names)
    return found


# The curve a person opens a live run for, by kind: drawn (empty) before the first point so the
# live chart fills in as the worker reports, instead of an empty page that needs a reload.
FIRST_CURVE: dict[str, tuple[str, str]] = {"grpo": ("train", "reward"), "sft": ("train", "loss"),
                                           "dpo": ("train", "loss")}


def run_panels(recorded: list[tuple[str, str]], *, expect: tuple[str, str] | None = None) -> list[Panel]:
    """The panels this run has data for; metrics no panel claims get one each, so none is hidden.

    `expect` (split, name): a metric the run is about to record; its panel is shown even empty."""
    by_split: dict[str, set[str]] = {}
    for split, name in recorded:
        by_split.setdefault(split, set()).add(name)
    expected = {expect} if expect else set()
    panels, claimed = [], set()
    for title, split, wanted, band, step_link in PANEL_SPECS:
        names = _matching(by_split.get(split, set()), wanted)
        if not names and (split, wanted[0]) in expected:
            names = [wanted[0]]
        if names:
            panels.append(Panel(title, split, names, band if band in by_split.get(split, set()) else "", step_link))
            claimed |= {(split, n) for n in names} | ({(split, band)} if band else set())
    for split, name in sorted(set(recorded) - claimed):
        panels.append(Panel(f"{name} ({split})", split, [name], "", split == "train"))
    return panels


def _run_for(request: HttpRequest, slug: str, run_id: int, minimum: str = Role.VIEWER) -> Run:
    return get_object_or_404_for_user(
        runs_for_run_page(), request.user, minimum, pk=run_id, project__slug=slug)


@login_required
def run_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    filters = {name: request.GET.get(name, "")[:200] for name in FILTERS}
    tags = run_tag_filter(value[:200] for value in request.GET.getlist("tag")[:MAX_RUN_TAGS])[:MAX_RUN_TAGS]
    columns = config_columns(value[:1000] for value in request.GET.getlist("cols")[:len(CONFIG_COLUMNS)])
    sort = request.GET.get("sort", DEFAULT_RUN_SORT)
    sorted_column = config_sort_column(sort)
    if sorted_column is not None and sorted_column not in columns:
        columns.append(sorted_column)  # a table sorted by a config field shows it
    error = None
    try:
        experiment = int(filters["experiment"]) if filters["experiment"] else None
        page = run_list(project, **{**filters, "experiment": experiment}, tag=tags, sort=sort,
                        after=request.GET.get("after") or None, limit=50)
    except (ValueError, CursorError) as exc:
        page, error = Page(items=[], next_cursor=None), str(exc)
    runs = page.items
    headline = run_headline_cells(runs)
    sparklines = run_sparklines(runs)
    jobs = run_latest_jobs(runs)
    deleting = runs_being_deleted(project.pk, [run.pk for run in runs])
    query = query_without_after(request)
    if sorted_column is not None:
        query.setlist("cols", [column.key for column in columns])  # the links keep the column the table is sorted by
    rows = [{"run": run, "headline": headline[run.pk], "deleting": run.pk in deleting,
             "sparkline": json.dumps(sparklines.get(run.pk, [])), "job": jobs.get(run.pk),
             "tags": [(tag, _tag_filter_query(query, tags, tag)) for tag in _stored_tags(run)],
             "config": [(column, *config_cell(run, column.key)) for column in columns]} for run in runs]
    context = {
        "project": project, "rows": rows, "page": page, "filters": filters, "sort": sort, "sorts": _sort_menu(columns),
        "filter_error": error, "query": query, "headlines": _headline_sort_links(query, sort),
        "tag_filter": ", ".join(tags), "tag_chips": [(tag, _tag_filter_query(query, tags, tag, remove=True))
                                                     for tag in tags],
        "columns": _config_sort_links(query, sort, columns), "column_choices": CONFIG_COLUMNS,
        "column_keys": {column.key for column in columns}, "filtered": bool(tags) or any(filters.values()),
        "table_columns": 10 + len(HEADLINE_METRICS) + len(columns),
        "kinds": RunKind.choices, "statuses": RunStatus.choices, "can_edit": has_role(request.user, project, Role.EDITOR),
        "max_delete": MAX_RUNS_AT_ONCE,
        "new_run_url": reverse("dashboard:run_new", args=[slug]) if has_page("dashboard:run_new") else None,
        "any_borrowed": any(source for row in rows for _, source in row["headline"]),
        "any_active": any(run.status in (RunStatus.QUEUED, RunStatus.RUNNING) for run in runs) or bool(deleting),
    }
    if request.htmx:
        return render(request, "dashboard/runs/_rows.html", context)
    context["breadcrumbs"] = breadcrumbs_for(project, ("Runs", None))
    context["tags_in_use"] = run_tags_in_use(project)
    return render(request, "dashboard/runs/list.html", context)


def _stored_tags(run: Run) -> list[str]:
    return [tag for tag in run.tags if isinstance(tag, str)] if isinstance(run.tags, list) else []


def _headline_sort_links(query: QueryDict, sort: str) -> list[dict]:
    """Each headline column of the runs table with the link that sorts by it (highest first, then lowest first)."""
    sort_of = {key: name for name, key in METRIC_SORTS.items()}
    links = []
    for h in HEADLINE_METRICS:
        name = sort_of.get(h.key)
        if name is None:
            links.append({"headline": h, "url": None, "order": ""})
            continue
        changed = query.copy()
        changed["sort"] = name if sort == f"-{name}" else f"-{name}"
        order = "descending" if sort == f"-{name}" else "ascending" if sort == name else ""
        links.append({"headline": h, "url": f"?{changed.urlencode()}", "order": order})
    return links


def _sort_menu(columns: list[ConfigColumn]) -> dict[str, str]:
    """The sort menu: every sort but those by config columns, which are offered for the columns shown."""
    shown = {f"{sign}{CONFIG_SORT_PREFIX}{column.key}" for column in columns for sign in ("", "-")}
    return {value: label for value, label in RUN_SORT_LABELS.items()
            if config_sort_column(value) is None or value in shown}


def _config_sort_links(query: QueryDict, sort: str, columns: list[ConfigColumn]) -> list[dict]:
    """Each config column shown with the link that sorts by it: numbers highest first, text A to Z, then the
    other way round on a second click."""
    links = []
    for column in columns:
        name = f"{CONFIG_SORT_PREFIX}{column.key}"
        first, second = (f"-{name}", name) if column.numeric else (name, f"-{name}")
        changed = query.copy()
        changed["sort"] = second if sort == first else first
        order = "descending" if sort == f"-{name}" else "ascending" if sort == name else ""
        links.append({"column": column, "url": f"?{changed.urlencode()}", "order": order,
                      "next_label": RUN_SORT_LABELS[changed["sort"]]})
    return links


def _tag_filter_query(query: QueryDict, tags: list[str], tag: str, *, remove: bool = False) -> str:
    """The runs list's query string with `tag` added to (or removed from) the tag filter, the other filters kept."""
    changed = query.copy()
    wanted = [t for t in tags if t != tag] if remove else [*tags, *([tag] if tag not in tags else [])]
    changed.setlist("tag", wanted)
    return changed.urlencode()


def _detail_context(request: HttpRequest, run: Run) -> dict:
    detail = run_detail(run)
    job = detail.job
    return {
        "project": run.project, "run": run, "detail": detail, "job": job,
        "active": job is not None and (job.state in ACTIVE_JOB_STATES or job.state == "queued"),
        "can_edit": has_role(request.user, run.project, Role.EDITOR),
        "headlines": [_headline_shown(detail, h) for h in HEADLINE_METRICS],
        "placement_problem": job_placement_problem(job) if job is not None else None,
        "deletion_job": pending_deletion(run),
    }


def _headline_shown(detail: RunDetail, h: Headline) -> tuple[Headline, float | None, str]:
    """(headline, value, source) for the run header."""
    return (h, *headline_cell(detail.headline, detail.checkpoint_headline, h))


def _annotation_context(run: Run, *, tags_text: str | None = None, note: str | None = None,
                        errors: dict[str, str] | None = None, saved: bool = False) -> dict:
    """The run's tags and note, and their edit form (what was typed and each field's error when refused)."""
    tags = _stored_tags(run)
    return {
        "run_tags": tags, "run_note": run.note,
        "annotation": {"tags": ", ".join(tags) if tags_text is None else tags_text,
                       "note": run.note if note is None else note, "errors": errors or {}, "saved": saved,
                       "max_tags": MAX_RUN_TAGS, "tag_length": RUN_TAG_LENGTH, "note_length": RUN_NOTE_LENGTH},
    }


@login_required
def run_detail_page(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    run = _run_for(request, slug, run_id)
    return _render_detail_page(request, run, _annotation_context(run))


def _render_detail_page(request: HttpRequest, run: Run, annotation: dict, status: int = 200) -> HttpResponse:
    slug = run.project.slug
    context = _detail_context(request, run)
    context.update(annotation)
    trajectories = reverse("dashboard:trajectory_list", args=[slug]) if has_page("dashboard:trajectory_list") else ""
    context.update(
        panels=run_panels(metric_names(run), expect=FIRST_CURVE.get(run.kind) if context["active"] else None),
        latest=metric_latest(run),
        config_json=json.dumps(run.config, indent=2, sort_keys=True),
        launched_config_json=(json.dumps(run.resolved_config, indent=2, sort_keys=True)
                              if isinstance(run.resolved_config, dict) else ""),
        step_url=f"{trajectories}?run={run.pk}" if trajectories else "",
        smoothing=_bounded_float(request.GET.get("smoothing"), 0.6), x_axis=request.GET.get("x", "step"),
        smooth_method=request.GET.get("smooth", "ema"),
        breadcrumbs=breadcrumbs_for(run.project, ("Runs", reverse("dashboard:run_list", args=[slug])),
                                    (run.name, None)),
    )
    return render(request, "dashboard/runs/detail.html", context, status=status)


@login_required
@require_POST
def run_annotate_view(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """Save the run's tags and note (editor). Under htmx the answer is the tags-and-note section (with the errors
    beside their fields when refused); a plain form post is redirected to the run page, or gets the page again
    with the errors and what was typed (422)."""
    run = _run_for(request, slug, run_id, Role.EDITOR)
    tags_text = request.POST.get("tags", "")
    note = request.POST.get("note", "")
    try:
        run_annotate(run=run, actor=request.user, tags=run_tags_from_text(tags_text), note=note)
    except RunAnnotationError as exc:
        annotation = _annotation_context(run, tags_text=tags_text, note=note, errors=exc.errors)
        if request.htmx:
            return render(request, "dashboard/runs/_annotation.html",
                          {"project": run.project, "run": run, "can_edit": True, **annotation})
        return _render_detail_page(request, run, annotation, status=422)
    if request.htmx:
        return render(request, "dashboard/runs/_annotation.html",
                      {"project": run.project, "run": run, "can_edit": True,
                       **_annotation_context(run, saved=True)})
    messages.success(request, f"Tags and note of {run.name} saved.")
    return redirect("dashboard:run_detail", slug=slug, run_id=run.pk)


def _bounded_float(raw: str | None, default: float) -> float:
    try:
        value = float(raw) if raw is not None else default
    except ValueError:
        return default
    return min(0.99, max(0.0, value)) if value == value else default


@login_required
def run_live(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    """The header, log tail and actions, swapped in by htmx every few seconds while the run is active.

    It also carries the run's panels: metrics first recorded after the page was opened (the
    validation curves, timings, ...) get their charts without a reload (charts.js).
    """
    run = _run_for(request, slug, run_id)
    context = _detail_context(request, run)
    trajectories = reverse("dashboard:trajectory_list", args=[slug]) if has_page("dashboard:trajectory_list") else ""
    context.update(live_update=True, panels=run_panels(metric_names(run)),
                   step_url=f"{trajectories}?run={run.pk}" if trajectories else "")
    return render(request, "dashboard/runs/_live.html", context)


def _run_action(request: HttpRequest, slug: str, run_id: int, action, done: str) -> HttpResponse:
    run = _run_for(request, slug, run_id, Role.EDITOR)
    try:
        action(run=run)
        messages.success(request, done.format(run=run))
    except RunActionError as exc:
        messages.error(request, str(exc))
    return redirect("dashboard:run_detail", slug=slug, run_id=run.pk)


@login_required
@require_POST
def run_cancel_view(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    return _run_action(request, slug, run_id, run_cancel, "Cancellation of {run.name} requested.")


@login_required
@require_POST
def run_retry_view(request: HttpRequest, slug: str, run_id: int) -> HttpResponse:
    return _run_action(request, slug, run_id, run_retry, "{run.name} queued again; it resumes from its last "
                                                         "checkpoint.")


def config_rows(configs: list[dict], defaults: list[set[str]] | None = None) -> list[dict]:
    """Every config key of the compared runs with each run's (value, is training's default), flagged
    when the values differ; `defaults` holds, per run, the keys whose value it did not set."""
    defaults = defaults if defaults is not None else [set() for _ in configs]
    keys = sorted({key for config in configs for key in config})
    missing = object()
    rows = []
    for key in keys:
        values = [config.get(key, missing) for config in configs]
        shown = ["—" if v is missing else json.dumps(v, sort_keys=True) for v in values]
        rows.append({"key": key, "values": [(text, key in keys_defaulted) for text, keys_defaulted in
                                            zip(shown, defaults, strict=True)],
                     "differs": len(set(shown)) > 1})
    return rows


def _launched_config_rows(runs: list[Run]) -> list[dict]:
    """The compare page's config table: each run's launched config, its defaults marked."""
    configs = [launched_config(run) for run in runs]
    defaults = [{key for key in config if config_defaulted(run, key)} for run, config in zip(runs, configs, strict=True)]
    return config_rows(configs, defaults)


def _compare_cell(group: SeedGroup, latest: dict, best: dict, key: tuple[str, str]) -> dict:
    """One summary cell: a run's final and best value, or a seed group's mean and min-max of each."""
    if not group.is_group:
        run = group.runs[0]
        return {"group": False, "final": latest[run.pk].get(key), "best": best[run.pk].get(key)}
    return {"group": True, "size": len(group.runs),
            "final": spread(latest[run.pk].get(key) for run in group.runs),
            "best": spread(best[run.pk].get(key) for run in group.runs)}


@login_required
def run_compare_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    ids = run_ids_from_text(request.GET.get("ids", ""))
    if len(ids) > MAX_COMPARE:
        messages.error(request, f"Compare at most {MAX_COMPARE} runs; the first {MAX_COMPARE} are shown.")
        ids = ids[:MAX_COMPARE]
    runs_by_id = runs_by_id_in(project, ids)
    if len(runs_by_id) != len(ids):
        raise Http404("Some of these runs are not in this project.")
    runs = [runs_by_id[i] for i in ids]
    recorded = sorted({pair for run in runs for pair in metric_names(run)})
    latest = {run.pk: {(m.split, m.name): m.value for m in metric_latest(run)} for run in runs}
    best = {run.pk: metric_best(run) for run in runs}
    by_seed = request.GET.get("group") == "seed"
    groups = seed_groups(runs) if by_seed else [SeedGroup("", (run,), run.name) for run in runs]
    summary = [{"split": split, "name": name, "direction": metric_direction(name),
                "cells": [_compare_cell(group, latest, best, (split, name)) for group in groups]}
               for split, name in recorded]
    chart_groups = [{"runs": group.run_ids, "label": group.label} for group in groups if group.is_group]
    context = {
        "project": project, "runs": runs, "ids": ",".join(map(str, ids)), "too_few": len(runs) < 2,
        "panels": run_panels(recorded), "config_rows": _launched_config_rows(runs),
        "only_differences": request.GET.get("diff", "1") != "0", "summary": summary,
        "groups": groups, "group_by_seed": by_seed, "any_group": bool(chart_groups),
        "seed_groups_data": {"project": project.slug, "groups": chart_groups},
        "smoothing": _bounded_float(request.GET.get("smoothing"), 0.6), "x_axis": request.GET.get("x", "step"),
        "smooth_method": request.GET.get("smooth", "ema"),
        "breadcrumbs": breadcrumbs_for(project, ("Runs", reverse("dashboard:run_list", args=[slug])),
                                       ("Compare", None)),
    }
    return render(request, "dashboard/runs/compare.html", context)
