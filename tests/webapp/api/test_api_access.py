"""The REST API: hashed bearer tokens, the same role rules as the pages, an OpenAPI schema."""

from __future__ import annotations

import pytest

from webapp.projects.models import ApiToken
from webapp.projects.services.projects import api_token_issue, api_token_revoke, hash_token
from webapp.runs.models import Job


def test_token_is_stored_only_as_a_hash(project_team):
    issued = api_token_issue(user=project_team["editor"], name="ci")
    row = ApiToken.objects.get(pk=issued.token.pk)
    assert issued.raw not in (row.token_hash, row.prefix)
    assert row.token_hash == hash_token(issued.raw)
    assert issued.raw.startswith(row.prefix)


def test_requests_without_or_with_bad_tokens_are_refused(client, project_team):
    assert client.get("/api/projects").status_code == 401
    assert client.get("/api/projects", HTTP_AUTHORIZATION="Bearer cru_nope").status_code == 401


def test_revoked_token_stops_working(client, project_team):
    issued = api_token_issue(user=project_team["viewer"], name="old")
    headers = {"HTTP_AUTHORIZATION": f"Bearer {issued.raw}"}
    assert client.get("/api/projects", **headers).status_code == 200
    api_token_revoke(token=issued.token)
    assert client.get("/api/projects", **headers).status_code == 401


def test_project_list_shows_only_memberships(client, project_team, bearer):
    body = client.get("/api/projects", **bearer("viewer")).json()
    assert [p["slug"] for p in body] == [project_team["project"].slug]
    assert body[0]["role"] == "viewer"


def test_other_projects_are_404(client, project_team, bearer):
    other = project_team["other"]
    assert client.get(f"/api/projects/{other.slug}", **bearer("owner")).status_code == 404
    assert client.get(f"/api/projects/{other.slug}/jobs", **bearer("owner")).status_code == 404
    job = Job.objects.create(project=other, kind="noop")
    assert client.get(f"/api/jobs/{job.pk}", **bearer("owner")).status_code == 404
    assert client.post(f"/api/jobs/{job.pk}/cancel", **bearer("owner")).status_code == 404


@pytest.mark.parametrize(("role", "status"), [("viewer", 403), ("reviewer", 403), ("editor", 201), ("owner", 201)])
def test_starting_a_job_needs_editor(client, project_team, bearer, role, status, django_capture_on_commit_callbacks):
    slug = project_team["project"].slug
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(f"/api/projects/{slug}/jobs", {"kind": "noop", "payload": {"steps": 1}},
                               content_type="application/json", **bearer(role))
    assert response.status_code == status, response.content
    if status == 201:
        assert response.json()["state"] == "queued"


def test_training_kinds_cannot_be_started_as_bare_jobs(client, project_team, bearer):
    slug = project_team["project"].slug
    response = client.post(f"/api/projects/{slug}/jobs", {"kind": "grpo"}, content_type="application/json",
                           **bearer("owner"))
    assert response.status_code == 400
    assert "creating a run" in response.json()["detail"]


def test_cancel_twice_is_a_conflict_with_a_reason(client, project_team, bearer):
    job = Job.objects.create(project=project_team["project"], kind="noop")
    headers = bearer("editor")
    assert client.post(f"/api/jobs/{job.pk}/cancel", **headers).json()["state"] == "cancelled"
    second = client.post(f"/api/jobs/{job.pk}/cancel", **headers)
    assert second.status_code == 409 and "nothing to cancel" in second.json()["detail"]


def test_openapi_schema_lists_endpoints(client, project_team):
    client.force_login(project_team["viewer"])
    schema = client.get("/api/openapi.json").json()
    assert {"/api/projects", "/api/projects/{slug}/jobs", "/api/jobs/{job_id}/cancel"} <= set(schema["paths"])
