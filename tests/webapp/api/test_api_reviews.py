"""The review API: queues from a filter, next item with its lock, labels, undo, label lists and exports,
labels to data; the role matrix (non-members 404 everywhere, exports included) and field errors."""

from __future__ import annotations

import csv
import io
import json

import pytest
from pipeline_data import XSS, make_pipeline_run

from webapp.datasets.models import Task
from webapp.datasets.services.datasets import dataset_create
from webapp.trajectories.models import QueueItem, Review, ReviewQueue, Trajectory
from webapp.trajectories.services.review import queue_create, queue_preference_pairs_file

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(project_team):
    return make_pipeline_run(project_team["project"], project_team["owner"], steps=3)


@pytest.fixture
def queue(project_team, run):
    return queue_create(project=project_team["project"], name="failures", filter={"run": run.pk}, limit=4,
                        actor=project_team["editor"])


def _post(client, path, headers, body=None):
    return client.post(f"/api{path}", json.dumps(body or {}), content_type="application/json", **headers)


def _patch(client, path, headers, body):
    return client.patch(f"/api{path}", json.dumps(body), content_type="application/json", **headers)


def _get(client, path, headers):
    return client.get(f"/api{path}", **headers)


def _label(client, bearer, queue, who="reviewer", **body):
    item = _post(client, f"/review-queues/{queue.pk}/next", bearer(who))
    assert item.status_code == 200, item.content
    item = item.json()
    response = _post(client, f"/review-queues/{queue.pk}/items/{item['id']}/review", bearer(who),
                     {"verdict": "agree"} | body)
    assert response.status_code == 201, response.content
    return item, response.json()


# ---------------------------------------------------------------------------------------
# Roles
# ---------------------------------------------------------------------------------------


def test_the_role_matrix(client, project_team, bearer, run, queue):
    slug = project_team["project"].slug
    body = {"name": "new", "filter": {"run": run.pk}}
    assert _post(client, f"/projects/{slug}/review-queues", bearer("viewer"), body).status_code == 403
    assert _post(client, f"/projects/{slug}/review-queues", bearer("reviewer"), body).status_code == 403
    assert _post(client, f"/projects/{slug}/review-queues", bearer("outsider"), body).status_code == 404
    assert _post(client, f"/projects/{slug}/review-queues", bearer("editor"), body).status_code == 201

    for path in (f"/projects/{slug}/review-queues", f"/review-queues/{queue.pk}", f"/projects/{slug}/reviews"):
        assert _get(client, path, bearer("viewer")).status_code == 200, path
        assert _get(client, path, bearer("outsider")).status_code == 404, path
    for path in (f"/review-queues/{queue.pk}/next", f"/review-queues/{queue.pk}/undo"):
        assert _post(client, path, bearer("viewer")).status_code == 403, path
        assert _post(client, path, bearer("outsider")).status_code == 404, path
    item = queue.items.get(position=0)
    label = f"/review-queues/{queue.pk}/items/{item.pk}/review"
    assert _post(client, label, bearer("viewer"), {"verdict": "agree"}).status_code == 403
    assert _post(client, label, bearer("outsider"), {"verdict": "agree"}).status_code == 404
    assert not Review.objects.exists()

    exports = (f"/projects/{slug}/reviews/export?format=csv", f"/projects/{slug}/reviews/export?queue={queue.pk}")
    for path in exports:
        assert _get(client, path, bearer("viewer")).status_code == 403, path
        assert _get(client, path, bearer("outsider")).status_code == 404, path
        assert _get(client, path, bearer("reviewer")).status_code == 200, path
    other_queue = f"/projects/{project_team['other'].slug}/reviews/export"
    assert _get(client, other_queue, bearer("reviewer")).status_code == 404

    dataset = {"dataset": "tool calls"}
    assert _post(client, f"/review-queues/{queue.pk}/to-dataset", bearer("reviewer"), dataset).status_code == 403
    assert _post(client, f"/review-queues/{queue.pk}/to-dataset", bearer("outsider"), dataset).status_code == 404
    assert _post(client, f"/review-queues/{queue.pk}/preference-pairs", bearer("reviewer")).status_code == 403
    # Anonymous callers are refused before any of this.
    assert client.get(f"/api/review-queues/{queue.pk}").status_code == 401


