"""Review pages: queues and the new-queue form, one queue's page, labelling (verdicts and pairs), undo,
exports, labels to a dataset, and the DPO run form pre-filled from a pair queue."""

from __future__ import annotations

import csv
import io
import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from pipeline_data import XSS, make_pipeline_run

from webapp.datasets.models import TaskDataset
from webapp.trajectories.models import QueueItem, QueueKind, Review, ReviewQueue, Trajectory
from webapp.trajectories.services.review import queue_claim_next, queue_create, review_save

MEMBERS = ["viewer", "reviewer", "editor", "owner"]


@pytest.fixture
def team(project_team):
    project = project_team["project"]
    run = make_pipeline_run(project, project_team["owner"])
    queue = queue_create(project=project, name="Failures of run", filter={"run": run.pk, "passed": "no"}, limit=5,
                         actor=project_team["editor"])
    return {**project_team, "run": run, "queue": queue, "slug": project.slug}


def _url(team, tail: str = "", queue: ReviewQueue | None = None) -> str:
    queue = queue or team["queue"]
    return f"/p/{team['slug']}/review/{queue.pk}/{tail}"


def _pair_queue(team, limit: int = 3) -> ReviewQueue:
    return queue_create(project=team["project"], name="Pairs", kind=QueueKind.PAIR, filter={"run": team["run"].pk},
                        limit=limit, actor=team["editor"])


def _body(response) -> str:
    return response.content.decode()


def _claimed(team, who: str = "reviewer", queue: ReviewQueue | None = None) -> QueueItem:
    return QueueItem.objects.get(queue=queue or team["queue"], locked_by=team[who])


# ---------------------------------------------------------------------------------------
# Roles
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", [*MEMBERS, "outsider"])
def test_reading_pages_are_for_members(client, team, who):
    client.force_login(team[who])
    for url in (f"/p/{team['slug']}/review/", _url(team)):
        assert client.get(url).status_code == (404 if who == "outsider" else 200), url


@pytest.mark.parametrize(("who", "status"), [("viewer", 403), ("reviewer", 200), ("editor", 200), ("owner", 200),
                                             ("outsider", 404)])
def test_labelling_and_exports_need_a_reviewer(client, team, who, status):
    client.force_login(team[who])
    assert client.get(_url(team, "label/")).status_code == status
    for url in (f"/p/{team['slug']}/review/labels.jsonl", f"/p/{team['slug']}/review/labels.csv",
                _url(team, "labels.jsonl"), _url(team, "labels.csv")):
        assert client.get(url).status_code == status, url
    item = team["queue"].items.first()
    writes = {"save/": {"item": item.pk, "verdict": "agree"}, "undo/": {}, "release/": {"item": item.pk}}
    for tail, data in writes.items():
        response = client.post(_url(team, tail), data)
        if status == 200:
            assert response.status_code == 302, tail
        else:
            assert response.status_code == status, tail
    if status != 200:
        assert not Review.objects.exists()


@pytest.mark.parametrize(("who", "status"), [("viewer", 403), ("reviewer", 403), ("editor", 302), ("owner", 302),
                                             ("outsider", 404)])
def test_creating_queues_needs_an_editor(client, team, who, status):
    client.force_login(team[who])
    response = client.post(f"/p/{team['slug']}/review/new/", {
        "name": "Wrong tool", "kind": "verdict", "order": "failures_first", "limit": "10", "reviews_per_item": "1",
        "lock_minutes": "10", "filter": f"run={team['run'].pk}&bucket=wrong_tool"})
    assert response.status_code == status
    created = ReviewQueue.objects.filter(name="Wrong tool").first()
    assert (created is not None) == (status == 302)
    if created:
        assert response["Location"] == f"/p/{team['slug']}/review/{created.pk}/"
        assert created.filter == {"run": str(team["run"].pk), "bucket": "wrong_tool"}
        assert created.size == 10  # 4 tasks x 3 steps have a wrong-tool sample: the limit takes 10
        assert set(created.items.values_list("trajectory__failure_bucket", flat=True)) == {"wrong_tool"}
    body = _body(client.get(f"/p/{team['slug']}/review/")) if who != "outsider" else ""
    assert ('id="queue-form"' in body) == (status == 302)


