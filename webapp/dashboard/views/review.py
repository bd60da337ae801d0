"""Review: the project's queues and the new-queue form, one queue's page, and the labelling page.

A queue is a saved trajectory filter (the trajectory list's query string) whose matches are
labelled one by one. The labelling page claims the next item for the reviewer (it stays locked
to them for the queue's lock time), shows it, and saves a verdict, a failure bucket, a note and
a corrected output, or in pair mode which of two samples is better. Every key of UI.md's map
works there (static/crucible/js/review.js); each save is a POST that redirects to the next item.

Roles: viewers read the queues and their agreement; reviewers label and export labels; editors
create queues, add labels to a dataset and start a DPO run from a pair queue. Non-members get
404 everywhere, exports included. Every write goes through webapp.trajectories.services.review,
every read (progress, agreement, queues, items) through webapp.trajectories.selectors.reviews.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, QueryDict, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_POST

from webapp.common.bounds import unstorable_text_reason
from webapp.common.timeline import TurnView, pretty_json, prompt_turns, turn_timeline
from webapp.dashboard.views.common import breadcrumbs_for, has_page
from webapp.datasets.models import Split
from webapp.datasets.selectors.datasets import dataset_in_project, dataset_names
from webapp.projects.models import Project, Role
from webapp.projects.selectors.access import (
    get_object_or_404_for_user,
    get_project_or_404,
    has_role,
)
from webapp.projects.selectors.projects import members_with_roles
from webapp.runs.models import Run
from webapp.runs.selectors.failures import run_in_project
from webapp.runs.selectors.runs import recent_runs
from webapp.trajectories.models import (
    FAILURE_BUCKETS,
    QueueItem,
    QueueKind,
    QueueOrder,
    Review,
    ReviewQueue,
    Trajectory,
)
from webapp.trajectories.selectors.reviews import (
    held_by_others,
    item_for_labelling,
    label_rows,
    labels_csv,
    labels_jsonl,
    my_queue_history,
    my_review_of,
    queue_agreement,
    queue_assignees,
    queue_item,
    queue_list,
    queue_progress,
    queues_with_creator,
)
from webapp.trajectories.services.evals import EvalsReport, tasks_into_new_dataset
from webapp.trajectories.services.review import (
    CORRECTED_OUTPUT_LENGTH,
    NOTE_LENGTH,
    ReviewError,
    queue_claim_next,
    queue_create,
    queue_labels_to_dataset,
    queue_preference_pairs_reference,
    queue_release,
    review_save,
    review_undo,
    reviewed_with_tasks,
)
from webapp.trajectories.services.verification import env_task_of

EXPORTS = {"jsonl": ("application/x-ndjson", labels_jsonl), "csv": ("text/csv", labels_csv)}
# The keys that pick a failure bucket: 1-9 then 0, in FAILURE_BUCKETS' order.
BUCKET_KEYS = [str(n) for n in range(1, 10)] + ["0"]
REVIEWER_ROLES = (Role.REVIEWER, Role.EDITOR, Role.OWNER)
FORM_DEFAULTS = {"name": "", "kind": QueueKind.VERDICT, "order": QueueOrder.FAILURES_FIRST, "limit": "200",
                 "reviews_per_item": "1", "lock_minutes": "10", "filter": "", "assignees": []}


# ---------------------------------------------------------------------------------------
# Access
# ---------------------------------------------------------------------------------------


def _queue_for(request: HttpRequest, slug: str, queue_id: int, minimum: str = Role.VIEWER) -> ReviewQueue:
    return get_object_or_404_for_user(queues_with_creator(), request.user,
                                      minimum, pk=queue_id, project__slug=slug)


def _progress(queue: ReviewQueue, user) -> dict:
    """queue_progress (`complete`: items with all their labels), and whether the whole queue is done."""
    progress = dict(queue_progress(queue=queue, reviewer=user))
    progress["queue_complete"] = progress["total"] > 0 and progress["complete"] >= progress["total"]
    return progress


def _review_url(slug: str, name: str = "review", *args) -> str:
    return reverse(f"dashboard:{name}", args=[slug, *args])


def _queue_crumbs(queue: ReviewQueue, *tail: tuple[str, str | None]) -> list:
    slug = queue.project.slug
    if not tail:
        return breadcrumbs_for(queue.project, ("Review", _review_url(slug)), (queue.name, None))
    return breadcrumbs_for(queue.project, ("Review", _review_url(slug)),
                           (queue.name, _review_url(slug, "review_queue", queue.pk)), *tail)


def _positive_int(raw: str | None) -> int | None:
    raw = (raw or "").strip()
    return int(raw) if raw.isdigit() and 0 < int(raw) < 2**63 else None


# ---------------------------------------------------------------------------------------
# The queue list and the new-queue form
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    label: str
    help: str
    needs_run: bool = False
    needs_bucket: bool = False


PRESETS: dict[str, Preset] = {
    "failures": Preset("Failures first of a run", "The run's failed trajectories.", needs_run=True),
    "disagree": Preset("Verifier disagreements", "Trajectories a re-verification scored differently "
                       "(of one run if you choose it)."),
    "bucket": Preset("One failure bucket", "Trajectories the verifier put in that bucket (of one run if you "
                     "choose it).", needs_bucket=True),
    "production": Preset("Production trajectories", "Logged from production, newest first."),
    "sanity": Preset("Verifier sanity check", "A random sample of 100 of a run's trajectories, passed or not: "
                     "do you agree with the verifier?", needs_run=True),
    "pairs": Preset("Preference pairs of a run", "Two samples of the same task side by side, for DPO.",
                    needs_run=True),
}


def preset_values(preset: str, run: Run | None, bucket: str) -> tuple[dict, str | None]:
    """The form's values for a preset, or (values, what is missing)."""
    spec = PRESETS[preset]
    if spec.needs_run and run is None:
        return {}, f"“{spec.label}” needs a run: choose one."
    if spec.needs_bucket and bucket not in FAILURE_BUCKETS:
        return {}, f"“{spec.label}” needs a bucket: choose one."
    query: dict[str, str] = {"run": str(run.pk)} if run is not None else {}
    of_run = f" of {run.name}" if run is not None else ""
    values: dict = {"order": QueueOrder.FAILURES_FIRST}
    if preset == "failures":
        query["passed"] = "no"
        values["name"] = f"Failures{of_run}"
    elif preset == "disagree":
        query["disagree"] = "yes"
        values["name"] = f"Verifier disagreements{of_run}"
    elif preset == "bucket":
        query["bucket"] = bucket
        values["name"] = f"{bucket.replace('_', ' ').capitalize()}{of_run}"
    elif preset == "production":
        query = {"source": "production"}
        values.update(name="Production trajectories", order=QueueOrder.NEWEST)
    elif preset == "sanity":
        values.update(name=f"Verifier sanity check{of_run}", order=QueueOrder.RANDOM, limit="100")
    elif preset == "pairs":
        values.update(name=f"Preference pairs{of_run}", kind=QueueKind.PAIR)
    values["filter"] = urlencode(query)
    values["name"] = values["name"][:200]
    return values, None


