"""Pages: login required, role rules, untrusted text escaped, CSP set."""

from __future__ import annotations

import pytest

from webapp.runs.models import Job


def test_pages_require_login(client, project_team):
    response = client.get(f"/p/{project_team['project'].slug}/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_login_page_and_csp_header(client):
    response = client.get("/login/")
    assert response.status_code == 200
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]


def test_home_lists_only_my_projects(client, project_team):
    client.force_login(project_team["viewer"])
    body = client.get("/").content.decode()
    assert "Acme agents" in body and "Other team" not in body


def test_other_project_is_404(client, project_team):
    client.force_login(project_team["owner"])
    assert client.get(f"/p/{project_team['other'].slug}/").status_code == 404
    assert client.get(f"/p/{project_team['other'].slug}/jobs/").status_code == 404


def test_model_output_in_job_error_is_escaped(client, project_team):
    Job.objects.create(project=project_team["project"], kind="noop", state="failed",
                       error='<script>alert("pwned")</script>')
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project_team['project'].slug}/jobs/").content.decode()
    assert '<script>alert("pwned")</script>' not in body
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in body


@pytest.mark.parametrize(("role", "allowed"), [("viewer", False), ("reviewer", False), ("editor", True)])
def test_cancel_button_and_action_need_editor(client, project_team, role, allowed):
    job = Job.objects.create(project=project_team["project"], kind="noop")
    slug = project_team["project"].slug
    client.force_login(project_team[role])
    page = client.get(f"/p/{slug}/jobs/").content.decode()
    assert (f"/jobs/{job.pk}/cancel/" in page) is allowed
    response = client.post(f"/p/{slug}/jobs/{job.pk}/cancel/")
    assert response.status_code == (302 if allowed else 403)
    job.refresh_from_db()
    assert (job.state == "cancelled") is allowed


def test_htmx_request_gets_only_the_rows(client, project_team):
    Job.objects.create(project=project_team["project"], kind="noop")
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project_team['project'].slug}/jobs/", HTTP_HX_REQUEST="true").content.decode()
    assert "<tr" in body and "<html" not in body
