"""API for the review queue and labels: queues from a filter, the next item with its lock, labels,
undo, progress and agreement, label exports, and labels turned into dataset tasks.

Roles (webapp.projects.selectors.access): viewers read queues and labels; reviewers take items, label,
undo and export; editors create queues and turn labels into data. Non-members get 404 on
everything, exports included. Field errors answer 422 as {"detail": message, "errors":
{field: message}} (filter parameters as `filter.<name>`); an item held by someone else is a
409 and a queue assigned to other reviewers a 403, in the same shape. Lists answer
`{"items": [...], "next": CURSOR or null}`: pass `next` as `?after=` (keyset pages).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import StreamingHttpResponse
from django.utils import timezone
from ninja import Field, Router, Schema
from ninja.responses import Status

from webapp.api.errors import FieldErrorsOut
from webapp.api.schemas import ErrorOut, EvalsOut
from webapp.api.trajectories import filter_object_schema
from webapp.common.bounds import NAME_PATTERN, Choice, Documented, JsonObject, LongText, RowId, Text
from webapp.common.pagination import MAX_PAGE, CursorError
from webapp.datasets.models import Split
from webapp.projects.models import Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.trajectories.models import (
    FAILURE_BUCKETS,
    QueueItem,
    QueueKind,
    QueueOrder,
    Review,
    ReviewQueue,
    Verdict,
)
from webapp.trajectories.selectors.reviews import (
    done_item_count,
    has_labelled,
    item_with_holder,
    label_rows,
    labels_csv,
    labels_jsonl,
    my_review_of,
    queue_agreement,
    queue_assignee_names,
    queue_in_project,
    queue_item,
    queue_page,
    queue_progress,
    queues_with_creator,
    review_page,
    review_with_reviewer,
    reviews_with_reviewer,
)
from webapp.trajectories.selectors.trajectories import trajectory_briefs
from webapp.trajectories.services.review import (
    LIMIT_RANGE,
    LOCK_MINUTES_RANGE,
    NOTE_LENGTH,
    REVIEWS_PER_ITEM_RANGE,
    ReviewError,
    queue_claim_next,
    queue_create,
    queue_labels_to_dataset,
    queue_preference_pairs_reference,
    queue_release,
    review_save,
    review_undo,
    review_update,
)

router = Router(tags=["reviews"])

EXPORT_FORMATS = {"jsonl": ("application/x-ndjson; charset=utf-8", labels_jsonl),
                  "csv": ("text/csv; charset=utf-8", labels_csv)}
REVIEW_VERDICT_FILTERS = ("agree", "disagree", "pair")
ERRORS = {403: FieldErrorsOut, 404: ErrorOut, 409: FieldErrorsOut, 422: FieldErrorsOut}


# ---------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------


def _bounds(limits: tuple[int, int]) -> dict:
    """The range queue_create checks (with its own message), stated in the document."""
    return {"minimum": limits[0], "maximum": limits[1]}


class ReviewQueueIn(Schema):
    name: Documented(200, NAME_PATTERN) = Field(description="Shown in the queue list; unique in the project "
                                                             "(archived queues too).")
    kind: Choice(*QueueKind.values) = Field("verdict", description="verdict (agree / disagree with the verifier) or pair "
                                                  "(preference between two samples of one prompt).")
    filter: JsonObject = Field({}, json_schema_extra=filter_object_schema(), description="The trajectory list's filters, e.g. {\"run\": 4, \"bucket\": "
                                               "\"wrong_tool\", \"passed\": \"no\"}: the same names as its query "
                                               "string.")
    order: Choice(*QueueOrder.values) = Field("failures_first",
                                              description="failures_first, newest or random (a seeded sample).")
    limit: int = Field(200, description="How many items (pairs in pair mode), 1 to 5000.",
                       json_schema_extra=_bounds(LIMIT_RANGE))
    reviews_per_item: int = Field(1, description="Labels each item needs, 1 to 5 (2 or more gives Cohen's kappa).",
                                  json_schema_extra=_bounds(REVIEWS_PER_ITEM_RANGE))
    lock_minutes: int = Field(10, description="How long an item stays with the reviewer who took it, 1 to 240.",
                              json_schema_extra=_bounds(LOCK_MINUTES_RANGE))
    assignees: list[Text(150)] = Field([], max_length=100,
                                       description="Usernames; when given, only they get items.")


class ReviewQueueOut(Schema):
    id: int
    name: str
    kind: str
    order: str
    filter: dict
    size: int = Field(description="Items taken from the filter at creation.")
    done_items: int = Field(description="Items with all the labels they need.")
    reviews_per_item: int
    lock_minutes: int
    assignees: list[str]
    created_by: str | None
    created_at: datetime
    archived: bool


class ReviewQueuePageOut(Schema):
    items: list[ReviewQueueOut]
    next: str | None = Field(description="Pass as `after` for the next page; null on the last page.")


class ReviewProgressOut(Schema):
    done_today: int = Field(description="The caller's labels since local midnight, in any queue of the project.")
    done_in_queue: int = Field(description="The caller's labels in this queue.")
    remaining: int = Field(description="Items the caller could still take (not labelled by them, not held by "
                                       "someone else).")
    total: int
    complete: int = Field(description="Items with all the labels they need.")


class VerifierAgreementOut(Schema):
    agree: int
    disagree: int
    rate: float | None = Field(description="Share of verdicts that agree with the verifier.")


class ReviewerAgreementOut(Schema):
    items: int = Field(description="Items labelled by two or more reviewers.")
    kappa: float | None = Field(description="Cohen's kappa over the first two labels of those items.")


class ReviewerStatsOut(Schema):
    reviewer: str
    done: int
    agree_rate: float | None


class ReviewAgreementOut(Schema):
    with_verifier: VerifierAgreementOut
    between_reviewers: ReviewerAgreementOut
    per_reviewer: list[ReviewerStatsOut]


class ReviewQueueDetailOut(ReviewQueueOut):
    progress: ReviewProgressOut = Field(description="The caller's progress.")
    agreement: ReviewAgreementOut


class ReviewedTrajectoryOut(Schema):
    id: int
    task_key: str
    run_id: int | None
    step: int
    sample_index: int
    group_id: str
    reward: float | None
    passed: bool
    failure_bucket: str
    source: str


class ReviewOut(Schema):
    id: int
    trajectory_id: int
    preferred_over_id: int | None = Field(description="Pair mode: `trajectory_id` is preferred over this one.")
    item_id: int | None
    queue_id: int | None
    reviewer: str
    verdict: str
    failure_bucket: str
    note: str
    corrected_output: str
    created_at: datetime
    updated_at: datetime


class ReviewPageOut(Schema):
    items: list[ReviewOut]
    next: str | None = Field(description="Pass as `after` for the next page; null on the last page.")


class QueueItemOut(Schema):
    id: int
    queue_id: int
    position: int
    trajectory_id: int
    other_id: int | None = Field(description="Pair mode: the second sample.")
    reviews_done: int
    locked_by: str | None
    locked_until: datetime | None = Field(description="The lock runs out then; label before it, or ask again.")
    trajectory: ReviewedTrajectoryOut
    other: ReviewedTrajectoryOut | None
    my_review: ReviewOut | None = Field(description="The caller's label of this item, if any.")


# The note's limit, checked by the review service with the label's other fields (all errors at once).
NOTE_LIMIT = {"maxLength": NOTE_LENGTH}


class ReviewIn(Schema):
    verdict: Choice("", *Verdict.values) = Field("", description="Verdict items: agree or disagree (with the "
                                                                 "verifier).")
    failure_bucket: Choice("", *FAILURE_BUCKETS) = Field("", description="Optional: the failure bucket the reviewer "
                                                                          "sees.")
    note: LongText = Field("", description="Up to 10,000 characters.", json_schema_extra=NOTE_LIMIT)
    corrected_output: LongText = Field("", description="What the model should have answered (up to 100,000 "
                                                       "characters); becomes ground truth in 'to-dataset'.")
    preferred_id: RowId | None = Field(None, description="Pair items: the id of the better trajectory.")


class ReviewPatchIn(Schema):
    verdict: Choice(*Verdict.values) | None = None
    failure_bucket: Choice("", *FAILURE_BUCKETS) | None = None
    note: LongText | None = Field(None, json_schema_extra=NOTE_LIMIT)
    corrected_output: LongText | None = None


class QueueToDatasetIn(Schema):
    dataset: Text(200) = Field(description="The name of one of the project's datasets: a new version is made.")
    split: Choice(*Split.values) = Field("held_out", description="train, validation or held_out.")
    trajectory_ids: list[RowId] | None = Field(None, max_length=10_000,
                                               description="Only these of the queue's reviewed trajectories.")


class PreferencePairsFileOut(Schema):
    preference_pairs: str = Field(description="The queue as a DPO run's config names it (\"review_queue:<id>\"): give "
                                              "it as `preference_pairs`; the server writes the pairs for the job.")
    pairs: int


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


def _failed(exc: ReviewError) -> Status:
    return Status(exc.status, FieldErrorsOut(detail=str(exc), errors=exc.errors))


def _queue_for(request, queue_id: int, minimum: str = Role.VIEWER) -> ReviewQueue:
    return get_object_or_404_for_user(queues_with_creator(), request.user,
                                      minimum, pk=queue_id)


def _queue_out(queue: ReviewQueue, done_items: int | None = None) -> dict[str, Any]:
    if done_items is None:
        done_items = getattr(queue, "done_items", None)
    if done_items is None:
        done_items = done_item_count(queue)
    return {"id": queue.pk, "name": queue.name, "kind": queue.kind, "order": queue.order, "filter": queue.filter,
            "size": queue.size, "done_items": done_items, "reviews_per_item": queue.reviews_per_item,
            "lock_minutes": queue.lock_minutes,
            "assignees": queue_assignee_names(queue),
            "created_by": queue.created_by.username if queue.created_by else None,
            "created_at": queue.created_at, "archived": queue.archived}


def _review_out(review: Review) -> dict[str, Any]:
    return {"id": review.pk, "trajectory_id": review.trajectory_id, "preferred_over_id": review.preferred_over_id,
            "item_id": review.item_id, "queue_id": review.item.queue_id if review.item_id else None,
            "reviewer": review.reviewer.username, "verdict": review.verdict, "failure_bucket": review.failure_bucket,
            "note": review.note, "corrected_output": review.corrected_output, "created_at": review.created_at,
            "updated_at": review.updated_at}


BRIEF = ("id", "task_key", "run_id", "step", "sample_index", "group_id", "reward", "passed", "failure_bucket",
         "source")


def _item_out(item: QueueItem, user) -> dict[str, Any]:
    item = item_with_holder(item.pk)
    ids = [item.trajectory_id] + ([item.other_id] if item.other_id else [])
    brief = trajectory_briefs(ids, BRIEF)
    mine = my_review_of(item=item, reviewer=user)
    return {"id": item.pk, "queue_id": item.queue_id, "position": item.position, "trajectory_id": item.trajectory_id,
            "other_id": item.other_id, "reviews_done": item.reviews_done,
            "locked_by": item.locked_by.username if item.locked_by else None, "locked_until": item.locked_until,
            "trajectory": brief[item.trajectory_id], "other": brief.get(item.other_id) if item.other_id else None,
            "my_review": _review_out(mine) if mine else None}


def _cursor_error(exc: CursorError) -> Status:
    return Status(400, FieldErrorsOut(detail=str(exc), errors={"after": str(exc)}))


# ---------------------------------------------------------------------------------------
# Queues
# ---------------------------------------------------------------------------------------


@router.post("/projects/{slug}/review-queues", response={201: ReviewQueueOut, **ERRORS},
             summary="Create a review queue from a trajectory filter")
def create_queue(request, slug: str, body: ReviewQueueIn):
    """Take the trajectories matching `filter` once, in `order`, as the queue's items (editor).

    Pair queues pair two samples of one prompt (same GRPO group), preferring samples with
    different rewards. A filter that matches nothing is a 422 on `filter`; a name the project's
    queues already use (archived ones too) a 409 on `name`, also when a concurrent request took it.
    """
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    try:
        queue = queue_create(project=project, name=body.name, kind=body.kind, filter=body.filter, order=body.order,
                             limit=body.limit, reviews_per_item=body.reviews_per_item,
                             lock_minutes=body.lock_minutes, assignees=body.assignees, actor=request.user)
    except ReviewError as exc:
        return _failed(exc)
    return Status(201, _queue_out(queue, done_items=0))


@router.get("/projects/{slug}/review-queues", response={200: ReviewQueuePageOut, 400: FieldErrorsOut, 404: ErrorOut},
            summary="List the project's review queues")
def list_queues(request, slug: str, after: Text(1000) | None = None, limit: int = 50):
    """Newest first, each with its size and how many items have all their labels (viewer)."""
    project = get_project_or_404(request.user, slug)
    try:
        page = queue_page(project, after=after, limit=max(1, min(limit, MAX_PAGE)))
    except CursorError as exc:
        return _cursor_error(exc)
    return {"items": [_queue_out(queue) for queue in page.items], "next": page.next_cursor}


@router.get("/review-queues/{queue_id}", response={200: ReviewQueueDetailOut, 404: ErrorOut},
            summary="One queue with the caller's progress and the agreement figures")
def get_queue(request, queue_id: RowId):
    """Progress is the caller's (done today, done in this queue, remaining); agreement is the
    reviewers' with the verifier and between reviewers (Cohen's kappa on items labelled twice)."""
    queue = _queue_for(request, queue_id)
    return {**_queue_out(queue), "progress": queue_progress(queue=queue, reviewer=request.user),
            "agreement": queue_agreement(queue)}


@router.post("/review-queues/{queue_id}/next", response={200: QueueItemOut, 204: None, **ERRORS},
             summary="Take the next item (locked to the caller)")
def next_item(request, queue_id: RowId):
    """The caller's next item, locked to them until `locked_until` (reviewer).

    Asking again while holding an item gives the same item (its lock renewed). Two
    reviewers asking at once never get the same item. 204 when nothing is left for the caller.
    """
    queue = _queue_for(request, queue_id, Role.REVIEWER)
    try:
        item = queue_claim_next(queue=queue, reviewer=request.user)
    except ReviewError as exc:
        return _failed(exc)
    if item is None:
        return Status(204, None)
    return _item_out(item, request.user)


@router.post("/review-queues/{queue_id}/items/{item_id}/release", response={204: None, **ERRORS},
             summary="Give an item back before its lock runs out")
def release_item(request, queue_id: RowId, item_id: RowId):
    """Drop the caller's lock on the item (reviewer); someone else's lock is left alone."""
    queue = _queue_for(request, queue_id, Role.REVIEWER)
    item = queue_item(queue, item_id)
    if item is None:
        return Status(404, ErrorOut(detail="No such item in this queue."))
    queue_release(item=item, reviewer=request.user)
    return Status(204, None)


@router.post("/review-queues/{queue_id}/items/{item_id}/review", response={200: ReviewOut, 201: ReviewOut, **ERRORS},
             summary="Label an item (create, or update the caller's label)")
def label_item(request, queue_id: RowId, item_id: RowId, body: ReviewIn):
    """Verdict items take `verdict` (+ optional bucket, note, corrected output); pair items take
    `preferred_id`. The caller must hold the item (from `next`) or have labelled it before:
    201 for a new label, 200 when it updated the caller's label. The lock is released."""
    queue = _queue_for(request, queue_id, Role.REVIEWER)
    item = queue_item(queue, item_id)
    if item is None:
        return Status(404, ErrorOut(detail="No such item in this queue."))
    existed = has_labelled(item=item, reviewer=request.user)
    try:
        review = review_save(item=item, reviewer=request.user, verdict=body.verdict,
                             failure_bucket=body.failure_bucket, note=body.note,
                             corrected_output=body.corrected_output, preferred_id=body.preferred_id)
    except ReviewError as exc:
        return _failed(exc)
    review = review_with_reviewer(review.pk)
    return Status(200 if existed else 201, _review_out(review))


