"""The Django admin: superusers only, view-only for rows the services write, tokens issued properly."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from webapp.datasets.models import Task, TaskDataset
from webapp.projects.admin import PRODUCT_NOTE
from webapp.projects.models import ApiToken, AuditEvent, Membership
from webapp.runs.models import (
    AliasMove,
    Checkpoint,
    CheckpointAlias,
    Experiment,
    Job,
    MetricPoint,
    ModelSpec,
    Run,
    WorkerNode,
)
from webapp.trajectories.models import Review, Trajectory
from webapp.verifiers.models import Verifier, VerifierVersion

VIEW_ONLY = [Run, Experiment, Job, MetricPoint, Checkpoint, CheckpointAlias, Trajectory, Review,
             TaskDataset, Task, Verifier, AuditEvent, WorkerNode]


def _project_rows(project, actor) -> dict:
    """One row of every project-owned model in `project`, written directly (not what is under test)."""
    tag = project.slug
    dataset = TaskDataset.objects.create(project=project, name=f"{tag}-tasks", content_hash="d" * 64)
    task = Task.objects.create(dataset=dataset, external_id="t1", messages=[{"role": "user", "content": "hi"}],
                               content_hash="t" * 64)
    verifier = Verifier.objects.create(project=project, name=f"{tag}-verifier", kind="json_tool_call")
    version = VerifierVersion.objects.create(verifier=verifier, version=1, config={}, content_hash="v" * 64)
    model = ModelSpec.objects.create(project=project, name=f"{tag}-model", hf_id="tiny/model")
    run = Run.objects.create(project=project, name=f"{tag}-grpo", kind="grpo", status="running",
                             dataset=dataset, verifier_version=version, model=model)
    job = Job.objects.create(project=project, run=run, kind="grpo", queue="train", state="running", attempt=1)
    first = Checkpoint.objects.create(run=run, step=10, storage_uri=f"/ckpt/{tag}/10")
    second = Checkpoint.objects.create(run=run, step=20, storage_uri=f"/ckpt/{tag}/20")
    alias = CheckpointAlias.objects.create(project=project, name="production", checkpoint=first)
    AliasMove.objects.create(alias=alias, checkpoint=first, moved_by=actor, reason="first")
    MetricPoint.objects.create(run=run, step=10, split="train", name="reward", value=0.5)
    trajectory = Trajectory.objects.create(project=project, run=run, task=task, task_key="t1", step=10, reward=1.0,
                                           passed=True)
    review = Review.objects.create(trajectory=trajectory, reviewer=actor, verdict="agree")
    experiment = Experiment.objects.create(project=project, name=f"{tag}-exp", dataset=dataset,
                                           verifier_version=version, model=model)
    return {"run": run, "job": job, "checkpoints": (first, second), "alias": alias, "trajectory": trajectory,
            "review": review, "experiment": experiment, "dataset": dataset, "verifier": verifier}


@pytest.fixture
def world(project_team):
    now = timezone.now()
    WorkerNode.objects.create(name="gpu@host-1", hostname="host-1", pid=1, queues=["train"],
                              started_at=now, heartbeat_at=now)
    return {
        "mine": _project_rows(project_team["project"], project_team["owner"]),
        "theirs": _project_rows(project_team["other"], project_team["outsider"]),
        **project_team,
    }


@pytest.fixture
def superuser(make_user):
    return make_user("root", is_staff=True, is_superuser=True)


@pytest.fixture
def root_client(client, superuser):
    client.force_login(superuser)
    return client


def _url(obj, view: str = "change") -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=[obj.pk])


def _model_url(model, view: str) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}")


# --- who may enter ------------------------------------------------------------------------------


def test_staff_viewer_without_superuser_is_refused_everywhere(client, world):
    """A staff viewer of project A, even holding every model permission, reaches no admin page."""
    viewer = world["viewer"]
    viewer.is_staff = True
    viewer.save()
    viewer.user_permissions.set(Permission.objects.all())
    client.force_login(viewer)
    urls = [reverse("admin:index"), reverse("admin:app_list", args=["runs"]),
            _model_url(Trajectory, "changelist"), _model_url(Job, "changelist"),
            _model_url(Run, "add"), _model_url(ApiToken, "add"), reverse("admin:autocomplete")]
    for side in ("mine", "theirs"):
        rows = world[side]
        urls += [_url(rows["trajectory"]), _url(rows["job"]), _url(rows["run"]), _url(rows["alias"]),
                 _url(rows["review"]), _url(rows["run"], "history"), _url(rows["run"], "delete")]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url

    login_page = client.get(reverse("admin:login"))
    assert login_page.status_code == 200
    assert "not authorized" in login_page.content.decode()

    # Writes are refused as well: the other project's alias does not move.
    alias = world["theirs"]["alias"]
    response = client.post(_url(alias), {"name": "production", "project": alias.project_id,
                                         "checkpoint": world["theirs"]["checkpoints"][1].pk})
    assert response.status_code == 302
    alias.refresh_from_db()
    assert alias.checkpoint == world["theirs"]["checkpoints"][0]


def test_anonymous_and_plain_users_get_the_login_page(client, world):
    assert client.get(_url(world["mine"]["trajectory"]))["Location"].startswith(reverse("admin:login"))
    client.force_login(world["owner"])  # owner of the project, but not staff
    assert client.get(reverse("admin:index"))["Location"].startswith(reverse("admin:login"))


def test_superuser_sees_every_admin_list_and_row(root_client, world):
    index = root_client.get(reverse("admin:index"))
    assert index.status_code == 200
    assert PRODUCT_NOTE in index.content.decode()
    for model in admin.site._registry:
        changelist = root_client.get(_model_url(model, "changelist"))
        assert changelist.status_code == 200, model
        obj = model.objects.first()
        if obj is not None:
            assert root_client.get(_url(obj)).status_code == 200, model
    # What may still be added has a working form.
    for model in (ApiToken, type(world["project"]), ModelSpec):
        assert root_client.get(_model_url(model, "add")).status_code == 200, model
    # Both projects' rows are listed.
    jobs = root_client.get(_model_url(Job, "changelist"))
    assert jobs.context["cl"].result_count == 2
    for side in ("mine", "theirs"):
        assert root_client.get(_url(world[side]["trajectory"])).status_code == 200
        assert root_client.get(_url(world[side]["job"])).status_code == 200


# --- view-only for what the services write ------------------------------------------------------


@pytest.mark.parametrize("model", VIEW_ONLY, ids=lambda m: m.__name__)
def test_service_owned_rows_cannot_be_added_changed_or_deleted(root_client, world, model):
    assert root_client.get(_model_url(model, "add")).status_code == 403
    assert root_client.post(_model_url(model, "add"), {}).status_code == 403
    obj = model.objects.first()
    page = root_client.get(_url(obj))
    assert page.status_code == 200
    assert page.context["has_change_permission"] is False
    assert root_client.get(_url(obj, "delete")).status_code == 403
    assert root_client.post(_url(obj, "delete"), {"post": "yes"}).status_code == 403
    assert model.objects.filter(pk=obj.pk).exists()


def test_alias_cannot_be_moved_in_the_admin(root_client, world):
    alias = world["mine"]["alias"]
    _, second = world["mine"]["checkpoints"]
    moves, events = AliasMove.objects.count(), AuditEvent.objects.count()
    response = root_client.post(_url(alias), {
        "name": "production", "project": alias.project_id, "checkpoint": second.pk,
        "moves-TOTAL_FORMS": "0", "moves-INITIAL_FORMS": "0",
    })
    assert response.status_code == 403
    alias.refresh_from_db()
    assert alias.checkpoint == world["mine"]["checkpoints"][0]
    assert (AliasMove.objects.count(), AuditEvent.objects.count()) == (moves, events)


def test_runs_and_jobs_cannot_be_added_or_their_state_edited(root_client, world):
    run, job = world["mine"]["run"], world["mine"]["job"]
    runs, jobs = Run.objects.count(), Job.objects.count()
    assert root_client.post(_model_url(Run, "add"), {"name": "x", "kind": "sft", "project": run.project_id,
                                                    "config": "{}", "status": "queued"}).status_code == 403
    assert root_client.post(_model_url(Job, "add"), {"kind": "noop", "project": run.project_id}).status_code == 403
    assert (Run.objects.count(), Job.objects.count()) == (runs, jobs)

    page = root_client.get(_url(run)).content.decode()
    assert 'name="status"' not in page
    assert root_client.post(_url(run), {"name": run.name, "kind": run.kind, "project": run.project_id,
                                       "config": "{}", "status": "succeeded"}).status_code == 403
    assert root_client.post(_url(job), {"state": "succeeded"}).status_code == 403
    run.refresh_from_db()
    job.refresh_from_db()
    assert (run.status, job.state) == ("running", "running")


def test_the_admin_says_where_runs_are_launched(root_client, world):
    page = root_client.get(_model_url(Run, "changelist")).content.decode()
    assert "launched from the product" in page


# --- API tokens: issued with the secret shown once, revoked by an action --------------------------


def test_admin_issues_a_working_token_and_shows_the_secret_once(root_client, client, world):
    viewer = world["viewer"]
    response = root_client.post(_model_url(ApiToken, "add"), {"user": viewer.pk, "name": "notebook"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    secret = re.search(r'value="(cru_[^"]+)"', response.content.decode()).group(1)
    token = ApiToken.objects.get(name="notebook")
    assert token.user == viewer
    assert token.prefix == secret[:12] != "-"
    assert secret not in (token.token_hash, token.prefix)

    from django.test import Client

    api = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    body = api.get("/api/projects", **headers).json()
    assert [p["slug"] for p in body] == [world["project"].slug]

    # The token's page shows no secret, and the token cannot be edited.
    page = root_client.get(_url(token))
    assert page.status_code == 200
    assert secret not in page.content.decode()
    assert root_client.post(_url(token), {"user": viewer.pk, "name": "renamed"}).status_code == 403

    # Revoking from the list stops it at once.
    changelist = _model_url(ApiToken, "changelist")
    response = root_client.post(changelist, {"action": "revoke_tokens", "_selected_action": [token.pk]})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert api.get("/api/projects", **headers).status_code == 401


@pytest.mark.parametrize("name", ["", "   "])
def test_admin_refuses_a_token_without_a_name(root_client, world, name):
    response = root_client.post(_model_url(ApiToken, "add"), {"user": world["viewer"].pk, "name": name})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors
    assert not ApiToken.objects.exists()


def test_admin_refuses_a_token_for_an_inactive_user(root_client, world):
    viewer = world["viewer"]
    viewer.is_active = False
    viewer.save()
    response = root_client.post(_model_url(ApiToken, "add"), {"user": viewer.pk, "name": "ci"})
    assert "inactive" in response.content.decode()
    assert not ApiToken.objects.exists()


# --- memberships go through the service --------------------------------------------------------


def _membership_post(project, rows: list[dict], **fields) -> dict:
    data = {"name": project.name, "slug": project.slug, "description": project.description,
            "memberships-TOTAL_FORMS": str(len(rows)), "memberships-INITIAL_FORMS": str(sum("id" in r for r in rows)),
            "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000", **fields}
    for i, row in enumerate(rows):
        for key, value in row.items():
            data[f"memberships-{i}-{key}"] = value
        data[f"memberships-{i}-project"] = project.pk
    return data


def _existing(project) -> list[dict]:
    return [{"id": m.pk, "user": m.user_id, "role": m.role}
            for m in Membership.objects.filter(project=project).order_by("pk")]


def test_role_changes_in_the_admin_are_audited(root_client, superuser, world):
    project, viewer = world["project"], world["viewer"]
    rows = _existing(project)
    for row in rows:
        if row["user"] == viewer.pk:
            row["role"] = "editor"
    response = root_client.post(_url(project), _membership_post(project, rows))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Membership.objects.get(project=project, user=viewer).role == "editor"
    event = AuditEvent.objects.filter(action="membership.set_role").latest("id")
    assert event.actor == superuser
    assert event.data == {"user": viewer.username, "from": "viewer", "to": "editor"}


def test_admin_cannot_remove_the_last_owner(root_client, world):
    project, owner = world["project"], world["owner"]
    rows = _existing(project)
    for row in rows:
        if row["user"] == owner.pk:
            row["DELETE"] = "on"
    response = root_client.post(_url(project), _membership_post(project, rows))
    assert response.status_code == 200
    assert "at least one owner" in response.content.decode()
    assert Membership.objects.filter(project=project, user=owner, role="owner").exists()


def test_removing_a_member_in_the_admin_is_audited(root_client, world):
    project, reviewer = world["project"], world["reviewer"]
    rows = _existing(project)
    for row in rows:
        if row["user"] == reviewer.pk:
            row["DELETE"] = "on"
    assert root_client.post(_url(project), _membership_post(project, rows)).status_code == 302
    assert not Membership.objects.filter(project=project, user=reviewer).exists()
    assert AuditEvent.objects.filter(action="membership.remove", project=project).exists()


def test_project_added_in_the_admin_needs_an_owner_and_is_audited(root_client, superuser, world):
    url = _model_url(type(world["project"]), "add")
    base = {"name": "New team", "slug": "new-team", "description": "",
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
            "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000"}
    response = root_client.post(url, base)
    assert response.status_code == 200
    assert "at least one owner" in response.content.decode()
    response = root_client.post(url, {**base, "memberships-TOTAL_FORMS": "1", "memberships-0-user": world["editor"].pk,
                                      "memberships-0-role": "owner"})
    assert response.status_code == 302
    project = type(world["project"]).objects.get(slug="new-team")
    assert project.created_by == superuser
    assert Membership.objects.get(project=project).user == world["editor"]
    assert set(AuditEvent.objects.filter(project=project).values_list("action", flat=True)) == {
        "project.create", "membership.set_role"}


def test_admin_names_models_in_plain_english(client, django_user_model):
    """Django's default plural gave "Checkpoint aliass" and "Trajectorys"."""
    root = django_user_model.objects.create_superuser("root-plural", password="pw-root")
    client.force_login(root)
    index = client.get("/admin/").content.decode()
    assert "Checkpoint aliases" in index and "Trajectories" in index
    assert "aliass" not in index and "Trajectorys" not in index