def filter_from_text(text: str) -> dict[str, str]:
    """The trajectory list's query string, or a pasted URL of the list, as the dict queue_create checks."""
    text = text.strip()
    if "?" in text or text.startswith(("http://", "https://", "/")):
        text = urlsplit(text).query if "?" in text else ""
    return QueryDict(text).dict()


def _reviewers(project: Project):
    return members_with_roles(project, REVIEWER_ROLES)


def _list_context(request: HttpRequest, project: Project) -> dict:
    rows = []
    for queue in queue_list(project):
        progress = _progress(queue, request.user)
        rows.append({"queue": queue, "progress": progress})
    can_label = has_role(request.user, project, Role.REVIEWER)
    return {
        "project": project, "rows": rows, "can_label": can_label,
        "done_today": rows[0]["progress"]["done_today"] if rows else 0,
        "can_edit": has_role(request.user, project, Role.EDITOR),
        "kinds": QueueKind.choices, "orders": QueueOrder.choices, "presets": PRESETS,
        "runs": recent_runs(project, limit=200),
        "buckets": FAILURE_BUCKETS, "reviewers": _reviewers(project),
        "trajectories_url": reverse("dashboard:trajectory_list", args=[project.slug])
        if has_page("dashboard:trajectory_list") else "",
        "breadcrumbs": breadcrumbs_for(project, ("Review", None)),
    }


