"""Verifiers: the list, a verifier and its versions (config, diff, runs), new verifier / new version
forms built from the kind's schema, the playground, sanity checks with a keyboard pass, and rescores.

Writes go through webapp.verifiers.services.verifiers (every save is a new immutable version),
webapp.trajectories.services.sanity_checks (sanity checks) and webapp.runs.services.rescore; reads
through webapp.verifiers.selectors. User verifier code only ever runs in the sandbox, through
the registry's python verifier. Every string shown (config, code, task, output, the
verifier's info) is hostile text: templates escape it, nothing is `|safe`.
"""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from environments.parsing import calls_from_trajectory
from webapp.common.bounds import unstorable_text_reason
from webapp.common.schema_form import SchemaField
from webapp.common.timeline import expected_against_actual, pretty_json, request_text, turn_timeline
from webapp.dashboard.views.common import breadcrumbs_for
from webapp.datasets.models import Task, TaskDataset
from webapp.datasets.selectors.datasets import (
    TaskOption,
    dataset_versions_by_name,
    project_task,
    task_option,
    task_options,
)
from webapp.projects.models import Project, Role
from webapp.projects.selectors.access import (
    get_object_or_404_for_user,
    get_project_or_404,
    has_role,
)
from webapp.runs.models import FINAL_JOB_STATES, Run
from webapp.runs.selectors.failures import run_in_project
from webapp.runs.selectors.runs import (
    run_choices,
    runs_of_verifier_version,
    runs_per_verifier_version,
)
from webapp.runs.services.rescore import rescore_start
from webapp.trajectories.models import FAILURE_BUCKETS
from webapp.trajectories.selectors.trajectories import (
    project_trajectory_with_task,
    recent_rescores,
    rescore_counts,
    rescore_disagreements,
    rescores_for_page,
    run_has_trajectories,
    run_trajectory_count,
    verifier_rescores,
)
from webapp.trajectories.services.playground import (
    OUTPUT_FORMATS,
    InputError,
    score_output,
    task_from_json,
    task_of_row,
    trajectory_from_output,
)
from webapp.trajectories.services.sanity_checks import (
    CHECK_DEFAULT,
    CHECK_MAX,
    CHECK_MIN,
    CheckError,
    agreement_threshold,
    check_create,
    check_label,
    check_score_pending,
    check_summary,
)
from webapp.trajectories.services.verification import env_task_of, env_trajectory_of
from webapp.verifiers.models import (
    SampleMethod,
    Verifier,
    VerifierCheck,
    VerifierCheckItem,
    VerifierVersion,
)
from webapp.verifiers.selectors.verifiers import (
    check_items_with_trajectories,
    checks_with_project,
    config_diff,
    first_unjudged_item,
    has_unscored_items,
    judged_item_count,
    latest_checks,
    next_unjudged_position,
    project_verifier_version,
    project_verifier_versions,
    recent_checks,
    scored_item_at,
    scored_positions,
    verifier_checks,
    verifier_named,
    verifier_rows,
    verifier_version_numbered,
    verifiers_with_project,
    version_checks,
    version_rows,
)
from webapp.verifiers.services import config_form
from webapp.verifiers.services.judge import JUDGE_KIND, judge_setup_summary
from webapp.verifiers.services.verifiers import (
    VerifierNameTaken,
    verifier_create,
    verifier_update_config,
)

# The keys that pick a bucket in the keyboard pass: 1-9 then 0, in FAILURE_BUCKETS' order (as in review).
BUCKET_KEYS = [str(n) for n in range(1, 10)] + ["0"]
CHOICES_LIMIT = 200
TASK_OPTIONS = 200  # tasks listed in the playground's picker; a search narrows a bigger dataset
DISAGREEMENTS_SHOWN = 200


def _int(value) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if 0 < number < 2**63 else None


def _crumbs(project: Project, *trail: tuple[str, str | None]) -> list:
    return breadcrumbs_for(project, ("Verifiers", reverse("dashboard:verifier_list", args=[project.slug])), *trail)


def _verifier_or_404(request: HttpRequest, slug: str, verifier_id: int, minimum: str = Role.VIEWER) -> Verifier:
    return get_object_or_404_for_user(verifiers_with_project(), request.user, minimum,
                                      pk=verifier_id, project__slug=slug)


