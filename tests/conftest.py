"""Shared fixtures: users in each role of one project, and a stranger's project."""

from __future__ import annotations

import pytest


@pytest.fixture
def make_user(django_user_model):
    counter = {"n": 0}

    def make(username: str | None = None, **extra):
        counter["n"] += 1
        name = username or f"user{counter['n']}"
        return django_user_model.objects.create_user(username=name, password="pw-" + name, **extra)

    return make


@pytest.fixture
def project_team(db, make_user):
    """A project with one member per role, plus an outsider who belongs to another project."""
    from webapp.projects.services.projects import membership_set_role, project_create

    owner = make_user("owner")
    project = project_create(name="Acme agents", owner=owner)
    members = {"owner": owner}
    for role in ("viewer", "reviewer", "editor"):
        user = make_user(role)
        membership_set_role(project=project, user=user, role=role, actor=owner)
        members[role] = user
    outsider = make_user("outsider")
    other = project_create(name="Other team", owner=outsider)
    return {"project": project, "other": other, "outsider": outsider, **members}


@pytest.fixture
def bearer(project_team):
    """Authorization headers for a role of `project_team` (one API token per role, issued on first use)."""
    from webapp.projects.services.projects import api_token_issue

    tokens: dict[str, str] = {}

    def headers(who: str) -> dict:
        if who not in tokens:
            tokens[who] = api_token_issue(user=project_team[who], name=f"{who} script").raw
        return {"HTTP_AUTHORIZATION": f"Bearer {tokens[who]}"}

    return headers
