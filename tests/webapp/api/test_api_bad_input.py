"""Bad input never gives a 500: every request that once did now gets a 4xx naming the field.

Each case below was a 500 on PostgreSQL or SQLite (CI runs this file on both). The
hypothesis test throws arbitrary JSON at the production-logging schema.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webapp.datasets.services.datasets import dataset_create
from webapp.projects.services.projects import api_token_issue
from webapp.runs.models import Checkpoint, CheckpointAlias, ModelSpec, Run
from webapp.trajectories.models import Trajectory
from webapp.verifiers.services.verifiers import verifier_create

NUL = "\u0000"
SURROGATE = "\ud800"


@pytest.fixture
def world(project_team):
    """A project with a dataset, a verifier, a model, a run with a checkpoint and an alias."""
    from environments.workplace.generator import generate_tasks

    owner, project = project_team["owner"], project_team["project"]
    dataset_create(project=project, name="wp", tasks=generate_tasks(6, 0), actor=owner)
    verifier_create(project=project, name="v", kind="json_tool_call", config={}, actor=owner)
    ModelSpec.objects.create(project=project, name="tiny", hf_id="smollm2-135m-instruct")
    run = Run.objects.create(project=project, name="r", kind="grpo")
    checkpoint = Checkpoint.objects.create(run=run, step=1, storage_uri="/ckpt/1")
    CheckpointAlias.objects.create(project=project, name="production", checkpoint=checkpoint)
    return {"slug": project.slug, "checkpoint": checkpoint.pk, "token": api_token_issue(user=owner, name="t").raw}


def _send(client, token: str, method: str, path: str, body=None):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    if method == "GET":
        return client.get(path, **auth)
    return client.post(path, json.dumps(body), content_type="application/json", **auth)


def _traj(**extra) -> dict:
    item = {"id": "run-1", "turns": [{"role": "assistant", "content": "hi"}], **extra}
    return {"trajectories": [item]}


TASK = {"messages": [{"role": "user", "content": "hi"}]}
EXPERIMENT = {"name": "e", "dataset": "wp", "verifier": "v", "model": "tiny"}

# (method, path with {slug}/{ckpt}, body, a word the error must contain)
CASES = [
    ("POST", "/api/projects/{slug}/trajectories", _traj(tokens_in=-5), "tokens_in"),
    ("POST", "/api/projects/{slug}/trajectories", _traj(tokens_in=2147483648), "tokens_in"),
    ("POST", "/api/projects/{slug}/trajectories", _traj(tokens_out=10**30), "tokens_out"),
    ("POST", "/api/projects/{slug}/trajectories", _traj(id="x" * 500), "id"),
    ("POST", "/api/projects/{slug}/trajectories",
     {"trajectories": [{"id": "a", "turns": [{"role": "assistant", "content": "a" + NUL}]}]}, "turns"),
    ("POST", "/api/projects/{slug}/trajectories", _traj(task={**TASK, "metadata": {"k": NUL}}), "metadata"),
    ("POST", "/api/projects/{slug}/trajectories", _traj(id="a" + NUL), "id"),
    ("POST", "/api/projects/{slug}/trajectories",
     {"trajectories": [{"id": "a", "turns": [{"role": "assistant", "content": SURROGATE}]}]}, "turns"),
    ("GET", "/api/projects/{slug}/trajectories?limit=" + str(10**20), None, "limit"),
    ("GET", "/api/projects/{slug}/trajectories?step=" + str(10**12), None, "step"),
    ("GET", "/api/projects/{slug}/trajectories?run_id=" + str(10**20), None, "run_id"),
    ("GET", "/api/projects/{slug}/trajectories?bucket=%00", None, "bucket"),
    ("GET", "/api/projects/{slug}/jobs?state=%00", None, "state"),
    ("GET", "/api/projects/%C3%A9%00x", None, "path"),
    ("POST", "/api/projects/{slug}/jobs", {"payload": {"a": NUL}}, "payload"),
    ("POST", "/api/projects/{slug}/experiments", {**EXPERIMENT, "config": {"common": "x"}}, "config.common"),
    ("POST", "/api/projects/{slug}/experiments", {**EXPERIMENT, "config": {"regression_datasets": 5}},
     "regression_datasets"),
    ("POST", "/api/projects/{slug}/experiments", {**EXPERIMENT, "name": "n" * 300}, "name"),
    ("POST", "/api/projects/{slug}/experiments", {**EXPERIMENT, "name": "a" + NUL}, "name"),
    ("POST", "/api/checkpoints/{ckpt}/promote", {"alias": "production", "reason": "why" + NUL}, "reason"),
    ("POST", "/api/projects/{slug}/aliases/%00/rollback", {}, "path"),
    ("POST", "/api/projects/{slug}/evals-from-trajectories", {"dataset": "wp", "trajectory_ids": [10**20]},
     "trajectory_ids"),
    ("POST", "/api/projects/{slug}/evals-from-trajectories", {"dataset": "wp", "run_id": 10**20, "bucket": "x"},
     "run_id"),
    # Nested configs are checked against their schema before use, not at stage three.
    ("POST", "/api/projects/{slug}/experiments", {**EXPERIMENT, "config": {"grpo": {"learning_rate": "fast"}}},
     "config.grpo"),
    ("POST", "/api/projects/{slug}/experiments", {**EXPERIMENT, "config": {"success_margin": "big"}},
     "success_margin"),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), CASES,
                         ids=[f"{c[0]} {c[1].split('/')[-1][:30]} {c[3]}" for c in CASES])
def test_bad_input_gets_a_4xx_that_names_the_field(client, world, method, path, body, field):
    url = path.format(slug=world["slug"], ckpt=world["checkpoint"])
    response = _send(client, world["token"], method, url, body)
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json")
    assert field in json.dumps(response.json()), response.json()


def test_nothing_is_stored_from_a_refused_batch(client, world):
    body = {"trajectories": [{"id": "good", "turns": [{"role": "assistant", "content": "ok"}]},
                             {"id": "bad", "turns": [{"role": "assistant", "content": NUL}]}]}
    response = _send(client, world["token"], "POST", f"/api/projects/{world['slug']}/trajectories", body)
    assert response.status_code == 422
    assert not Trajectory.objects.filter(source="production").exists()


def test_an_unexpected_error_under_api_answers_json_not_html(client, world, monkeypatch):
    """A bug (here: the selector raising) is a JSON 500 without a traceback, as the API's other answers."""
    from webapp.api import api as api_module

    def broken(user):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(api_module, "project_list_for_user", broken)
    response = _send(client, world["token"], "GET", "/api/projects")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("application/json")
    assert "secret internals" not in response.content.decode()
    assert "Internal error" in response.json()["detail"]


