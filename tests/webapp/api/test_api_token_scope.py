"""API tokens' scope: an expiry (401 saying when), read-only (403 on writes), one project (403 elsewhere).

Run on PostgreSQL and on SQLite; every refusal writes nothing.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from webapp.api.models import TokenFailure
from webapp.projects.models import ApiToken, Role, TokenAccess
from webapp.projects.services.projects import (
    TokenOptionsError,
    api_token_authenticate,
    api_token_issue,
    membership_set_role,
)
from webapp.runs.models import AliasMove, Checkpoint, Run


def _headers(raw: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def _post(client: Client, path: str, raw: str, body: dict | None = None):
    return client.post(path, json.dumps(body or {}), content_type="application/json", **_headers(raw))


@pytest.fixture
def two_projects(project_team):
    """The owner of Acme is also an editor of the other team's project; each project has a run and checkpoint."""
    owner, other = project_team["owner"], project_team["other"]
    membership_set_role(project=other, user=owner, role=Role.EDITOR, actor=project_team["outsider"])
    made = {}
    for key in ("project", "other"):
        run = Run.objects.create(project=project_team[key], name=f"{key} run", kind="grpo", created_by=owner)
        made[key] = {"run": run, "checkpoint": Checkpoint.objects.create(run=run, step=1, storage_uri="/c/1")}
    return {**project_team, "made": made}


# ---------------------------------------------------------------------------------------
# Expiry
# ---------------------------------------------------------------------------------------


def test_an_expired_token_is_401_saying_when_and_is_not_counted_as_a_guess(client, project_team):
    issued = api_token_issue(user=project_team["viewer"], name="old script",
                             expires_at=timezone.now() + timedelta(minutes=5))
    assert client.get("/api/projects", **_headers(issued.raw)).status_code == 200
    ApiToken.objects.filter(pk=issued.token.pk).update(expires_at=timezone.now() - timedelta(seconds=1),
                                                       last_used_at=None)
    response = client.get("/api/projects", **_headers(issued.raw))
    assert response.status_code == 401
    detail = response.json()["detail"]
    assert "expired on" in detail and issued.token.prefix in detail and "crucible_token create" in detail
    assert issued.raw not in detail
    issued.token.refresh_from_db()
    assert issued.token.last_used_at is None  # a refused request is not a use
    assert not TokenFailure.objects.exists()  # a real token, not a guess: no lockout counting
    # writes too, and the API docs' schema
    assert _post(client, f"/api/projects/{project_team['project'].slug}/verifiers", issued.raw,
                 {"name": "v", "kind": "json_tool_call", "config": {}}).status_code == 401
    assert client.get("/api/openapi.json", **_headers(issued.raw)).status_code == 401


def test_a_token_that_has_not_expired_yet_works_and_records_its_use(client, project_team):
    issued = api_token_issue(user=project_team["viewer"], name="s", expires_at=timezone.now() + timedelta(days=1))
    assert client.get("/api/projects", **_headers(issued.raw)).status_code == 200
    issued.token.refresh_from_db()
    assert issued.token.last_used_at is not None


# ---------------------------------------------------------------------------------------
# Read-only
# ---------------------------------------------------------------------------------------


WRITES = [
    ("post", "/api/checkpoints/{checkpoint}/promote", {"alias": "production", "force": True, "reason": "r"}),
    ("post", "/api/projects/{slug}/verifiers", {"name": "v", "kind": "json_tool_call", "config": {}}),
    ("post", "/api/runs/{run}/cancel", {}),
    ("patch", "/api/reviews/1", {"label": "pass"}),
]


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_a_read_only_token_reads_and_is_403_on_every_write(client, two_projects, method, path, body):
    issued = api_token_issue(user=two_projects["owner"], name="dashboards", access=TokenAccess.READ)
    made = two_projects["made"]["project"]
    checkpoint = made["checkpoint"]
    assert client.get(f"/api/checkpoints/{checkpoint.pk}", **_headers(issued.raw)).status_code == 200
    url = path.format(checkpoint=checkpoint.pk, slug=two_projects["project"].slug, run=made["run"].pk)
    response = getattr(client, method)(url, json.dumps(body), content_type="application/json",
                                       **_headers(issued.raw))
    assert response.status_code == 403
    assert "read-only" in response.json()["detail"] and method.upper() in response.json()["detail"]
    assert not AliasMove.objects.exists() and not two_projects["project"].verifiers.exists()
    made["run"].refresh_from_db()
    assert made["run"].status == "draft"


