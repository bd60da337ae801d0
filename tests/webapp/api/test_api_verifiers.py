"""The verifier API: list, versions, a new version validated against the kind's schema (field errors by
config path), score one output or one stored trajectory, sanity checks; roles and the OpenAPI docs."""

from __future__ import annotations

import json
import shutil

import pytest
from pipeline_data import XSS, make_pipeline_run

from environments.sandbox import BWRAP, available_isolation
from webapp.trajectories.models import Trajectory
from webapp.trajectories.services.sanity_checks import check_label
from webapp.verifiers.models import Verifier, VerifierCheck
from webapp.verifiers.services.verifiers import verifier_create


@pytest.fixture
def run(project_team):
    return make_pipeline_run(project_team["project"], project_team["owner"], steps=3)


@pytest.fixture
def verifier(run):
    return run.verifier_version.verifier


def _post(client, url, body, headers):
    return client.post(url, data=json.dumps(body), content_type="application/json", **headers)


def test_list_and_detail(client, project_team, bearer, verifier):
    slug = project_team["project"].slug
    listed = client.get(f"/api/projects/{slug}/verifiers", **bearer("viewer")).json()
    assert [(v["name"], v["kind"], v["version_count"], v["latest_version"]) for v in listed] == \
        [("tool_call_verifier", "json_tool_call", 1, 1)]
    detail = client.get(f"/api/verifiers/{verifier.pk}", **bearer("viewer")).json()
    assert detail["versions"][0]["runs"] == 1 and detail["versions"][0]["config"] == {}
    assert detail["versions"][0]["latest_check"] is None
    one = client.get(f"/api/verifiers/{verifier.pk}/versions/1", **bearer("viewer")).json()
    assert one["version"] == 1 and one["content_hash"] == verifier.latest_version.content_hash
    assert client.get(f"/api/verifiers/{verifier.pk}/versions/7", **bearer("viewer")).status_code == 404


def test_create_a_version_validated_against_the_schema(client, project_team, bearer, verifier):
    url = f"/api/verifiers/{verifier.pk}/versions"
    created = _post(client, url, {"config": {"mode": "strict", "weights": {"completion": 1}}}, bearer("editor"))
    assert created.status_code == 201 and created.json()["version"] == 2
    same = _post(client, url, {"config": {"mode": "strict", "weights": {"completion": 1}}}, bearer("editor"))
    assert same.status_code == 200 and same.json()["version"] == 2
    bad = _post(client, url, {"config": {"mode": "loose", "weights": {"completion": "x", "bogus": 1}, "extra": 1}},
                bearer("editor"))
    assert bad.status_code == 422
    errors = bad.json()["errors"]
    assert "'loose' is not one of ['strict', 'lenient']" in errors["config.mode"]
    assert "is not of type 'number'" in errors["config.weights.completion"]
    assert errors["config.weights.bogus"].startswith("Unknown key") and errors["config.extra"].startswith("Unknown key")
    assert bad.json()["detail"]
    assert verifier.versions.count() == 2 and verifier.versions.get(version=1).config == {}


def test_create_a_verifier(client, project_team, bearer):
    url = f"/api/projects/{project_team['project'].slug}/verifiers"
    code = "def verify(task, trajectory):\n    return 1.0\n"
    created = _post(client, url, {"name": "mine", "kind": "python", "config": {"code": code}}, bearer("editor"))
    assert created.status_code == 201 and created.json()["versions"][0]["config"] == {"code": code}
    missing = _post(client, url, {"name": "other", "kind": "python", "config": {}}, bearer("editor"))
    assert missing.status_code == 422 and missing.json()["errors"] == {"config.code": "Required."}
    dup = _post(client, url, {"name": "mine", "kind": "python", "config": {"code": code}}, bearer("editor"))
    assert dup.status_code == 409 and "already has a verifier named" in dup.json()["errors"]["name"]
    kind = _post(client, url, {"name": "x", "kind": "nope", "config": {}}, bearer("editor"))
    assert kind.status_code == 422 and "kind" in kind.json()["errors"]
    nul = _post(client, url, {"name": "x", "kind": "python", "config": {"code": "a\u0000b"}}, bearer("editor"))
    assert nul.status_code == 422


