"""Failed logins: a user name is locked out from one address after 5 failures, told when to retry.

django-axes keeps the counts in the database, so each test starts from none (rolled back).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import authenticate

LIMIT = 5  # AXES_FAILURE_LIMIT's default (CRUCIBLE_LOGIN_FAILURE_LIMIT)


def _login(client, username: str, password: str, addr: str = "127.0.0.1", **extra):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=addr, **extra)


def _fail(client, username: str, times: int, addr: str = "127.0.0.1", **extra):
    return [_login(client, username, "wrong", addr, **extra) for _ in range(times)]


def test_settings_are_the_documented_ones(settings):
    assert settings.AXES_FAILURE_LIMIT == LIMIT
    assert timedelta(minutes=15) == settings.AXES_COOLOFF_TIME
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


def test_five_wrong_passwords_lock_out_even_the_right_one(client, project_team):
    responses = _fail(client, "editor", LIMIT)
    assert [r.status_code for r in responses[:-1]] == [200] * (LIMIT - 1)
    assert all("didn't match" in r.content.decode() for r in responses[:-1])
    assert responses[-1].status_code == 429  # the failure that reaches the limit already says so

    right = _login(client, "editor", "pw-editor")
    assert right.status_code == 429
    body = right.content.decode()
    assert "Too many failed logins" in body and "Try again in 15 minutes" in body
    assert 890 <= int(right["Retry-After"]) <= 900
    assert "_auth_user_id" not in client.session
    assert "Content-Security-Policy" in right  # still our page, under our headers


def test_the_message_counts_down(client, project_team):
    _fail(client, "editor", LIMIT)
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(minutes=10))
    response = _login(client, "editor", "pw-editor")
    assert response.status_code == 429
    assert "Try again in 5 minutes" in response.content.decode()
    assert 290 <= int(response["Retry-After"]) <= 300


def test_the_lock_ends_after_the_cool_off(client, project_team):
    _fail(client, "editor", LIMIT)
    assert _login(client, "editor", "pw-editor").status_code == 429
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(minutes=16))
    response = _login(client, "editor", "pw-editor")
    assert response.status_code == 302 and response["Location"] == "/"
    assert AccessAttempt.objects.count() == 0  # a success clears the count


def test_tries_during_the_lock_do_not_extend_it(client, project_team):
    _fail(client, "editor", LIMIT)
    first_lock = AccessAttempt.objects.get()
    _fail(client, "editor", 3)
    _login(client, "editor", "pw-editor")
    attempt = AccessAttempt.objects.get()
    assert attempt.attempt_time == first_lock.attempt_time
    assert attempt.failures_since_start == LIMIT


def test_policy_is_per_user_name_and_address(client, project_team):
    _fail(client, "editor", LIMIT)
    # Another user at the same address logs in (a shared office address is not locked as a whole) ...
    assert _login(client, "viewer", "pw-viewer").status_code == 302
    client.logout()
    # ... and so does the same user from another address.
    assert _login(client, "editor", "pw-editor", addr="10.0.0.2").status_code == 302
    client.logout()
    assert _login(client, "editor", "pw-editor").status_code == 429


def test_a_success_resets_the_count(client, project_team):
    _fail(client, "editor", LIMIT - 1)
    assert _login(client, "editor", "pw-editor").status_code == 302
    client.logout()
    responses = _fail(client, "editor", LIMIT - 1)
    assert all(r.status_code == 200 for r in responses)


def test_unknown_user_names_are_throttled_too(client, project_team):
    responses = _fail(client, "nobody", LIMIT)
    assert responses[-1].status_code == 429


def test_forwarded_for_cannot_dodge_the_lock(client, project_team):
    for n in range(LIMIT):
        _login(client, "editor", "wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
    assert _login(client, "editor", "pw-editor", HTTP_X_FORWARDED_FOR="192.0.2.200").status_code == 429


def test_admin_login_shares_the_lock(client, project_team):
    _fail(client, "owner", LIMIT)
    response = client.post("/admin/login/", {"username": "owner", "password": "pw-owner"})
    assert response.status_code == 429


@pytest.mark.django_db
def test_authenticate_without_a_request_still_works(django_user_model):
    # The shell, management commands and tests call authenticate() with no request.
    django_user_model.objects.create_user(username="ops", password="pw-ops-123")
    assert authenticate(username="ops", password="pw-ops-123") is not None
    assert authenticate(username="ops", password="wrong") is None