@router.post("/review-queues/{queue_id}/undo", response={200: QueueItemOut, 204: None, **ERRORS},
             summary="Undo the caller's last label in the queue")
def undo_label(request, queue_id: RowId):
    """Remove the caller's most recent label here; its item comes back locked to them (reviewer).
    204 when there is nothing to undo; 409 while another reviewer holds that item."""
    queue = _queue_for(request, queue_id, Role.REVIEWER)
    try:
        item = review_undo(queue=queue, reviewer=request.user)
    except ReviewError as exc:
        return _failed(exc)
    if item is None:
        return Status(204, None)
    return _item_out(item, request.user)


@router.post("/review-queues/{queue_id}/to-dataset", response={200: EvalsOut, 201: EvalsOut, **ERRORS},
             summary="Turn the queue's reviewed trajectories into dataset tasks")
def queue_to_dataset(request, queue_id: RowId, body: QueueToDatasetIn):
    """Trajectories labelled 'disagree' or given a corrected output become tasks of a new version
    of `dataset`, each linked to its trajectory (editor). 201 when tasks were added, 200 when
    every one was a duplicate or skipped (`skipped` says why)."""
    queue = _queue_for(request, queue_id, Role.EDITOR)
    try:
        report = queue_labels_to_dataset(queue=queue, trajectory_ids=body.trajectory_ids, project=queue.project,
                                         dataset_name=body.dataset, split=body.split, actor=request.user)
    except ReviewError as exc:
        return _failed(exc)
    out = EvalsOut(dataset=report.dataset.name if report.dataset else None,
                   version=report.dataset.version if report.dataset else None, created=report.created,
                   duplicates=report.duplicates, skipped=report.skipped)
    return Status(201 if report.created else 200, out)


