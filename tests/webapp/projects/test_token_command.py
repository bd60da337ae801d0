"""`manage.py crucible_token`: issue a token (secret printed once), list and revoke tokens."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from webapp.projects.models import ApiToken
from webapp.projects.services.projects import hash_token


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("crucible_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_created_token_authenticates_and_revoking_stops_it(client, project_team):
    out, err = run("create", "--user", "viewer", "--name", "ci runner")
    secret = out.strip()
    assert "\n" not in secret and secret.startswith("cru_")  # stdout holds only the secret
    assert "not be shown again" in err and secret not in err

    token = ApiToken.objects.get(user=project_team["viewer"], name="ci runner")
    assert token.token_hash == hash_token(secret)
    assert token.prefix == secret[:12]

    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    response = client.get("/api/projects", **headers)
    assert response.status_code == 200
    assert [p["slug"] for p in response.json()] == [project_team["project"].slug]

    out, _ = run("revoke", "--prefix", token.prefix)
    assert f"Revoked token {token.pk}" in out
    assert client.get("/api/projects", **headers).status_code == 401

    out, _ = run("revoke", "--id", str(token.pk))
    assert "already revoked" in out


def test_list_shows_tokens_but_never_secrets(project_team):
    first = run("create", "--user", "editor", "--name", "laptop")[0].strip()
    run("create", "--user", "editor", "--name", "ci")
    run("revoke", "--prefix", first[:12])
    out, _ = run("list", "--user", "editor")
    assert "laptop" in out and "ci" in out and "revoked" in out and "active" in out
    assert first not in out
    active, _ = run("list", "--user", "editor", "--active")
    assert "laptop" not in active and "ci" in active
    assert "no API tokens" in run("list", "--user", "viewer")[0]


def test_revoke_by_id_limited_to_a_user(client, project_team):
    secret = run("create", "--user", "owner", "--name", "bot")[0].strip()
    token = ApiToken.objects.get(name="bot")
    with pytest.raises(CommandError, match="No API token"):
        run("revoke", "--id", str(token.pk), "--user", "viewer")
    run("revoke", "--id", str(token.pk), "--user", "owner")
    assert client.get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 401


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create", "--user", "nobody", "--name", "x"], "No user named 'nobody'"),
        (["create", "--user", "viewer", "--name", ""], "must not be empty"),
        (["create", "--user", "viewer", "--name", "   "], "must not be empty"),
        (["create", "--user", "viewer", "--name", "x" * 101], "at most 100"),
        (["list", "--user", "nobody"], "No user named"),
        (["revoke", "--id", "999999"], "No API token with id 999999"),
        (["revoke", "--prefix", "cru_missing0"], "No API token with prefix"),
    ],
)
def test_bad_input_is_a_clear_error(project_team, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not ApiToken.objects.exists()


def test_inactive_user_gets_no_token(project_team):
    viewer = project_team["viewer"]
    viewer.is_active = False
    viewer.save()
    with pytest.raises(CommandError, match="inactive"):
        run("create", "--user", "viewer", "--name", "ci")


def test_an_action_is_required(db):
    with pytest.raises(CommandError):
        run()