def _version_or_404(verifier: Verifier, number: int) -> VerifierVersion:
    version = verifier_version_numbered(verifier, number)
    if version is None:
        raise Http404("No such version.")
    return version


def _project_versions(project: Project):
    return project_verifier_versions(project, limit=CHOICES_LIMIT)


def _runs(project: Project) -> list[Run]:
    return run_choices(project, limit=CHOICES_LIMIT)


# ---------------------------------------------------------------------------------------
# The list, a verifier, a version
# ---------------------------------------------------------------------------------------


@login_required
def verifier_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    context = {
        "project": project, "rows": verifier_rows(project, runs_per_verifier_version(project)), "threshold": agreement_threshold(),
        "can_edit": has_role(request.user, project, Role.EDITOR),
        "checks": recent_checks(project),
        "rescores": recent_rescores(project, limit=10),
        "breadcrumbs": breadcrumbs_for(project, ("Verifiers", None)),
    }
    return render(request, "dashboard/verifiers/list.html", context)


@login_required
def verifier_detail_page(request: HttpRequest, slug: str, verifier_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    verifier = _verifier_or_404(request, slug, verifier_id)
    rows = version_rows(verifier, runs_per_verifier_version(project))
    numbers = [r.version.version for r in rows]
    diff, diff_error, a, b = None, "", None, None
    if request.GET.get("a") or request.GET.get("b"):
        a_n, b_n = _int(request.GET.get("a")), _int(request.GET.get("b"))
        a = next((r.version for r in rows if r.version.version == a_n), None)
        b = next((r.version for r in rows if r.version.version == b_n), None)
        if a is None or b is None:
            diff_error = f"Choose two versions of {verifier.name} to compare (it has {', '.join(map(str, numbers))})."
        else:
            diff = config_diff(a.config, b.config)
    context = {
        "project": project, "verifier": verifier, "rows": rows, "diff": diff, "diff_error": diff_error,
        "a": a, "b": b, "threshold": agreement_threshold(),
        "diff_changed": sum(not row.same for row in diff or []),
        "default_a": numbers[1] if len(numbers) > 1 else (numbers[0] if numbers else ""),
        "default_b": numbers[0] if numbers else "",
        "checks": verifier_checks(verifier, limit=20),
        "rescores": verifier_rescores(verifier, limit=20),
        "can_edit": has_role(request.user, project, Role.EDITOR),
        "breadcrumbs": _crumbs(project, (verifier.name, None)),
    }
    return render(request, "dashboard/verifiers/detail.html", context)


@login_required
def verifier_version_page(request: HttpRequest, slug: str, verifier_id: int, number: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    verifier = _verifier_or_404(request, slug, verifier_id)
    version = _version_or_404(verifier, number)
    latest = verifier.latest_version
    try:
        fields = config_form.config_fields(verifier.kind)
    except config_form.UnknownKind:
        fields = []
    context = {
        "project": project, "verifier": verifier, "version": version, "latest": latest,
        "config_json": pretty_json(version.config), "code": version.config.get("code")
        if isinstance(version.config.get("code"), str) else "",
        "rubric": version.config.get("rubric") if isinstance(version.config.get("rubric"), str) else "",
        "config_rows": _config_rows(fields, version.config), "runs": runs_of_verifier_version(version.pk), "threshold": agreement_threshold(),
        "checks": version_checks(version, limit=20),
        "latest_check": latest_checks([version.pk]).get(version.pk),
        "can_edit": has_role(request.user, project, Role.EDITOR),
        "breadcrumbs": _crumbs(project, (verifier.name, reverse("dashboard:verifier_detail", args=[slug, verifier.pk])),
                               (f"v{version.version}", None)),
    }
    return render(request, "dashboard/verifiers/version.html", context)


def _config_rows(fields: list[SchemaField], config: dict) -> list[dict]:
    """Each input of the kind's form with the version's value (dotted keys for nested ones), then unknown keys."""
    rows, seen = [], set()
    flat = [c for f in fields for c in (f.children if f.widget == "group" else [f])]
    for spec in flat:
        value, found = config, True
        for part in spec.name.split("."):
            if isinstance(value, dict) and part in value:
                value = value[part]
            else:
                found = False
                break
        seen.add(spec.name.split(".")[0])
        rows.append({"key": spec.name, "set": found, "long": found and spec.widget in ("code", "textarea"),
                     "value": value if isinstance(value, str) else json.dumps(value, ensure_ascii=False),
                     "default": spec.placeholder, "help": spec.help})
    for key in sorted(set(config) - seen):
        rows.append({"key": key, "set": True, "long": False, "value": json.dumps(config[key], ensure_ascii=False),
                     "default": "", "help": "Not in this kind's schema."})
    return rows


# ---------------------------------------------------------------------------------------
# New verifier, new version (editor)
# ---------------------------------------------------------------------------------------


def _kinds() -> list[dict]:
    return [k for k in config_form.kind_entries() if k["available"]]


def _render_form(request, project, *, verifier, kind, top, values, errors, status=200, base=None) -> HttpResponse:
    fields = config_form.config_fields(kind)
    context = {
        "project": project, "verifier": verifier, "kind": kind, "kinds": _kinds(), "top": top, "values": values,
        "errors": errors, "fields": fields, "base": base,
        "general_errors": config_form.unknown_error_keys(kind, errors) if errors else {},
        "kind_info": next((k for k in _kinds() if k["name"] == kind), None),
        "judge_setup": judge_setup_summary() if kind == JUDGE_KIND else None,
    }
    if verifier is None:
        context["breadcrumbs"] = _crumbs(project, ("New verifier", None))
    else:
        context["breadcrumbs"] = _crumbs(project, (verifier.name, reverse("dashboard:verifier_detail",
                                                                          args=[project.slug, verifier.pk])),
                                         ("New version", None))
    return render(request, "dashboard/verifiers/form.html", context, status=status)


@login_required
def verifier_new_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    kinds = [k["name"] for k in _kinds()]
    data = request.POST if request.method == "POST" else request.GET
    kind = data.get("kind", "")
    if kind not in kinds:
        kind = "json_tool_call" if "json_tool_call" in kinds else kinds[0]
    top = {"name": data.get("name", "")[:200], "description": data.get("description", "")[:10_000]}
    if request.method != "POST":
        return _render_form(request, project, verifier=None, kind=kind, top=top,
                            values=config_form.initial_values(kind), errors={})
    config, errors, values = config_form.config_from_post(kind, request.POST, project)
    name = request.POST.get("name", "").strip()
    if not name or len(name) > 200 or unstorable_text_reason(name):
        errors["name"] = "Give the verifier a name (at most 200 characters, no NUL)."
    elif verifier_named(project, name) is not None:
        errors["name"] = str(VerifierNameTaken(name))
    description = request.POST.get("description", "")
    if len(description) > 10_000 or unstorable_text_reason(description):
        errors["description"] = "At most 10,000 characters, no NUL."
    if request.POST.get("kind") not in kinds:
        errors["kind"] = f"Choose one of {', '.join(kinds)}."
    if errors:
        return _render_form(request, project, verifier=None, kind=kind, top=top, values=values, errors=errors,
                            status=422)
    try:
        verifier = verifier_create(project=project, name=name, kind=kind, config=config, actor=request.user,
                                   description=description)
    except VerifierNameTaken as exc:  # a concurrent request created it between the check and now
        return _render_form(request, project, verifier=None, kind=kind, top=top, values=values,
                            errors={"name": str(exc)}, status=422)
    messages.success(request, f"Verifier {verifier.name} created (v1). Try it in the playground, then sanity-check it.")
    return redirect("dashboard:verifier_version", slug=slug, verifier_id=verifier.pk, number=1)


@login_required
def verifier_version_new_page(request: HttpRequest, slug: str, verifier_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    verifier = _verifier_or_404(request, slug, verifier_id, Role.EDITOR)
    latest = verifier.latest_version
    base = latest
    if request.GET.get("from"):
        base = _version_or_404(verifier, _int(request.GET.get("from")) or 0)
    top = {"name": verifier.name, "description": verifier.description}
    if request.method != "POST":
        values = config_form.raw_values_from_config(verifier.kind, base.config) if base else \
            config_form.initial_values(verifier.kind)
        return _render_form(request, project, verifier=verifier, kind=verifier.kind, top=top, values=values,
                            errors={}, base=base)
    config, errors, values = config_form.config_from_post(verifier.kind, request.POST, project)
    if errors:
        return _render_form(request, project, verifier=verifier, kind=verifier.kind, top=top, values=values,
                            errors=errors, status=422, base=base)
    version = verifier_update_config(verifier=verifier, config=config, actor=request.user)
    if latest is not None and version.pk == latest.pk:
        messages.info(request, f"Nothing changed: v{version.version} already has this config, so no new version "
                               "was made.")
    else:
        messages.success(request, f"Saved as v{version.version}; earlier versions are unchanged (runs keep theirs).")
    return redirect("dashboard:verifier_version", slug=slug, verifier_id=verifier.pk, number=version.version)


# ---------------------------------------------------------------------------------------
# Playground
# ---------------------------------------------------------------------------------------

PLAYGROUND_FIELDS = ("version", "dataset", "q", "task", "task_json", "output", "output_format", "trajectory",
                     "truncated")


def _task_options(dataset: TaskDataset | None, query: str, chosen: Task | None) -> tuple[list[TaskOption], bool]:
    """The task picker's options: the dataset's first TASK_OPTIONS tasks whose id or category is `query`, or whose
    messages' text holds it (the task browser's search and its indexes: a million-task version is not scanned),
    each with its request; whether more match; the chosen task first when it is not among them."""
    options, more = task_options(dataset, query, TASK_OPTIONS) if dataset is not None else ([], False)
    if chosen is not None and (dataset is None or chosen.dataset_id == dataset.pk) and all(
            o.pk != chosen.pk for o in options):
        options.insert(0, task_option(chosen))
    return options, more


def _playground_inputs(project: Project, form: dict, errors: dict[str, str]):
    """(version, task, trajectory, notes) from the form; problems go to `errors` beside their inputs."""
    notes: list[str] = []
    version = project_verifier_version(project, _int(form["version"]))
    if version is None:
        errors["version"] = "Choose a verifier version of this project."
    stored = None
    if form["trajectory"]:
        stored = project_trajectory_with_task(project, _int(form["trajectory"]))
        if stored is None:
            errors["trajectory"] = "No trajectory with this id in this project."
    task = None
    try:
        if form["task_json"].strip():
            task = task_from_json(form["task_json"])
            notes.append("Task: the pasted JSON.")
        elif form["task"]:
            row = project_task(project, _int(form["task"]))
            if row is None:
                errors["task"] = "Choose a task of this project's datasets."
            else:
                task = task_of_row(row)
                notes.append(f"Task: {row.external_id} of {row.dataset.name} v{row.dataset.version}.")
        elif stored is not None:
            task = env_task_of(stored)
            if task is None:
                errors["trajectory"] = "This trajectory has no stored task: choose or paste one."
            else:
                notes.append(f"Task: the one trajectory #{stored.pk} answered.")
        else:
            errors["task"] = "Choose a task from a dataset, paste a task as JSON, or give a stored trajectory."
    except InputError as exc:
        errors[exc.field] = str(exc)
    trajectory = None
    try:
        if form["output"].strip():
            trajectory = trajectory_from_output(form["output"], form["output_format"], truncated=form["truncated"])
            if stored is not None:
                notes.append("Output: the pasted text (the trajectory's own turns are not used).")
        elif stored is not None:
            trajectory = env_trajectory_of(stored)
            notes.append(f"Output: the turns of trajectory #{stored.pk}.")
        else:
            errors.setdefault("output", "Paste a model output, or give a stored trajectory's id.")
    except InputError as exc:
        errors[exc.field] = str(exc)
    return version, task, trajectory, notes


@login_required
def verifier_playground_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    data = request.POST if request.method == "POST" else request.GET
    form = {name: data.get(name, "") for name in PLAYGROUND_FIELDS}
    form["truncated"] = bool(form["truncated"])
    if form["output_format"] not in OUTPUT_FORMATS:
        form["output_format"] = "auto"
    datasets = dataset_versions_by_name(project, CHOICES_LIMIT)
    dataset = next((d for d in datasets if d.pk == _int(form["dataset"])), None)
    chosen_task = project_task(project, _int(form["task"])) if form["task"] else None
    if chosen_task is not None and dataset is None:
        dataset = next((d for d in datasets if d.pk == chosen_task.dataset_id), None)
    options, more = _task_options(dataset, form["q"].strip()[:200], chosen_task)
    picker = {"project": project, "form": form, "dataset": dataset, "options": options, "more_tasks": more,
              "task_limit": TASK_OPTIONS}
    if request.method == "GET" and request.htmx and request.GET.get("partial") == "tasks":
        # The dataset or the search changed: only the task picker is sent (the page keeps what was typed).
        return render(request, "dashboard/verifiers/_task_picker.html", {**picker, "errors": {}})
    errors: dict[str, str] = {}
    result, notes, status = None, [], 200
    if request.method == "POST" and data.get("action") != "find":
        version, task, trajectory, notes = _playground_inputs(project, form, errors)
        if errors:
            status = 422
        else:
            result = score_output(version, task, trajectory)
    versions = list(_project_versions(project))
    if not form["version"] and versions:
        form["version"] = str(versions[0].pk)
    context = {
        **picker, "errors": errors, "result": result, "notes": notes, "versions": versions, "datasets": datasets,
        "output_formats": OUTPUT_FORMATS, "breadcrumbs": _crumbs(project, ("Playground", None)),
        "can_edit": has_role(request.user, project, Role.EDITOR),
    }
    return render(request, "dashboard/verifiers/playground.html", context, status=status)


# ---------------------------------------------------------------------------------------
# Sanity checks
# ---------------------------------------------------------------------------------------


def _check_or_404(request: HttpRequest, slug: str, check_id: int, minimum: str = Role.VIEWER) -> VerifierCheck:
    return get_object_or_404_for_user(checks_with_project(), request.user, minimum,
                                      project_field="version__verifier__project", pk=check_id,
                                      version__verifier__project__slug=slug)


def _check_crumbs(check: VerifierCheck, *tail: tuple[str, str | None]) -> list:
    verifier, project = check.version.verifier, check.version.verifier.project
    trail = [(verifier.name, reverse("dashboard:verifier_detail", args=[project.slug, verifier.pk])),
             (f"v{check.version.version}", reverse("dashboard:verifier_version",
                                                   args=[project.slug, verifier.pk, check.version.version]))]
    if tail:
        trail.append((f"Check #{check.pk}", reverse("dashboard:verifier_check", args=[project.slug, check.pk])))
        trail.extend(tail)
    else:
        trail.append((f"Check #{check.pk}", None))
    return _crumbs(project, *trail)


@login_required
def verifier_check_new_page(request: HttpRequest, slug: str, verifier_id: int, number: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    verifier = _verifier_or_404(request, slug, verifier_id, Role.EDITOR)
    version = _version_or_404(verifier, number)
    data = request.POST if request.method == "POST" else request.GET
    form = {"size": data.get("size", str(CHECK_DEFAULT)), "run": data.get("run", ""),
            "method": data.get("method", SampleMethod.RANDOM), "seed": data.get("seed", "")}
    errors: dict[str, str] = {}
    if request.method == "POST":
        size = _int(form["size"])
        if size is None or not CHECK_MIN <= size <= CHECK_MAX:
            errors["size"] = f"Choose between {CHECK_MIN} and {CHECK_MAX} outputs."
        run = None
        if form["run"]:
            run = run_in_project(project, _int(form["run"]))
            if run is None:
                errors["run"] = "Choose a run of this project."
        seed = None
        if form["seed"].strip():
            try:
                seed = int(form["seed"])
            except ValueError:
                errors["seed"] = "A whole number, or empty for a random draw."
            else:
                if not 0 <= seed < 2**63:
                    errors["seed"] = "Between 0 and 2^63."
        if form["method"] not in SampleMethod.values:
            errors["method"] = f"Choose one of {', '.join(SampleMethod.values)}."
        if not errors:
            try:
                check = check_create(version=version, actor=request.user, size=size, run=run, method=form["method"],
                                     seed=seed)
            except CheckError as exc:
                errors[exc.field] = str(exc)
            else:
                report = check_score_pending(check)
                if report.remaining:
                    messages.warning(request, f"Scored {report.scored} of {check.size} outputs in "
                                              f"{report.seconds:.0f} s (the time budget); score the rest below.")
                else:
                    messages.success(request, f"Scored {check.size} outputs with {verifier.name} v{version.version}: "
                                              "now judge each verdict.")
                return redirect("dashboard:verifier_check", slug=slug, check_id=check.pk)
    context = {
        "project": project, "verifier": verifier, "version": version, "form": form, "errors": errors,
        "runs": _runs(project), "methods": SampleMethod.choices, "check_min": CHECK_MIN, "check_max": CHECK_MAX,
        "breadcrumbs": _crumbs(project, (verifier.name, reverse("dashboard:verifier_detail", args=[slug, verifier.pk])),
                               (f"v{version.version}", reverse("dashboard:verifier_version",
                                                               args=[slug, verifier.pk, version.version])),
                               ("Sanity check", None)),
    }
    return render(request, "dashboard/verifiers/check_new.html", context, status=422 if errors else 200)


@login_required
def verifier_check_page(request: HttpRequest, slug: str, check_id: int) -> HttpResponse:
    check = _check_or_404(request, slug, check_id)
    project = check.version.verifier.project
    summary = check_summary(check)
    items = check_items_with_trajectories(check)
    context = {
        "project": project, "check": check, "summary": summary, "items": items,
        "chart": {"bins": summary.histogram, "errors": summary.errors},
        "can_edit": has_role(request.user, project, Role.EDITOR),
        "can_label": has_role(request.user, project, Role.REVIEWER),
        "breadcrumbs": _check_crumbs(check),
    }
    return render(request, "dashboard/verifiers/check.html", context)


@login_required
@require_POST
def verifier_check_score_view(request: HttpRequest, slug: str, check_id: int) -> HttpResponse:
    check = _check_or_404(request, slug, check_id, Role.EDITOR)
    report = check_score_pending(check)
    if report.remaining:
        messages.warning(request, f"Scored {report.scored} more; {report.remaining} still to score.")
    else:
        messages.success(request, f"Scored {report.scored} more: every output of the check is scored.")
    return redirect("dashboard:verifier_check", slug=slug, check_id=check.pk)


def _label_item(check: VerifierCheck, position: int | None) -> VerifierCheckItem | None:
    if position is not None:
        return scored_item_at(check, position)
    return first_unjudged_item(check)


def _label_url(check: VerifierCheck, position: int) -> str:
    project = check.version.verifier.project
    return reverse("dashboard:verifier_check_label", args=[project.slug, check.pk]) + f"?item={position}"


def _render_label(request, check: VerifierCheck, item: VerifierCheckItem, *, values: dict, errors: dict,
                  status: int = 200) -> HttpResponse:
    project = check.version.verifier.project
    trajectory = item.trajectory
    task = env_task_of(trajectory)
    scored = scored_positions(check)
    index = scored.index(item.position)
    try:
        tools = (task.tool_specs() or None) if task else None
    except (KeyError, TypeError, ValueError, AttributeError):  # a malformed stored tool list: parse without it
        tools = None
    parsed = calls_from_trajectory(env_trajectory_of(trajectory), tools)
    expected = task.ground_truth if task is not None and isinstance(task.ground_truth, list) else None
    context = {
        "project": project, "check": check, "item": item, "t": trajectory, "task": task,
        "request": request_text(task.messages) if task is not None else "",
        "timeline": turn_timeline(trajectory.turns, task.tools if task else None),
        "calls": expected_against_actual(expected, [c.to_dict() for c in parsed.calls]),
        "parse_format": parsed.format, "parse_errors": [e.to_dict() for e in parsed.errors],
        "values": values, "errors": errors, "number": index + 1, "count": len(scored),
        "labelled": judged_item_count(check),
        "previous_url": _label_url(check, scored[index - 1]) if index > 0 else "",
        "next_url": _label_url(check, scored[index + 1]) if index + 1 < len(scored) else "",
        "buckets": list(zip(BUCKET_KEYS, FAILURE_BUCKETS, strict=False)),
        "breadcrumbs": _check_crumbs(check, ("Judge", None)),
    }
    return render(request, "dashboard/verifiers/check_label.html", context, status=status)


@login_required
def verifier_check_label_page(request: HttpRequest, slug: str, check_id: int) -> HttpResponse:
    """The keyboard pass: one output at a time; a / d right or wrong, 1-9 0 a bucket, Ctrl+Enter save and next."""
    check = _check_or_404(request, slug, check_id, Role.REVIEWER)
    if request.method == "POST":
        return _save_label(request, check)
    position = request.GET.get("item")
    item = _label_item(check, int(position) if position and position.isdigit() and int(position) < 2**31 else None)
    if item is None:
        if position:
            raise Http404("No such scored output in this check.")
        if has_unscored_items(check):
            messages.info(request, "Every scored output is judged; some outputs are not scored yet.")
        else:
            messages.success(request, f"Every output of check #{check.pk} is judged.")
        return redirect("dashboard:verifier_check", slug=slug, check_id=check.pk)
    values = {"verdict": {True: "right", False: "wrong"}.get(item.human_right, ""),
              "human_bucket": item.human_bucket}
    return _render_label(request, check, item, values=values, errors={})


def _save_label(request: HttpRequest, check: VerifierCheck) -> HttpResponse:
    position = request.POST.get("item", "")
    item = _label_item(check, int(position) if position.isdigit() and int(position) < 2**31 else -1)
    if item is None:
        raise Http404("No such scored output in this check.")
    values = {"verdict": request.POST.get("verdict", ""), "human_bucket": request.POST.get("human_bucket", "")}
    errors: dict[str, str] = {}
    if values["verdict"] not in ("right", "wrong"):
        errors["verdict"] = "Say whether the verifier's verdict is right (a) or wrong (d)."
    if values["human_bucket"] and values["human_bucket"] not in FAILURE_BUCKETS:
        errors["human_bucket"] = "Choose a failure bucket from the list, or none."
    if not errors:
        try:
            check_label(item=item, actor=request.user, right=values["verdict"] == "right",
                        bucket=values["human_bucket"])
        except CheckError as exc:
            errors[exc.field] = str(exc)
    if errors:
        return _render_label(request, check, item, values=values, errors=errors, status=422)
    following = next_unjudged_position(check, item.position)
    if following is None:
        check.refresh_from_db()
        rate = f"{check.agreement:.0%}" if check.agreement is not None else "—"
        messages.success(request, f"Every scored output is judged: {rate} agreement on {check.labelled} outputs.")
        return redirect("dashboard:verifier_check", slug=check.version.verifier.project.slug, check_id=check.pk)
    return redirect(_label_url(check, following))


# ---------------------------------------------------------------------------------------
# Rescore a run with a version (editor)
# ---------------------------------------------------------------------------------------


@login_required
def verifier_rescore_new_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    data = request.POST if request.method == "POST" else request.GET
    form = {"run": data.get("run", ""), "version": data.get("version", "")}
    errors: dict[str, str] = {}
    if request.method == "POST":
        run = run_in_project(project, _int(form["run"]))
        version = project_verifier_version(project, _int(form["version"]))
        if run is None:
            errors["run"] = "Choose a run of this project."
        elif not run_has_trajectories(run.pk):
            errors["run"] = "This run has no stored trajectories to rescore."
        if version is None:
            errors["version"] = "Choose a verifier version of this project."
        if not errors:
            rescore = rescore_start(run=run, verifier_version=version, actor=request.user)
            messages.success(request, f"Rescoring {run.name} with {version.verifier.name} v{version.version}: "
                                      f"job #{rescore.job_id} on the verify queue.")
            return redirect("dashboard:verifier_rescore", slug=slug, rescore_id=rescore.pk)
    context = {
        "project": project, "form": form, "errors": errors, "runs": _runs(project),
        "versions": _project_versions(project),
        "breadcrumbs": _crumbs(project, ("Rescore a run", None)),
    }
    return render(request, "dashboard/verifiers/rescore_new.html", context, status=422 if errors else 200)


@login_required
def verifier_rescore_page(request: HttpRequest, slug: str, rescore_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    rescore = get_object_or_404_for_user(rescores_for_page(), request.user, pk=rescore_id, project=project,
                                         run__isnull=False)
    job = rescore.job
    active = job is not None and job.state not in FINAL_JOB_STATES
    counts = rescore_counts(rescore)
    context = {
        "project": project, "rescore": rescore, "job": job, "active": active, "counts": counts,
        "total": run_trajectory_count(rescore.run_id) if active else None,
        "summary": rescore.summary or {},
        "disagreements": rescore_disagreements(rescore, DISAGREEMENTS_SHOWN),
        "shown_limit": DISAGREEMENTS_SHOWN,
        "list_url": reverse("dashboard:trajectory_list", args=[slug]) + f"?rescore={rescore.pk}&disagree=yes",
        "breadcrumbs": _crumbs(project, (f"Rescore #{rescore.pk}", None)),
    }
    if request.htmx:
        return render(request, "dashboard/verifiers/_rescore_state.html", context)
    return render(request, "dashboard/verifiers/rescore.html", context)
