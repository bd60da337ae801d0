"""Review queue services and selectors: queues from filters, locks, labels, undo, agreement, exports, data."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.utils import timezone
from pipeline_data import XSS, make_pipeline_run

from webapp.datasets.models import Task
from webapp.datasets.services.datasets import dataset_create
from webapp.projects.models import AuditEvent
from webapp.trajectories.models import QueueItem, Review, ReviewQueue, Trajectory
from webapp.trajectories.selectors.reviews import (
    cohen_kappa,
    label_rows,
    labels_csv,
    labels_jsonl,
    my_queue_history,
    queue_agreement,
    queue_list,
    queue_progress,
)
from webapp.trajectories.services import review as rs
from webapp.trajectories.services.review import (
    ReviewError,
    queue_claim_next,
    queue_create,
    queue_labels_to_dataset,
    queue_preference_pairs_file,
    queue_preference_pairs_reference,
    queue_release,
    review_save,
    review_undo,
    review_update,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(project_team):
    return make_pipeline_run(project_team["project"], project_team["owner"], steps=3)


def _queue(project_team, run, **kwargs):
    """A queue of its own name (names are unique per project), unless the test names it."""
    taken = ReviewQueue.objects.filter(project=project_team["project"]).count()
    options = {"name": f"failures {taken + 1}", "filter": {"run": run.pk}, "actor": project_team["editor"]} | kwargs
    return queue_create(project=project_team["project"], **options)


def _ids(queue):
    return list(queue.items.order_by("position").values_list("trajectory_id", flat=True))


def _label(queue, who, now=None, **fields):
    item = queue_claim_next(queue=queue, reviewer=who, now=now)
    assert item is not None
    return item, review_save(item=item, reviewer=who, now=now, **({"verdict": "agree"} | fields))


# ---------------------------------------------------------------------------------------
# Creating queues
# ---------------------------------------------------------------------------------------


def test_every_bad_field_is_named(project_team, run):
    with pytest.raises(ReviewError) as caught:
        queue_create(project=project_team["project"], name="  ", kind="triple", filter={"bucket": "nope", "runn": 3},
                     order="sideways", limit=0, reviews_per_item=6, lock_minutes=241,
                     assignees=[project_team["viewer"], project_team["outsider"].pk, "ghost"],
                     actor=project_team["editor"])
    errors = caught.value.errors
    assert set(errors) == {"name", "kind", "order", "limit", "reviews_per_item", "lock_minutes", "assignees",
                           "filter.bucket", "filter.runn"}
    assert "viewer" in errors["assignees"] and "outsider" in errors["assignees"] and "ghost" in errors["assignees"]
    assert "wrong_tool" in errors["filter.bucket"]
    assert "name:" in str(caught.value)
    with pytest.raises(ReviewError) as caught:
        _queue(project_team, run, name="x" * 201, filter={"step_min": 3, "step_max": 1, "run": "four"})
    assert set(caught.value.errors) == {"name", "filter.run", "filter.step_max"}
    with pytest.raises(ReviewError) as caught:
        _queue(project_team, run, filter={"step_min": 3, "step_max": 1})
    assert set(caught.value.errors) == {"filter.step_max"}


def test_a_filter_that_matches_nothing_is_refused_and_leaves_no_queue(project_team, run):
    with pytest.raises(ReviewError) as caught:
        _queue(project_team, run, filter={"run": run.pk, "step": 99})
    assert set(caught.value.errors) == {"filter"} and "No trajectories match" in caught.value.errors["filter"]
    assert not queue_list(project_team["project"])


def test_failures_first_puts_low_rewards_first_and_passes_last(project_team, run):
    queue = _queue(project_team, run, filter={"run": run.pk, "step": 2})
    rows = [Trajectory.objects.get(pk=pk) for pk in _ids(queue)]
    assert queue.size == len(rows) == 16
    assert list(queue.items.order_by("position").values_list("position", flat=True)) == list(range(16))
    assert [r.passed for r in rows] == [False] * 12 + [True] * 4
    failing = [r.reward for r in rows if not r.passed]
    assert failing == sorted(failing)
    assert queue.filter == {"run": str(run.pk), "step": "2"}
    assert AuditEvent.objects.filter(action="review_queue.create", target_id=str(queue.pk)).exists()


def test_newest_order_limit_and_filters(project_team, run):
    queue = _queue(project_team, run, order="newest", limit=5)
    newest = list(Trajectory.objects.filter(run=run).order_by("-id").values_list("id", flat=True)[:5])
    assert _ids(queue) == newest and queue.size == 5
    bucket = _queue(project_team, run, filter={"run": run.pk, "bucket": "wrong_tool", "step_min": 2})
    rows = Trajectory.objects.filter(pk__in=_ids(bucket))
    assert bucket.size == 8 and {(r.failure_bucket, r.step >= 2) for r in rows} == {("wrong_tool", True)}


def test_json_numbers_and_booleans_survive_as_filters(project_team, run):
    # 0 and False are falsy: they must still filter (step 0, passed=no), not vanish.
    with pytest.raises(ReviewError) as caught:
        _queue(project_team, run, filter={"run": run.pk, "step": 0})
    assert "filter" in caught.value.errors
    failures = _queue(project_team, run, filter={"run": run.pk, "passed": False, "after": "cursor"})
    assert failures.size == 36 and failures.filter == {"run": str(run.pk), "passed": "no"}
    assert not Trajectory.objects.filter(pk__in=_ids(failures), passed=True).exists()


def test_random_sample_is_seeded_distinct_and_within_the_filter(project_team, run, monkeypatch):
    first = _queue(project_team, run, order="random", limit=10, filter={"run": run.pk, "passed": "no"})
    ids = _ids(first)
    assert len(ids) == len(set(ids)) == 10
    assert not Trajectory.objects.filter(pk__in=ids, passed=True).exists()
    second = _queue(project_team, run, order="random", limit=10, filter={"run": run.pk, "passed": "no"})
    assert _ids(second) != ids  # seeded by the queue id
    everything = _queue(project_team, run, order="random", limit=500)
    assert sorted(_ids(everything)) == sorted(Trajectory.objects.filter(run=run).values_list("id", flat=True))
    # Above the exact-sample size, ids are probed over the id range (no ORDER BY random()).
    monkeypatch.setattr(rs, "RANDOM_EXACT_LIMIT", 5)
    # (Probing runs only above 20,000 matches with at most 5,000 items: here 6 of the 12 invalid_json rows.)
    probed = _queue(project_team, run, order="random", limit=6, filter={"run": run.pk, "bucket": "invalid_json"})
    ids = _ids(probed)
    assert len(ids) == len(set(ids)) == 6
    assert set(Trajectory.objects.filter(pk__in=ids).values_list("failure_bucket", flat=True)) == {"invalid_json"}


def test_pair_queue_pairs_two_samples_of_one_group_with_different_rewards(project_team, run):
    queue = _queue(project_team, run, kind="pair", limit=6)
    items = list(queue.items.select_related("trajectory", "other").order_by("position"))
    assert len(items) == queue.size == 6
    groups = set()
    for item in items:
        a, b = item.trajectory, item.other
        assert a.pk != b.pk and a.group_id == b.group_id and a.task_key == b.task_key and a.step == b.step
        assert a.reward != b.reward
        groups.add(a.group_id)
    assert len(groups) == 6  # one pair per group
    all_pairs = _queue(project_team, run, kind="pair", limit=5000, order="random")
    assert all_pairs.size == 12  # 4 tasks x 3 steps
    # Sides are shuffled: the better sample is on the left in some pairs and on the right in others.
    left_is_better = {item.trajectory.reward > item.other.reward
                      for item in all_pairs.items.select_related("trajectory", "other")}
    assert left_is_better == {True, False}
    with pytest.raises(ReviewError) as caught:  # one sample per group under this filter: no pairs
        _queue(project_team, run, kind="pair", filter={"run": run.pk, "bucket": "wrong_tool"})
    assert "two samples" in caught.value.errors["filter"]


def test_queue_list_counts_done_items(project_team, run):
    queue = _queue(project_team, run, filter={"run": run.pk, "step": 1}, limit=3)
    _label(queue, project_team["reviewer"])
    listed = queue_list(project_team["project"])
    assert [(q.pk, q.size, q.done_items) for q in listed] == [(queue.pk, 3, 1)]


# ---------------------------------------------------------------------------------------
# Locks
# ---------------------------------------------------------------------------------------


def test_a_locked_item_goes_to_nobody_else_and_an_expired_lock_is_reissued(project_team, run):
    queue = _queue(project_team, run, limit=3, lock_minutes=10)
    now = timezone.now()
    reviewer, editor, owner = project_team["reviewer"], project_team["editor"], project_team["owner"]
    first = queue_claim_next(queue=queue, reviewer=reviewer, now=now)
    assert first.position == 0 and first.locked_by == reviewer
    assert first.locked_until == now + timedelta(minutes=10)
    again = queue_claim_next(queue=queue, reviewer=reviewer, now=now + timedelta(minutes=1))
    assert again.pk == first.pk  # re-opening the page keeps the same item, lock renewed
    assert QueueItem.objects.get(pk=first.pk).locked_until == now + timedelta(minutes=11)
    second = queue_claim_next(queue=queue, reviewer=editor, now=now + timedelta(minutes=2))
    assert second.position == 1
    third = queue_claim_next(queue=queue, reviewer=owner, now=now + timedelta(minutes=2))
    assert third.position == 2
    assert queue_claim_next(queue=queue, reviewer=project_team["viewer"], now=now + timedelta(minutes=3)) is None
    # The reviewer walked away: after the lock runs out, the item goes to the next person who asks.
    late = now + timedelta(minutes=11, seconds=1)
    taken = queue_claim_next(queue=queue, reviewer=project_team["viewer"], now=late)
    assert taken.pk == first.pk and taken.locked_by == project_team["viewer"]
    with pytest.raises(ReviewError) as caught:
        review_save(item=first, reviewer=reviewer, verdict="agree", now=late)
    assert caught.value.status == 409 and "held by viewer until" in caught.value.errors["item"]


def test_release_frees_the_item(project_team, run):
    queue = _queue(project_team, run, limit=2)
    item = queue_claim_next(queue=queue, reviewer=project_team["reviewer"])
    queue_release(item=item, reviewer=project_team["editor"])  # not theirs: nothing happens
    assert QueueItem.objects.get(pk=item.pk).locked_by == project_team["reviewer"]
    queue_release(item=item, reviewer=project_team["reviewer"])
    assert QueueItem.objects.get(pk=item.pk).locked_by is None
    assert queue_claim_next(queue=queue, reviewer=project_team["editor"]).pk == item.pk


def test_assigned_queues_hand_items_only_to_their_assignees(project_team, run):
    queue = _queue(project_team, run, limit=2, assignees=[project_team["reviewer"]])
    assert list(queue.assignees.all()) == [project_team["reviewer"]]
    with pytest.raises(ReviewError) as caught:
        queue_claim_next(queue=queue, reviewer=project_team["editor"])
    assert caught.value.status == 403 and "reviewer" in caught.value.errors["queue"]
    assert queue_claim_next(queue=queue, reviewer=project_team["reviewer"]) is not None
    assert queue_progress(queue=queue, reviewer=project_team["editor"])["remaining"] == 0
    queue.archived = True
    queue.save(update_fields=["archived"])
    with pytest.raises(ReviewError) as caught:
        queue_claim_next(queue=queue, reviewer=project_team["reviewer"])
    assert "archived" in caught.value.errors["queue"]


# ---------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------


def test_label_fields_are_checked(project_team, run):
    queue = _queue(project_team, run, limit=2)
    item = queue_claim_next(queue=queue, reviewer=project_team["reviewer"])
    with pytest.raises(ReviewError) as caught:
        review_save(item=item, reviewer=project_team["reviewer"], verdict="", failure_bucket="bogus",
                    note="n" * 10_001, corrected_output="a\x00b")
    assert set(caught.value.errors) == {"verdict", "failure_bucket", "note", "corrected_output"}
    with pytest.raises(ReviewError) as caught:
        review_save(item=item, reviewer=project_team["reviewer"], verdict="agree", preferred_id=item.trajectory_id,
                    corrected_output="x" * 100_001)
    assert set(caught.value.errors) == {"corrected_output"}
    assert not Review.objects.exists()


def test_only_the_lock_holder_may_label(project_team, run):
    queue = _queue(project_team, run, limit=2)
    item = queue_claim_next(queue=queue, reviewer=project_team["reviewer"])
    with pytest.raises(ReviewError) as caught:
        review_save(item=item, reviewer=project_team["editor"], verdict="agree")
    assert "held by reviewer until" in caught.value.errors["item"]
    free = queue.items.get(position=1)
    with pytest.raises(ReviewError) as caught:
        review_save(item=free, reviewer=project_team["editor"], verdict="agree")
    assert "next item" in caught.value.errors["item"]


def test_relabelling_updates_the_label_without_counting_twice(project_team, run):
    queue = _queue(project_team, run, limit=3)
    reviewer = project_team["reviewer"]
    item, review = _label(queue, reviewer, verdict="disagree", failure_bucket="wrong_tool", note="first")
    item.refresh_from_db()
    assert item.reviews_done == 1 and item.locked_by is None and item.locked_until is None
    again = review_save(item=item, reviewer=reviewer, verdict="agree", note="second")
    assert again.pk == review.pk
    item.refresh_from_db()
    assert item.reviews_done == 1
    stored = Review.objects.get()
    assert (stored.verdict, stored.failure_bucket, stored.note, stored.item_id) == ("agree", "", "second", item.pk)
    # The next claim moves on; a second label per item needs a queue asking for two.
    assert queue_claim_next(queue=queue, reviewer=reviewer).position == 1


def test_two_labels_per_item_go_to_two_reviewers(project_team, run):
    queue = _queue(project_team, run, limit=2, reviews_per_item=2)
    item, _ = _label(queue, project_team["reviewer"])
    assert queue_claim_next(queue=queue, reviewer=project_team["reviewer"]).position == 1
    other = queue_claim_next(queue=queue, reviewer=project_team["editor"])
    assert other.pk == item.pk
    review_save(item=other, reviewer=project_team["editor"], verdict="disagree")
    item.refresh_from_db()
    assert item.reviews_done == 2
    progress = queue_progress(queue=queue, reviewer=project_team["owner"])
    assert progress["complete"] == 1 and progress["total"] == 2
    assert progress["remaining"] == 0  # item 1 is held by the reviewer


def test_a_label_from_another_queue_moves_instead_of_colliding(project_team, run):
    reviewer = project_team["reviewer"]
    one = _queue(project_team, run, limit=1)
    two = _queue(project_team, run, limit=1)
    item_one, _ = _label(one, reviewer, verdict="agree")
    item_two, review = _label(two, reviewer, verdict="disagree")
    assert Review.objects.count() == 1 and review.item_id == item_two.pk
    item_one.refresh_from_db()
    item_two.refresh_from_db()
    assert (item_one.reviews_done, item_two.reviews_done) == (0, 1)


def test_undo_removes_my_last_label_and_hands_the_item_back(project_team, run):
    queue = _queue(project_team, run, limit=3)
    reviewer = project_team["reviewer"]
    assert review_undo(queue=queue, reviewer=reviewer) is None
    first, _ = _label(queue, reviewer)
    second, _ = _label(queue, reviewer, verdict="disagree")
    now = timezone.now()
    back = review_undo(queue=queue, reviewer=reviewer, now=now)
    assert back.pk == second.pk and back.reviews_done == 0
    assert back.locked_by == reviewer and back.locked_until == now + timedelta(minutes=queue.lock_minutes)
    assert list(Review.objects.values_list("item_id", flat=True)) == [first.pk]
    assert queue_claim_next(queue=queue, reviewer=reviewer).pk == second.pk
    review_save(item=back, reviewer=reviewer, verdict="agree")
    assert QueueItem.objects.get(pk=second.pk).reviews_done == 1


def test_undo_does_not_take_an_item_someone_else_holds(project_team, run):
    queue = _queue(project_team, run, limit=1, reviews_per_item=2)
    _label(queue, project_team["reviewer"])
    queue_claim_next(queue=queue, reviewer=project_team["editor"])
    with pytest.raises(ReviewError) as caught:
        review_undo(queue=queue, reviewer=project_team["reviewer"])
    assert caught.value.status == 409 and Review.objects.count() == 1


def test_review_update_is_for_its_own_reviewer(project_team, run):
    queue = _queue(project_team, run, limit=1)
    _, review = _label(queue, project_team["reviewer"])
    with pytest.raises(ReviewError) as caught:
        review_update(review=review, reviewer=project_team["editor"], note="mine now")
    assert caught.value.status == 403
    with pytest.raises(ReviewError):
        review_update(review=review, reviewer=project_team["reviewer"], verdict="maybe")
    review_update(review=review, reviewer=project_team["reviewer"], note="better", failure_bucket="wrong_tool")
    review.refresh_from_db()
    assert (review.verdict, review.failure_bucket, review.note) == ("agree", "wrong_tool", "better")


def test_pair_labels_store_preferred_over_and_replace_the_reverse_answer(project_team, run):
    queue = _queue(project_team, run, kind="pair", limit=2)
    reviewer = project_team["reviewer"]
    item = queue_claim_next(queue=queue, reviewer=reviewer)
    with pytest.raises(ReviewError) as caught:
        review_save(item=item, reviewer=reviewer, preferred_id=10**9, verdict="agree")
    assert set(caught.value.errors) == {"preferred_id", "verdict"}
    review = review_save(item=item, reviewer=reviewer, preferred_id=item.other_id, note="cleaner")
    assert (review.trajectory_id, review.preferred_over_id, review.verdict) == (item.other_id, item.trajectory_id, "")
    flipped = review_save(item=item, reviewer=reviewer, preferred_id=item.trajectory_id)
    assert list(Review.objects.values_list("trajectory_id", "preferred_over_id")) == [
        (item.trajectory_id, item.other_id)]
    assert flipped.item_id == item.pk
    item.refresh_from_db()
    assert item.reviews_done == 1


# ---------------------------------------------------------------------------------------
# Progress, history, agreement
# ---------------------------------------------------------------------------------------


def test_progress_and_history(project_team, run):
    queue = _queue(project_team, run, limit=4)
    reviewer = project_team["reviewer"]
    first, _ = _label(queue, reviewer)
    second, _ = _label(queue, reviewer)
    queue_claim_next(queue=queue, reviewer=project_team["editor"])  # holds item 2
    progress = queue_progress(queue=queue, reviewer=reviewer)
    assert progress == {"done_today": 2, "done_in_queue": 2, "remaining": 1, "total": 4, "complete": 2}
    other = _queue(project_team, run, limit=1, name="elsewhere", order="newest", filter={"passed": "yes"})
    _label(other, reviewer)
    assert queue_progress(queue=queue, reviewer=reviewer)["done_today"] == 3
    tomorrow = timezone.now() + timedelta(days=1)
    assert queue_progress(queue=queue, reviewer=reviewer, now=tomorrow)["done_today"] == 0
    assert [i.pk for i in my_queue_history(queue=queue, reviewer=reviewer)] == [first.pk, second.pk]
    assert my_queue_history(queue=queue, reviewer=project_team["editor"]) == []


def test_cohen_kappa_on_the_textbook_example():
    # Wikipedia's example: 50 proposals, 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no -> kappa 0.4.
    pairs = [("yes", "yes")] * 20 + [("yes", "no")] * 5 + [("no", "yes")] * 10 + [("no", "no")] * 15
    assert cohen_kappa(pairs) == pytest.approx(0.4)
    assert cohen_kappa([]) is None
    assert cohen_kappa([("a", "a")] * 3) == 1.0
    assert cohen_kappa([("a", "b"), ("b", "a")]) == pytest.approx(-1.0)


def test_agreement_with_the_verifier_and_between_reviewers(project_team, run):
    queue = _queue(project_team, run, limit=3, reviews_per_item=2)
    reviewer, editor = project_team["reviewer"], project_team["editor"]
    for verdicts in (("agree", "agree"), ("disagree", "disagree"), ("agree", "disagree")):
        for who, verdict in zip((reviewer, editor), verdicts, strict=True):
            _label(queue, who, verdict=verdict)
    agreement = queue_agreement(queue)
    assert agreement["with_verifier"] == {"agree": 3, "disagree": 3, "rate": 0.5}
    assert agreement["between_reviewers"]["items"] == 3
    # p_o = 2/3, p_e = (2/3*1/3 + 1/3*2/3) = 4/9 -> kappa = (2/3 - 4/9) / (5/9) = 0.4
    assert agreement["between_reviewers"]["kappa"] == pytest.approx(0.4)
    assert agreement["per_reviewer"] == [
        {"reviewer": "editor", "done": 3, "agree_rate": pytest.approx(1 / 3)},
        {"reviewer": "reviewer", "done": 3, "agree_rate": pytest.approx(2 / 3)},
    ]
    empty = _queue(project_team, run, limit=1, name="empty")
    assert queue_agreement(empty) == {"with_verifier": {"agree": 0, "disagree": 0, "rate": None},
                                      "between_reviewers": {"items": 0, "kappa": None}, "per_reviewer": []}


# ---------------------------------------------------------------------------------------
# Exports and data
# ---------------------------------------------------------------------------------------

HOSTILE_NOTE = f'{XSS[0]}, "quoted", {XSS[2]}\nsecond line\ttab'


def test_jsonl_and_csv_exports_keep_hostile_text_and_defuse_formulas(project_team, run):
    queue = _queue(project_team, run, limit=3)
    reviewer = project_team["reviewer"]
    _label(queue, reviewer, verdict="disagree", failure_bucket="wrong_tool", note=HOSTILE_NOTE,
           corrected_output='=HYPERLINK("http://evil","x")')
    _label(queue, reviewer, note="@SUM(A1:A2)")
    rows = list(label_rows(project=project_team["project"], queue=queue))
    assert [r["note"] for r in rows] == [HOSTILE_NOTE, "@SUM(A1:A2)"]
    first = rows[0]
    trajectory = Trajectory.objects.get(pk=first["trajectory_id"])
    assert first == {
        "trajectory_id": trajectory.pk, "task": trajectory.task_key, "run_id": run.pk, "run": run.name,
        "step": trajectory.step, "verdict": "disagree", "bucket": "wrong_tool",
        "verifier_bucket": trajectory.failure_bucket, "note": HOSTILE_NOTE,
        "corrected_output": '=HYPERLINK("http://evil","x")', "preferred_over": None, "reviewer": "reviewer",
        "created_at": first["created_at"], "updated_at": first["updated_at"], "queue": queue.pk,
    }
    assert first["created_at"].startswith(str(timezone.now().year))
    parsed = [json.loads(line) for line in "".join(labels_jsonl(rows)).splitlines()]
    assert parsed == rows
    table = list(csv.DictReader(io.StringIO("".join(labels_csv(rows)))))
    assert [t["note"] for t in table] == [HOSTILE_NOTE, "'@SUM(A1:A2)"]
    assert table[0]["corrected_output"] == "'=HYPERLINK(\"http://evil\",\"x\")"
    assert table[0]["trajectory_id"] == str(trajectory.pk) and table[0]["preferred_over"] == ""
    assert list(label_rows(project=project_team["other"])) == []
    assert len(list(label_rows(project=project_team["project"]))) == 2


def test_csv_comes_in_chunks(project_team, run, monkeypatch):
    import webapp.trajectories.selectors.reviews as selectors

    monkeypatch.setattr(selectors, "CSV_CHUNK_ROWS", 2)
    rows = [{"trajectory_id": i, "note": "-1+1"} for i in range(5)]
    chunks = list(labels_csv(rows))
    assert len(chunks) == 3
    table = list(csv.DictReader(io.StringIO("".join(chunks))))
    assert len(table) == 5 and table[0]["note"] == "'-1+1"


def test_labels_become_a_new_dataset_version_linked_to_their_trajectories(project_team, run):
    # One wrong_tool sample per task at step 1: three different tasks, so no duplicate content.
    queue = _queue(project_team, run, limit=3, filter={"run": run.pk, "bucket": "wrong_tool", "step": 1})
    reviewer = project_team["reviewer"]
    item, _ = _label(queue, reviewer, verdict="disagree", failure_bucket="wrong_arguments")
    trajectory = Trajectory.objects.get(pk=item.trajectory_id)
    truth = trajectory.task.ground_truth[0]
    corrected = json.dumps({"name": truth["name"], "arguments": truth["arguments"]})
    item2, _ = _label(queue, reviewer, verdict="agree", corrected_output=corrected)
    _label(queue, reviewer, verdict="agree")  # agrees, no correction: not new data
    # The run's own dataset holds these tasks already (same prompt and answer): a new eval set.
    dataset = dataset_create(project=project_team["project"], name="regressions", tasks=[],
                             actor=project_team["editor"], environment="json_tool_call")
    with pytest.raises(ReviewError) as caught:
        queue_labels_to_dataset(queue=queue, project=project_team["project"], dataset_name="missing",
                                split="held_out", actor=project_team["editor"])
    assert "No dataset named 'missing'" in caught.value.errors["dataset"]
    assert "regressions, tool calls" in caught.value.errors["dataset"]
    report = queue_labels_to_dataset(queue=queue, project=project_team["project"], dataset_name=dataset.name,
                                     split="held_out", actor=project_team["editor"])
    assert report.created == 2 and report.dataset.version == dataset.version + 1
    new = Task.objects.filter(dataset=report.dataset, origin_trajectory__isnull=False)
    assert set(new.values_list("origin_trajectory_id", flat=True)) == {item.trajectory_id, item2.trajectory_id}
    assert set(new.values_list("split", flat=True)) == {"held_out"}
    assert AuditEvent.objects.filter(action="review_queue.to_dataset", target_id=str(report.dataset.pk)).exists()
    # From a selection of trajectory ids instead of a queue.
    other = Trajectory.objects.filter(run=run, failure_bucket="invalid_json").first()
    report = queue_labels_to_dataset(trajectory_ids=[other.pk], project=project_team["project"],
                                     dataset_name=dataset.name, split="held_out", actor=project_team["editor"])
    assert report.created == 1 and report.dataset.version == dataset.version + 2
    with pytest.raises(ReviewError) as caught:
        queue_labels_to_dataset(trajectory_ids=[10**9], project=project_team["project"], dataset_name=dataset.name,
                                split="held_out", actor=project_team["editor"])
    assert "trajectory_ids" in caught.value.errors
    empty = _queue(project_team, run, limit=1, name="nothing reviewed")
    with pytest.raises(ReviewError) as caught:
        queue_labels_to_dataset(queue=empty, project=project_team["project"], dataset_name=dataset.name,
                                split="held_out", actor=project_team["editor"])
    assert "No reviewed trajectory" in caught.value.errors["queue"]


def test_preference_pairs_file_is_what_dpo_reads(project_team, run, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    queue = _queue(project_team, run, kind="pair", limit=3)
    with pytest.raises(ReviewError):
        queue_preference_pairs_file(queue=queue, folder=tmp_path)
    with pytest.raises(ReviewError):
        queue_preference_pairs_reference(queue=queue, actor=project_team["editor"])
    reviewer = project_team["reviewer"]
    chosen = []
    for _ in range(3):
        item = queue_claim_next(queue=queue, reviewer=reviewer)
        better = max((item.trajectory, item.other), key=lambda t: t.reward or 0)
        review_save(item=item, reviewer=reviewer, preferred_id=better.pk)
        chosen.append(better.pk)
    assert queue_preference_pairs_reference(queue=queue, actor=project_team["editor"]) == (f"review_queue:{queue.pk}", 3)
    path = queue_preference_pairs_file(queue=queue, folder=tmp_path / "run")
    assert path.parent == tmp_path / "run" and path.suffix == ".jsonl"
    assert queue_preference_pairs_file(queue=queue, folder=tmp_path / "run") == path  # same labels, same file

    from training.dpo import _turns
    from training.sft import _row_task, read_jsonl

    rows = read_jsonl(path, "preference_pairs")
    assert len(rows) == 3
    for where, row in rows:
        task = _row_task(row, {}, where)
        assert task.messages and task.tools and task.ground_truth
        for side in ("chosen", "rejected"):
            turns = _turns(row[side], where, side)
            assert [t["role"] for t in turns] == ["assistant"]
        assert row["chosen_trajectory"] in chosen
        chosen_trajectory = Trajectory.objects.get(pk=row["chosen_trajectory"])
        assert task.id == chosen_trajectory.task_key
        assert row["chosen"]["turns"][-1] == chosen_trajectory.turns[-1]