def test_only_its_reviewer_changes_a_label(client, project_team, bearer, queue):
    _, review = _label(client, bearer, queue, note="first")
    path = f"/reviews/{review['id']}"
    assert _patch(client, path, bearer("outsider"), {"note": "x"}).status_code == 404
    assert _patch(client, path, bearer("viewer"), {"note": "x"}).status_code == 403
    assert _patch(client, path, bearer("editor"), {"note": "x"}).status_code == 403
    response = _patch(client, path, bearer("reviewer"), {"note": "second", "failure_bucket": "wrong_tool"})
    assert response.status_code == 200
    body = response.json()
    assert (body["note"], body["failure_bucket"], body["verdict"]) == ("second", "wrong_tool", "agree")
    bad = _patch(client, path, bearer("reviewer"), {"verdict": "meh"})
    assert bad.status_code == 422 and set(bad.json()["errors"]) == {"verdict"}


# ---------------------------------------------------------------------------------------
# Queues
# ---------------------------------------------------------------------------------------


def test_create_answers_field_errors(client, project_team, bearer, run):
    path = f"/projects/{project_team['project'].slug}/review-queues"
    response = _post(client, path, bearer("editor"), {"name": "q", "filter": {"bucket": "nope", "step": "x"},
                                                       "order": "sideways", "limit": 0, "assignees": ["viewer"]})
    assert response.status_code == 422
    body = response.json()
    assert set(body["errors"]) == {"filter.bucket", "filter.step", "order", "limit", "assignees"}
    assert "filter.bucket" in body["detail"]
    empty = _post(client, path, bearer("editor"), {"name": "q", "filter": {"run": run.pk, "step": 42}})
    assert empty.status_code == 422 and set(empty.json()["errors"]) == {"filter"}
    long = _post(client, path, bearer("editor"), {"name": "x" * 201})
    assert long.status_code == 422 and set(long.json()["errors"]) == {"name"}
    nul = _post(client, path, bearer("editor"), {"name": "a\u0000b"})
    assert nul.status_code == 422 and set(nul.json()["errors"]) == {"name"}
    assert not ReviewQueue.objects.exists()


def test_create_list_and_detail(client, project_team, bearer, run):
    slug = project_team["project"].slug
    created = _post(client, f"/projects/{slug}/review-queues", bearer("editor"), {
        "name": "wrong tools", "filter": {"run": run.pk, "bucket": "wrong_tool"}, "order": "newest", "limit": 5,
        "reviews_per_item": 2, "lock_minutes": 5, "assignees": ["reviewer", "editor"]})
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["size"] == 5 and body["done_items"] == 0 and body["assignees"] == ["editor", "reviewer"]
    assert body["filter"] == {"run": str(run.pk), "bucket": "wrong_tool"} and body["created_by"] == "editor"
    for i in range(2):
        _post(client, f"/projects/{slug}/review-queues", bearer("editor"), {"name": f"more {i}",
                                                                            "filter": {"run": run.pk}})
    first = _get(client, f"/projects/{slug}/review-queues?limit=2", bearer("viewer")).json()
    assert [q["name"] for q in first["items"]] == ["more 1", "more 0"] and first["next"]
    rest = _get(client, f"/projects/{slug}/review-queues?limit=2&after={first['next']}", bearer("viewer")).json()
    assert [q["name"] for q in rest["items"]] == ["wrong tools"] and rest["next"] is None
    assert _get(client, f"/projects/{slug}/review-queues?after=junk", bearer("viewer")).status_code == 400

    queue = ReviewQueue.objects.get(name="wrong tools")
    _label(client, bearer, queue, verdict="disagree")
    detail = _get(client, f"/review-queues/{queue.pk}", bearer("reviewer")).json()
    assert detail["progress"] == {"done_today": 1, "done_in_queue": 1, "remaining": 4, "total": 5, "complete": 0}
    assert detail["agreement"]["with_verifier"] == {"agree": 0, "disagree": 1, "rate": 0.0}
    assert detail["agreement"]["between_reviewers"] == {"items": 0, "kappa": None}
    assert detail["agreement"]["per_reviewer"] == [{"reviewer": "reviewer", "done": 1, "agree_rate": 0.0}]
    # The queue is assigned: the owner (not an assignee) gets a 403 with the reason.
    refused = _post(client, f"/review-queues/{queue.pk}/next", bearer("owner"))
    assert refused.status_code == 403 and "assigned" in refused.json()["errors"]["queue"]


# ---------------------------------------------------------------------------------------
# Next item, labels, undo
# ---------------------------------------------------------------------------------------


