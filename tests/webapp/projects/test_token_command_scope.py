"""`manage.py crucible_token create` with a scope: --read-only, --project SLUG, --expires-in DAYS / --expires DATE."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from webapp.projects.models import ApiToken, TokenAccess


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("crucible_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_with_a_scope_issues_a_narrowed_token(client, project_team):
    slug = project_team["project"].slug
    before = timezone.now()
    out, err = run("create", "--user", "viewer", "--name", "dash", "--read-only", "--project", slug,
                   "--expires-in", "30")
    secret = out.strip()
    token = ApiToken.objects.get(user=project_team["viewer"])
    assert token.access == TokenAccess.READ and token.project == project_team["project"]
    assert before + timedelta(days=30) <= token.expires_at <= timezone.now() + timedelta(days=30)
    assert f"read-only, only project {slug}, expires" in err and secret not in err
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    assert client.get("/api/projects", **headers).status_code == 200
    assert client.post(f"/api/projects/{slug}/verifiers", {}, content_type="application/json",
                       **headers).status_code == 403

    listing, _ = run("list", "--user", "viewer")
    row = listing.splitlines()[1]
    assert "read " in row and slug in row and "active" in row and secret not in listing


def test_expires_on_a_date_and_lists_as_expired_once_past(project_team):
    run("create", "--user", "viewer", "--name", "until", "--expires", "2999-01-31")
    token = ApiToken.objects.get(name="until")
    assert token.expires_at == datetime(2999, 1, 31, tzinfo=UTC)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    listing, _ = run("list", "--user", "viewer")
    assert "expired" in listing.splitlines()[1]


@pytest.mark.parametrize(("args", "message"), [
    (["--expires-in", "0"], "give 1 to 3650"),
    (["--expires-in", "5000"], "give 1 to 3650"),
    (["--expires", "31/01/2030"], "not a date: write it as YYYY-MM-DD"),
    (["--expires", "2001-01-01"], "must be in the future"),
    (["--project", "no-such"], "No project with the slug 'no-such'"),
    (["--project", "other-team"], "not a member of the project"),
])
def test_bad_scope_options_are_clear_errors_and_issue_nothing(project_team, args, message):
    with pytest.raises(CommandError, match=message):
        run("create", "--user", "viewer", "--name", "x", *args)
    assert not ApiToken.objects.exists()


def test_expiry_options_are_exclusive(project_team):
    with pytest.raises(CommandError):
        run("create", "--user", "viewer", "--name", "x", "--expires-in", "3", "--expires", "2999-01-01")
