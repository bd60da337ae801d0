"""Reads of the review queue shared by the pages and the API: queues, progress, agreement, label exports.

Access is checked by the caller (webapp.projects.selectors.access) before a project or queue reaches
these functions. Exports stream: rows are read with `.iterator()` and written as text chunks,
so a project's whole label history never sits in memory.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from django.db.models import Count, Exists, F, Min, OuterRef, Q, QuerySet
from django.utils import timezone

from webapp.common.pagination import Page, keyset_page
from webapp.projects.models import Project
from webapp.trajectories.models import QueueItem, Review, ReviewQueue, Verdict

LABEL_COLUMNS = ("trajectory_id", "task", "run_id", "run", "step", "verdict", "bucket", "verifier_bucket", "note",
                 "corrected_output", "preferred_over", "reviewer", "created_at", "updated_at", "queue")
# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CSV_CHUNK_ROWS = 200


# ---------------------------------------------------------------------------------------
# Queues
# ---------------------------------------------------------------------------------------


def _with_counts(queues: QuerySet[ReviewQueue]) -> QuerySet[ReviewQueue]:
    """`done_items`: items with all their labels (size is stored on the queue at creation)."""
    return queues.annotate(done_items=Count("items", filter=Q(items__reviews_done__gte=F("reviews_per_item"))))


def queue_list(project: Project, *, include_archived: bool = True) -> list[ReviewQueue]:
    """The project's queues, newest first, each with `done_items` and `size`."""
    queues = ReviewQueue.objects.filter(project=project).select_related("created_by")
    if not include_archived:
        queues = queues.filter(archived=False)
    return list(_with_counts(queues).order_by("-created_at", "-id"))


def queue_page(project: Project, *, after: str | None = None, limit: int = 50) -> Page:
    """The project's queues as a keyset page (newest first), with `done_items`."""
    queues = _with_counts(ReviewQueue.objects.filter(project=project).select_related("created_by"))
    return keyset_page(queues.prefetch_related("assignees"), ordering=["-id"], after=after, limit=limit)


def _local_midnight(now: datetime) -> datetime:
    return timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)


def queue_progress(*, queue: ReviewQueue, reviewer, now: datetime | None = None) -> dict[str, int]:
    """This reviewer's progress: labels today (any queue of the project), in this queue, items left to them.

    remaining counts the items that still need a label, that this reviewer has not
    labelled and that nobody else holds now (0 for a reviewer the queue is not assigned to).
    """
    now = now or timezone.now()
    mine = Review.objects.filter(reviewer=reviewer)
    done_today = mine.filter(item__queue__project_id=queue.project_id, created_at__gte=_local_midnight(now)).count()
    done_in_queue = mine.filter(item__queue=queue).count()
    counts = queue.items.aggregate(total=Count("id"), complete=Count("id", filter=Q(
        reviews_done__gte=queue.reviews_per_item)))
    assigned = list(queue.assignees.values_list("pk", flat=True))
    if assigned and reviewer.pk not in assigned:
        remaining = 0
    else:
        labelled = Review.objects.filter(item=OuterRef("pk"), reviewer=reviewer)
        remaining = (queue.items.filter(reviews_done__lt=queue.reviews_per_item).exclude(Exists(labelled))
                     .filter(Q(locked_until__isnull=True) | Q(locked_until__lte=now) | Q(locked_by=reviewer))
                     .count())
    return {"done_today": done_today, "done_in_queue": done_in_queue, "remaining": remaining,
            "total": counts["total"], "complete": counts["complete"]}


# ---------------------------------------------------------------------------------------
# Agreement
# ---------------------------------------------------------------------------------------


