"""The review queue: queues from a saved filter, item locks, labels, undo, and labels turned into data.

A queue takes the trajectory list's filter (the same query string, parsed by
`TrajectoryFilter.from_query`) and materialises its matches once, as QueueItem rows in
review order. A reviewer asks for the next item and holds it for `lock_minutes`; nobody
else is handed a held item, and an abandoned lock simply expires. A label (`review_save`)
is stored as a Review linked to its item; labelling the same item again updates the label
instead of counting twice. Pages and the REST API call these functions after checking the
caller's role (webapp.projects.selectors.access): the services trust that check.

Concurrency of `queue_claim_next`: on PostgreSQL the candidate row is read with
SELECT ... FOR UPDATE SKIP LOCKED inside a transaction, so concurrent reviewers walk past
each other's rows; everywhere the claim itself is a conditional UPDATE (the item must still
be free), so two reviewers never get the same item even without row locks (SQLite).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, F, Max, Min, OuterRef, Q, QuerySet
from django.db.models.functions import Greatest
from django.utils import timezone

from webapp.common.bounds import unstorable_text_reason
from webapp.datasets.models import Split, TaskDataset
from webapp.projects.models import Project, Role
from webapp.projects.selectors.access import has_role
from webapp.projects.services.projects import audit_log
from webapp.trajectories.models import (
    FAILURE_BUCKETS,
    QueueItem,
    QueueKind,
    QueueOrder,
    Review,
    ReviewQueue,
    Trajectory,
    Verdict,
)
from webapp.trajectories.selectors.trajectories import (
    FILTER_FIELDS,
    FilterError,
    TrajectoryFilter,
    filtered_trajectories,
)
from webapp.trajectories.services.evals import EvalsReport, tasks_from_trajectories
from webapp.trajectories.services.verification import env_task_of

NAME_LENGTH = 200
LIMIT_RANGE = (1, 5000)
REVIEWS_PER_ITEM_RANGE = (1, 5)
LOCK_MINUTES_RANGE = (1, 240)
NOTE_LENGTH = 10_000
CORRECTED_OUTPUT_LENGTH = 100_000
# Query parameters of the list page that are not part of a filter (paging): dropped, not refused.
NOT_FILTER_PARAMS = frozenset({"after", "limit"})
# Up to this many matches a random queue is an exact uniform sample of their ids; above it,
# ids are sampled by probing random points of the id range (index seeks, never ORDER BY random()).
RANDOM_EXACT_LIMIT = 20_000
# Pair queues look at up to this many candidate samples (in queue order) to find their groups.
PAIR_SEED_FACTOR = 4
PAIR_SEED_LIMIT = 20_000
KEY_CHUNK = 200
MEMBER_WINDOW = 64
PAIR_COLUMNS = ("id", "run_id", "step", "group_id", "task_key", "reward")
PROBE_BATCH = 100


class ReviewError(ValueError):
    """A queue or label request that cannot be done; `errors` maps each field to what is wrong.

    `status` says how an API answers it: 422 (bad input), 409 (the item is held by someone
    else, or changed under the caller) or 403 (the queue is assigned to other reviewers).
    """

    def __init__(self, errors: dict[str, str], *, status: int = 422):
        self.errors = errors
        self.status = status
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors.items()))


class QueueNameTaken(ReviewError):
    """The project already has a queue of this name (found first, or lost a race to create it): a 409 on `name`."""

    def __init__(self, name: str) -> None:
        super().__init__({"name": f"This project already has a review queue named {name!r} (archived queues "
                                  "count too): choose another name, or open that queue."}, status=409)


# ---------------------------------------------------------------------------------------
# Creating a queue
# ---------------------------------------------------------------------------------------


def _bounded_int(value: Any, name: str, bounds: tuple[int, int], errors: dict[str, str]) -> int:
    low, high = bounds
    if isinstance(value, bool):
        errors[name] = f"must be a whole number between {low} and {high}"
        return low
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        errors[name] = f"{str(value)[:40]!r} is not a whole number"
        return low
    if isinstance(value, float) and value != number:
        errors[name] = f"must be a whole number between {low} and {high}"
        return low
    if not low <= number <= high:
        errors[name] = f"must be between {low} and {high}"
        return low
    return number


def _filter_query(raw: Any, errors: dict[str, str]) -> dict[str, str]:
    """A filter given as a dict or QueryDict as the string query `from_query` reads.

    JSON bodies carry numbers and booleans: 0 and False must survive (they are falsy), so
    every value becomes its query-string form first. Unknown names are refused, so a typo
    cannot silently turn into a queue over everything.
    """
    if raw is None:
        return {}
    if not hasattr(raw, "keys") or not hasattr(raw, "get"):
        errors["filter"] = "must be an object of trajectory filters, e.g. {\"run\": 4, \"bucket\": \"wrong_tool\"}"
        return {}
    query: dict[str, str] = {}
    for name in raw.keys():  # noqa: SIM118 - a QueryDict is not a plain dict
        if name in NOT_FILTER_PARAMS:
            continue
        if name not in FILTER_FIELDS:
            errors[f"filter.{str(name)[:40]}"] = f"is not a trajectory filter; use one of {', '.join(FILTER_FIELDS)}"
            continue
        value = raw.get(name)
        if isinstance(value, bool):
            value = "yes" if value else "no"
        elif value is None:
            value = ""
        elif isinstance(value, int | float | str):
            value = str(value)
        else:
            errors[f"filter.{name}"] = "must be a single value (text, number or yes/no)"
            continue
        query[name] = value
    return query


def _parse_filter(raw: Any, errors: dict[str, str]) -> TrajectoryFilter:
    query = _filter_query(raw, errors)
    try:
        return TrajectoryFilter.from_query(query)
    except FilterError as exc:
        errors.update({f"filter.{name}": message for name, message in exc.errors.items()})
        return TrajectoryFilter()


def _resolve_assignees(project: Project, assignees: Iterable[Any], errors: dict[str, str]) -> list:
    """Users given as User objects, ids or usernames; each must hold at least the reviewer role."""
    user_model = get_user_model()
    wanted = list(assignees or ())
    users, unknown = [], []
    for entry in wanted:
        if isinstance(entry, user_model):
            user = entry
        elif isinstance(entry, int) and not isinstance(entry, bool):
            user = user_model.objects.filter(pk=entry).first()
        elif isinstance(entry, str) and entry.strip():
            user = user_model.objects.filter(username=entry.strip()).first()
        else:
            user = None
        if user is None or not has_role(user, project, Role.REVIEWER):
            unknown.append(str(getattr(user or entry, "username", entry))[:40])
        elif user not in users:
            users.append(user)
    if unknown:
        errors["assignees"] = (f"{', '.join(unknown)}: not a reviewer of this project (assignees need the reviewer "
                               "role or higher)")
    return users


def _ordered(rows: QuerySet[Trajectory], order: str) -> QuerySet[Trajectory]:
    if order == QueueOrder.FAILURES_FIRST:
        return rows.order_by("passed", F("reward").asc(nulls_first=True), "-id")
    return rows.order_by("-id")


def _first_at_or_after(rows: QuerySet[Trajectory], pivots: list[int]) -> list[int]:
    """The first match at or after each pivot: one index seek each, batched into one UNION ALL
    query where the database allows ordered, limited parts (PostgreSQL); one query each on SQLite."""
    seeks = [rows.filter(id__gte=pivot).order_by("id").values_list("id", flat=True)[:1] for pivot in pivots]
    if len(seeks) > 1 and connection.features.supports_slicing_ordering_in_compound:
        return list(seeks[0].union(*seeks[1:], all=True))
    return [pk for seek in seeks for pk in seek]


def _random_ids(rows: QuerySet[Trajectory], count: int, rng: random.Random) -> list[int]:
    """`count` distinct ids of `rows` chosen by `rng`, in a random order, cheap on a million rows.

    Up to RANDOM_EXACT_LIMIT matches: an exact uniform sample of their ids. Beyond: each id
    is the first match at or after a random point of the id range, found by an index seek
    (rows after a gap in the ids are a little likelier; fine for a sanity-check sample).
    Never ORDER BY random(), which sorts every match.
    """
    plain = rows.order_by()
    ids = list(plain.values_list("id", flat=True)[: RANDOM_EXACT_LIMIT + 1])
    if len(ids) <= RANDOM_EXACT_LIMIT:
        ids.sort()
        return rng.sample(ids, min(count, len(ids)))
    bounds = plain.aggregate(low=Min("id"), high=Max("id"))
    low, high = bounds["low"], bounds["high"]
    chosen: set[int] = set()
    for _round in range(8):
        missing = count - len(chosen)
        if missing <= 0:
            break
        pivots = [rng.randint(low, high) for _ in range(missing + missing // 4 + 1)]
        for start in range(0, len(pivots), PROBE_BATCH):
            chosen.update(_first_at_or_after(rows, pivots[start:start + PROBE_BATCH]))
    picked = sorted(chosen)
    rng.shuffle(picked)
    return picked[:count]


def _verdict_items(rows: QuerySet[Trajectory], order: str, limit: int, rng: random.Random) -> list[tuple[int, None]]:
    if order == QueueOrder.RANDOM:
        ids = _random_ids(rows, limit, rng)
    else:
        ids = list(_ordered(rows, order).values_list("id", flat=True)[:limit])
    return [(pk, None) for pk in ids]


def _group_key(row: dict) -> tuple:
    """Samples of one prompt: the GRPO group (run, step, group_id), else the same task at the same run and step."""
    if row["group_id"]:
        return ("g", row["run_id"], row["step"], row["group_id"])
    return ("t", row["run_id"], row["step"], row["task_key"])


def _members(rows: QuerySet[Trajectory], keys: list[tuple], first_of: dict[tuple, dict]) -> dict[tuple, list[dict]]:
    """The samples of each key that match the filter, by id.

    A group is logged in one batch, so its samples sit at nearby ids: one query over small
    id windows around the seeds (an index range each) finds them. Only keys still without a
    second sample get the exact (run, step, group) query, which reads a whole step's rows.
    """
    wanted = set(keys)
    found: dict[tuple, dict[int, dict]] = {}

    def collect(matching: QuerySet[Trajectory]) -> None:
        for row in matching.values(*PAIR_COLUMNS):
            key = _group_key(row)
            if key in wanted:
                found.setdefault(key, {})[row["id"]] = row

    windows = Q()
    for key in keys:
        seed = first_of[key]["id"]
        windows |= Q(id__gte=seed - MEMBER_WINDOW, id__lte=seed + MEMBER_WINDOW)
    collect(rows.filter(windows))
    exact = Q()
    for key in keys:
        if len(found.get(key, {})) >= 2:
            continue
        kind, run_id, step, value = key
        exact |= (Q(run_id=run_id, step=step, group_id=value) if kind == "g" else
                  Q(run_id=run_id, step=step, task_key=value, group_id=""))
    if exact:
        collect(rows.filter(exact))
    return {key: [samples[pk] for pk in sorted(samples)] for key, samples in found.items()}


def _differs(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    return abs(a - b) > 1e-9


def _pair_items(rows: QuerySet[Trajectory], order: str, limit: int, rng: random.Random) -> list[tuple[int, int]]:
    """One pair per group: the group's first sample in queue order against a sample with another reward
    (or any other sample when all rewards are equal); sides shuffled so the left is not always the worse."""
    cap = min(limit * PAIR_SEED_FACTOR, PAIR_SEED_LIMIT)
    if order == QueueOrder.RANDOM:
        ids = _random_ids(rows, cap, rng)
        by_id = {r["id"]: r for r in Trajectory.objects.filter(pk__in=ids).values(*PAIR_COLUMNS)}
        seeds = [by_id[pk] for pk in ids if pk in by_id]
    else:
        seeds = list(_ordered(rows, order).values(*PAIR_COLUMNS)[:cap])
    first_of: dict[tuple, dict] = {}
    for row in seeds:
        first_of.setdefault(_group_key(row), row)
    keys = list(first_of)
    pairs: list[tuple[int, int]] = []
    for start in range(0, len(keys), KEY_CHUNK):
        chunk = keys[start:start + KEY_CHUNK]
        members = _members(rows, chunk, first_of)
        for key in chunk:
            first = first_of[key]
            others = [m for m in members.get(key, []) if m["id"] != first["id"]]
            if not others:
                continue
            other = next((m for m in others if _differs(m["reward"], first["reward"])), others[0])
            pair = (first["id"], other["id"])
            pairs.append(pair if rng.random() < 0.5 else (pair[1], pair[0]))
            if len(pairs) >= limit:
                return pairs
    return pairs


@transaction.atomic
def queue_create(
    *,
    project: Project,
    name: str,
    kind: str = QueueKind.VERDICT,
    filter: Any,  # noqa: A002 - the queue's own field name
    order: str = QueueOrder.FAILURES_FIRST,
    limit: int = 200,
    reviews_per_item: int = 1,
    lock_minutes: int = 10,
    assignees: Iterable[Any] = (),
    actor,
) -> ReviewQueue:
    """A queue over the trajectories matching `filter`, its items taken once, now, in `order`.

    verdict queues hold one trajectory per item; pair queues hold two samples of one prompt
    (same GRPO group, else same task, run and step) for a preference label. `limit` caps the
    items (pairs for a pair queue). Raises ReviewError naming each bad field (filter
    parameters as `filter.<name>`), or `filter` when nothing matches; QueueNameTaken (409)
    when the project has a queue of that name, also when a concurrent request made it first.
    """
    errors: dict[str, str] = {}
    name = (name or "").strip()
    if not name:
        errors["name"] = "give the queue a name"
    elif len(name) > NAME_LENGTH:
        errors["name"] = f"is longer than {NAME_LENGTH} characters"
    elif unstorable_text_reason(name):
        errors["name"] = unstorable_text_reason(name)
    if kind not in QueueKind.values:
        errors["kind"] = f"{str(kind)[:40]!r} is not one of {', '.join(QueueKind.values)}"
    if order not in QueueOrder.values:
        errors["order"] = f"{str(order)[:40]!r} is not one of {', '.join(QueueOrder.values)}"
    limit = _bounded_int(limit, "limit", LIMIT_RANGE, errors)
    reviews_per_item = _bounded_int(reviews_per_item, "reviews_per_item", REVIEWS_PER_ITEM_RANGE, errors)
    lock_minutes = _bounded_int(lock_minutes, "lock_minutes", LOCK_MINUTES_RANGE, errors)
    flt = _parse_filter(filter, errors)
    users = _resolve_assignees(project, assignees, errors)
    if errors:
        raise ReviewError(errors)
    if ReviewQueue.objects.filter(project=project, name=name).exists():
        raise QueueNameTaken(name)

    try:
        with transaction.atomic():  # a savepoint: the unique name decides a race, not the check above
            queue = ReviewQueue.objects.create(
                project=project, name=name, kind=kind, filter=flt.as_query(), order=order,
                reviews_per_item=reviews_per_item, lock_minutes=lock_minutes,
                created_by=actor if getattr(actor, "is_authenticated", False) else None,
            )
    except IntegrityError:
        if ReviewQueue.objects.filter(project=project, name=name).exists():
            raise QueueNameTaken(name) from None
        raise
    rng = random.Random(f"review-queue-{queue.pk}")
    rows = filtered_trajectories(project, flt)
    if kind == QueueKind.PAIR:
        picked = _pair_items(rows, order, limit, rng)
        if not picked:
            matched = rows.exists()
            raise ReviewError({"filter": (
                "No task has two samples under this filter: pair mode compares two samples of the same prompt; "
                "widen the filter (e.g. a whole run or step)." if matched else
                "No trajectories match this filter: loosen it, or check the run and step.")})
    else:
        picked = _verdict_items(rows, order, limit, rng)
        if not picked:
            raise ReviewError({"filter": "No trajectories match this filter: loosen it, or check the run and step."})
    QueueItem.objects.bulk_create(
        [QueueItem(queue=queue, position=i, trajectory_id=first, other_id=second)
         for i, (first, second) in enumerate(picked)],
        batch_size=1000,
    )
    queue.size = len(picked)
    queue.save(update_fields=["size"])
    if users:
        queue.assignees.set(users)
    audit_log(project=project, actor=actor, action="review_queue.create", target=queue,
              data={"name": name, "kind": kind, "order": order, "size": queue.size, "filter": queue.filter})
    return queue


# ---------------------------------------------------------------------------------------
# Locks
# ---------------------------------------------------------------------------------------


def _now(now: datetime | None) -> datetime:
    return now or timezone.now()


def _open_items(queue: ReviewQueue, reviewer) -> QuerySet[QueueItem]:
    """Items that still need a label and that this reviewer has not labelled."""
    mine = Review.objects.filter(item=OuterRef("pk"), reviewer=reviewer)
    return queue.items.filter(reviews_done__lt=queue.reviews_per_item).exclude(Exists(mine))


def _free(reviewer, now: datetime) -> Q:
    """Not held by someone else: never locked, lock expired, or held by this reviewer."""
    return Q(locked_until__isnull=True) | Q(locked_until__lte=now) | Q(locked_by=reviewer)


def check_assignee(queue: ReviewQueue, reviewer) -> None:
    """ReviewError (403) when the queue is assigned to reviewers and `reviewer` is not one of them."""
    assigned = list(queue.assignees.values_list("pk", "username"))
    if assigned and reviewer.pk not in {pk for pk, _ in assigned}:
        names = ", ".join(username for _, username in assigned)
        raise ReviewError({"queue": f"This queue is assigned to {names}; ask its creator to add you."}, status=403)


def queue_claim_next(*, queue: ReviewQueue, reviewer, now: datetime | None = None) -> QueueItem | None:
    """The item this reviewer should label now, locked to them for the queue's lock_minutes.

    The item they already hold (re-opening the page does not take a second one, and the
    lock is renewed), else the first open item in queue order that nobody else holds.
    None when nothing is left for this reviewer.
    """
    now = _now(now)
    if queue.archived:
        raise ReviewError({"queue": "This queue is archived: it hands out no more items."}, status=409)
    check_assignee(queue, reviewer)
    until = now + timedelta(minutes=queue.lock_minutes)
    open_items = _open_items(queue, reviewer)
    held = (open_items.filter(locked_by=reviewer, locked_until__gt=now).select_related("trajectory", "other")
            .order_by("position").first())
    if held is not None:
        QueueItem.objects.filter(pk=held.pk, locked_by=reviewer).update(locked_until=until)
        held.locked_until = until
        return held
    for _attempt in range(20):
        with transaction.atomic():
            candidates = open_items.filter(_free(reviewer, now)).order_by("position")
            if connection.features.has_select_for_update_skip_locked:
                candidates = candidates.select_for_update(skip_locked=True)
            pk = candidates.values_list("pk", flat=True).first()
            if pk is None:
                return None
            claimed = QueueItem.objects.filter(
                _free(reviewer, now), pk=pk, reviews_done__lt=queue.reviews_per_item,
            ).update(locked_by=reviewer, locked_until=until)
        if claimed == 1:
            return QueueItem.objects.select_related("trajectory", "other").get(pk=pk)
    return None


def queue_release(*, item: QueueItem, reviewer) -> None:
    """Drop this reviewer's lock on the item (someone else's lock is left alone)."""
    QueueItem.objects.filter(pk=item.pk, locked_by=reviewer).update(locked_by=None, locked_until=None)


def _holder_error(item: QueueItem) -> ReviewError:
    holder = getattr(item.locked_by, "username", "another reviewer")
    until = timezone.localtime(item.locked_until).strftime("%H:%M")
    return ReviewError({"item": f"This item is held by {holder} until {until}; take the next item instead."},
                       status=409)


# ---------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------


def _text_errors(note: str, corrected_output: str, errors: dict[str, str]) -> None:
    for field, value, most in (("note", note, NOTE_LENGTH), ("corrected_output", corrected_output,
                                                             CORRECTED_OUTPUT_LENGTH)):
        if not isinstance(value, str):
            errors[field] = "must be text"
        elif len(value) > most:
            errors[field] = f"is longer than {most:,} characters"
        elif unstorable_text_reason(value):
            errors[field] = unstorable_text_reason(value)


def _verdict_errors(verdict: str, failure_bucket: str, errors: dict[str, str]) -> None:
    if verdict not in Verdict.values:
        errors["verdict"] = ("choose agree or disagree (with the verifier)" if not verdict else
                             f"{str(verdict)[:40]!r} is not agree or disagree")
    if failure_bucket and failure_bucket not in FAILURE_BUCKETS:
        errors["failure_bucket"] = f"{str(failure_bucket)[:40]!r} is not one of {', '.join(FAILURE_BUCKETS)}"


def _uncount(item_ids: Iterable[int | None], keep: int) -> None:
    """A label moved away from (or removed from) other items no longer counts there."""
    others = {pk for pk in item_ids if pk is not None and pk != keep}
    if others:
        QueueItem.objects.filter(pk__in=others).update(reviews_done=Greatest(F("reviews_done") - 1, 0))


def review_save(
    *,
    item: QueueItem,
    reviewer,
    verdict: str = "",
    failure_bucket: str = "",
    note: str = "",
    corrected_output: str = "",
    preferred_id: int | None = None,
    now: datetime | None = None,
) -> Review:
    """Store this reviewer's label of `item` (create or update) and release their lock.

    Verdict items take `verdict` (agree / disagree with the verifier) and optionally a
    failure bucket, a note and a corrected output. Pair items take `preferred_id` (one of
    the two trajectories) and optionally a note; the label is stored as Review(trajectory=
    preferred, preferred_over=the other), replacing this reviewer's opposite answer.
    The reviewer must hold the item's lock or have labelled it before; reviews_done
    grows once per reviewer.
    """
    now = _now(now)
    errors: dict[str, str] = {}
    is_pair = item.other_id is not None
    if isinstance(preferred_id, str):  # straight from a form
        preferred_id = int(preferred_id) if preferred_id.strip().isdigit() else None
    if is_pair:
        if verdict:
            errors["verdict"] = "a pair item takes preferred_id (the better sample), not a verdict"
        if failure_bucket:
            errors["failure_bucket"] = "a pair item takes preferred_id (the better sample), not a failure bucket"
        if preferred_id not in (item.trajectory_id, item.other_id):
            errors["preferred_id"] = (f"choose trajectory {item.trajectory_id} or {item.other_id}"
                                      if preferred_id is None else
                                      f"{preferred_id} is not one of this pair ({item.trajectory_id}, "
                                      f"{item.other_id})")
    else:
        _verdict_errors(verdict, failure_bucket, errors)
    _text_errors(note, corrected_output, errors)
    if errors:
        raise ReviewError(errors)

    with transaction.atomic():
        current = (QueueItem.objects.select_for_update(of=("self",)).select_related("queue", "locked_by")
                   .get(pk=item.pk))
        labelled = Review.objects.filter(item=current, reviewer=reviewer).exists()
        holds = current.locked_by_id == reviewer.pk
        if not labelled and not holds:
            if current.locked_until is not None and current.locked_until > now and current.locked_by_id:
                raise _holder_error(current)
            raise ReviewError({"item": "You do not hold this item: ask for the next item first."}, status=409)
        if not labelled and current.reviews_done >= current.queue.reviews_per_item:
            raise ReviewError({"item": "This item already has all the labels it needs."}, status=409)
        if is_pair:
            review = _save_preference(current, reviewer, preferred_id, note, corrected_output)
        else:
            review = _save_verdict(current, reviewer, verdict, failure_bucket, note, corrected_output)
        fields: dict[str, Any] = {}
        if not labelled:
            fields["reviews_done"] = F("reviews_done") + 1
        if holds:
            fields.update(locked_by=None, locked_until=None)
        if fields:
            QueueItem.objects.filter(pk=current.pk).update(**fields)
    item.refresh_from_db(fields=["reviews_done", "locked_by", "locked_until"])
    return review


def _save_verdict(item: QueueItem, reviewer, verdict: str, bucket: str, note: str, corrected: str) -> Review:
    # One verdict per reviewer and trajectory (a constraint): a label of the same trajectory from
    # another queue moves here and stops counting there.
    review = Review.objects.filter(trajectory_id=item.trajectory_id, reviewer=reviewer,
                                   preferred_over__isnull=True).first()
    if review is None:
        return Review.objects.create(trajectory_id=item.trajectory_id, reviewer=reviewer, item=item, verdict=verdict,
                                     failure_bucket=bucket, note=note, corrected_output=corrected)
    _uncount([review.item_id], keep=item.pk)
    review.item, review.verdict, review.failure_bucket = item, verdict, bucket
    review.note, review.corrected_output = note, corrected
    review.save()
    return review


def _save_preference(item: QueueItem, reviewer, preferred_id: int, note: str, corrected: str) -> Review:
    pair = (item.trajectory_id, item.other_id)
    rejected_id = pair[1] if preferred_id == pair[0] else pair[0]
    existing = list(Review.objects.filter(reviewer=reviewer, trajectory_id__in=pair, preferred_over_id__in=pair))
    _uncount([r.item_id for r in existing], keep=item.pk)
    same = next((r for r in existing if r.trajectory_id == preferred_id), None)
    reverse = [r.pk for r in existing if r.trajectory_id != preferred_id]
    if reverse:
        Review.objects.filter(pk__in=reverse).delete()
    if same is None:
        return Review.objects.create(trajectory_id=preferred_id, preferred_over_id=rejected_id, reviewer=reviewer,
                                     item=item, verdict="", note=note, corrected_output=corrected)
    same.item, same.note, same.corrected_output = item, note, corrected
    same.save()
    return same


def review_update(
    *,
    review: Review,
    reviewer,
    verdict: str | None = None,
    failure_bucket: str | None = None,
    note: str | None = None,
    corrected_output: str | None = None,
) -> Review:
    """Edit one's own label outside the queue flow (API PATCH); fields left None keep their value."""
    if review.reviewer_id != reviewer.pk:
        raise ReviewError({"review": "Only the reviewer who wrote a label can change it."}, status=403)
    errors: dict[str, str] = {}
    is_preference = review.preferred_over_id is not None
    new_verdict = review.verdict if verdict is None else verdict
    new_bucket = review.failure_bucket if failure_bucket is None else failure_bucket
    new_note = review.note if note is None else note
    new_corrected = review.corrected_output if corrected_output is None else corrected_output
    if is_preference:
        if verdict:
            errors["verdict"] = "a preference label has no verdict"
        if failure_bucket:
            errors["failure_bucket"] = "a preference label has no failure bucket"
    else:
        _verdict_errors(new_verdict, new_bucket, errors)
    _text_errors(new_note, new_corrected, errors)
    if errors:
        raise ReviewError(errors)
    if not is_preference:
        review.verdict, review.failure_bucket = new_verdict, new_bucket
    review.note, review.corrected_output = new_note, new_corrected
    review.save()
    return review