def test_a_nul_in_a_page_url_is_a_400_not_a_500(client, project_team):
    client.force_login(project_team["owner"])
    response = client.get("/p/%00/")
    assert response.status_code == 400


json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(10**40), max_value=10**40)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
turn = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool", NUL, SURROGATE])},
                             optional={"content": json_values, "tool_calls": json_values})
trajectory = st.fixed_dictionaries(
    {"turns": st.lists(turn | json_values, max_size=3)},
    optional={"id": st.text(max_size=260) | json_scalars, "tokens_in": json_scalars, "tokens_out": json_scalars,
              "latency_ms": json_scalars, "truncated": json_scalars,
              "task": st.fixed_dictionaries({"messages": st.lists(json_values, max_size=2)},
                                            optional={"metadata": json_values, "category": json_scalars,
                                                      "tools": json_values, "ground_truth": json_values})},
)
batch = st.fixed_dictionaries({"trajectories": st.lists(trajectory, max_size=3) | json_values},
                              optional={"verifier": json_scalars})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=batch | json_values)
def test_production_logging_never_answers_5xx(client, world, body):
    response = _send(client, world["token"], "POST", f"/api/projects/{world['slug']}/trajectories", body)
    assert response.status_code < 500, (body, response.content[:300])


def test_schema_errors_come_back_by_field(client, world):
    body = {"trajectories": [{"id": "a", "turns": [{"role": "assistant", "content": "x"}], "tokens_in": -1,
                              "tokens_out": "many"}]}
    response = _send(client, world["token"], "POST", f"/api/projects/{world['slug']}/trajectories", body)
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert set(errors) == {"trajectories.0.tokens_in", "trajectories.0.tokens_out"}
    assert "greater than or equal to 0" in errors["trajectories.0.tokens_in"]
    assert "trajectories.0.tokens_in: " in response.json()["detail"]
    query = _send(client, world["token"], "GET", f"/api/projects/{world['slug']}/trajectories?limit=-1")
    assert list(query.json()["errors"]) == ["limit"]