@pytest.mark.parametrize(("who", "status"), [("viewer", 403), ("reviewer", 403), ("outsider", 404)])
def test_labels_to_data_need_an_editor(client, team, who, status):
    client.force_login(team[who])
    pair = _pair_queue(team)
    assert client.post(_url(team, "to-dataset/"), {"dataset_name": "tool calls", "split": "held_out"}).status_code \
        == status
    assert client.post(_url(team, "dpo/", pair)).status_code == status


def test_posts_need_the_csrf_token(team):
    client = Client(enforce_csrf_checks=True)
    client.force_login(team["editor"])
    client.get(_url(team, "label/"))
    item = _claimed(team, "editor")
    for tail, data in (("save/", {"item": item.pk, "verdict": "agree"}), ("undo/", {}),
                       ("release/", {"item": item.pk}), ("to-dataset/", {"dataset_name": "tool calls",
                                                                          "split": "held_out"})):
        assert client.post(_url(team, tail), data).status_code == 403, tail
    assert client.post(f"/p/{team['slug']}/review/new/", {"name": "x"}).status_code == 403
    assert not Review.objects.exists() and ReviewQueue.objects.count() == 1


def test_a_queue_of_another_project_is_not_found(client, team):
    other = make_pipeline_run(team["other"], team["outsider"], name="theirs")
    theirs = queue_create(project=team["other"], name="Theirs", filter={"run": other.pk}, limit=2,
                          actor=team["outsider"])
    client.force_login(team["owner"])
    for tail in ("", "label/", "labels.jsonl"):
        assert client.get(f"/p/{team['slug']}/review/{theirs.pk}/{tail}").status_code == 404
    assert client.post(f"/p/{team['slug']}/review/{theirs.pk}/save/", {"item": theirs.items.first().pk,
                                                                      "verdict": "agree"}).status_code == 404
    # an item id of another queue is not found through this queue either
    client.force_login(team["reviewer"])
    assert client.post(_url(team, "save/"), {"item": theirs.items.first().pk, "verdict": "agree"}).status_code == 404


# ---------------------------------------------------------------------------------------
# The new-queue form
# ---------------------------------------------------------------------------------------


def test_create_form_shows_each_error_beside_its_field_and_keeps_what_was_typed(client, team):
    client.force_login(team["editor"])
    response = client.post(f"/p/{team['slug']}/review/new/", {
        "name": "", "kind": "verdict", "order": "failures_first", "limit": "lots", "reviews_per_item": "9",
        "lock_minutes": "10", "filter": "run=abc&colour=red", "assignees": [str(team["viewer"].pk)]})
    assert response.status_code == 422
    body = _body(response)
    errors = {name: body.split(f'id="{name}-error">', 1)[1].split("</p>", 1)[0] for name in
              ("queue-name", "queue-limit", "queue-reviews", "queue-filter", "queue-assignees")}
    assert "name" in errors["queue-name"]
    assert "&#x27;lots&#x27; is not a whole number" in errors["queue-limit"]
    assert "between 1 and 5" in errors["queue-reviews"]
    assert "colour" in errors["queue-filter"] and "run" in errors["queue-filter"]
    assert "viewer" in errors["queue-assignees"]
    assert 'value="lots"' in body and 'value="run=abc&amp;colour=red"' in body
    assert not ReviewQueue.objects.filter(name="").exists()


def test_a_filter_that_matches_nothing_is_an_error_beside_the_filter(client, team):
    client.force_login(team["editor"])
    response = client.post(f"/p/{team['slug']}/review/new/", {
        "name": "Nothing", "kind": "verdict", "order": "newest", "limit": "10", "reviews_per_item": "1",
        "lock_minutes": "10", "filter": "step=999"})
    assert response.status_code == 422
    assert "No trajectories match this filter" in _body(response).split('id="queue-filter-error">')[1]