def test_next_locks_labels_update_and_the_queue_runs_out(client, project_team, bearer, queue):
    first = _post(client, f"/review-queues/{queue.pk}/next", bearer("reviewer"))
    assert first.status_code == 200
    item = first.json()
    assert item["position"] == 0 and item["locked_by"] == "reviewer" and item["locked_until"]
    trajectory = Trajectory.objects.get(pk=item["trajectory_id"])
    assert item["trajectory"]["task_key"] == trajectory.task_key and item["other"] is None
    assert item["my_review"] is None
    again = _post(client, f"/review-queues/{queue.pk}/next", bearer("reviewer")).json()
    assert again["id"] == item["id"]
    other = _post(client, f"/review-queues/{queue.pk}/next", bearer("editor")).json()
    assert other["id"] != item["id"]

    path = f"/review-queues/{queue.pk}/items/{item['id']}/review"
    held = _post(client, path, bearer("editor"), {"verdict": "agree"})
    assert held.status_code == 409 and "held by reviewer" in held.json()["errors"]["item"]
    bad = _post(client, path, bearer("reviewer"), {"verdict": "", "failure_bucket": "nope", "note": "n" * 10_001})
    assert bad.status_code == 422 and set(bad.json()["errors"]) == {"verdict", "failure_bucket", "note"}
    created = _post(client, path, bearer("reviewer"), {"verdict": "disagree", "failure_bucket": "wrong_arguments"})
    assert created.status_code == 201
    review = created.json()
    assert (review["verdict"], review["queue_id"], review["item_id"]) == ("disagree", queue.pk, item["id"])
    updated = _post(client, path, bearer("reviewer"), {"verdict": "agree", "note": "on second thought"})
    assert updated.status_code == 200 and updated.json()["id"] == review["id"]
    assert QueueItem.objects.get(pk=item["id"]).reviews_done == 1
    assert _post(client, f"/review-queues/{queue.pk}/items/999999/review", bearer("reviewer"),
                 {"verdict": "agree"}).status_code == 404

    for _ in range(2):
        _label(client, bearer, queue)
    assert _post(client, f"/review-queues/{queue.pk}/next", bearer("reviewer")).status_code == 204
    release = _post(client, f"/review-queues/{queue.pk}/items/{other['id']}/release", bearer("editor"))
    assert release.status_code == 204
    last = _post(client, f"/review-queues/{queue.pk}/next", bearer("reviewer"))
    assert last.status_code == 200 and last.json()["id"] == other["id"]


def test_undo_gives_the_item_back(client, project_team, bearer, queue):
    assert _post(client, f"/review-queues/{queue.pk}/undo", bearer("reviewer")).status_code == 204
    item, review = _label(client, bearer, queue, verdict="disagree", note="oops")
    response = _post(client, f"/review-queues/{queue.pk}/undo", bearer("reviewer"))
    assert response.status_code == 200
    back = response.json()
    assert back["id"] == item["id"] and back["locked_by"] == "reviewer" and back["reviews_done"] == 0
    assert back["my_review"] is None and not Review.objects.filter(pk=review["id"]).exists()
    assert _post(client, f"/review-queues/{queue.pk}/next", bearer("reviewer")).json()["id"] == item["id"]


def test_pair_labels_and_the_preference_pairs_file(client, project_team, bearer, run, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    slug = project_team["project"].slug
    created = _post(client, f"/projects/{slug}/review-queues", bearer("editor"),
                    {"name": "pairs", "kind": "pair", "filter": {"run": run.pk, "step": 3}, "limit": 2})
    assert created.status_code == 201 and created.json()["size"] == 2
    queue = ReviewQueue.objects.get(pk=created.json()["id"])
    pairs_path = f"/review-queues/{queue.pk}/preference-pairs"
    assert _post(client, pairs_path, bearer("editor")).status_code == 422
    item = _post(client, f"/review-queues/{queue.pk}/next", bearer("reviewer")).json()
    assert item["other_id"] and item["other"]["id"] == item["other_id"]
    path = f"/review-queues/{queue.pk}/items/{item['id']}/review"
    wrong = _post(client, path, bearer("reviewer"), {"preferred_id": 1})
    assert wrong.status_code == 422 and "preferred_id" in wrong.json()["errors"]
    saved = _post(client, path, bearer("reviewer"), {"preferred_id": item["other_id"]}).json()
    assert (saved["trajectory_id"], saved["preferred_over_id"], saved["verdict"]) == (
        item["other_id"], item["trajectory_id"], "")
    written = _post(client, pairs_path, bearer("editor"))
    assert written.status_code == 201 and written.json() == {"preference_pairs": f"review_queue:{queue.pk}", "pairs": 1}
    assert "path" not in written.json() and not list(tmp_path.rglob("*.jsonl"))  # no server path handed out
    lines = queue_preference_pairs_file(queue=queue, folder=tmp_path / "run").read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[0])
    assert row["chosen_trajectory"] == item["other_id"] and set(row) >= {"task", "chosen", "rejected"}
    pairs = _get(client, f"/projects/{slug}/reviews?verdict=pair", bearer("viewer")).json()["items"]
    assert [p["id"] for p in pairs] == [saved["id"]]