def _render_list(request, project, *, form: dict, errors: dict, notes: list[str], status: int = 200):
    context = _list_context(request, project)
    other_errors = {key: message for key, message in errors.items() if key not in FORM_DEFAULTS and key != "preset"}
    context.update(form={**FORM_DEFAULTS, **form}, errors=errors, other_errors=other_errors, notes=notes)
    return render(request, "dashboard/review/list.html", context, status=status)


@login_required
@require_GET
def review_list_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    form: dict = {}
    errors: dict[str, str] = {}
    notes: list[str] = []
    preset = request.GET.get("preset", "")
    if preset in PRESETS:
        run_id = _positive_int(request.GET.get("run"))
        run = run_in_project(project, run_id) if run_id else None
        form, problem = preset_values(preset, run, request.GET.get("bucket", ""))
        if problem:
            errors["preset"] = problem
        else:
            notes.append(f"The form is filled in for “{PRESETS[preset].label}”: check it and create the queue.")
    elif "filter" in request.GET:
        form = {"filter": request.GET.get("filter", "")[:2000]}
        notes.append("The filter comes from the trajectory list: name the queue and create it.")
    return _render_list(request, project, form=form, errors=errors, notes=notes)


def _form_from_post(data) -> dict:
    form = {name: data.get(name, "") for name in FORM_DEFAULTS if name != "assignees"}
    form["assignees"] = data.getlist("assignees")
    return form


def _queue_arguments(form: dict) -> tuple[dict, dict[str, str]]:
    """queue_create's keyword arguments from the form (it checks them), and text it could not store."""
    errors: dict[str, str] = {}
    for name in ("name", "filter"):
        reason = unstorable_text_reason(form[name])
        if reason:
            errors[name] = f"The {name} {reason}."
    arguments = {name: form[name] for name in ("name", "kind", "order", "limit", "reviews_per_item", "lock_minutes")}
    arguments["filter"] = filter_from_text(form["filter"]) if "filter" not in errors else {}
    arguments["assignees"] = [int(raw) if raw.isdigit() and len(raw) < 19 else raw for raw in form["assignees"]]
    return arguments, errors


def _form_errors(errors: dict[str, str]) -> dict[str, str]:
    """The service's errors by form field: every `filter.<name>` goes beside the filter input."""
    fields: dict[str, str] = {}
    for key, message in errors.items():
        if key.startswith("filter."):
            name = key.split(".", 1)[1]
            fields["filter"] = f"{fields['filter']}; " if "filter" in fields else ""
            fields["filter"] += f"{name}: {message}"
        else:
            fields[key] = message
    return fields


