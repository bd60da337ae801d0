"""Every form of the dashboard that creates something redirects after success, so a reload creates nothing.

The token form too: its secret waits in the session for the one page load that follows, which
removes it. (The run, experiment, dataset, verifier and review-queue forms' redirects are asserted in their
own page tests; the review queue's "labels into a dataset" and the run import in test_pages_review
and test_run_import.)
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from webapp.projects.models import ApiToken, Membership, TokenAccess
from webapp.runs.models import ModelSpec


def _settings(slug: str, tail: str = "") -> str:
    return f"/p/{slug}/settings/{tail}"


def _secret(body: str) -> str | None:
    match = re.search(r'<code id="new-token-secret" class="secret">(cru_[A-Za-z0-9_-]+)</code>', body)
    return match.group(1) if match else None


# ---------------------------------------------------------------------------------------
# API tokens
# ---------------------------------------------------------------------------------------


def test_creating_a_token_redirects_and_a_reload_makes_no_second_token(client, project_team):
    slug = project_team["project"].slug
    client.force_login(project_team["viewer"])
    response = client.post(_settings(slug, "tokens/"), {"name": "ci"})
    assert response.status_code == 302 and response["Location"] == _settings(slug) + "#new-token"
    assert "cru_" not in response.content.decode()  # the secret is not in the redirect
    shown = client.get(response["Location"])
    secret = _secret(shown.content.decode())
    assert secret and "no-store" in shown["Cache-Control"]
    # the browser's reload repeats the GET, not the POST: still one token, and its secret is gone
    reloaded = client.get(response["Location"]).content.decode()
    assert _secret(reloaded) is None and secret not in reloaded
    assert ApiToken.objects.filter(user=project_team["viewer"]).count() == 1
    assert not any("cru_" in str(value) for value in client.session.values())


def test_a_secret_held_for_a_revoked_or_someone_elses_token_is_not_shown(client, project_team):
    from webapp.projects.services.projects import api_token_revoke

    slug = project_team["project"].slug
    client.force_login(project_team["editor"])
    location = client.post(_settings(slug, "tokens/"), {"name": "ci"})["Location"]
    api_token_revoke(token=ApiToken.objects.get(user=project_team["editor"]))
    assert _secret(client.get(location).content.decode()) is None


def test_the_token_form_sets_access_project_and_expiry(client, project_team):
    slug, project = project_team["project"].slug, project_team["project"]
    client.force_login(project_team["reviewer"])
    before = timezone.now()
    response = client.post(_settings(slug, "tokens/"), {"name": "dashboards", "access": "read", "limit": "project",
                                                        "expires_days": "30"}, follow=True)
    token = ApiToken.objects.get(user=project_team["reviewer"])
    assert token.access == TokenAccess.READ and token.project == project
    assert before + timedelta(days=30) <= token.expires_at <= timezone.now() + timedelta(days=30)
    body = response.content.decode()
    assert f"only in {project.name}" in body and "read-only (GET requests)" in body and "it expires" in body
    row = re.search(rf'<tr id="token-{token.pk}".*?</tr>', body, re.S).group(0)
    assert "Read-only" in row and f"only {project.name}" in row and 'class="state active"' in row
    # the defaults keep the old behaviour: read-write, every project, no expiry
    client.post(_settings(slug, "tokens/"), {"name": "plain"})
    plain = ApiToken.objects.get(user=project_team["reviewer"], name="plain")
    assert plain.access == TokenAccess.READ_WRITE and plain.project is None and plain.expires_at is None


def test_the_token_list_shows_last_use_expiry_and_expired_state(client, project_team):
    from webapp.projects.services.projects import api_token_issue

    user, slug = project_team["viewer"], project_team["project"].slug
    used = api_token_issue(user=user, name="used")
    client.get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {used.raw}")
    old = api_token_issue(user=user, name="old", expires_at=timezone.now() + timedelta(hours=1)).token
    ApiToken.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(days=2))
    client.force_login(user)
    body = client.get(_settings(slug)).content.decode()
    used_row = re.search(rf'<tr id="token-{used.token.pk}".*?</tr>', body, re.S).group(0)
    old_row = re.search(rf'<tr id="token-{old.pk}".*?</tr>', body, re.S).group(0)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", used_row, re.S)
    assert "<time" in cells[5] and "never" in cells[6]  # last used: a time; expires: never
    assert 'class="state expired"' in old_row and "2\xa0days ago" in old_row
    assert 'class="state active"' in used_row


@pytest.mark.parametrize(("data", "field", "message"), [
    ({"access": "admin"}, "token-access", "Choose read-only or read-write"),
    ({"limit": "elsewhere"}, "token-limit", "Choose every project you belong to"),
    ({"expires_days": "0"}, "token-expires", "from 1 to 3650"),
    ({"expires_days": "tomorrow"}, "token-expires", "from 1 to 3650"),
    ({"expires_days": "99999"}, "token-expires", "from 1 to 3650"),
])
def test_token_option_errors_beside_the_field_and_nothing_issued(client, project_team, data, field, message):
    client.force_login(project_team["viewer"])
    response = client.post(_settings(project_team["project"].slug, "tokens/"), {"name": "x", **data})
    assert response.status_code == 400
    error = re.search(rf'<p class="field-error" id="{field}-error">([^<]*)</p>', response.content.decode())
    assert error and message in error.group(1)
    assert not ApiToken.objects.exists()


# ---------------------------------------------------------------------------------------
# The other create forms of the settings page
# ---------------------------------------------------------------------------------------


def test_adding_a_member_or_a_model_redirects(client, project_team, make_user):
    slug = project_team["project"].slug
    make_user("newcomer")
    client.force_login(project_team["owner"])
    response = client.post(_settings(slug, "members/add/"), {"username": "newcomer", "role": "viewer"})
    assert response.status_code == 302 and response["Location"] == _settings(slug) + "#members"
    assert Membership.objects.filter(user__username="newcomer").count() == 1
    response = client.post(_settings(slug, "models/add/"), {"name": "tiny", "source": "HuggingFaceTB/SmolLM2-135M"})
    assert response.status_code == 302 and response["Location"] == _settings(slug) + "#models"
    assert ModelSpec.objects.filter(project=project_team["project"], name="tiny").count() == 1
