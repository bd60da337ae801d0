"""Every operation with a body, read from the OpenAPI document, against the bad-input classes.

Non-finite and overflowing numbers, integers beyond 64 bits, JSON nested 10,000 levels deep and a body over the
upload limit once answered 500 (or were written, and failed in PostgreSQL later). The
cases are generated from the document, so an endpoint added tomorrow is covered the day
it is added: each must answer a 4xx it documents, as JSON naming the problem, and write
nothing. CI runs this file on PostgreSQL and on SQLite.
"""

from __future__ import annotations

import json

import pytest
from django.apps import apps
from django.conf import settings

from webapp.api.api import api
from webapp.projects.services.projects import api_token_issue

DOCUMENT = api.get_openapi_schema()
DEEP = "[" * 10_000 + "]" * 10_000

# class -> (raw JSON body, expected status, a word the answer must contain)
JSON_CLASSES = {
    "nan": ('{"name": "n", "config": {"a": [1, NaN]}}', 422, "NaN"),
    "infinity": ('{"name": "n", "value": Infinity}', 422, "Infinity"),
    "minus-infinity": ('{"name": "n", "value": -Infinity}', 422, "-Infinity"),
    "overflow": ('{"name": "n", "payload": {"x": 1e400}}', 422, "1e400"),
    "negative-overflow": ('[{"x": -1e400}]', 422, "-1e400"),
    "int-too-long-to-read": ('{"n": ' + "9" * 5000 + "}", 422, "too long to read"),
    "int-beyond-64-bits": ('{"name": "n", "payload": {"x": [1, 9223372036854775808]}}', 422, "beyond 64 bits"),
    "negative-int-beyond-64-bits": ('[{"x": -9223372036854775809}]', 422, "beyond 64 bits"),
    "deep-array": (DEEP, 422, "nests deeper"),
    "deep-object": ('{"a":' * 10_000 + "1" + "}" * 10_000, 422, "nests deeper"),
    "oversize": (json.dumps({"name": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)}), 413,
                 f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes"),
}


def _operations(media_type: str) -> list[tuple[str, str, dict]]:
    found = []
    for path, item in DOCUMENT["paths"].items():
        for method, operation in item.items():
            if media_type in operation.get("requestBody", {}).get("content", {}):
                found.append((method, path, operation))
    return found


JSON_OPERATIONS = _operations("application/json")
MULTIPART_OPERATIONS = _operations("multipart/form-data")


def test_the_document_has_operations_of_both_kinds():
    """The generator reads what it should: if this fails, the cases below test nothing."""
    assert len(JSON_OPERATIONS) >= 15 and len(MULTIPART_OPERATIONS) >= 2


def _url(path: str, operation: dict, slug: str) -> str:
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path":
            value = slug if parameter["name"] == "slug" else \
                ("1" if parameter["schema"].get("type") == "integer" else "production")
            path = path.replace("{" + parameter["name"] + "}", value)
    return path


def _row_counts() -> dict[str, int]:
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


@pytest.fixture
def owner_token(project_team):
    return api_token_issue(user=project_team["owner"], name="bad input").raw


def _assert_refused(response, operation: dict, status: int, word: str) -> None:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert status in operation["responses"] or str(status) in operation["responses"], \
        f"{status} is answered but not documented"
    assert response["Content-Type"].startswith("application/json")
    assert word in response.json()["detail"], response.json()


@pytest.mark.parametrize("case", list(JSON_CLASSES))
@pytest.mark.parametrize(("method", "path", "operation"), JSON_OPERATIONS,
                         ids=[f"{m.upper()} {p}" for m, p, _ in JSON_OPERATIONS])