def cohen_kappa(pairs: list[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters' labels; None when undefined (no pairs).

    kappa = (p_o - p_e) / (1 - p_e), p_o the observed agreement and p_e the agreement
    expected by chance from each rater's label shares. When p_e is 1 (both raters always
    gave one and the same label) the raters agree fully: 1.0.
    """
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(1 for a, b in pairs if a == b) / n
    first = Counter(a for a, _ in pairs)
    second = Counter(b for _, b in pairs)
    expected = sum(first[label] * second.get(label, 0) for label in first) / (n * n)
    if expected >= 1.0:
        return 1.0 if observed >= 1.0 else None
    return (observed - expected) / (1.0 - expected)


def _category(review: dict, item: dict) -> str:
    """What two reviewers compare: verdict and bucket, or which side of a pair won."""
    if review["preferred_over_id"] is not None:
        return "first" if review["trajectory_id"] == item["trajectory_id"] else "second"
    return f"{review['verdict']}:{review['failure_bucket']}"


def queue_agreement(queue: ReviewQueue) -> dict[str, Any]:
    """Agreement of reviewers with the verifier, between reviewers (Cohen's kappa), and per reviewer.

    with_verifier: agree / disagree verdicts and the agree share. between_reviewers: items
    labelled by two or more reviewers, and kappa over the first two reviewers' labels of
    each (verdict and bucket together; the chosen side in pair mode). per_reviewer: labels
    and agree share of each reviewer, most labels first.
    """
    reviews = list(Review.objects.filter(item__queue=queue).order_by("created_at", "id").values(
        "item_id", "trajectory_id", "preferred_over_id", "verdict", "failure_bucket", "reviewer__username"))
    agree = sum(1 for r in reviews if r["verdict"] == Verdict.AGREE)
    disagree = sum(1 for r in reviews if r["verdict"] == Verdict.DISAGREE)
    by_item: dict[int, list[dict]] = defaultdict(list)
    for review in reviews:
        by_item[review["item_id"]].append(review)
    multi = {pk: labels for pk, labels in by_item.items() if len({r["reviewer__username"] for r in labels}) >= 2}
    items = {row["id"]: row for row in QueueItem.objects.filter(pk__in=list(multi)).values("id", "trajectory_id")}
    pairs = []
    for pk, labels in multi.items():
        first = labels[0]
        second = next(r for r in labels if r["reviewer__username"] != first["reviewer__username"])
        pairs.append((_category(first, items[pk]), _category(second, items[pk])))
    per: dict[str, Counter] = defaultdict(Counter)
    for review in reviews:
        counts = per[review["reviewer__username"]]
        counts["done"] += 1
        counts[review["verdict"] or "pair"] += 1
    per_reviewer = [
        {"reviewer": name, "done": counts["done"],
         "agree_rate": (counts[Verdict.AGREE] / (counts[Verdict.AGREE] + counts[Verdict.DISAGREE])
                        if counts[Verdict.AGREE] + counts[Verdict.DISAGREE] else None)}
        for name, counts in sorted(per.items(), key=lambda entry: (-entry[1]["done"], entry[0]))
    ]
    return {
        "with_verifier": {"agree": agree, "disagree": disagree,
                          "rate": agree / (agree + disagree) if agree + disagree else None},
        "between_reviewers": {"items": len(pairs), "kappa": cohen_kappa(pairs)},
        "per_reviewer": per_reviewer,
    }


def my_queue_history(*, queue: ReviewQueue, reviewer) -> list[QueueItem]:
    """The items this reviewer labelled in the queue, in the order they labelled them (oldest first)."""
    return list(queue.items.filter(reviews__reviewer=reviewer)
                .annotate(labelled_at=Min("reviews__created_at", filter=Q(reviews__reviewer=reviewer)))
                .select_related("trajectory", "other").order_by("labelled_at", "id"))


def my_review_of(*, item: QueueItem, reviewer) -> Review | None:
    """This reviewer's label of an item (to pre-fill the form when they go back to it)."""
    return Review.objects.filter(item=item, reviewer=reviewer).first()


# ---------------------------------------------------------------------------------------
# Review lists and exports
# ---------------------------------------------------------------------------------------


def project_reviews(project: Project, *, queue_id: int | None = None, reviewer: str = "",
                    verdict: str = "") -> QuerySet[Review]:
    """The project's labels, optionally of one queue, one reviewer (username) or one verdict
    ("pair" for preference labels)."""
    rows = Review.objects.filter(trajectory__project=project)
    if queue_id is not None:
        rows = rows.filter(item__queue_id=queue_id)
    if reviewer:
        rows = rows.filter(reviewer__username=reviewer)
    if verdict == "pair":
        rows = rows.filter(preferred_over__isnull=False)
    elif verdict:
        rows = rows.filter(verdict=verdict)
    return rows


def review_page(project: Project, *, queue_id: int | None = None, reviewer: str = "", verdict: str = "",
                after: str | None = None, limit: int = 50) -> Page:
    """One keyset page of labels, newest first."""
    rows = project_reviews(project, queue_id=queue_id, reviewer=reviewer, verdict=verdict).select_related(
        "reviewer", "item")
    return keyset_page(rows, ordering=["-id"], after=after, limit=limit)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def label_rows(*, project: Project, queue: ReviewQueue | None = None) -> Iterator[dict[str, Any]]:
    """Every label of the project (or of one queue), oldest first, as flat dicts (LABEL_COLUMNS)."""
    rows = project_reviews(project, queue_id=queue.pk if queue is not None else None).order_by("id").values_list(
        "trajectory_id", "trajectory__task_key", "trajectory__run_id", "trajectory__run__name", "trajectory__step",
        "verdict", "failure_bucket", "trajectory__failure_bucket", "note", "corrected_output", "preferred_over_id",
        "reviewer__username", "created_at", "updated_at", "item__queue_id")
    for row in rows.iterator(chunk_size=2000):
        values = dict(zip(LABEL_COLUMNS, row, strict=True))
        values["created_at"], values["updated_at"] = _iso(values["created_at"]), _iso(values["updated_at"])
        yield values


def labels_jsonl(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """One JSON object per line."""
    for row in rows:
        yield json.dumps(row, ensure_ascii=False) + "\n"


def _cell(value: Any) -> Any:
    """A cell a spreadsheet shows as text: one that would start a formula gets a leading quote."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def labels_csv(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """A header line, then the rows (csv module quoting), in chunks of CSV_CHUNK_ROWS rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(LABEL_COLUMNS)
    pending = 0
    for row in rows:
        writer.writerow([_cell(row.get(column)) for column in LABEL_COLUMNS])
        pending += 1
        if pending >= CSV_CHUNK_ROWS:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
            pending = 0
    yield buffer.getvalue()


# ---------------------------------------------------------------------------------------
# One queue, item or label (access checks, the labelling page, the API's answers)
# ---------------------------------------------------------------------------------------


def queues_with_creator() -> QuerySet[ReviewQueue]:
    """Every review queue with its project and creator, for webapp.projects.selectors.access.get_object_or_404_for_user
    to narrow to the caller's projects."""
    return ReviewQueue.objects.select_related("project", "created_by")


def queue_in_project(project: Project, queue_id: int) -> ReviewQueue | None:
    """The project's queue with this id, or None (another project's is as absent as a missing one)."""
    return ReviewQueue.objects.filter(project=project, pk=queue_id).first()


def done_item_count(queue: ReviewQueue) -> int:
    """How many of the queue's items have all their labels (queue_page annotates it; one queue counts it here)."""
    return queue.items.filter(reviews_done__gte=queue.reviews_per_item).count()


def held_by_others(queue: ReviewQueue, reviewer) -> int:
    """Open items this reviewer has not labelled that another reviewer holds now (why nothing is offered yet)."""
    mine = Review.objects.filter(item=OuterRef("pk"), reviewer=reviewer)
    return (queue.items.filter(reviews_done__lt=queue.reviews_per_item, locked_until__gt=timezone.now())
            .exclude(locked_by=reviewer).exclude(Exists(mine)).count())


def queue_assignees(queue: ReviewQueue) -> list:
    """The users the queue is assigned to, by user name (none: every reviewer of the project may label it)."""
    return list(queue.assignees.order_by("username"))


def queue_assignee_names(queue: ReviewQueue) -> list[str]:
    """The user names the queue is assigned to, sorted (read through a prefetch when the queue has one)."""
    return sorted(user.username for user in queue.assignees.all())


def queue_item(queue: ReviewQueue, item_id: int | None) -> QueueItem | None:
    """The queue's item with this id, or None (an item of another queue is as absent as a missing one)."""
    return QueueItem.objects.filter(queue=queue, pk=item_id).first()


def item_for_labelling(queue: ReviewQueue, item_id: int | None) -> QueueItem | None:
    """The queue's item with this id and both trajectories with what the labelling page shows of them (project,
    run, task, verifier), or None."""
    return QueueItem.objects.filter(queue=queue).select_related(
        "trajectory__project", "trajectory__run", "trajectory__task", "trajectory__verifier_version__verifier",
        "other__project", "other__run", "other__task", "other__verifier_version__verifier",
    ).filter(pk=item_id).first()


def item_with_holder(item_id: int) -> QueueItem:
    """The item as it is now with the user holding its lock (the API's answer after a claim or an undo)."""
    return QueueItem.objects.select_related("locked_by").get(pk=item_id)


def has_labelled(*, item: QueueItem, reviewer) -> bool:
    """Whether this reviewer has a label of the item already (saving again updates it)."""
    return Review.objects.filter(item=item, reviewer=reviewer).exists()


def reviews_with_reviewer() -> QuerySet[Review]:
    """Every label with its reviewer and item, for get_object_or_404_for_user
    (project_field="trajectory__project") to narrow to the caller's projects."""
    return Review.objects.select_related("reviewer", "item")


def review_with_reviewer(review_id: int) -> Review:
    """One label as it is now, with its reviewer and item (the API's answer after a save)."""
    return reviews_with_reviewer().get(pk=review_id)
