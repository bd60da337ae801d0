"""A person logs in, finds their project, and watches a job on the jobs page."""

from __future__ import annotations

import pytest

from webapp.runs.models import Job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _login(page, live_server, username: str, password: str) -> None:
    page.goto(f"{live_server.url}/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def test_login_project_and_jobs(page, live_server, project_team):
    Job.objects.create(project=project_team["project"], kind="noop", state="failed",
                       error="<img src=x onerror=alert(1)>")
    _login(page, live_server, "editor", "pw-editor")
    page.wait_for_selector("main >> text=Acme agents")
    assert page.locator("text=Other team").count() == 0
    page.click("main >> text=Acme agents")
    page.click(".sidenav >> text=Jobs")
    row = page.locator("tr.state-failed")
    row.wait_for()
    # The untrusted error text is shown as text, not turned into an element.
    assert "<img src=x onerror=alert(1)>" in row.inner_text()
    assert page.locator("tr.state-failed img").count() == 0


def test_wrong_password_says_so(page, live_server, project_team):
    _login(page, live_server, "editor", "wrong")
    assert page.locator("text=didn't match").is_visible()