def test_the_form_is_prefilled_from_the_trajectory_list_and_from_presets(client, team):
    client.force_login(team["editor"])
    run = team["run"]
    body = _body(client.get(f"/p/{team['slug']}/review/", {"filter": f"run={run.pk}&bucket=wrong_tool"}))
    assert f'value="run={run.pk}&amp;bucket=wrong_tool"' in body
    body = _body(client.get(f"/p/{team['slug']}/review/", {"preset": "sanity", "run": run.pk}))
    assert f'value="run={run.pk}"' in body and '<option value="random" selected>' in body
    assert 'id="queue-limit" name="limit" value="100"' in body
    body = _body(client.get(f"/p/{team['slug']}/review/", {"preset": "disagree"}))
    assert 'value="disagree=yes"' in body
    body = _body(client.get(f"/p/{team['slug']}/review/", {"preset": "production"}))
    assert 'value="source=production"' in body and '<option value="newest" selected>' in body
    body = _body(client.get(f"/p/{team['slug']}/review/", {"preset": "failures"}))
    assert "needs a run" in body.split('id="preset-error">')[1]
    body = _body(client.get(f"/p/{team['slug']}/review/", {"preset": "pairs", "run": run.pk}))
    assert '<option value="pair" selected>' in body


def test_a_pasted_list_url_is_read_as_its_query(client, team):
    client.force_login(team["editor"])
    response = client.post(f"/p/{team['slug']}/review/new/", {
        "name": "Pasted", "kind": "verdict", "order": "newest", "limit": "4", "reviews_per_item": "2",
        "lock_minutes": "5", "assignees": [str(team["reviewer"].pk), str(team["editor"].pk)],
        "filter": f"http://testserver/p/{team['slug']}/trajectories/?run={team['run'].pk}&passed=no&after=xyz"})
    assert response.status_code == 302
    queue = ReviewQueue.objects.get(name="Pasted")
    assert queue.filter == {"run": str(team["run"].pk), "passed": "no"}
    assert (queue.size, queue.reviews_per_item, queue.lock_minutes) == (4, 2, 5)
    assert set(queue.assignees.values_list("username", flat=True)) == {"reviewer", "editor"}


def test_the_list_shows_queues_with_progress(client, team):
    item = queue_claim_next(queue=team["queue"], reviewer=team["reviewer"])
    review_save(item=item, reviewer=team["reviewer"], verdict="agree")
    client.force_login(team["reviewer"])
    body = _body(client.get(f"/p/{team['slug']}/review/"))
    row = body.split(f'data-queue="{team["queue"].pk}"')[1].split("</tr>")[0]
    assert "Failures of run" in row and "1 / 5" in row and "open" in row
    assert 'id="queue-form"' not in body  # reviewers label, editors create
    assert "/review/labels.jsonl" in body


# ---------------------------------------------------------------------------------------
# Labelling
# ---------------------------------------------------------------------------------------


def _progress(body: str, name: str) -> int:
    return int(body.split(f'data-progress="{name}">', 1)[1].split("<", 1)[0])


def test_labelling_flow_claims_saves_and_moves_on(client, team):
    client.force_login(team["reviewer"])
    response = client.get(_url(team, "label/"))
    body = _body(response)
    first = _claimed(team)
    assert f'name="item" value="{first.pk}"' in body
    assert "You hold this item until" in body and first.locked_until is not None
    assert _progress(body, "done_in_queue") == 0 and _progress(body, "remaining") == 5
    assert first.trajectory.task_key in body and 'class="timeline"' in body

    response = client.post(_url(team, "save/"), {"item": first.pk, "verdict": "disagree",
                                                 "failure_bucket": "wrong_arguments", "note": "argh",
                                                 "corrected_output": ""})
    assert response.status_code == 302 and response["Location"] == _url(team, "label/")
    review = Review.objects.get(reviewer=team["reviewer"], trajectory=first.trajectory)
    assert (review.verdict, review.failure_bucket, review.note, review.item_id) == (
        "disagree", "wrong_arguments", "argh", first.pk)

    body = _body(client.get(_url(team, "label/")))
    second = _claimed(team)
    assert second.pk != first.pk and f'name="item" value="{second.pk}"' in body
    assert _progress(body, "done_in_queue") == 1 and _progress(body, "done_today") == 1
    assert _progress(body, "remaining") == 4
    assert f"?item={first.pk}" in body  # previous: my last label