def test_a_bad_json_body_is_refused_with_a_documented_4xx_and_nothing_written(
        client, project_team, owner_token, method, path, operation, case):
    body, status, word = JSON_CLASSES[case]
    before = _row_counts()
    response = client.generic(method.upper(), _url(path, operation, project_team["project"].slug), body,
                              content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {owner_token}")
    _assert_refused(response, operation, status, word)
    assert _row_counts() == before


@pytest.mark.parametrize(("method", "path", "operation"), MULTIPART_OPERATIONS,
                         ids=[f"{m.upper()} {p}" for m, p, _ in MULTIPART_OPERATIONS])
def test_a_multipart_body_over_the_limit_is_a_documented_413(
        client, project_team, owner_token, method, path, operation):
    before = _row_counts()
    response = client.post(_url(path, operation, project_team["project"].slug),
                           {"name": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)},
                           HTTP_AUTHORIZATION=f"Bearer {owner_token}")
    _assert_refused(response, operation, 413, f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes")
    assert _row_counts() == before


def test_the_refusal_names_the_field_path(client, project_team, owner_token):
    response = client.post(f"/api/projects/{project_team['project'].slug}/trajectories",
                           '{"trajectories": [{"id": "a", "latency_ms": 1e400, "turns": [{"role": "user"}]}]}',
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {owner_token}")
    assert response.status_code == 422
    assert list(response.json()["errors"]) == ["trajectories.0.latency_ms"]


def test_finite_numbers_and_moderate_nesting_still_pass_the_parser(client, project_team, owner_token):
    """The parser refuses only what it must: 1e308, -0.0, 1e-400 and 60 levels reach the view."""
    nested = "[" * 60 + "]" * 60
    body = '{"kind": "noop", "payload": {"big": 1e308, "zero": -0.0, "tiny": 1e-400, "nested": ' + nested + "}}"
    response = client.post(f"/api/projects/{project_team['project'].slug}/jobs", body,
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {owner_token}")
    assert response.status_code == 201, response.content[:300]


def test_invalid_json_is_a_400_that_keeps_the_position(client, project_team, owner_token):
    response = client.post(f"/api/projects/{project_team['project'].slug}/jobs", '{"kind": "noop",\n "payload": }',
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {owner_token}")
    assert response.status_code == 400
    assert "line 2 column" in response.json()["detail"]


def test_a_page_form_over_the_limit_is_a_413_that_says_the_limit(project_team):
    """Pages too: CsrfViewMiddleware reads the form first, and Django would answer a bare 400."""
    from django.middleware.csrf import _get_new_csrf_string
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(project_team["owner"])
    token = _get_new_csrf_string()
    browser.cookies["csrftoken"] = token
    response = browser.post(f"/p/{project_team['project'].slug}/verifiers/new/",
                            {"name": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)}, HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 413
    assert f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes" in response.content.decode()


ALL_OPERATIONS = [(method, path, operation) for path, item in DOCUMENT["paths"].items()
                  for method, operation in item.items()]


def test_every_operation_documents_its_error_answers_and_their_bodies():
    for method, path, operation in ALL_OPERATIONS:
        responses = {int(status): response for status, response in operation["responses"].items()}
        has_input = bool(operation.get("parameters")) or "requestBody" in operation
        expected = {400, 401, 429} | ({422} if has_input else set()) | ({413} if "requestBody" in operation else set())
        assert expected <= set(responses), (method, path, sorted(responses))
        for status in expected:
            schema = responses[status]["content"]["application/json"]["schema"]
            assert "$ref" in schema, (method, path, status)
    schemas = DOCUMENT["components"]["schemas"]
    assert schemas["ValidationErrorOut"]["properties"]["errors"]["type"] == "object"
    assert schemas["ErrorOut"]["required"] == ["detail"]


@pytest.mark.parametrize(("method", "path", "operation"), ALL_OPERATIONS,
                         ids=[f"{m.upper()} {p}" for m, p, _ in ALL_OPERATIONS])
def test_no_credentials_is_a_documented_401(client, project_team, method, path, operation):
    response = client.generic(method.upper(), _url(path, operation, project_team["project"].slug), "{}",
                              content_type="application/json")
    _assert_refused(response, operation, 401, "")
