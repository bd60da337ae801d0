"""The page shell: navigation, project switcher, theme per user, search box, breadcrumbs."""

from __future__ import annotations

from webapp.projects.models import UserPreference


def test_project_pages_have_the_navigation_and_breadcrumbs(client, project_team):
    client.force_login(project_team["viewer"])
    slug = project_team["project"].slug
    body = client.get(f"/p/{slug}/jobs/").content.decode()
    assert f'href="/p/{slug}/" data-nav-key="o"' in body
    assert f'href="/p/{slug}/jobs/" data-nav-key="j" class="active"' in body
    assert 'class="breadcrumbs"' in body and ">Jobs</span>" in body


def test_the_switcher_lists_only_my_projects_and_refuses_others(client, project_team):
    client.force_login(project_team["viewer"])
    body = client.get("/").content.decode()
    assert 'value="acme-agents"' in body and "other-team" not in body
    assert client.get("/go/?slug=acme-agents")["Location"] == "/p/acme-agents/"
    assert client.get(f"/go/?slug={project_team['other'].slug}").status_code == 404


def test_the_theme_is_stored_per_user_and_rendered(client, project_team):
    viewer = project_team["viewer"]
    client.force_login(viewer)
    assert 'data-theme="auto"' in client.get("/").content.decode()
    response = client.post("/settings/theme/", {"theme": "dark", "next": "/p/acme-agents/jobs/"})
    assert response.status_code == 302 and response["Location"] == "/p/acme-agents/jobs/"
    assert UserPreference.objects.get(user=viewer).theme == "dark"
    assert 'data-theme="dark"' in client.get("/").content.decode()
    client.force_login(project_team["editor"])
    assert 'data-theme="auto"' in client.get("/").content.decode(), "another user keeps their own theme"


def test_a_bad_theme_or_a_foreign_next_url_is_refused(client, project_team):
    client.force_login(project_team["viewer"])
    response = client.post("/settings/theme/", {"theme": "neon", "next": "https://evil.example/"})
    assert response["Location"] == "/"
    assert not UserPreference.objects.exists()
    assert client.get("/settings/theme/").status_code == 405


def test_search_needs_membership(client, project_team):
    client.force_login(project_team["viewer"])
    assert client.get(f"/p/{project_team['other'].slug}/search/?q=x").status_code == 404
    assert client.get(f"/p/{project_team['project'].slug}/search/?q=x").status_code == 302


def test_plotly_is_served_from_the_package(client, project_team):
    from django.contrib.staticfiles import finders

    found = finders.find("vendor/plotly.min.js")
    assert found and "site-packages" in found and found.endswith("plotly/package_data/plotly.min.js")