def test_score_one_output_and_one_trajectory(client, project_team, bearer, run, verifier):
    url = f"/api/verifiers/{verifier.pk}/versions/1/score"
    task = run.dataset.tasks.get(external_id="task-0")
    right = _post(client, url, {"task_id": task.pk, "output": json.dumps(task.ground_truth[0])}, bearer("viewer"))
    assert right.status_code == 200
    body = right.json()
    assert (body["reward"], body["passed"], body["failure_bucket"], body["error"]) == (1.0, True, None, None)
    assert body["calls"][0]["matches"] and body["parse"]["source"] == "verifier"
    stored = Trajectory.objects.filter(run=run, failure_bucket="invalid_json").first()
    again = _post(client, url, {"trajectory_id": stored.pk}, bearer("viewer")).json()
    assert again["failure_bucket"] == "invalid_json" and again["reward"] == stored.reward
    turns = _post(client, url, {"task": {"messages": [], "tools": [{"name": "a", "parameters": {"type": "object"}}],
                                         "ground_truth": [{"name": "a", "arguments": {}}]},
                                "turns": [{"role": "assistant", "content": '{"name": "a", "arguments": {}}'}]},
                  bearer("viewer")).json()
    assert turns["passed"] is True
    nothing = _post(client, url, {"output": "x"}, bearer("viewer"))
    assert nothing.status_code == 422 and "task" in nothing.json()["errors"]
    bad_task = _post(client, url, {"task": {"messages": "no"}, "output": "x"}, bearer("viewer"))
    assert bad_task.status_code == 422 and "task" in bad_task.json()["errors"]
    other = Trajectory.objects.create(project=project_team["other"], task_key="t", turns=[])
    foreign = _post(client, url, {"trajectory_id": other.pk}, bearer("viewer"))
    assert foreign.status_code == 422 and "trajectory_id" in foreign.json()["errors"]


@pytest.mark.skipif(shutil.which("bwrap") is None or available_isolation() != BWRAP,
                    reason="bubblewrap (bwrap) is not installed or not usable: python verifiers need its sandbox")
def test_a_python_error_is_a_verifier_error_with_no_reward(client, project_team, bearer):
    mine = verifier_create(project=project_team["project"], name="boom", kind="python", actor=project_team["editor"],
                           config={"code": f"def verify(task, trajectory):\n    raise ValueError({XSS[0]!r})\n"})
    body = _post(client, f"/api/verifiers/{mine.pk}/versions/1/score",
                 {"task": {"messages": []}, "output": "x"}, bearer("viewer")).json()
    assert body["reward"] is None and body["passed"] is False and body["failure_bucket"] == "verifier_error"
    assert "ValueError" in body["error"]


def test_sanity_checks(client, project_team, bearer, run, verifier):
    url = f"/api/verifiers/{verifier.pk}/versions/1/checks"
    created = _post(client, url, {"size": 10, "run_id": run.pk, "method": "stratified", "seed": 3}, bearer("editor"))
    assert created.status_code == 201
    body = created.json()
    assert body["scored"] == 10 and len(body["items"]) == 10 and body["agreement"] is None
    assert sum(b["count"] for b in body["histogram"]) + body["errors"] == 10
    check = VerifierCheck.objects.get(pk=body["id"])
    for index, item in enumerate(check.items.order_by("position")):
        check_label(item=item, actor=project_team["reviewer"], right=index != 4)
    result = client.get(f"/api/verifier-checks/{check.pk}", **bearer("viewer")).json()
    assert (result["labelled"], result["agreed"], result["agreement"]) == (10, 9, 0.9)
    assert result["disagreements"] == [4] and result["under_threshold"] is False
    listed = client.get(url, **bearer("viewer")).json()
    assert [c["id"] for c in listed] == [check.pk]
    assert client.get(f"/api/verifiers/{verifier.pk}", **bearer("viewer")).json()["latest_check"]["agreement"] == 0.9
    small = _post(client, url, {"size": 5}, bearer("editor"))
    assert small.status_code == 422 and "size" in small.json()["errors"]
    method = _post(client, url, {"size": 10, "method": "weird"}, bearer("editor"))
    assert method.status_code == 422 and "method" in method.json()["errors"]


def test_roles(client, project_team, bearer, run, verifier):
    slug = project_team["project"].slug
    version_url = f"/api/verifiers/{verifier.pk}/versions"
    assert _post(client, version_url, {"config": {"mode": "strict"}}, bearer("viewer")).status_code == 403
    assert _post(client, version_url, {"config": {"mode": "strict"}}, bearer("reviewer")).status_code == 403
    assert _post(client, f"/api/projects/{slug}/verifiers", {"name": "x", "kind": "python", "config": {}},
                 bearer("viewer")).status_code == 403
    assert _post(client, f"{version_url}/1/checks", {"size": 10}, bearer("viewer")).status_code == 403
    outsider = bearer("outsider")
    for url in [f"/api/projects/{slug}/verifiers", f"/api/verifiers/{verifier.pk}", version_url,
                f"{version_url}/1", f"{version_url}/1/checks"]:
        assert client.get(url, **outsider).status_code == 404, url
    assert _post(client, version_url, {"config": {}}, outsider).status_code == 404
    assert _post(client, f"{version_url}/1/score", {"output": "x"}, outsider).status_code == 404
    assert Verifier.objects.get().versions.count() == 1


def test_the_endpoints_are_documented(client, project_team):
    client.force_login(project_team["viewer"])
    schema = client.get("/api/openapi.json").json()
    score = schema["paths"]["/api/verifiers/{verifier_id}/versions/{number}/score"]["post"]
    assert score["summary"] == "Score one output or one stored trajectory" and "never a reward of 0" in \
        score["description"]
    assert "verifiers" in score["tags"]
    assert "/api/verifier-checks/{check_id}" in schema["paths"]