def test_long_content_is_folded_never_cut(client, team):
    client.force_login(team["reviewer"])
    client.get(_url(team, "label/"))
    item = _claimed(team)
    long_text = "line of model output\n" * 200 + "THE END"
    Trajectory.objects.filter(pk=item.trajectory_id).update(
        turns=[*item.trajectory.turns, {"role": "assistant", "content": long_text}])
    body = _body(client.get(_url(team, "label/")))
    assert long_text in body and f"Show all {len(long_text)} characters" in body
    assert 'class="turn-text folded" data-fold' in body


def test_the_review_page_is_in_the_project_navigation(client, team):
    client.force_login(team["viewer"])
    body = _body(client.get(f"/p/{team['slug']}/"))
    assert f'href="/p/{team["slug"]}/review/" data-nav-key="q"' in body


def test_a_label_without_verdict_is_refused_beside_the_field(client, team):
    client.force_login(team["reviewer"])
    client.get(_url(team, "label/"))
    item = _claimed(team)
    response = client.post(_url(team, "save/"), {"item": item.pk, "verdict": "", "note": "kept"})
    assert response.status_code == 422
    body = _body(response)
    assert "choose agree or disagree" in body.split('id="verdict-error">')[1]
    assert ">kept</textarea>" in body and not Review.objects.exists()
    response = client.post(_url(team, "save/"), {"item": item.pk, "verdict": "agree", "note": "nul \x00 here",
                                                 "corrected_output": "x" * 100_001})
    body = _body(response)
    assert response.status_code == 422 and "NUL" in body.split('id="note-error">')[1]
    assert "longer than 100,000" in body.split('id="corrected-output-error">')[1]


def test_history_item_is_prefilled_and_relabelling_updates_it(client, team):
    client.force_login(team["reviewer"])
    labelled = []
    for verdict in ("agree", "disagree"):
        client.get(_url(team, "label/"))
        item = _claimed(team)
        client.post(_url(team, "save/"), {"item": item.pk, "verdict": verdict, "note": f"note {verdict}"})
        labelled.append(item)
    body = _body(client.get(_url(team, "label/"), {"item": labelled[0].pk}))
    assert 'id="verdict-agree" checked' in body and ">note agree</textarea>" in body
    assert 'name="from_history" value="1"' in body
    assert f"?item={labelled[1].pk}" in body  # next: the following label of mine
    response = client.post(_url(team, "save/"), {"item": labelled[0].pk, "verdict": "disagree", "note": "changed",
                                                 "from_history": "1"})
    assert response["Location"] == _url(team, f"label/?item={labelled[1].pk}")
    assert Review.objects.filter(reviewer=team["reviewer"]).count() == 2
    review = Review.objects.get(reviewer=team["reviewer"], item=labelled[0])
    assert (review.verdict, review.note) == ("disagree", "changed")
    # an item I never labelled cannot be opened as history
    other = team["queue"].items.exclude(pk__in=[i.pk for i in labelled]).first()
    assert client.get(_url(team, "label/"), {"item": other.pk}).status_code == 404


def test_undo_removes_my_last_label_and_gives_the_item_back(client, team):
    client.force_login(team["reviewer"])
    client.get(_url(team, "label/"))
    item = _claimed(team)
    client.post(_url(team, "save/"), {"item": item.pk, "verdict": "agree"})
    client.get(_url(team, "label/"))  # claims the next one
    response = client.post(_url(team, "undo/"))
    assert response.status_code == 302 and not Review.objects.exists()
    body = _body(client.get(_url(team, "label/"), follow=True))
    assert "is undone" in body
    assert f'name="item" value="{item.pk}"' in body and 'id="verdict-agree" checked' not in body
    assert "Nothing to undo" in _body(client.post(_url(team, "undo/"), follow=True))


def test_release_gives_the_item_up(client, team):
    client.force_login(team["reviewer"])
    client.get(_url(team, "label/"))
    item = _claimed(team)
    response = client.post(_url(team, "release/"), {"item": item.pk})
    assert response["Location"] == _url(team)
    item.refresh_from_db()
    assert item.locked_by is None