@router.post("/review-queues/{queue_id}/preference-pairs", response={201: PreferencePairsFileOut, **ERRORS},
             summary="Check the queue's preference labels and name them for a DPO run")
def queue_pairs_file(request, queue_id: RowId):
    """What a DPO run's config gives as `preference_pairs` for this queue ("review_queue:<id>"),
    and how many pairs it holds now (editor). The run names the queue, never a file: when its
    job starts, the server writes the pairs ({task, chosen, rejected} per line) into the run's
    folder. 422 when the queue has no usable preference label."""
    queue = _queue_for(request, queue_id, Role.EDITOR)
    try:
        reference, pairs = queue_preference_pairs_reference(queue=queue, actor=request.user)
    except ReviewError as exc:
        return _failed(exc)
    return Status(201, PreferencePairsFileOut(preference_pairs=reference, pairs=pairs))


# ---------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------


@router.get("/projects/{slug}/reviews", response={200: ReviewPageOut, 400: FieldErrorsOut, 404: ErrorOut,
                                                  422: FieldErrorsOut},
            summary="List the project's labels")
def list_reviews(request, slug: str, queue: RowId | None = None, reviewer: Text(150) = "",
                 verdict: Choice("", *REVIEW_VERDICT_FILTERS) = "",
                 after: Text(1000) | None = None, limit: int = 50):
    """Newest first; filter by queue id, reviewer (username) and verdict (agree, disagree, or
    pair for preference labels) (viewer)."""
    project = get_project_or_404(request.user, slug)
    if verdict and verdict not in REVIEW_VERDICT_FILTERS:
        message = f"Unknown verdict {verdict[:40]!r}; use one of {', '.join(REVIEW_VERDICT_FILTERS)}."
        return Status(422, FieldErrorsOut(detail=message, errors={"verdict": message}))
    try:
        page = review_page(project, queue_id=queue, reviewer=reviewer, verdict=verdict, after=after,
                           limit=max(1, min(limit, MAX_PAGE)))
    except CursorError as exc:
        return _cursor_error(exc)
    return {"items": [_review_out(review) for review in page.items], "next": page.next_cursor}