# ---------------------------------------------------------------------------------------
# Label lists, exports, data
# ---------------------------------------------------------------------------------------


def test_review_list_filters_and_pages(client, project_team, bearer, queue, run):
    slug = project_team["project"].slug
    _label(client, bearer, queue, verdict="disagree")
    _label(client, bearer, queue, verdict="agree")
    _label(client, bearer, queue, who="editor", verdict="agree")
    other = queue_create(project=project_team["project"], name="other", filter={"run": run.pk, "passed": "yes"},
                         limit=1, actor=project_team["editor"])
    _label(client, bearer, other, verdict="agree")
    path = f"/projects/{slug}/reviews"
    everything = _get(client, path, bearer("viewer")).json()["items"]
    assert [r["id"] for r in everything] == sorted((r["id"] for r in everything), reverse=True)
    assert len(everything) == 4
    mine = _get(client, f"{path}?reviewer=reviewer&queue={queue.pk}", bearer("viewer")).json()["items"]
    assert len(mine) == 2 and {r["queue_id"] for r in mine} == {queue.pk}
    assert len(_get(client, f"{path}?verdict=disagree", bearer("viewer")).json()["items"]) == 1
    assert _get(client, f"{path}?verdict=maybe", bearer("viewer")).status_code == 422
    seen, after = [], ""
    while True:
        page = _get(client, f"{path}?limit=3{after}", bearer("viewer")).json()
        seen += [r["id"] for r in page["items"]]
        if not page["next"]:
            break
        after = f"&after={page['next']}"
    assert seen == [r["id"] for r in everything]
    assert _get(client, f"{path}?after=nonsense", bearer("viewer")).status_code == 400


HOSTILE = f'{XSS[0]} "{XSS[1]}",\n{XSS[2]}'


def test_exports_stream_jsonl_and_csv_with_hostile_text_intact(client, project_team, bearer, queue):
    slug = project_team["project"].slug
    item, _ = _label(client, bearer, queue, verdict="disagree", failure_bucket="wrong_tool", note=HOSTILE,
                     corrected_output="=cmd|' /C calc'!A0")
    _label(client, bearer, queue, note="+1 looks fine")
    response = _get(client, f"/projects/{slug}/reviews/export?format=jsonl&queue={queue.pk}", bearer("reviewer"))
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("application/x-ndjson")
    disposition = response["Content-Disposition"]
    assert disposition.startswith("attachment;") and f"queue-{queue.pk}" in disposition
    assert disposition.endswith('.jsonl"')
    rows = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [r["note"] for r in rows] == [HOSTILE, "+1 looks fine"]
    first = rows[0]
    trajectory = Trajectory.objects.get(pk=item["trajectory_id"])
    assert (first["trajectory_id"], first["task"], first["run_id"], first["step"], first["verdict"],
            first["bucket"], first["reviewer"], first["queue"]) == (
        trajectory.pk, trajectory.task_key, trajectory.run_id, trajectory.step, "disagree", "wrong_tool",
        "reviewer", queue.pk)
    assert first["corrected_output"] == "=cmd|' /C calc'!A0" and first["created_at"]

    response = _get(client, f"/projects/{slug}/reviews/export?format=csv", bearer("editor"))
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].endswith('.csv"')
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [t["note"] for t in table] == [HOSTILE, "'+1 looks fine"]
    assert table[0]["corrected_output"] == "'=cmd|' /C calc'!A0"
    assert table[0]["reviewer"] == "reviewer" and table[0]["step"] == str(trajectory.step)
    bad = _get(client, f"/projects/{slug}/reviews/export?format=xlsx", bearer("reviewer"))
    assert bad.status_code == 422 and "format" in bad.json()["errors"]


