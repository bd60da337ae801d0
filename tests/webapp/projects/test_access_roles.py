"""Per-project roles: one place enforces them; strangers get 404, low roles 403."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404

from webapp.projects.selectors.access import (
    for_user,
    get_object_or_404_for_user,
    get_project_or_404,
    has_role,
)
from webapp.runs.models import Job
from webapp.runs.services.jobs import job_create

ROLES = ["viewer", "reviewer", "editor", "owner"]


@pytest.mark.parametrize("member", ROLES)
@pytest.mark.parametrize("minimum", ROLES)
def test_role_ladder(project_team, member, minimum):
    user, project = project_team[member], project_team["project"]
    expected = ROLES.index(member) >= ROLES.index(minimum)
    assert has_role(user, project, minimum) is expected
    if expected:
        assert get_project_or_404(user, project.slug, minimum) == project
    else:
        with pytest.raises(PermissionDenied):
            get_project_or_404(user, project.slug, minimum)


def test_outsider_gets_404_not_403(project_team):
    with pytest.raises(Http404):
        get_project_or_404(project_team["outsider"], project_team["project"].slug)


def test_objects_of_other_projects_are_invisible(project_team, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        mine = job_create(project=project_team["project"], kind="noop")
        theirs = job_create(project=project_team["other"], kind="noop")
    visible = set(for_user(Job.objects.all(), project_team["viewer"]).values_list("pk", flat=True))
    assert mine.pk in visible and theirs.pk not in visible
    with pytest.raises(Http404):
        get_object_or_404_for_user(Job.objects.all(), project_team["viewer"], pk=theirs.pk)
    with pytest.raises(PermissionDenied):
        get_object_or_404_for_user(Job.objects.all(), project_team["viewer"], "editor", pk=mine.pk)


def test_inactive_user_sees_nothing(project_team):
    editor = project_team["editor"]
    editor.is_active = False
    editor.save()
    with pytest.raises(Http404):
        get_project_or_404(editor, project_team["project"].slug)


def test_role_changes_are_audited_and_last_owner_kept(project_team):
    from webapp.projects.models import AuditEvent
    from webapp.projects.services.projects import membership_set_role

    project, owner = project_team["project"], project_team["owner"]
    membership_set_role(project=project, user=project_team["viewer"], role="editor", actor=owner)
    event = AuditEvent.objects.filter(project=project, action="membership.set_role").first()
    assert event.data == {"user": "viewer", "from": "viewer", "to": "editor"}
    with pytest.raises(ValueError, match="at least one owner"):
        membership_set_role(project=project, user=owner, role="viewer", actor=owner)