@router.patch("/reviews/{review_id}", response={200: ReviewOut, **ERRORS}, summary="Change one's own label")
def update_review(request, review_id: RowId, body: ReviewPatchIn):
    """Fields left out keep their value. Only the label's own reviewer (still a reviewer of the
    project) may change it: 403 for anyone else, 404 for non-members."""
    review = get_object_or_404_for_user(reviews_with_reviewer(), request.user,
                                        Role.REVIEWER, project_field="trajectory__project", pk=review_id)
    try:
        review_update(review=review, reviewer=request.user, **body.dict(exclude_unset=True))
    except ReviewError as exc:
        return _failed(exc)
    return _review_out(review_with_reviewer(review.pk))


@router.get("/projects/{slug}/reviews/export", response={200: None, 404: ErrorOut, 422: FieldErrorsOut},
            summary="Download the labels as JSONL or CSV",
            openapi_extra={"responses": {200: {"description": "The labels, streamed as a file download.",
                                                 "content": {"application/x-ndjson": {}, "text/csv": {}}}}})
def export_reviews(request, slug: str, format: Choice(*EXPORT_FORMATS) = "jsonl",  # noqa: A002
                   queue: RowId | None = None):
    """Every label of the project (or of one queue), oldest first: trajectory id, task, run, step,
    verdict, bucket, the verifier's bucket, note, corrected output, preferred_over, reviewer,
    times, queue (reviewer). CSV cells that a spreadsheet would run as a formula start with '."""
    project = get_project_or_404(request.user, slug, Role.REVIEWER)
    if format not in EXPORT_FORMATS:
        message = f"Unknown format {format[:40]!r}; use jsonl or csv."
        return Status(422, FieldErrorsOut(detail=message, errors={"format": message}))
    chosen = None
    if queue is not None:
        chosen = queue_in_project(project, queue)
        if chosen is None:
            return Status(404, ErrorOut(detail="No such queue in this project."))
    content_type, writer = EXPORT_FORMATS[format]
    response = StreamingHttpResponse(writer(label_rows(project=project, queue=chosen)), content_type=content_type)
    stamp = timezone.localtime().strftime("%Y%m%d-%H%M")
    name = f"crucible-labels-{project.slug}{f'-queue-{chosen.pk}' if chosen else ''}-{stamp}.{format}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
