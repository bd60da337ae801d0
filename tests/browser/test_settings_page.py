"""The project settings page in a real browser: a member added (after an error), a token created,
copied and revoked, and the copy fallback where the clipboard API is missing.

Set CRUCIBLE_SCREENSHOT_DIR to keep screenshots of the page in the light and dark themes
(settings-light.png, settings-dark.png, settings-token.png, settings-errors.png).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from browser_session import login
from django.test import Client

from webapp.projects.models import ApiToken, Membership, Project, UserPreference
from webapp.projects.services.projects import api_token_issue

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SECRET = re.compile(r"cru_[A-Za-z0-9_-]{20,}")


@pytest.fixture
def context(browser):
    """A context of the test's own, with the clipboard granted (http://localhost is a secure context)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  permissions=["clipboard-read", "clipboard-write"])
    yield context
    context.close()


def _csp_watch(page) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    return errors


def test_create_copy_and_revoke_a_token(context, live_server, project_team):
    page = context.new_page()
    csp_errors = _csp_watch(page)
    login(page, live_server, "editor")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/settings/")
    assert "You have no API tokens yet" in page.locator("#tokens").inner_text()

    page.fill("#token-name", "ci runner")
    page.click("#tokens button:has-text('Create token')")
    page.locator("#new-token-secret").wait_for()
    secret = page.locator("#new-token-secret").inner_text().strip()
    assert SECRET.fullmatch(secret)
    assert page.content().count(secret) == 1  # on the page exactly once
    page.click("button[data-copy='new-token-secret']")
    page.wait_for_function("() => document.querySelector('[data-copy-status]').textContent.length > 0")
    assert page.locator("[data-copy-status]").inner_text() == "Copied to the clipboard."
    assert page.evaluate("() => navigator.clipboard.readText()") == secret
    shots = os.environ.get("CRUCIBLE_SCREENSHOT_DIR")
    if shots:
        page.screenshot(path=str(Path(shots) / "settings-token.png"), full_page=True)

    # the secret works for the API, and it is gone from the page once the page is loaded again
    assert Client().get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200
    page.goto(f"{live_server.url}/p/{slug}/settings/")
    assert secret not in page.content()
    row = page.locator("table.tokens tr.active")
    assert row.count() == 1 and "ci runner" in row.inner_text() and secret[:12] in row.inner_text()

    page.on("dialog", lambda dialog: dialog.accept())
    row.locator("button:has-text('Revoke')").click()
    page.wait_for_selector(".messages li.success:has-text('is revoked')")
    assert "revoked" in page.locator("table.tokens tr.revoked").inner_text()
    assert ApiToken.objects.get(user=project_team["editor"]).revoked_at is not None
    assert Client().get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 401
    assert csp_errors == []


def test_a_dismissed_confirmation_revokes_nothing(context, live_server, project_team):
    token = api_token_issue(user=project_team["viewer"], name="laptop").token
    page = context.new_page()
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project_team['project'].slug}/settings/")
    page.on("dialog", lambda dialog: dialog.dismiss())
    page.click(f"#token-{token.pk} button:has-text('Revoke')")
    page.wait_for_timeout(300)
    token.refresh_from_db()
    assert token.revoked_at is None and page.locator(".messages").count() == 0


def test_copy_falls_back_to_selecting_the_secret(browser, live_server, project_team):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script("Object.defineProperty(navigator, 'clipboard', { value: undefined });")
    try:
        page = context.new_page()
        login(page, live_server, "reviewer")
        page.goto(f"{live_server.url}/p/{project_team['project'].slug}/settings/")
        page.fill("#token-name", "notebook")
        page.click("#tokens button:has-text('Create token')")
        secret = page.locator("#new-token-secret").inner_text().strip()
        page.click("button[data-copy='new-token-secret']")
        page.wait_for_function("() => document.querySelector('[data-copy-status]').textContent.length > 0")
        assert page.evaluate("() => window.getSelection().toString().trim()") == secret
        assert page.locator("[data-copy-status]").inner_text() in (
            "Copied.", "Selected: press Ctrl+C (⌘C on a Mac) to copy.")
    finally:
        context.close()


def test_owner_adds_a_member_after_an_error_and_sets_the_price(context, live_server, project_team):
    page = context.new_page()
    csp_errors = _csp_watch(page)
    login(page, live_server, "owner")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/settings/")
    page.fill("#add-username", "outsidr")
    page.select_option("#add-role", "reviewer")
    page.click("button:has-text('Add member')")
    assert "There is no user named “outsidr”" in page.locator("#add-username-error").inner_text()
    assert page.input_value("#add-username") == "outsidr"  # what was typed is kept
    assert page.input_value("#add-role") == "reviewer"
    page.fill("#price-input", "12,5")
    shots = os.environ.get("CRUCIBLE_SCREENSHOT_DIR")
    page.click("button:has-text('Save price')")
    assert "Use a point for decimals (12.5)" in page.locator("#price-error").inner_text()
    assert page.input_value("#price-input") == "12,5"
    owner_row = page.locator("tr[data-member='owner']")
    owner_row.locator("select").select_option("viewer")
    owner_row.locator("button:has-text('Save')").click()
    assert "only owner" in page.locator("tr[data-member='owner'] .field-error").inner_text()
    if shots:
        page.screenshot(path=str(Path(shots) / "settings-errors.png"), full_page=True)

    page.fill("#add-username", "outsider")
    page.select_option("#add-role", "reviewer")  # each form is its own: the price's error page reset this one
    page.click("button:has-text('Add member')")
    page.wait_for_selector(".messages li.success:has-text('outsider joined')")
    assert Membership.objects.get(project=project_team["project"], user=project_team["outsider"]).role == "reviewer"
    page.fill("#price-input", "12.5")
    page.click("button:has-text('Save price')")
    page.wait_for_selector(".messages li.success:has-text('now 12.5')")
    assert str(Project.objects.get(pk=project_team["project"].pk).price_per_device_hour) == "12.5000"

    page.on("dialog", lambda dialog: dialog.accept())
    page.locator("tr[data-member='outsider'] button:has-text('Remove')").click()
    page.wait_for_selector(".messages li.success:has-text('outsider was removed')")
    assert page.locator("tr[data-member='outsider']").count() == 0
    assert csp_errors == []

    if shots:
        api_token_issue(user=project_team["owner"], name="deploy bot")
        old = api_token_issue(user=project_team["owner"], name="old laptop").token
        ApiToken.objects.filter(pk=old.pk).update(revoked_at=old.created_at)
        for theme in ("light", "dark"):
            UserPreference.objects.update_or_create(user=project_team["owner"], defaults={"theme": theme})
            page.goto(f"{live_server.url}/p/{slug}/settings/")
            page.screenshot(path=str(Path(shots) / f"settings-{theme}.png"), full_page=True)
        context.clear_cookies()  # signed out
        login(page, live_server, "viewer")
        page.goto(f"{live_server.url}/p/{slug}/settings/")
        page.screenshot(path=str(Path(shots) / "settings-viewer.png"), full_page=True)
