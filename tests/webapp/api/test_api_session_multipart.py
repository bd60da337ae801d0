"""A broken multipart upload to the API is judged after access, for session callers as for token callers.

ninja's CSRF check for a logged-in session reads the form body, which once made a non-member's
broken upload a 400 (the body could not be read) where a token caller got the 404 of a project
they cannot see. Now both get 404 for a project they are not in (or that does not exist), a
member a 400 that says the upload could not be read, and nothing is written either way.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.middleware.csrf import _get_new_csrf_string
from django.test import Client

MALFORMED = {
    "no boundary": "multipart/form-data",
    "empty boundary": "multipart/form-data; boundary=",
    "non-ASCII boundary": "multipart/form-data; boundary=grenzé",
}
BODY = b'--x\r\nContent-Disposition: form-data; name="name"\r\n\r\nx\r\n--x--\r\n'
ENDPOINTS = ["/api/projects/{slug}/datasets/import", "/api/projects/{slug}/runs/import"]
WHO = [("editor", "own", 400), ("outsider", "own", 404), ("editor", "unknown", 404)]


def _row_counts() -> dict[str, int]:
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


def _session_client(user, *, with_csrf_token: bool) -> tuple[Client, dict]:
    """A browser as in production (CSRF enforced), logged in; with or without the CSRF token it would send."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    if not with_csrf_token:
        return client, {}
    token = _get_new_csrf_string()
    client.cookies["csrftoken"] = token
    return client, {"HTTP_X_CSRFTOKEN": token}


def _assert_answer(response, status: int) -> None:
    assert response.status_code == status, response.content[:400]
    assert response["Content-Type"].startswith("application/json")
    detail = response.json()["detail"]
    if status == 400:
        assert "could not be read" in detail and "multipart" in detail, detail
    else:
        assert "could not be read" not in detail, "a non-member learnt how the body was refused"


@pytest.mark.parametrize("body", sorted(MALFORMED))
@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(("who", "project", "status"), WHO)
@pytest.mark.parametrize("with_csrf_token", [True, False], ids=["csrf-token", "no-csrf-token"])
def test_a_session_caller_gets_the_access_answer_before_the_body_is_read(project_team, body, path, who, project,
                                                                          status, with_csrf_token):
    slug = project_team["project"].slug if project == "own" else "no-such-project"
    client, headers = _session_client(project_team[who], with_csrf_token=with_csrf_token)
    before = _row_counts()
    response = client.generic("POST", path.format(slug=slug), BODY, content_type=MALFORMED[body], **headers)
    if status == 400 and not with_csrf_token:
        # A member without the CSRF cookie is refused by the CSRF check, which then reads no body.
        assert response.status_code == 403 and "CSRF" in response.json()["detail"], response.content[:400]
    else:
        _assert_answer(response, status)
    assert _row_counts() == before


@pytest.mark.parametrize("body", sorted(MALFORMED))
@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(("who", "project", "status"), WHO)
def test_a_token_caller_gets_the_same_answers(client, project_team, bearer, body, path, who, project, status):
    slug = project_team["project"].slug if project == "own" else "no-such-project"
    headers = bearer(who)  # the token is issued before counting
    before = _row_counts()
    response = client.generic("POST", path.format(slug=slug), BODY, content_type=MALFORMED[body], **headers)
    _assert_answer(response, status)
    assert _row_counts() == before


def test_a_member_session_without_the_csrf_token_is_still_refused_by_csrf(project_team):
    """The access check comes first, but does not replace the CSRF check for members."""
    client, _ = _session_client(project_team["editor"], with_csrf_token=False)
    response = client.post(f"/api/projects/{project_team['project'].slug}/jobs", {"kind": "noop"},
                           content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]