def review_undo(*, queue: ReviewQueue, reviewer, now: datetime | None = None) -> QueueItem | None:
    """Remove this reviewer's most recent label in the queue and hand its item back to them, locked.

    None when they have no label in this queue. Refused (409) while another reviewer holds
    the item: the label stays until that lock is released or expires.
    """
    now = _now(now)
    with transaction.atomic():
        review = (Review.objects.filter(item__queue=queue, reviewer=reviewer).order_by("-updated_at", "-id")
                  .values("pk", "item_id").first())
        if review is None:
            return None
        # The item's row lock first, as review_save takes it: the two never wait on each other in a circle.
        item = (QueueItem.objects.select_for_update(of=("self",)).select_related("locked_by")
                .get(pk=review["item_id"]))
        if (item.locked_by_id not in (None, reviewer.pk) and item.locked_until is not None
                and item.locked_until > now):
            raise _holder_error(item)
        deleted, _ = Review.objects.filter(pk=review["pk"], item_id=item.pk).delete()
        if not deleted:  # a concurrent undo or re-label got there first
            return None
        QueueItem.objects.filter(pk=item.pk).update(
            reviews_done=Greatest(F("reviews_done") - 1, 0), locked_by=reviewer,
            locked_until=now + timedelta(minutes=queue.lock_minutes))
    return QueueItem.objects.select_related("trajectory", "other").get(pk=item.pk)


