"""API access without credentials, CSRF for sessions only, the bad-token throttle, the docs behind login."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from webapp.api.api import api
from webapp.api.models import TokenFailure
from webapp.projects.models import ApiToken
from webapp.projects.services.projects import api_token_issue, api_token_revoke
from webapp.projects.services.throttle import client_ip
from webapp.runs.models import Job


@pytest.fixture
def csrf_client():
    return Client(enforce_csrf_checks=True)


def _operations(slug: str) -> list[tuple[str, str]]:
    """(method, URL) of every API operation, from the OpenAPI schema, with placeholder path parameters."""
    ops = []
    for path, methods in api.get_openapi_schema()["paths"].items():
        url = path.replace("{slug}", slug).replace("{name}", "production")
        url = re.sub(r"\{\w+\}", "1", url)
        ops += [(method.upper(), url) for method in methods]
    return ops


def _call(client, method: str, url: str, **extra):
    send = getattr(client, method.lower())
    if method in ("POST", "PUT", "PATCH"):
        return send(url, {}, content_type="application/json", **extra)
    return send(url, **extra)


def test_the_schema_lists_the_operations_the_issue_names(project_team):
    ops = _operations(project_team["project"].slug)
    slug = project_team["project"].slug
    for expected in [("GET", "/api/projects"), ("POST", f"/api/projects/{slug}/jobs"),
                     ("POST", "/api/checkpoints/1/promote")]:
        assert expected in ops
    assert len(ops) >= 10


@pytest.mark.parametrize("credentials", ["none", "bad token", "revoked token", "wrong scheme"])
def test_every_operation_is_401_without_valid_credentials(csrf_client, project_team, settings, credentials):
    settings.CRUCIBLE_TOKEN_FAILURE_LIMIT = 1000  # this test sends many bad tokens from one address
    headers = {}
    if credentials == "bad token":
        headers = {"HTTP_AUTHORIZATION": "Bearer cru_not-a-real-token"}
    elif credentials == "revoked token":
        issued = api_token_issue(user=project_team["owner"], name="old")
        api_token_revoke(token=issued.token)
        headers = {"HTTP_AUTHORIZATION": f"Bearer {issued.raw}"}
    elif credentials == "wrong scheme":
        headers = {"HTTP_AUTHORIZATION": "Basic b3duZXI6cHctb3duZXI="}
    wrong = []
    for method, url in _operations(project_team["project"].slug):
        response = _call(csrf_client, method, url, **headers)
        if response.status_code != 401 or response.json() != {"detail": "Unauthorized"}:
            wrong.append((method, url, response.status_code, response.content[:80]))
    assert not wrong, wrong
    assert not Job.objects.exists()


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_methods_no_endpoint_has_are_405_not_a_csrf_403(csrf_client, project_team, method):
    slug = project_team["project"].slug
    for url in ("/api/projects", f"/api/projects/{slug}/jobs", "/api/checkpoints/1/promote"):
        response = _call(csrf_client, method, url)
        assert response.status_code == 405, (url, response.status_code, response.content)


def test_an_expired_session_cookie_is_401_not_403(csrf_client, project_team):
    csrf_client.cookies["sessionid"] = "no-such-session"
    slug = project_team["project"].slug
    response = csrf_client.post(f"/api/projects/{slug}/jobs", {"kind": "noop"}, content_type="application/json")
    assert response.status_code == 401


def _csrf_token(client) -> str:
    client.get("/login/")  # any page with a form sets the CSRF cookie
    return client.cookies["csrftoken"].value


def test_session_post_needs_the_csrf_token(csrf_client, project_team, django_capture_on_commit_callbacks):
    slug = project_team["project"].slug
    csrf_client.force_login(project_team["editor"])
    refused = csrf_client.post(f"/api/projects/{slug}/jobs", {"kind": "noop"}, content_type="application/json")
    assert refused.status_code == 403
    assert refused.json() == {"detail": "CSRF check Failed"}
    assert not Job.objects.exists()

    token = _csrf_token(csrf_client)
    with django_capture_on_commit_callbacks(execute=False):
        accepted = csrf_client.post(f"/api/projects/{slug}/jobs", {"kind": "noop"}, content_type="application/json",
                                    HTTP_X_CSRFTOKEN=token)
    assert accepted.status_code == 201, accepted.content
    assert Job.objects.count() == 1
    # Reads need no CSRF token.
    assert csrf_client.get("/api/projects").status_code == 200


def test_session_with_a_bad_token_still_needs_csrf(csrf_client, project_team):
    slug = project_team["project"].slug
    csrf_client.force_login(project_team["editor"])
    response = csrf_client.post(f"/api/projects/{slug}/jobs", {"kind": "noop"}, content_type="application/json",
                                HTTP_AUTHORIZATION="Bearer cru_wrong")
    assert response.status_code == 403


def test_token_posts_need_no_csrf_token(csrf_client, project_team, django_capture_on_commit_callbacks):
    slug = project_team["project"].slug
    issued = api_token_issue(user=project_team["editor"], name="ci")
    with django_capture_on_commit_callbacks(execute=False):
        response = csrf_client.post(f"/api/projects/{slug}/jobs", {"kind": "noop"}, content_type="application/json",
                                    HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
    assert response.status_code == 201, response.content


# --- bad-token throttle ---------------------------------------------------------------------


@pytest.fixture
def token_limit(settings):
    settings.CRUCIBLE_TOKEN_FAILURE_LIMIT = 3
    settings.CRUCIBLE_TOKEN_COOLOFF_SECONDS = 600
    return 3


def _bad(client, addr: str, **extra):
    return client.get("/api/projects", HTTP_AUTHORIZATION="Bearer cru_guess", REMOTE_ADDR=addr, **extra)


def test_bad_token_flood_is_429_with_retry_after(client, project_team, token_limit):
    good = api_token_issue(user=project_team["viewer"], name="ci")
    for _ in range(token_limit):
        assert _bad(client, "10.0.0.1").status_code == 401
    locked = _bad(client, "10.0.0.1")
    assert locked.status_code == 429
    assert 590 <= int(locked["Retry-After"]) <= 600
    assert "Try again in 10 minutes" in locked.json()["detail"]

    # While locked, even a good token from that address is not looked at (last use not recorded) ...
    from_locked = client.get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {good.raw}", REMOTE_ADDR="10.0.0.1")
    assert from_locked.status_code == 429
    assert ApiToken.objects.get(pk=good.token.pk).last_used_at is None
    # ... and the lock does not grow with the attempts made during it.
    assert TokenFailure.objects.get(client="10.0.0.1").failures == token_limit
    # Another address is unaffected; so are requests from the locked address that carry no token.
    other = client.get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {good.raw}", REMOTE_ADDR="10.0.0.2")
    assert other.status_code == 200
    assert client.get("/api/projects", REMOTE_ADDR="10.0.0.1").status_code == 401


def test_token_lock_ends_after_the_cool_off(client, project_team, token_limit):
    good = api_token_issue(user=project_team["viewer"], name="ci")
    for _ in range(token_limit):
        _bad(client, "10.0.0.1")
    assert _bad(client, "10.0.0.1").status_code == 429
    past = timezone.now() - timedelta(seconds=601)
    TokenFailure.objects.filter(client="10.0.0.1").update(window_start=past, locked_until=past)
    response = client.get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {good.raw}", REMOTE_ADDR="10.0.0.1")
    assert response.status_code == 200
    # A fresh window: one more bad token does not lock again at once.
    assert _bad(client, "10.0.0.1").status_code == 401
    assert TokenFailure.objects.get(client="10.0.0.1").failures == 1


def test_failures_older_than_the_window_do_not_count(client, project_team, token_limit):
    for _ in range(token_limit - 1):
        _bad(client, "10.0.0.1")
    TokenFailure.objects.update(window_start=timezone.now() - timedelta(seconds=601))
    for _ in range(token_limit - 1):
        assert _bad(client, "10.0.0.1").status_code == 401
    assert _bad(client, "10.0.0.1").status_code == 401  # the limit-th bad token in this window locks ...
    assert _bad(client, "10.0.0.1").status_code == 429  # ... the next request


def test_forwarded_for_is_ignored_unless_proxies_are_trusted(client, project_team, token_limit, settings):
    for n in range(token_limit):
        _bad(client, "10.0.0.1", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
    assert _bad(client, "10.0.0.1", HTTP_X_FORWARDED_FOR="192.0.2.99").status_code == 429
    assert list(TokenFailure.objects.values_list("client", flat=True)) == ["10.0.0.1"]

    settings.CRUCIBLE_TRUSTED_PROXY_COUNT = 1
    # Behind one proxy, the client is the address the proxy appended (the right-most one).
    assert _bad(client, "10.0.0.1", HTTP_X_FORWARDED_FOR="10.0.0.1, 198.51.100.7").status_code == 401
    assert TokenFailure.objects.filter(client="198.51.100.7").exists()


def test_client_ip(rf, settings):
    settings.CRUCIBLE_TRUSTED_PROXY_COUNT = 0
    assert client_ip(rf.get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="6.6.6.6")) == "10.1.1.1"
    settings.CRUCIBLE_TRUSTED_PROXY_COUNT = 1
    assert client_ip(rf.get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.5")) == "203.0.113.5"
    assert client_ip(rf.get("/", REMOTE_ADDR="10.1.1.1")) == "10.1.1.1"  # no header: the proxy was bypassed
    assert client_ip(rf.get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="junk")) == "10.1.1.1"
    settings.CRUCIBLE_TRUSTED_PROXY_COUNT = 2
    assert client_ip(rf.get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.5, 10.0.0.3")) == "203.0.113.5"
    assert client_ip(rf.get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="2001:db8::1, 10.0.0.3")) == "2001:db8::1"


# --- docs and schema ---------------------------------------------------------------------------


def test_docs_and_schema_need_a_login(client, project_team):
    docs = client.get("/api/docs")
    assert docs.status_code == 302 and docs["Location"] == "/login/?next=/api/docs"
    schema = client.get("/api/openapi.json")
    assert schema.status_code == 401 and schema.json() == {"detail": "Unauthorized"}
    assert client.get("/api/openapi.json", HTTP_AUTHORIZATION="Bearer cru_wrong").status_code == 401


def test_a_token_can_read_the_schema(client, project_team):
    issued = api_token_issue(user=project_team["viewer"], name="codegen")
    response = client.get("/api/openapi.json", HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
    assert response.status_code == 200
    assert "/api/projects" in response.json()["paths"]


def test_docs_page_is_self_hosted_under_the_strict_csp(client, project_team):
    client.force_login(project_team["viewer"])
    response = client.get("/api/docs")
    assert response.status_code == 200
    html = response.content.decode()
    assert "http://" not in html and "https://" not in html and "//cdn" not in html
    assets = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert assets and all(a.startswith("/static/") for a in assets), assets
    # The only script without a src is Swagger UI's settings as a JSON data block, which is never run.
    inline = re.findall(r"<script(?![^>]*\bsrc=)([^>]*)>", html)
    assert inline == [' type="application/json" id="swagger-settings"'], inline
    script_src = response["Content-Security-Policy"].split("script-src")[1].split(";")[0]
    assert script_src.strip() == "'self'"
    assert client.get("/api/openapi.json").status_code == 200
    for asset in ("ninja/swagger-ui-bundle.js", "ninja/swagger-ui-init.js", "ninja/swagger-ui.css"):
        assert f"/static/{asset}" in assets
