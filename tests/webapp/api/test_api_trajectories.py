"""The trajectory API: the list with the page's filters and keyset pages, one trajectory with its trace,
its GRPO group, the same task elsewhere, re-verify; roles and field errors."""

from __future__ import annotations

import pytest
from pipeline_data import make_pipeline_run

from webapp.trajectories.models import Trajectory


@pytest.fixture
def run(project_team):
    return make_pipeline_run(project_team["project"], project_team["owner"], steps=3)


def _list(client, headers, slug, query=""):
    return client.get(f"/api/projects/{slug}/trajectories{query}", **headers)


def test_the_list_filters_and_walks_every_page_once(client, project_team, bearer, run):
    slug = project_team["project"].slug
    seen, after = [], ""
    while True:
        body = _list(client, bearer("viewer"), slug, f"?run={run.pk}&limit=7{after}").json()
        seen += [item["id"] for item in body["items"]]
        if not body["next"]:
            break
        after = f"&after={body['next']}"
    expected = list(Trajectory.objects.filter(run=run).order_by("-id").values_list("id", flat=True))
    assert seen == expected and len(seen) == 48
    bucket = _list(client, bearer("viewer"), slug, f"?run_id={run.pk}&bucket=invalid_json&step=2").json()["items"]
    assert {i["failure_bucket"] for i in bucket} == {"invalid_json"} and {i["step"] for i in bucket} == {2}
    assert len(bucket) == 4


def test_bad_filters_answer_field_errors(client, project_team, bearer, run):
    slug = project_team["project"].slug
    response = _list(client, bearer("viewer"), slug, "?step=x&passed=maybe&bucket=nope")
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert set(errors) == {"step", "passed", "bucket"} and "not a whole number" in errors["step"]
    foreign = _list(client, bearer("viewer"), slug, "?after=abc")
    assert foreign.status_code == 400 and "after" in foreign.json()["errors"]


def test_one_trajectory_carries_its_timeline_trace_and_group(client, project_team, bearer, run):
    wrong = Trajectory.objects.filter(run=run, failure_bucket="wrong_arguments").first()
    body = client.get(f"/api/trajectories/{wrong.pk}", **bearer("viewer")).json()
    assert body["verifier"]["name"] == "tool_call_verifier" and body["trace"]["source"] == "recomputed"
    call = next(c for turn in body["timeline"] for c in turn["calls"])
    statuses = {a["name"]: a["status"] for a in call["arguments"]}
    assert statuses["extra"] == "extra" and "mistyped" in statuses.values()
    assert body["trace"]["calls"][0]["argument_diffs"] and not body["trace"]["calls"][0]["matches"]
    group = client.get(f"/api/trajectories/{wrong.pk}/group", **bearer("viewer")).json()
    assert len(group["samples"]) == 4 and group["mean"] == pytest.approx(0.25) and not group["no_gradient"]
    same = client.get(f"/api/trajectories/{wrong.pk}/same-task", **bearer("viewer")).json()["items"]
    assert same and all(i["task_key"] == wrong.task_key and i["id"] != wrong.pk for i in same)


def test_reverify_needs_a_reviewer_and_keeps_the_stored_verdict(client, project_team, bearer, run):
    trajectory = Trajectory.objects.filter(run=run, failure_bucket="invalid_json").first()
    url = f"/api/trajectories/{trajectory.pk}/reverify"
    payload = {"verifier": "tool_call_verifier"}
    assert client.post(url, payload, content_type="application/json", **bearer("viewer")).status_code == 403
    response = client.post(url, payload, content_type="application/json", **bearer("reviewer"))
    assert response.status_code == 201
    body = response.json()
    assert body["failure_bucket"] == "invalid_json" and body["disagrees"] is False and body["info"]["parse"]
    again = client.get(f"/api/trajectories/{trajectory.pk}", **bearer("viewer")).json()
    assert [r["id"] for r in again["rescores"]] == [body["id"]] and again["failure_bucket"] == "invalid_json"
    unknown = client.post(url, {"verifier": "nope"}, content_type="application/json", **bearer("reviewer"))
    assert unknown.status_code == 400 and "tool_call_verifier" in unknown.json()["detail"]


def test_outsiders_get_404_for_every_trajectory_endpoint(client, project_team, bearer, run):
    trajectory = Trajectory.objects.filter(run=run).first()
    for url in (f"/api/trajectories/{trajectory.pk}", f"/api/trajectories/{trajectory.pk}/group",
                f"/api/trajectories/{trajectory.pk}/same-task", f"/api/projects/{project_team['project'].slug}/trajectories"):
        assert client.get(url, **bearer("outsider")).status_code == 404, url
    response = client.post(f"/api/trajectories/{trajectory.pk}/reverify", {"verifier": "tool_call_verifier"},
                           content_type="application/json", **bearer("outsider"))
    assert response.status_code == 404