# ---------------------------------------------------------------------------------------
# From labels to data
# ---------------------------------------------------------------------------------------


def reviewed_in_queue(queue: ReviewQueue) -> QuerySet[Trajectory]:
    """Trajectories of the queue with a label that says the verifier or the model was wrong:
    a disagree verdict or a corrected output."""
    telling = Review.objects.filter(trajectory=OuterRef("pk"), item__queue=queue).filter(
        Q(verdict=Verdict.DISAGREE) | ~Q(corrected_output=""))
    return Trajectory.objects.filter(project_id=queue.project_id).filter(Exists(telling))


def queue_labels_to_dataset(
    *,
    queue: ReviewQueue | None = None,
    trajectory_ids: Iterable[int] | None = None,
    project: Project,
    dataset_name: str,
    split: str,
    actor,
) -> EvalsReport:
    """Reviewed trajectories become tasks of a new version of `dataset_name` (linked to their source).

    From a queue: its trajectories with a disagree verdict or a corrected output. From
    `trajectory_ids`: those trajectories of the project. A corrected output becomes the
    task's ground truth (see tasks_from_trajectories).
    """
    errors: dict[str, str] = {}
    dataset = TaskDataset.objects.filter(project=project, name=dataset_name).order_by("-version").first()
    if dataset is None:
        names = sorted(set(TaskDataset.objects.filter(project=project).values_list("name", flat=True)))
        errors["dataset"] = (f"No dataset named {str(dataset_name)[:200]!r} in this project (available: "
                             f"{', '.join(names) or 'none yet'}).")
    if split not in Split.values:
        errors["split"] = f"{str(split)[:40]!r} is not one of {', '.join(Split.values)}"
    if queue is not None and queue.project_id != project.pk:
        errors["queue"] = "This queue belongs to another project."
    if queue is None and trajectory_ids is None:
        errors["queue"] = "Say which trajectories: a queue, or trajectory ids."
    if errors:
        raise ReviewError(errors)
    if queue is not None:
        rows = reviewed_in_queue(queue)
        if trajectory_ids is not None:
            rows = rows.filter(pk__in=list(trajectory_ids))
        if not rows.exists():
            raise ReviewError({"queue": "No reviewed trajectory in this queue yet: label some 'disagree' or add a "
                                        "corrected output first."})
    else:
        ids = sorted({int(pk) for pk in trajectory_ids})
        rows = Trajectory.objects.filter(project=project, pk__in=ids)
        found = set(rows.values_list("pk", flat=True))
        missing = [str(pk) for pk in ids if pk not in found]
        if not ids:
            raise ReviewError({"trajectory_ids": "Choose at least one trajectory."})
        if missing:
            raise ReviewError({"trajectory_ids": f"Not trajectories of this project: {', '.join(missing[:20])}."})
    try:
        report = tasks_from_trajectories(trajectories=list(rows.select_related("task").order_by("id")),
                                         dataset=dataset, split=split, actor=actor)
    except ValueError as exc:
        raise ReviewError({"split": str(exc)}) from None
    if report.dataset is not None:
        audit_log(project=project, actor=actor, action="review_queue.to_dataset", target=report.dataset,
                  data={"queue": queue.pk if queue is not None else None, "created": report.created,
                        "duplicates": report.duplicates, "version": report.dataset.version})
    return report


