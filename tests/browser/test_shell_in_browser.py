"""The shell in a real browser: global keys, the help overlay, the switcher and the theme."""

from __future__ import annotations

import pytest
from browser_session import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_keys_help_overlay_and_navigation(page, live_server, project_team):
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    login(page, live_server, "viewer")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/")
    page.keyboard.press("?")
    dialog = page.locator("dialog#help")
    dialog.wait_for(state="visible")
    assert "go to Jobs" in dialog.inner_text()
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "global-search"
    page.keyboard.type("gj")  # typing in a field is text, not keys
    assert page.url.endswith(f"/p/{slug}/")
    page.locator("main").click()
    page.keyboard.press("g")
    page.keyboard.press("j")
    page.wait_for_url(f"{live_server.url}/p/{slug}/jobs/")
    assert page.locator(".sidenav a.active").inner_text().startswith("Jobs")
    assert errors == []


def test_switcher_and_theme_toggle(page, live_server, project_team):
    login(page, live_server, "owner")
    page.select_option("#project-switcher", project_team["project"].slug)
    page.wait_for_url(f"{live_server.url}/p/{project_team['project'].slug}/")
    assert page.get_attribute("html", "data-theme") == "auto"
    page.click(".theme-toggle button")
    page.wait_for_load_state()
    assert page.get_attribute("html", "data-theme") == "dark"
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 18, 23)"
    assert page.url.endswith(f"/p/{project_team['project'].slug}/")
