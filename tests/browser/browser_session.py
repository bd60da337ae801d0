"""Shared steps of the browser tests (imported by them; users of `project_team` have password pw-<name>)."""

from __future__ import annotations


def login(page, live_server, username: str) -> None:
    """Log in through the login page as a person would, and wait for the project list."""
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"pw-{username}")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