def _answer_turns(trajectory: Trajectory, prompt: list[dict]) -> list[dict]:
    """The turns after the task's prompt (stored trajectories may repeat the prompt first)."""
    turns = list(trajectory.turns or [])
    if prompt and turns[: len(prompt)] == prompt:
        return turns[len(prompt):]
    return turns


def preference_pairs(queue: ReviewQueue) -> list[dict]:
    """The queue's preference labels as DPO rows, one per pair of trajectories.

    Several reviewers of one pair vote: the side with more votes is `chosen`; a tie is
    left out. Pairs whose task was not stored (no dataset task, no snapshot) are left out.
    """
    votes: dict[tuple[int, int], int] = {}
    for chosen, rejected in Review.objects.filter(item__queue=queue, preferred_over__isnull=False).order_by(
            "id").values_list("trajectory_id", "preferred_over_id"):
        key = (min(chosen, rejected), max(chosen, rejected))
        votes[key] = votes.get(key, 0) + (1 if chosen == key[0] else -1)
    ids = {pk for key in votes for pk in key}
    trajectories = Trajectory.objects.filter(pk__in=ids).select_related("task").in_bulk()
    rows = []
    for (low, high), score in sorted(votes.items()):
        if score == 0 or low not in trajectories or high not in trajectories:
            continue
        chosen, rejected = (trajectories[low], trajectories[high]) if score > 0 else (trajectories[high],
                                                                                     trajectories[low])
        task = env_task_of(chosen)
        if task is None:
            continue
        rows.append({"task": task.to_dict(),
                     "chosen": {"turns": _answer_turns(chosen, task.messages)},
                     "rejected": {"turns": _answer_turns(rejected, task.messages)},
                     "chosen_trajectory": chosen.pk, "rejected_trajectory": rejected.pk, "votes": abs(score)})
    return rows