def test_someone_elses_item_is_not_saved(client, team):
    held = queue_claim_next(queue=team["queue"], reviewer=team["editor"])
    client.force_login(team["reviewer"])
    response = client.post(_url(team, "save/"), {"item": held.pk, "verdict": "agree"}, follow=True)
    assert "Not saved: This item is held by editor" in _body(response)
    assert not Review.objects.exists()


def test_a_finished_queue_says_complete_with_links(client, team):
    small = queue_create(project=team["project"], name="One", filter={"run": team["run"].pk}, limit=1,
                         actor=team["editor"])
    client.force_login(team["reviewer"])
    client.get(_url(team, "label/", small))
    client.post(_url(team, "save/", small), {"item": small.items.get().pk, "verdict": "agree"})
    body = _body(client.get(_url(team, "label/", small)))
    complete = body.split('id="queue-complete"')[1]
    assert "Queue complete" in complete and _url(team, "labels.jsonl", small) in complete
    assert _url(team, "", small) in complete and 'id="label-form"' not in body
    body = _body(client.get(_url(team, "", small)))
    assert "Queue complete" in body and 'id="start-labelling"' not in body


def test_an_assigned_queue_tells_others_why_they_get_nothing(client, team):
    assigned = queue_create(project=team["project"], name="Mine", filter={"run": team["run"].pk}, limit=2,
                            assignees=[team["editor"]], actor=team["editor"])
    client.force_login(team["reviewer"])
    body = _body(client.get(_url(team, "label/", assigned)))
    assert "assigned to editor" in body.split('id="queue-blocked"')[1]


def test_pair_mode_saves_the_preferred_sample(client, team):
    pair = _pair_queue(team)
    client.force_login(team["reviewer"])
    body = _body(client.get(_url(team, "label/", pair)))
    item = _claimed(team, queue=pair)
    assert 'id="sample-left"' in body and 'id="sample-right"' in body
    assert f'data-trajectory="{item.trajectory_id}"' in body and f'data-trajectory="{item.other_id}"' in body
    assert 'id="verdict-agree"' not in body
    response = client.post(_url(team, "save/", pair), {"item": item.pk, "preferred": ""})
    assert response.status_code == 422 and 'id="preferred-error"' in _body(response)
    response = client.post(_url(team, "save/", pair), {"item": item.pk, "preferred": "right", "note": "terser"})
    assert response.status_code == 302
    review = Review.objects.get(reviewer=team["reviewer"])
    assert (review.trajectory_id, review.preferred_over_id, review.verdict) == (item.other_id, item.trajectory_id, "")
    body = _body(client.get(_url(team, "label/", pair), {"item": item.pk}))
    assert 'id="preferred-right" checked' in body


# ---------------------------------------------------------------------------------------
# The queue page, exports, labels to data
# ---------------------------------------------------------------------------------------


def _label_two(team):
    labels = {}
    for who, verdict in (("reviewer", "agree"), ("editor", "disagree")):
        item = queue_claim_next(queue=team["queue"], reviewer=team[who])
        review_save(item=item, reviewer=team[who], verdict=verdict, failure_bucket="" if verdict == "agree" else
                    "wrong_tool", note=f"{who} says {verdict}, =cmd")
        labels[who] = item
    return labels


def test_queue_page_shows_progress_and_agreement(client, team):
    _label_two(team)
    client.force_login(team["viewer"])
    body = _body(client.get(_url(team)))
    assert "0.50" in body.split('id="verifier-agreement">')[1].split("</dd>")[0]
    assert "no item labelled by two reviewers" in body.split('id="kappa">')[1].split("</dd>")[0]
    table = body.split('class="grid per-reviewer"')[1].split("</table>")[0]
    assert "reviewer" in table and "editor" in table
    assert 'id="start-labelling"' not in body and "labels.jsonl" not in body  # a viewer reads only
    assert 'id="to-dataset-form"' not in body
    client.force_login(team["editor"])
    body = _body(client.get(_url(team)))
    assert 'id="start-labelling"' in body and 'id="to-dataset-form"' in body
    assert 'id="dpo-form"' not in body  # a verdict queue has no pairs
    assert f"run={team['run'].pk}" in body


