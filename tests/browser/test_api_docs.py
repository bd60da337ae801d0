"""The API docs render in a real browser, from our own static files, under the strict CSP."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Runs before any page script: records what the CSP blocks (the console also says "Refused to ...").
RECORD_CSP_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI);
});
"""


def test_swagger_ui_renders_the_operations_offline(page, live_server, project_team):
    console, foreign = [], []
    page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
    page.on("request", lambda req: None if req.url.startswith((live_server.url, "data:", "blob:"))
            else foreign.append(req.url))
    page.add_init_script(RECORD_CSP_VIOLATIONS)

    page.goto(f"{live_server.url}/api/docs")
    assert "/login/" in page.url  # the docs need a login
    page.fill("input[name=username]", "viewer")
    page.fill("input[name=password]", "pw-viewer")
    page.click("button[type=submit]")
    page.wait_for_url("**/api/docs")

    # Swagger UI fetched the schema and listed the operations.
    page.locator(".opblock-summary-path", has_text="/api/projects").first.wait_for(timeout=20_000)
    assert page.locator(".opblock").count() >= 10
    assert page.locator(".opblock-summary-path", has_text="/api/checkpoints/{checkpoint_id}/promote").count() == 1

    # Opening an operation works too (more of Swagger UI's code runs).
    page.locator(".opblock-summary-path", has_text="/api/projects").first.click()
    page.locator(".opblock-body").first.wait_for()

    assert page.evaluate("window.__cspViolations") == []
    assert not [line for line in console if "Content Security Policy" in line or "Refused to" in line], console
    assert foreign == []