def queue_preference_pairs_reference(*, queue: ReviewQueue, actor) -> tuple[str, int]:
    """What a DPO run's `preference_pairs` gives for this queue ("review_queue:<id>"), and its pair count.

    A run names the queue, never a file: the server writes the pairs into the run's folder when
    its job starts (queue_preference_pairs_file). ReviewError when the queue has no usable
    preference label.
    """
    rows = preference_pairs(queue)
    if not rows:
        raise ReviewError({"queue": "This queue has no preference label yet (label pairs in pair mode first)."})
    audit_log(project=queue.project, actor=actor, action="review_queue.preference_pairs", target=queue,
              data={"pairs": len(rows)})
    return f"review_queue:{queue.pk}", len(rows)


def queue_preference_pairs_file(*, queue: ReviewQueue, folder: Path) -> Path:
    """Write the queue's preference labels as the DPO pairs file training/dpo.py reads, in `folder`; its path.

    `folder` is the run's own folder (the job reads its inputs there). The file is named after
    the queue and its content, so the same labels give the same file and a file a run used is
    never rewritten. ReviewError when the queue has no usable preference label.
    """
    rows = preference_pairs(queue)
    if not rows:
        raise ReviewError({"queue": "This queue has no preference label yet (label pairs in pair mode first)."})
    text = "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in rows)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"pairs-queue-{queue.pk}-{digest}.jsonl"
    if not path.exists():
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".pairs-", suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return path


def reviewed_with_tasks(queue: ReviewQueue) -> list[Trajectory]:
    """reviewed_in_queue's trajectories with their tasks loaded: what "labels into a new dataset" turns into tasks."""
    return list(reviewed_in_queue(queue).select_related("task"))
