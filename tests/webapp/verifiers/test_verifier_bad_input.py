"""Verifiers under hostile input: the same name created 8 times at once (one verifier, seven identical
409s on `name`, never a 500) and JSON nested 10,000 levels deep in the playground's task, output and
config inputs (a 422 that says so, never a RecursionError's 500)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.webapp.races import needs_postgres as _needs_postgres
from tests.webapp.races import race as _race
from webapp.projects.services.projects import api_token_issue
from webapp.verifiers.models import Verifier, VerifierVersion
from webapp.verifiers.services.verifiers import VerifierNameTaken, verifier_create

DEEP = "[" * 10_000 + "]" * 10_000
DEEP_OBJECT = '{"a": ' * 10_000 + "1" + "}" * 10_000
TASK = {"messages": [{"role": "user", "content": "Call ping."}]}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_eight_concurrent_creations_of_one_name_make_one_verifier(project_team):
    _needs_postgres()
    token = api_token_issue(user=project_team["editor"], name="script").raw
    path = f"/api/projects/{project_team['project'].slug}/verifiers"
    for round_ in range(3):
        name = f"calls {round_}"
        body = json.dumps({"name": name, "kind": "json_tool_call", "config": {}})
        responses = _race(8, lambda _i, body=body: Client().post(
            path, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"))
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [201] + [409] * 7, [r.content for r in responses]
        errors = {json.dumps(r.json()["errors"]) for r in responses if r.status_code == 409}
        assert errors == {json.dumps({"name": str(VerifierNameTaken(name))})}
        assert Verifier.objects.filter(project=project_team["project"], name=name).count() == 1
        assert VerifierVersion.objects.filter(verifier__name=name).count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_service_answers_a_lost_race_with_the_name_error(project_team):
    _needs_postgres()
    project, editor = project_team["project"], project_team["editor"]
    results = _race(8, lambda _i: verifier_create(project=project, name="same", kind="json_tool_call", config={},
                                                  actor=editor))
    assert sum(isinstance(r, Verifier) for r in results) == 1
    assert all(isinstance(r, VerifierNameTaken) for r in results if not isinstance(r, Verifier)), results


def test_a_taken_name_is_the_same_409_on_the_api(client, project_team, bearer):
    verifier_create(project=project_team["project"], name="calls", kind="json_tool_call", config={},
                    actor=project_team["editor"])
    response = client.post(f"/api/projects/{project_team['project'].slug}/verifiers",
                           json.dumps({"name": "calls", "kind": "json_tool_call", "config": {}}),
                           content_type="application/json", **bearer("editor"))
    assert response.status_code == 409
    assert response.json()["errors"] == {"name": str(VerifierNameTaken("calls"))}


# --- deep nesting ---------------------------------------------------------------------------


@pytest.fixture
def version(project_team):
    return verifier_create(project=project_team["project"], name="calls", kind="json_tool_call", config={},
                           actor=project_team["editor"]).latest_version


def _playground(client, project_team, data: dict):
    client.force_login(project_team["viewer"])
    return client.post(f"/p/{project_team['project'].slug}/verifiers/playground/", {"action": "score", **data})


@pytest.mark.parametrize("deep", [DEEP, DEEP_OBJECT, "[" * 100 + "]" * 100])
def test_a_deep_task_in_the_playground_form_is_a_422(client, project_team, version, deep):
    response = _playground(client, project_team, {"version": version.pk, "output": "hi",
                                                  "task_json": '{"messages": [], "metadata": {"x": ' + deep + "}}"})
    assert response.status_code == 422
    assert "nests deeper than" in response.content.decode()


@pytest.mark.parametrize("output_format", ["auto", "turns"])
@pytest.mark.parametrize("deep", [DEEP, '[{"role": "assistant", "content": ' + DEEP_OBJECT + "}]"])
def test_a_deep_output_in_the_playground_form_is_a_422(client, project_team, version, output_format, deep):
    response = _playground(client, project_team, {"version": version.pk, "task_json": json.dumps(TASK),
                                                  "output": deep, "output_format": output_format})
    assert response.status_code == 422
    assert "nests deeper than" in response.content.decode()


def test_a_deep_output_text_through_the_api_is_a_422(client, project_team, bearer, version):
    response = client.post(f"/api/verifiers/{version.verifier_id}/versions/1/score",
                           json.dumps({"task": TASK, "output": DEEP}), content_type="application/json",
                           **bearer("viewer"))
    assert response.status_code == 422
    assert "nests deeper than" in response.json()["errors"]["output"]


@pytest.mark.parametrize("field", ["task", "turns"])
def test_a_deep_task_or_turns_body_through_the_api_is_a_422(client, project_team, bearer, version, field):
    value = '{"messages": ' + DEEP + "}" if field == "task" else DEEP
    body = '{"' + field + '": ' + value + (', "output": "hi"' if field == "task" else ', "task": '
                                           + json.dumps(TASK)) + "}"
    response = client.post(f"/api/verifiers/{version.verifier_id}/versions/1/score", body,
                           content_type="application/json", **bearer("viewer"))
    assert response.status_code == 422
    assert "nests deeper than" in response.content.decode()


def test_a_deep_value_in_a_json_config_input_is_a_field_problem():
    """No built-in kind has a free-form JSON input today; a new one must still refuse deep JSON."""
    from webapp.common.schema_form import FieldProblem, SchemaField, parse_value

    spec = SchemaField(name="extra", label="extra", widget="json")
    with pytest.raises(FieldProblem, match="nests deeper than"):
        parse_value(spec, DEEP)
    assert parse_value(spec, '{"a": [1, 2]}') == {"a": [1, 2]}