def test_kappa_between_two_reviewers_is_shown(client, team):
    double = queue_create(project=team["project"], name="Twice", filter={"run": team["run"].pk}, limit=2,
                          reviews_per_item=2, actor=team["editor"])
    for who, verdicts in (("reviewer", ["agree", "disagree"]), ("editor", ["agree", "agree"])):
        for verdict in verdicts:
            item = queue_claim_next(queue=double, reviewer=team[who])
            review_save(item=item, reviewer=team[who], verdict=verdict)
    client.force_login(team["viewer"])
    kappa = _body(client.get(_url(team, "", double))).split('id="kappa">')[1].split("</dd>")[0]
    assert "κ <strong>0.00</strong>" in kappa and "on 2 items" in kappa


def test_exports_hold_the_labels(client, team):
    labels = _label_two(team)
    client.force_login(team["reviewer"])
    response = client.get(_url(team, "labels.jsonl"))
    assert response["Content-Disposition"].startswith("attachment")
    rows = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert {(r["trajectory_id"], r["verdict"], r["reviewer"]) for r in rows} == {
        (labels["reviewer"].trajectory_id, "agree", "reviewer"), (labels["editor"].trajectory_id, "disagree", "editor")}
    assert all(r["run_id"] == team["run"].pk and r["step"] >= 1 and r["task"] and r["created_at"] for r in rows)
    response = client.get(_url(team, "labels.csv"))
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(table) == 2 and {r["note"] for r in table} == {"reviewer says agree, =cmd", "editor says disagree, =cmd"}
    project_rows = b"".join(client.get(f"/p/{team['slug']}/review/labels.jsonl").streaming_content).decode()
    assert len(project_rows.splitlines()) == 2
    assert client.get(_url(team, "labels.xml")).status_code == 404


def test_reviewed_trajectories_become_a_dataset_version_with_a_report(client, team):
    item = queue_claim_next(queue=team["queue"], reviewer=team["reviewer"])
    truth = item.trajectory.task.ground_truth[0]
    corrected = {"name": truth["name"], "arguments": {**truth["arguments"], **{k: "fixed" for k in truth["arguments"]
                                                                              if isinstance(truth["arguments"][k], str)}}}
    review_save(item=item, reviewer=team["reviewer"], verdict="disagree", corrected_output=json.dumps(corrected))
    taskless = queue_claim_next(queue=team["queue"], reviewer=team["reviewer"])
    review_save(item=taskless, reviewer=team["reviewer"], verdict="disagree")
    Trajectory.objects.filter(pk=taskless.trajectory_id).update(task=None, task_snapshot=None)
    agreed = queue_claim_next(queue=team["queue"], reviewer=team["reviewer"])
    review_save(item=agreed, reviewer=team["reviewer"], verdict="agree")  # nothing to learn: not taken
    client.force_login(team["editor"])
    response = client.post(_url(team, "to-dataset/"), {"dataset_name": "tool calls", "split": "held_out"}, follow=True)
    assert response.status_code == 200  # after a redirect: reloading the report makes no second version
    assert response.redirect_chain == [(_url(team, "") + "#dataset-report", 302)]
    report = _body(response).split('id="dataset-report"')[1].split("</section>")[0]
    # The dataset's name links to its page once the datasets pages exist.
    assert re.search(r"1 task added: <(strong|a href=\"[^\"]+\")>tool calls v2</(strong|a)>", report), report
    counts = {name: int(report.split(f'data-report="{name}">')[1].split("<")[0])
              for name in ("created", "duplicates", "skipped")}
    assert counts == {"created": 1, "duplicates": 0, "skipped": 1}
    assert f"#{taskless.trajectory_id}" in report and "no task was stored" in report
    task = TaskDataset.objects.get(project=team["project"], name="tool calls", version=2).tasks.get(
        origin_trajectory=item.trajectory)
    assert task.split == "held_out"  # the reviewer's corrected output is the new task's ground truth
    assert [(c["name"], c["arguments"]) for c in task.ground_truth] == [(corrected["name"], corrected["arguments"])]
    assert 'id="dataset-report"' not in _body(client.get(_url(team, "")))  # the report is shown once
    # the same again: a duplicate, no new version
    report = _body(client.post(_url(team, "to-dataset/"), {"dataset_name": "tool calls", "split": "held_out"},
                               follow=True))
    assert 'data-report="duplicates">1<' in report and "No new tasks" in report
    response = client.post(_url(team, "to-dataset/"), {"dataset_name": "no such", "split": "nope"})
    assert response.status_code == 422
    body = _body(response)
    assert "No dataset named" in body.split('id="dataset-name-error">')[1]
    assert 'id="dataset-split-error"' in body


