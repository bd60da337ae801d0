"""REST API for run tags and notes: PATCH /runs/{id} (roles, the service's checks under each field, nothing
half-written), tags and note in every run answer, and the list's `tag` filter and note search."""

from __future__ import annotations

import json

import pytest

from webapp.runs.models import Run


@pytest.fixture
def runs(project_team):
    project = project_team["project"]
    made = {
        "a": Run.objects.create(project=project, name="alpha", kind="grpo", tags=["baseline", "lr sweep"],
                                note="Diverged after step 40"),
        "b": Run.objects.create(project=project, name="beta", kind="grpo", tags=["baseline"]),
        "c": Run.objects.create(project=project, name="gamma", kind="sft"),
    }
    return {"slug": project.slug, **made}


def _patch(client, run: Run, headers: dict, body):
    return client.patch(f"/api/runs/{run.pk}", json.dumps(body), content_type="application/json", **headers)


def test_an_editor_sets_tags_and_note_and_every_answer_carries_them(client, bearer, runs):
    response = _patch(client, runs["c"], bearer("editor"), {"tags": [" Eval ", "held-out", "EVAL"], "note": "ok\r\n"})
    assert response.status_code == 200, response.content
    assert response.json()["tags"] == ["eval", "held-out"] and response.json()["note"] == "ok"
    stored = Run.objects.get(pk=runs["c"].pk)
    assert stored.tags == ["eval", "held-out"] and stored.note == "ok"
    detail = client.get(f"/api/runs/{runs['c'].pk}", **bearer("viewer")).json()
    assert detail["tags"] == ["eval", "held-out"] and detail["note"] == "ok"
    listed = {row["name"]: row for row in client.get(f"/api/projects/{runs['slug']}/runs", **bearer("viewer"))
              .json()["items"]}
    assert listed["alpha"]["tags"] == ["baseline", "lr sweep"] and listed["alpha"]["note"] == "Diverged after step 40"


def test_a_field_left_out_keeps_its_value(client, bearer, runs):
    assert _patch(client, runs["a"], bearer("editor"), {"note": ""}).status_code == 200
    stored = Run.objects.get(pk=runs["a"].pk)
    assert stored.tags == ["baseline", "lr sweep"] and stored.note == ""
    assert _patch(client, runs["a"], bearer("editor"), {"tags": []}).json()["tags"] == []


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"tags": ["good", "no<pe>"], "note": "x"}, "tags", ["cannot hold", "'<'"]),
    ({"tags": ["x" * 41]}, "tags", ["41 characters", "at most 40"]),
    ({"tags": [f"t{i}" for i in range(21)]}, "tags", ["20"]),
    ({"tags": "baseline"}, "tags", []),
    ({"note": "n" * 5001, "tags": ["fine"]}, "note", ["5,001 characters", "5,000"]),
    ({"note": "a\u0000b"}, "note", ["NUL"]),
])
def test_bad_input_is_a_422_naming_the_field_and_changes_nothing(client, bearer, runs, body, field, words):
    response = _patch(client, runs["a"], bearer("editor"), body)
    assert response.status_code == 422, response.content
    answer = response.json()
    assert list(answer["errors"]) == [field]
    for word in words:
        assert word in answer["errors"][field] and word in answer["detail"]
    stored = Run.objects.get(pk=runs["a"].pk)
    assert stored.tags == ["baseline", "lr sweep"] and stored.note == "Diverged after step 40"


def test_both_fields_refused_at_once(client, bearer, runs):
    answer = _patch(client, runs["a"], bearer("editor"), {"tags": ["bad!"], "note": "n" * 5001}).json()
    assert set(answer["errors"]) == {"tags", "note"}


@pytest.mark.parametrize(("who", "status"), [("viewer", 403), ("reviewer", 403), ("editor", 200), ("owner", 200),
                                             ("outsider", 404)])
def test_patching_needs_an_editor(client, bearer, runs, who, status):
    assert _patch(client, runs["c"], bearer(who), {"tags": ["x"]}).status_code == status
    assert (Run.objects.get(pk=runs["c"].pk).tags == ["x"]) is (status == 200)


@pytest.mark.parametrize(("query", "names"), [
    ("tag=baseline", {"alpha", "beta"}),
    ("tag=baseline&tag=lr%20sweep", {"alpha"}),
    ("tag=baseline,LR%20Sweep", {"alpha"}),
    ("tag=missing", set()),
    ("text=diverged", {"alpha"}),
    ("text=sweep", {"alpha"}),
    ("tag=baseline&text=beta", {"beta"}),
])
def test_the_list_filters_by_tag_and_searches_the_note_and_tags(client, bearer, runs, query, names):
    response = client.get(f"/api/projects/{runs['slug']}/runs?{query}", **bearer("viewer"))
    assert response.status_code == 200, response.content
    assert {row["name"] for row in response.json()["items"]} == names


def test_too_many_tag_filters_is_a_422_naming_tag(client, bearer, runs):
    query = "&".join(f"tag=t{i}" for i in range(21))
    response = client.get(f"/api/projects/{runs['slug']}/runs?{query}", **bearer("viewer"))
    assert response.status_code == 422 and "tag" in response.json()["errors"]


def test_the_document_states_the_rules(client):
    from webapp.api.api import api

    document = api.get_openapi_schema()
    operation = document["paths"]["/api/runs/{run_id}"]["patch"]
    schema_ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    body = document["components"]["schemas"][schema_ref]["properties"]
    tags = next(option for option in body["tags"]["anyOf"] if option.get("type") == "array")
    assert tags["maxItems"] == 20 and "pattern" in tags["items"]
    assert body["note"]["maxLength"] == 5000
    list_params = {p["name"] for p in document["paths"]["/api/projects/{slug}/runs"]["get"]["parameters"]}
    assert "tag" in list_params