@login_required
@require_POST
def review_create(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    form = _form_from_post(request.POST)
    arguments, errors = _queue_arguments(form)
    status = 422
    if not errors:
        try:
            queue = queue_create(project=project, actor=request.user, **arguments)
        except ReviewError as exc:
            errors, status = _form_errors(exc.errors), exc.status  # 409: the name is taken, shown beside it
    if errors:
        return _render_list(request, project, form=form, errors=errors, notes=[], status=status)
    messages.success(request, f"Queue “{queue.name}” created with {queue.size} item{'s' * (queue.size != 1)}.")
    return redirect("dashboard:review_queue", slug=slug, queue_id=queue.pk)


# ---------------------------------------------------------------------------------------
# Exports
# ---------------------------------------------------------------------------------------


def _export(project: Project, fmt: str, queue: ReviewQueue | None) -> StreamingHttpResponse:
    if fmt not in EXPORTS:
        raise Http404("Labels export as jsonl or csv.")
    content_type, writer = EXPORTS[fmt]
    response = StreamingHttpResponse(writer(label_rows(project=project, queue=queue)), content_type=content_type)
    name = f"{project.slug}-queue-{queue.pk}-labels.{fmt}" if queue else f"{project.slug}-labels.{fmt}"
    response["Content-Disposition"] = content_disposition_header(True, name)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
def review_export(request: HttpRequest, slug: str, fmt: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.REVIEWER)
    return _export(project, fmt, None)


@login_required
@require_GET
def review_queue_export(request: HttpRequest, slug: str, queue_id: int, fmt: str) -> HttpResponse:
    queue = _queue_for(request, slug, queue_id, Role.REVIEWER)
    return _export(queue.project, fmt, queue)


# ---------------------------------------------------------------------------------------
# One queue: progress, agreement, labels to data
# ---------------------------------------------------------------------------------------


def _render_queue(request, queue: ReviewQueue, *, report=None, dataset_form: dict | None = None,
                  errors: dict | None = None, status: int = 200) -> HttpResponse:
    project = queue.project
    slug = project.slug
    trajectories = reverse("dashboard:trajectory_list", args=[slug]) if has_page("dashboard:trajectory_list") else ""
    filter_text = urlencode(queue.filter or {})
    report_url = ""
    if report is not None and report.dataset is not None and has_page("dashboard:dataset_detail"):
        report_url = reverse("dashboard:dataset_detail", args=[slug, report.dataset.pk])
    context = {
        "project": project, "queue": queue, "progress": _progress(queue, request.user),
        "agreement": queue_agreement(queue), "filter_text": filter_text,
        "filter_url": f"{trajectories}?{filter_text}" if trajectories else "",
        "assignees": queue_assignees(queue),
        "can_label": has_role(request.user, project, Role.REVIEWER),
        "can_edit": has_role(request.user, project, Role.EDITOR),
        "is_pair": queue.kind == QueueKind.PAIR, "splits": Split.choices, "dataset_names": dataset_names(project),
        "dataset_form": {"dataset_name": "", "split": Split.HELD_OUT, **(dataset_form or {})},
        "errors": errors or {}, "report": report, "report_url": report_url,
        "breadcrumbs": _queue_crumbs(queue),
    }
    return render(request, "dashboard/review/queue.html", context, status=status)


@login_required
@require_GET
def review_queue_page(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    queue = _queue_for(request, slug, queue_id)
    return _render_queue(request, queue, report=_pop_dataset_report(request, queue))


DATASET_REPORT_KEY = "crucible.queue_dataset_report.{}"
REPORT_SKIPPED_KEPT = 200


def _keep_dataset_report(request: HttpRequest, queue: ReviewQueue, report: EvalsReport) -> None:
    """Hold what "labels into a dataset" made for the queue page that the form redirects to (shown once)."""
    request.session[DATASET_REPORT_KEY.format(queue.pk)] = {
        "dataset": report.dataset.pk if report.dataset else None, "created": report.created,
        "duplicates": report.duplicates, "skipped": report.skipped[:REPORT_SKIPPED_KEPT],
    }


def _pop_dataset_report(request: HttpRequest, queue: ReviewQueue) -> EvalsReport | None:
    held = request.session.pop(DATASET_REPORT_KEY.format(queue.pk), None)
    if not isinstance(held, dict):
        return None
    dataset = dataset_in_project(queue.project, held.get("dataset")) if held.get("dataset") else None
    return EvalsReport(dataset=dataset, created=held.get("created", 0), duplicates=held.get("duplicates", 0),
                       skipped=held.get("skipped", []))


@login_required
@require_POST
def review_to_dataset(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    queue = _queue_for(request, slug, queue_id, Role.EDITOR)
    form = {"dataset_name": request.POST.get("dataset_name", "").strip(), "split": request.POST.get("split", ""),
            "new_dataset": request.POST.get("new_dataset", "").strip()}
    errors: dict[str, str] = {}
    report = None
    reason = (unstorable_text_reason(form["dataset_name"]) or unstorable_text_reason(form["split"])
              or unstorable_text_reason(form["new_dataset"]))
    if reason:
        errors["dataset_name"] = f"The form {reason}."
    elif form["new_dataset"]:
        report, errors = _labels_to_new_dataset(request, queue, form)
    else:
        try:
            report = queue_labels_to_dataset(queue=queue, project=queue.project, dataset_name=form["dataset_name"],
                                             split=form["split"], actor=request.user)
        except ReviewError as exc:
            errors = {("dataset_name" if key == "dataset" else key): message for key, message in exc.errors.items()}
            if "dataset_name" in errors and not form["dataset_name"]:
                errors["dataset_name"] = "Choose the dataset that gets a new version with these tasks."
    if errors:
        return _render_queue(request, queue, report=report, dataset_form=form, errors=errors, status=422)
    # Redirect, so that reloading the page that shows the report cannot make another dataset version.
    _keep_dataset_report(request, queue, report)
    return redirect(reverse("dashboard:review_queue", args=[slug, queue.pk]) + "#dataset-report")


def _labels_to_new_dataset(request: HttpRequest, queue, form: dict) -> tuple:
    """The queue's reviewed trajectories as the first tasks of a new dataset (failures into evals)."""
    rows = reviewed_with_tasks(queue)
    if not rows:
        return None, {"queue": "No reviewed trajectory in this queue yet: label some 'disagree' or add a corrected "
                               "output first."}
    try:
        return tasks_into_new_dataset(project=queue.project, name=form["new_dataset"], trajectories=rows,
                                      split=form["split"], actor=request.user), {}
    except ValueError as exc:
        return None, {"new_dataset": str(exc)}


@login_required
@require_POST
def review_dpo(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    """Open the run form for a DPO run on the queue's preference pairs (the queue, never a file path)."""
    queue = _queue_for(request, slug, queue_id, Role.EDITOR)
    try:
        reference, _pairs = queue_preference_pairs_reference(queue=queue, actor=request.user)
    except ReviewError as exc:
        messages.error(request, "; ".join(exc.errors.values()) if exc.errors else str(exc))
        return redirect("dashboard:review_queue", slug=slug, queue_id=queue.pk)
    query = {"kind": "dpo", "preference_pairs": reference}
    return redirect(f"{reverse('dashboard:run_new', args=[slug])}?{urlencode(query)}")


# ---------------------------------------------------------------------------------------
# Labelling
# ---------------------------------------------------------------------------------------


@dataclass
class SampleView:
    """One trajectory on the labelling page."""

    trajectory: Trajectory
    side: str = ""
    timeline: list[TurnView] = field(default_factory=list)
    components: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""
    group_url: str = ""


def _sample(trajectory: Trajectory, side: str = "") -> SampleView:
    slug = trajectory.project.slug
    components = [(str(k), f"{v:.3f}" if isinstance(v, int | float) and not isinstance(v, bool) else pretty_json(v))
                  for k, v in sorted((trajectory.components or {}).items())]
    task = env_task_of(trajectory)
    return SampleView(
        trajectory=trajectory, side=side,
        timeline=turn_timeline(trajectory.turns, task.tools if task else None,
                               prompt_turns(trajectory.turns, task.messages if task else None)),
        components=components,
        url=reverse("dashboard:trajectory_detail", args=[slug, trajectory.pk])
        if has_page("dashboard:trajectory_detail") else "",
        group_url=reverse("dashboard:trajectory_group", args=[slug, trajectory.pk])
        if trajectory.group_id and has_page("dashboard:trajectory_group") else "",
    )


def _split_prompt(samples: list[SampleView]) -> list[TurnView]:
    """Pair mode: the prompt (the leading system and user turns) once, above the two answers.

    Only when both samples open with the same prompt; each side then shows its answer alone.
    """
    heads = []
    for sample in samples:
        count = next((i for i, turn in enumerate(sample.timeline) if turn.role not in ("system", "user")),
                     len(sample.timeline))
        heads.append(count)
    texts = [[(t.role, t.text) for t in s.timeline[:n]] for s, n in zip(samples, heads, strict=True)]
    if not heads[0] or any(text != texts[0] for text in texts):
        return []
    prompt = samples[0].timeline[:heads[0]]
    for sample, count in zip(samples, heads, strict=True):
        sample.timeline = sample.timeline[count:]
    return prompt


def _label_values(review: Review | None, item: QueueItem) -> dict:
    if review is None:
        return {"verdict": "", "failure_bucket": "", "note": "", "corrected_output": "", "preferred": ""}
    preferred = ""
    if review.preferred_over_id is not None:
        preferred = "left" if review.trajectory_id == item.trajectory_id else "right"
    return {"verdict": review.verdict, "failure_bucket": review.failure_bucket, "note": review.note,
            "corrected_output": review.corrected_output, "preferred": preferred}


def _history_links(queue: ReviewQueue, history: list[QueueItem], item: QueueItem | None, current: bool):
    """(previous url, next url) through my labelled items; the end of the history is the current item."""
    base = _review_url(queue.project.slug, "review_label", queue.pk)
    ids = [h.pk for h in history]
    if current or item is None or item.pk not in ids:
        return (f"{base}?item={ids[-1]}" if ids else ""), ""
    index = ids.index(item.pk)
    previous = f"{base}?item={ids[index - 1]}" if index > 0 else ""
    following = f"{base}?item={ids[index + 1]}" if index + 1 < len(ids) else base
    return previous, following


def _render_label(request, queue: ReviewQueue, item: QueueItem | None, *, history: list[QueueItem],
                  current: bool, values: dict | None = None, errors: dict | None = None, claim_error: str = "",
                  status: int = 200) -> HttpResponse:
    is_pair = queue.kind == QueueKind.PAIR
    review = None
    samples: list[SampleView] = []
    prompt: list[TurnView] = []
    if item is not None:
        if not current:
            review = my_review_of(item=item, reviewer=request.user)
        samples = [_sample(item.trajectory, "left" if is_pair else "")]
        if is_pair and item.other is not None:
            samples.append(_sample(item.other, "right"))
            prompt = _split_prompt(samples)
    previous_url, next_url = _history_links(queue, history, item, current)
    progress = _progress(queue, request.user)
    context = {
        "project": queue.project, "queue": queue, "item": item, "current": current, "is_pair": is_pair,
        "samples": samples, "prompt": prompt, "review": review, "values": values or _label_values(review, item),
        "errors": errors or {}, "claim_error": claim_error, "progress": progress,
        "held_by_others": held_by_others(queue, request.user) if item is None else 0,
        "history_count": len(history), "previous_url": previous_url, "next_url": next_url,
        "buckets": list(zip(BUCKET_KEYS, FAILURE_BUCKETS, strict=False)),
        "note_max": NOTE_LENGTH, "corrected_max": CORRECTED_OUTPUT_LENGTH,
        "can_edit": has_role(request.user, queue.project, Role.EDITOR),
        "breadcrumbs": _queue_crumbs(queue, ("Label", None)),
    }
    response = render(request, "dashboard/review/label.html", context, status=status)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
def review_label_page(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    queue = _queue_for(request, slug, queue_id, Role.REVIEWER)
    history = list(my_queue_history(queue=queue, reviewer=request.user))
    if "item" in request.GET:
        item_id = _positive_int(request.GET.get("item"))
        if item_id is None or item_id not in {h.pk for h in history}:
            raise Http404("You have not labelled this item of the queue.")
        item = item_for_labelling(queue, item_id)
        if item is None:  # labelled, then its queue item was deleted
            raise Http404("You have not labelled this item of the queue.")
        return _render_label(request, queue, item, history=history, current=False)
    claim_error = ""
    try:
        item = queue_claim_next(queue=queue, reviewer=request.user)
    except ReviewError as exc:
        item, claim_error = None, "; ".join(exc.errors.values()) if exc.errors else str(exc)
    if item is not None:
        item = item_for_labelling(queue, item.pk)
    return _render_label(request, queue, item, history=history, current=True, claim_error=claim_error)


def _label_form(data) -> dict:
    return {name: data.get(name, "") for name in ("verdict", "failure_bucket", "note", "corrected_output",
                                                   "preferred")}


@login_required
@require_POST
def review_save_view(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    queue = _queue_for(request, slug, queue_id, Role.REVIEWER)
    item = item_for_labelling(queue, _positive_int(request.POST.get("item")))
    if item is None:
        raise Http404("No such item in this queue.")
    values = _label_form(request.POST)
    current = request.POST.get("from_history") != "1"
    preferred_id = {"left": item.trajectory_id, "right": item.other_id}.get(values["preferred"])
    errors: dict[str, str] = {}
    try:
        review_save(item=item, reviewer=request.user, verdict=values["verdict"],
                    failure_bucket=values["failure_bucket"], note=values["note"],
                    corrected_output=values["corrected_output"], preferred_id=preferred_id)
    except ReviewError as exc:
        if exc.status == 409:  # the lock went to someone else, or the item has its labels: move on
            messages.error(request, f"Not saved: {'; '.join(exc.errors.values())}")
            return redirect("dashboard:review_label", slug=slug, queue_id=queue.pk)
        errors = dict(exc.errors)
    history = list(my_queue_history(queue=queue, reviewer=request.user))
    if errors:
        if "preferred_id" in errors:
            errors["preferred"] = errors.pop("preferred_id")
        return _render_label(request, queue, item, history=history, current=current, values=values, errors=errors,
                             status=422)
    messages.success(request, f"Saved your label of item {item.position + 1}.")
    if current:
        return redirect("dashboard:review_label", slug=slug, queue_id=queue.pk)
    _previous, following = _history_links(queue, history, item, current=False)
    return redirect(following or _review_url(slug, "review_label", queue.pk))


@login_required
@require_POST
def review_undo_view(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    queue = _queue_for(request, slug, queue_id, Role.REVIEWER)
    try:
        item = review_undo(queue=queue, reviewer=request.user)
    except ReviewError as exc:
        messages.error(request, "; ".join(exc.errors.values()) if exc.errors else str(exc))
        return redirect("dashboard:review_label", slug=slug, queue_id=queue.pk)
    if item is None:
        messages.info(request, "Nothing to undo: you have no label in this queue.")
    else:
        messages.success(request, f"Your label of item {item.position + 1} is undone: label it again.")
    return redirect("dashboard:review_label", slug=slug, queue_id=queue.pk)


@login_required
@require_POST
def review_release_view(request: HttpRequest, slug: str, queue_id: int) -> HttpResponse:
    queue = _queue_for(request, slug, queue_id, Role.REVIEWER)
    item = queue_item(queue, _positive_int(request.POST.get("item")))
    if item is None:
        raise Http404("No such item in this queue.")
    try:
        queue_release(item=item, reviewer=request.user)
        messages.success(request, f"Item {item.position + 1} is released: another reviewer can take it.")
    except ReviewError as exc:
        messages.error(request, "; ".join(exc.errors.values()) if exc.errors else str(exc))
    return redirect("dashboard:review_queue", slug=slug, queue_id=queue.pk)