def test_reviewed_trajectories_become_a_new_dataset(client, team):
    item = queue_claim_next(queue=team["queue"], reviewer=team["reviewer"])
    review_save(item=item, reviewer=team["reviewer"], verdict="disagree")
    client.force_login(team["editor"])
    response = client.post(_url(team, "to-dataset/"), {"new_dataset": "regressions", "split": "held_out"},
                           follow=True)
    assert response.status_code == 200 and "regressions v2" in _body(response)
    made = TaskDataset.objects.get(project=team["project"], name="regressions", version=2)
    assert list(made.tasks.values_list("origin_trajectory_id", flat=True)) == [item.trajectory_id]
    again = client.post(_url(team, "to-dataset/"), {"new_dataset": "regressions", "split": "held_out"})
    assert again.status_code == 422 and "exists already" in _body(again).split('id="new-dataset-error">')[1]


def test_dpo_button_opens_the_run_form_with_the_pairs_file(client, team):
    pair = _pair_queue(team)
    client.force_login(team["editor"])
    assert 'id="dpo-form"' in _body(client.get(_url(team, "", pair)))
    response = client.post(_url(team, "dpo/", pair), follow=True)
    assert "no preference label yet" in _body(response)
    item = queue_claim_next(queue=pair, reviewer=team["reviewer"])
    review_save(item=item, reviewer=team["reviewer"], preferred_id=item.trajectory_id)
    response = client.post(_url(team, "dpo/", pair))
    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert location.path == f"/p/{team['slug']}/runs/new/"
    query = parse_qs(location.query)
    assert query["kind"] == ["dpo"]
    assert query["preference_pairs"] == [f"review_queue:{pair.pk}"]  # the queue, never a server path
    body = _body(client.get(response["Location"]))
    assert '<option value="dpo" selected>' in body
    assert 'name="cfg.preference_pairs" type="text"' in body and f'value="review_queue:{pair.pk}"' in body
    assert "come from a review queue" in body


def test_run_form_ignores_preference_pairs_for_other_kinds_and_paths(client, team):
    client.force_login(team["editor"])
    body = _body(client.get(f"/p/{team['slug']}/runs/new/", {"kind": "grpo", "preference_pairs": "review_queue:1"}))
    assert 'value="review_queue:1"' not in body
    body = _body(client.get(f"/p/{team['slug']}/runs/new/", {"kind": "dpo", "preference_pairs": "/tmp/x.jsonl"}))
    assert 'value="/tmp/x.jsonl"' not in body


# ---------------------------------------------------------------------------------------
# Hostile text
# ---------------------------------------------------------------------------------------


def test_hostile_trajectories_render_as_text(client, project_team):
    project = project_team["project"]
    run = make_pipeline_run(project, project_team["owner"], hostile=True)
    queue = queue_create(project=project, name=XSS[2], filter={"run": run.pk}, limit=16, actor=project_team["editor"])
    hostile = QueueItem.objects.filter(queue=queue, trajectory__task_key__contains="<script>").first()
    QueueItem.objects.filter(queue=queue, position__lt=hostile.position).update(reviews_done=1)
    client.force_login(project_team["reviewer"])
    for url in (f"/p/{project.slug}/review/", f"/p/{project.slug}/review/{queue.pk}/",
                f"/p/{project.slug}/review/{queue.pk}/label/"):
        body = _body(client.get(url))
        for probe in XSS:
            assert probe not in body, (url, probe)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "&lt;img src=x onerror=alert(1)&gt;" in body