def test_labels_to_dataset(client, project_team, bearer, run):
    queue = queue_create(project=project_team["project"], name="calendar", limit=2, actor=project_team["editor"],
                         filter={"run": run.pk, "step": 1, "bucket": "wrong_tool"})
    dataset_create(project=project_team["project"], name="regressions", tasks=[], actor=project_team["editor"],
                   environment="json_tool_call")
    path = f"/review-queues/{queue.pk}/to-dataset"
    nothing = _post(client, path, bearer("editor"), {"dataset": "regressions"})
    assert nothing.status_code == 422 and "queue" in nothing.json()["errors"]
    item, _ = _label(client, bearer, queue, verdict="disagree")
    missing = _post(client, path, bearer("editor"), {"dataset": "nope", "split": "sideways"})
    assert missing.status_code == 422 and set(missing.json()["errors"]) == {"dataset", "split"}
    response = _post(client, path, bearer("editor"), {"dataset": "regressions", "split": "held_out"})
    assert response.status_code == 201, response.content
    assert response.json() | {"skipped": []} == {"dataset": "regressions", "version": 2, "created": 1,
                                                 "duplicates": 0, "skipped": []}
    task = Task.objects.get(dataset__name="regressions", dataset__version=2)
    assert task.origin_trajectory_id == item["trajectory_id"] and task.split == "held_out"
    again = _post(client, path, bearer("editor"), {"dataset": "regressions"})
    assert again.status_code == 200 and again.json()["duplicates"] == 1


def test_openapi_documents_the_review_endpoints(client, project_team, bearer):
    schema = client.get("/api/openapi.json", **bearer("viewer")).json()
    expected = {
        ("/api/projects/{slug}/review-queues", "post"), ("/api/projects/{slug}/review-queues", "get"),
        ("/api/review-queues/{queue_id}", "get"), ("/api/review-queues/{queue_id}/next", "post"),
        ("/api/review-queues/{queue_id}/items/{item_id}/review", "post"),
        ("/api/review-queues/{queue_id}/undo", "post"), ("/api/projects/{slug}/reviews", "get"),
        ("/api/reviews/{review_id}", "patch"), ("/api/projects/{slug}/reviews/export", "get"),
        ("/api/review-queues/{queue_id}/to-dataset", "post"),
    }
    for path, method in expected:
        operation = schema["paths"][path][method]
        assert operation["summary"] and operation["description"], (path, method)
        assert "reviews" in operation["tags"]


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "q", "limit": 10**30}, "limit"),
    ({"name": "q", "limit": 2.5}, "limit"),
    ({"name": "q", "lock_minutes": -1}, "lock_minutes"),
    ({"name": "q", "filter": {"run": {"id": 3}}}, "filter.run"),
    ({"name": "q", "filter": {"run": 10**30}}, "filter.run"),
    ({"name": "q", "filter": {"run": 2**40}}, "filter.run"),
    ({"name": "q", "filter": {"task": "a\u0000b"}}, "filter"),
    ({"name": "q", "filter": {"reward_min": "nan"}}, "filter.reward_min"),
    ({"name": "q", "assignees": ["x" * 151]}, "assignees.0"),
    ({"name": "q", "kind": "k" * 17}, "kind"),
])
def test_bad_queue_input_is_a_field_error(client, project_team, bearer, run, body, field):
    response = _post(client, f"/projects/{project_team['project'].slug}/review-queues", bearer("editor"), body)
    assert response.status_code == 422, response.content
    assert field in response.json()["errors"], response.json()


def test_bad_label_input_is_a_field_error(client, project_team, bearer, queue):
    item = _post(client, f"/review-queues/{queue.pk}/next", bearer("reviewer")).json()
    path = f"/review-queues/{queue.pk}/items/{item['id']}/review"
    for body, field in (({"verdict": "agree", "note": "\ud800"}, "note"), ({"preferred_id": 0}, "preferred_id"),
                        ({"verdict": "agree", "corrected_output": "x" * 100_001}, "corrected_output"),
                        ({"verdict": "agree", "failure_bucket": "b" * 40}, "failure_bucket")):
        response = _post(client, path, bearer("reviewer"), body)
        assert response.status_code == 422 and field in response.json()["errors"], (body, response.content)
    assert _get(client, f"/projects/{project_team['project'].slug}/reviews?queue=0", bearer("viewer")).status_code \
        == 422
    assert _post(client, f"/review-queues/{10**20}/next", bearer("reviewer")).status_code == 422
    assert not Review.objects.exists()
