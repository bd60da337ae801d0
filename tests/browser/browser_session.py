"""Shared steps of the browser tests (imported by them; users of `project_team` have password pw-<name>)."""

from __future__ import annotations


def login(page, live_server, username: str) -> None:
    """Log in through the login page as a person would, and wait for the project list."""
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"pw-{username}")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")


def shot(page, name: str) -> None:
    """A full-page screenshot under $CRUCIBLE_SCREENSHOT_DIR, when it is set (kept as CI artifacts)."""
    import os
    from pathlib import Path

    folder = os.environ.get("CRUCIBLE_SCREENSHOT_DIR")
    if folder:
        page.screenshot(path=str(Path(folder) / name), full_page=True)


def watch(page) -> dict[str, list[str]]:
    """Dialogs (an executed alert would open one) and CSP violations, recorded for the asserts."""
    seen: dict[str, list[str]] = {"dialogs": [], "csp": []}
    page.on("dialog", lambda dialog: (seen["dialogs"].append(dialog.message), dialog.dismiss()))
    page.on("console", lambda m: seen["csp"].append(m.text) if "Content Security Policy" in m.text else None)
    return seen