def test_a_read_write_token_of_the_same_user_may_write(client, two_projects):
    issued = api_token_issue(user=two_projects["owner"], name="ci")
    checkpoint = two_projects["made"]["project"]["checkpoint"]
    response = _post(client, f"/api/checkpoints/{checkpoint.pk}/promote", issued.raw,
                     {"alias": "candidate", "force": True, "reason": "try it"})
    assert response.status_code == 200, response.content
    assert AliasMove.objects.count() == 1


# ---------------------------------------------------------------------------------------
# One project
# ---------------------------------------------------------------------------------------


def test_a_project_token_lists_only_its_project(client, two_projects):
    both = api_token_issue(user=two_projects["owner"], name="all").raw
    one = api_token_issue(user=two_projects["owner"], name="acme", project=two_projects["project"]).raw
    slugs = lambda raw: sorted(p["slug"] for p in client.get("/api/projects", **_headers(raw)).json())  # noqa: E731
    assert slugs(both) == sorted([two_projects["project"].slug, two_projects["other"].slug])
    assert slugs(one) == [two_projects["project"].slug]


def test_a_project_token_is_403_in_the_users_other_project_saying_why(client, two_projects):
    raw = api_token_issue(user=two_projects["owner"], name="acme", project=two_projects["project"]).raw
    other = two_projects["other"]
    inside = two_projects["made"]["project"]
    outside = two_projects["made"]["other"]
    assert client.get(f"/api/projects/{two_projects['project'].slug}", **_headers(raw)).status_code == 200
    assert client.get(f"/api/runs/{inside['run'].pk}", **_headers(raw)).status_code == 200
    for path in (f"/api/projects/{other.slug}", f"/api/runs/{outside['run'].pk}",
                 f"/api/checkpoints/{outside['checkpoint'].pk}"):
        response = client.get(path, **_headers(raw))
        assert response.status_code == 403, path
        detail = response.json()["detail"]
        assert "limited to the project “Acme agents”" in detail and other.name in detail
    # a write in the other project is refused the same way and writes nothing
    response = _post(client, f"/api/projects/{other.slug}/verifiers", raw,
                     {"name": "v", "kind": "json_tool_call", "config": {}})
    assert response.status_code == 403 and "limited to the project" in response.json()["detail"]
    assert not other.verifiers.exists()


def test_a_project_token_still_gets_404_for_projects_its_user_is_not_in(client, project_team, make_user):
    from webapp.projects.services.projects import project_create

    stranger_project = project_create(name="Secret", owner=make_user("stranger"))
    raw = api_token_issue(user=project_team["viewer"], name="acme", project=project_team["project"]).raw
    assert client.get(f"/api/projects/{stranger_project.slug}", **_headers(raw)).status_code == 404


def test_a_project_token_works_only_while_its_user_is_a_member(client, project_team):
    from webapp.projects.models import Membership

    raw = api_token_issue(user=project_team["viewer"], name="acme", project=project_team["project"]).raw
    Membership.objects.filter(user=project_team["viewer"], project=project_team["project"]).delete()
    assert client.get(f"/api/projects/{project_team['project'].slug}", **_headers(raw)).status_code == 404
    assert client.get("/api/projects", **_headers(raw)).json() == []


def test_a_browser_session_is_not_narrowed(client, two_projects):
    client.force_login(two_projects["owner"])
    slugs = sorted(p["slug"] for p in client.get("/api/projects").json())
    assert slugs == sorted([two_projects["project"].slug, two_projects["other"].slug])


def test_the_scope_is_attached_per_token_not_per_user(two_projects):
    scoped = api_token_issue(user=two_projects["owner"], name="one", project=two_projects["project"],
                             access=TokenAccess.READ).raw
    free = api_token_issue(user=two_projects["owner"], name="all").raw
    a, b = api_token_authenticate(scoped), api_token_authenticate(free)
    assert a.token_scope.project_id == two_projects["project"].pk and a.token_scope.read_only
    assert b.token_scope.project_id is None and not b.token_scope.read_only


# ---------------------------------------------------------------------------------------
# Issuing
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "message"), [
    ({"access": "admin"}, "Unknown access 'admin'"),
    ({"expires_at": "past"}, "must be in the future"),
    ({"project": "other"}, "not a member of the project"),
])
def test_issue_refuses_a_scope_that_could_not_work(project_team, options, message):
    if options.get("expires_at") == "past":
        options = {"expires_at": timezone.now() - timedelta(seconds=1)}
    if options.get("project") == "other":
        options = {"project": project_team["other"]}
    with pytest.raises(TokenOptionsError, match=message):
        api_token_issue(user=project_team["viewer"], name="x", **options)
    assert not ApiToken.objects.exists()
