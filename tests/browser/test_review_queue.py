"""The review queue in a real browser: a queue labelled from first item to last with the keyboard
only, one preference pair in pair mode, undo, the labels exported and read back, and hostile
trajectories shown as text with no dialog.

Set CRUCIBLE_SCREENSHOT_DIR to keep screenshots (review-label.png, review-pair.png,
review-queue.png, review-complete.png).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from browser_session import login, shot, watch
from pipeline_data import XSS, make_pipeline_run

from webapp.trajectories.models import QueueItem, QueueKind, Review
from webapp.trajectories.services.review import queue_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _progress(page, name: str) -> str:
    return page.locator(f"#progress [data-progress='{name}']").inner_text()


def _wait_progress(page, name: str, value: int) -> None:
    page.wait_for_function(
        "([name, value]) => { const el = document.querySelector(`#progress [data-progress='${name}']`);"
        " return el && el.textContent.trim() === String(value); }", arg=[name, value])
    page.wait_for_load_state()  # the page's modules run: its keys work


def _held_item(queue, user) -> QueueItem:
    return QueueItem.objects.select_related("trajectory").get(queue=queue, locked_by=user)


@pytest.fixture
def review_team(project_team):
    project = project_team["project"]
    run = make_pipeline_run(project, project_team["owner"])
    return {**project_team, "run": run, "slug": project.slug}


def test_label_a_queue_from_first_item_to_last_with_the_keyboard(page, live_server, review_team):
    team = review_team
    queue = queue_create(project=team["project"], name="Failures", filter={"run": team["run"].pk, "passed": "no"},
                         limit=3, actor=team["editor"])
    seen = watch(page)
    login(page, live_server, "reviewer")
    page.goto(f"{live_server.url}/p/{team['slug']}/review/{queue.pk}/")
    page.keyboard.press("l")  # the queue page's key: start labelling
    page.wait_for_url(f"**/review/{queue.pk}/label/")
    assert "You hold this item until" in page.locator("#lock-note").inner_text()
    assert "a agree" in page.locator("#key-hint").inner_text()
    assert (_progress(page, "done_in_queue"), _progress(page, "remaining")) == ("0", "3")
    shot(page, "review-label.png")

    # Item 1: agree, bucket 3 (wrong_tool), a note typed after n; a and d typed in the note stay text.
    first = _held_item(queue, team["reviewer"])
    page.keyboard.press("a")
    page.keyboard.press("3")
    page.keyboard.press("n")
    page.keyboard.type("bad data")
    assert page.locator("#verdict-agree").is_checked() and page.input_value("#note") == "bad data"
    page.keyboard.press("Control+Enter")
    _wait_progress(page, "done_in_queue", 1)
    assert _progress(page, "remaining") == "2"
    review = Review.objects.get(reviewer=team["reviewer"], item=first)
    assert (review.verdict, review.failure_bucket, review.note) == ("agree", "wrong_tool", "bad data")

    # Item 2: a note first, Escape leaves the field, then d and 0 (verifier_error) work again.
    second = _held_item(queue, team["reviewer"])
    assert second.pk != first.pk
    page.keyboard.press("n")
    page.keyboard.type("x")
    page.keyboard.press("Escape")
    page.keyboard.press("d")
    page.keyboard.press("0")
    assert page.locator("#verdict-disagree").is_checked()
    assert page.input_value("#failure-bucket") == "verifier_error"
    page.keyboard.press("Control+Enter")
    _wait_progress(page, "done_in_queue", 2)
    review = Review.objects.get(reviewer=team["reviewer"], item=second)
    assert (review.verdict, review.failure_bucket, review.note) == ("disagree", "verifier_error", "x")

    # k goes back to my last label (pre-filled), j returns to the current item.
    third = _held_item(queue, team["reviewer"])
    page.keyboard.press("k")
    page.wait_for_url(f"**/label/?item={second.pk}")
    assert page.locator("#verdict-disagree").is_checked() and page.input_value("#note") == "x"
    page.keyboard.press("j")
    page.wait_for_url(f"**/review/{queue.pk}/label/")
    assert page.locator("#label-form input[name=item]").input_value() == str(third.pk)

    # Item 3: Ctrl+Enter from inside the note saves, and the queue is complete.
    page.keyboard.press("d")
    page.keyboard.press("n")
    page.keyboard.type("last one")
    page.keyboard.press("Control+Enter")
    page.locator("#queue-complete").wait_for()
    assert "Queue complete" in page.locator("#queue-complete").inner_text()
    assert _progress(page, "done_in_queue") == "3" and _progress(page, "remaining") == "0"
    shot(page, "review-complete.png")

    # u undoes the last label: the item comes back to me, unlabelled; labelling it again completes the queue.
    page.keyboard.press("u")
    page.wait_for_selector(".messages li.success:has-text('is undone')")
    page.wait_for_load_state()
    assert page.locator("#label-form input[name=item]").input_value() == str(third.pk)
    assert not Review.objects.filter(item=third).exists()
    assert _progress(page, "done_in_queue") == "2"
    page.keyboard.press("Control+Enter")  # no verdict yet: refused beside the field
    page.locator("#verdict-error").wait_for()
    page.wait_for_load_state()
    page.keyboard.press("a")
    page.keyboard.press("Control+Enter")
    page.locator("#queue-complete").wait_for()
    assert Review.objects.get(item=third).verdict == "agree"
    assert seen == {"dialogs": [], "csp": []}


def test_one_preference_pair_in_pair_mode_with_keys(page, live_server, review_team):
    team = review_team
    queue = queue_create(project=team["project"], name="Pairs", kind=QueueKind.PAIR, filter={"run": team["run"].pk},
                         limit=2, actor=team["editor"])
    seen = watch(page)
    login(page, live_server, "reviewer")
    page.goto(f"{live_server.url}/p/{team['slug']}/review/{queue.pk}/label/")
    item = _held_item(queue, team["reviewer"])
    page.keyboard.press("ArrowRight")
    assert page.locator("#sample-right").get_attribute("class").split().count("preferred") == 1
    assert "preferred" not in page.locator("#sample-left").get_attribute("class").split()
    page.keyboard.press("p")
    assert page.locator("#preferred-left").is_checked()
    assert "preferred" in page.locator("#sample-left").get_attribute("class").split()
    shot(page, "review-pair.png")
    page.keyboard.press("Control+Enter")
    _wait_progress(page, "done_in_queue", 1)
    review = Review.objects.get(reviewer=team["reviewer"])
    assert (review.trajectory_id, review.preferred_over_id) == (item.trajectory_id, item.other_id)
    # the next pair: Ctrl+Enter without a choice says what to do and saves nothing
    page.keyboard.press("Control+Enter")
    assert "Choose the better sample" in page.locator("#key-feedback").inner_text()
    assert Review.objects.count() == 1
    assert seen == {"dialogs": [], "csp": []}


def test_export_the_labels(page, live_server, review_team):
    team = review_team
    queue = queue_create(project=team["project"], name="Export me", filter={"run": team["run"].pk}, limit=2,
                         actor=team["editor"])
    login(page, live_server, "reviewer")
    page.goto(f"{live_server.url}/p/{team['slug']}/review/{queue.pk}/label/")
    for done, (verdict_key, note) in enumerate((("a", "fine"), ("d", "=not fine")), start=1):
        page.keyboard.press(verdict_key)
        page.keyboard.press("n")
        page.keyboard.type(note)
        page.keyboard.press("Control+Enter")
        _wait_progress(page, "done_in_queue", done)
    page.locator("#queue-complete").wait_for()
    page.goto(f"{live_server.url}/p/{team['slug']}/review/{queue.pk}/")
    shot(page, "review-queue.png")
    with page.expect_download() as download:
        page.click("#export-jsonl")
    rows = [json.loads(line) for line in Path(download.value.path()).read_text().splitlines()]
    assert download.value.suggested_filename == f"{team['slug']}-queue-{queue.pk}-labels.jsonl"
    assert [(r["verdict"], r["note"], r["reviewer"], r["run_id"]) for r in rows] == [
        ("agree", "fine", "reviewer", team["run"].pk), ("disagree", "=not fine", "reviewer", team["run"].pk)]
    assert {r["trajectory_id"] for r in rows} == set(queue.items.values_list("trajectory_id", flat=True))
    with page.expect_download() as download:
        page.click("#export-csv")
    table = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert [(r["verdict"], r["note"]) for r in table] == [("agree", "fine"), ("disagree", "'=not fine")]


def test_hostile_trajectories_render_as_text_without_a_dialog(page, live_server, project_team):
    project = project_team["project"]
    run = make_pipeline_run(project, project_team["owner"], hostile=True)
    key = next(k for k in run.trajectories.values_list("task_key", flat=True) if XSS[0] in k)
    queue = queue_create(project=project, name=f"Queue {XSS[2]}", filter={"run": run.pk, "task": key}, order="newest",
                         limit=20, actor=project_team["editor"])
    # the sample whose tool output is hostile too comes first
    hostile = QueueItem.objects.get(queue=queue, trajectory__step=3, trajectory__sample_index=0)
    QueueItem.objects.filter(queue=queue).exclude(pk=hostile.pk).update(reviews_done=1)
    pair = queue_create(project=project, name=XSS[1], kind=QueueKind.PAIR, filter={"run": run.pk, "task": key},
                        limit=1, actor=project_team["editor"])
    seen = watch(page)
    login(page, live_server, "reviewer")
    page.goto(f"{live_server.url}/p/{project.slug}/review/")
    assert page.locator(f"tr[data-queue='{queue.pk}'] a").first.inner_text() == f"Queue {XSS[2]}"
    page.goto(f"{live_server.url}/p/{project.slug}/review/{queue.pk}/")
    assert XSS[2] in page.locator("h1").inner_text()
    page.goto(f"{live_server.url}/p/{project.slug}/review/{queue.pk}/label/")
    assert page.locator("#label-form input[name=item]").input_value() == str(hostile.pk)
    assert page.locator(".task-key").first.inner_text() == hostile.trajectory.task_key
    timeline = page.locator("ol.timeline").first.inner_text()
    assert XSS[0] + " ok " + XSS[2] in timeline and XSS[1] in timeline  # tool output and the task's request
    assert page.locator("ol.timeline script, ol.timeline img, ol.timeline svg").count() == 0
    page.goto(f"{live_server.url}/p/{project.slug}/review/{pair.pk}/label/")
    assert XSS[0] in page.locator("#sample-left").inner_text() + page.locator("#sample-right").inner_text()
    assert page.locator(".samples script, .samples img, .samples svg").count() == 0
    page.wait_for_timeout(300)
    assert seen == {"dialogs": [], "csp": []}
