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


PIXEL_AT = """async ([png, x, y]) => {
  const image = new Image();
  image.src = "data:image/png;base64," + png;
  await image.decode();
  const canvas = document.createElement("canvas");
  canvas.width = image.width; canvas.height = image.height;
  const context = canvas.getContext("2d");
  context.drawImage(image, 0, 0);
  const [r, g, b] = context.getImageData(x, y, 1, 1).data;
  return `rgb(${r}, ${g}, ${b})`;
}"""


def test_sidebar_background_runs_the_whole_length_of_a_long_page(page, live_server, project_team):
    """A full-page capture of a page far taller than the window keeps the sidebar's colour to the bottom."""
    import base64

    login(page, live_server, "viewer")
    page.set_viewport_size({"width": 1200, "height": 600})
    page.goto(f"{live_server.url}/p/{project_team['project'].slug}/jobs/")
    page.evaluate("document.querySelector('main').style.minHeight = '3000px'")
    sidebar = page.evaluate("getComputedStyle(document.querySelector('.sidenav')).backgroundColor")
    main = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert sidebar != main
    png = base64.b64encode(page.screenshot(full_page=True)).decode()
    assert page.evaluate(PIXEL_AT, [png, 40, 2900]) == sidebar  # beside the sidebar's links: far below the window
    assert page.evaluate(PIXEL_AT, [png, 600, 2900]) == main
