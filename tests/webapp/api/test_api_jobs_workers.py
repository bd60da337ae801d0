"""Jobs, queues and workers over the API: roles, keyset pages and filters, retry, liveness, query counts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from webapp.projects.services.projects import api_token_issue
from webapp.runs.models import Job, JobState, Run, WorkerNode
from webapp.runs.selectors.jobs import ALIVE_SECONDS, job_list, queue_summary, worker_list
from webapp.runs.services import jobs as js

ROLES = ["viewer", "reviewer", "editor", "owner"]


def _failed_job(project, **fields) -> Job:
    """A job that a worker claimed and failed, through the real services."""
    job = Job.objects.create(project=project, kind="noop", **fields)
    claimed = js.job_claim(job_id=job.pk, worker="host:1")
    return js.job_fail(job_id=job.pk, attempt=claimed.attempt, error="boom")


def _node(name: str, *, age: float, stopped: bool = False, queues=("default",)) -> WorkerNode:
    now = timezone.now()
    return WorkerNode.objects.create(name=name, hostname=name.split("@")[-1], pid=1, queues=list(queues),
                                     started_at=now - timedelta(hours=1), heartbeat_at=now - timedelta(seconds=age),
                                     stopped_at=now if stopped else None)


def _walk(client, url: str, headers: dict) -> list[dict]:
    items, cursor = [], None
    while True:
        response = client.get(url + (f"&after={cursor}" if cursor else ""), **headers)
        assert response.status_code == 200, response.content
        items += response.json()["items"]
        cursor = response.json()["next"]
        if cursor is None:
            return items


# ---------------------------------------------------------------------------------------
# Roles
# ---------------------------------------------------------------------------------------


@pytest.fixture
def urls(project_team):
    job = Job.objects.create(project=project_team["project"], kind="noop")
    slug = project_team["project"].slug
    return [f"/api/projects/{slug}/queues", f"/api/projects/{slug}/jobs", f"/api/jobs/{job.pk}"]


@pytest.mark.parametrize("role", ROLES)
def test_every_member_reads_queues_jobs_and_workers(client, urls, bearer, role):
    headers = bearer(role)
    for url in [*urls, "/api/workers"]:
        response = client.get(url, **headers)
        assert response.status_code == 200, (url, response.content)


def test_non_members_get_404_on_project_endpoints(client, urls, bearer):
    for url in urls:
        response = client.get(url, **bearer("outsider"))
        assert response.status_code == 404, url
        assert response["Content-Type"].startswith("application/json")


def test_workers_need_membership_of_some_project(client, project_team, make_user):
    loner = make_user("loner")
    issued = api_token_issue(user=loner, name="x")
    refused = client.get("/api/workers", HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
    assert refused.status_code == 403 and "not a member of any" in refused.json()["detail"]
    outsider = api_token_issue(user=project_team["outsider"], name="y")  # a member of another project
    assert client.get("/api/workers", HTTP_AUTHORIZATION=f"Bearer {outsider.raw}").status_code == 200
    assert client.get("/api/workers").status_code == 401


@pytest.mark.parametrize(("role", "status"), [("viewer", 403), ("reviewer", 403), ("editor", 200), ("owner", 200),
                                              ("outsider", 404)])
def test_retry_needs_editor(client, project_team, bearer, role, status, django_capture_on_commit_callbacks):
    job = _failed_job(project_team["project"])
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(f"/api/jobs/{job.pk}/retry", **bearer(role))
    assert response.status_code == status, response.content
    assert ("detail" in response.json()) is (status != 200)
    job.refresh_from_db()
    assert job.state == (JobState.QUEUED if status == 200 else JobState.FAILED)


# ---------------------------------------------------------------------------------------
# Retry
# ---------------------------------------------------------------------------------------


def test_retry_of_a_failed_job_queues_it_with_new_attempts(client, project_team, bearer,
                                                           django_capture_on_commit_callbacks):
    run = Run.objects.create(project=project_team["project"], name="r", kind="grpo", status="failed")
    job = _failed_job(project_team["project"], run=run)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(f"/api/jobs/{job.pk}/retry", **bearer("editor"))
    body = response.json()
    assert response.status_code == 200, body
    assert body["state"] == "queued" and body["error"] == "" and body["attempt_label"] == "1/4"
    assert body["history"][-1]["outcome"] == "failed" and body["run_name"] == "r"
    assert len(callbacks) == 1  # a worker is woken once the retry commits
    run.refresh_from_db()
    assert run.status == "queued"


def test_retry_of_a_running_job_is_a_conflict(client, project_team, bearer):
    job = Job.objects.create(project=project_team["project"], kind="noop")
    claimed = js.job_claim(job_id=job.pk, worker="host:1")
    js.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
    response = client.post(f"/api/jobs/{job.pk}/retry", **bearer("editor"))
    assert response.status_code == 409
    assert "only failed or cancelled jobs can be retried" in response.json()["detail"]
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


# ---------------------------------------------------------------------------------------
# Job list: pages, filters, columns
# ---------------------------------------------------------------------------------------


@pytest.fixture
def many_jobs(project_team):
    project = project_team["project"]
    kinds = [("noop", "default"), ("eval", "rollout"), ("grpo", "train")]
    jobs = [Job.objects.create(project=project, kind=kinds[i % 3][0], queue=kinds[i % 3][1]) for i in range(23)]
    Job.objects.filter(pk__in=[j.pk for j in jobs[:5]]).update(state=JobState.FAILED)
    Job.objects.create(project=project_team["other"], kind="noop")
    return jobs


def test_job_pages_walk_every_row_once_newest_first(client, project_team, bearer, many_jobs):
    slug = project_team["project"].slug
    items = _walk(client, f"/api/projects/{slug}/jobs?limit=4", bearer("viewer"))
    assert [j["id"] for j in items] == [j.pk for j in reversed(many_jobs)]


@pytest.mark.parametrize(("query", "expected"), [
    ("state=failed", lambda j, i: i < 5),
    ("queue=train", lambda j, i: j.queue == "train"),
    ("kind=eval", lambda j, i: j.kind == "eval"),
    ("kind=eval&state=failed", lambda j, i: j.kind == "eval" and i < 5),
])
def test_job_filters_hold_across_pages(client, project_team, bearer, many_jobs, query, expected):
    slug = project_team["project"].slug
    items = _walk(client, f"/api/projects/{slug}/jobs?limit=2&{query}", bearer("viewer"))
    assert [j["id"] for j in items] == [j.pk for i, j in reversed(list(enumerate(many_jobs))) if expected(j, i)]


def test_limit_and_bad_filters(client, project_team, bearer, many_jobs):
    slug, headers = project_team["project"].slug, bearer("viewer")
    body = client.get(f"/api/projects/{slug}/jobs?limit=3", **headers).json()
    assert len(body["items"]) == 3 and body["next"]
    assert len(client.get(f"/api/projects/{slug}/jobs?limit=0", **headers).json()["items"]) == 1
    bad_state = client.get(f"/api/projects/{slug}/jobs?state=exploded", **headers)
    assert bad_state.status_code == 400 and "Unknown job state 'exploded'" in bad_state.json()["detail"]
    bad_cursor = client.get(f"/api/projects/{slug}/jobs?after=%21%21", **headers)
    assert bad_cursor.status_code == 400 and "cursor" in bad_cursor.json()["detail"]
    _node("w1@a", age=1)
    _node("w2@a", age=1)
    workers_cursor = client.get("/api/workers?limit=1", **headers).json()["next"]
    foreign = client.get(f"/api/projects/{slug}/jobs?after={workers_cursor}", **headers)
    assert foreign.status_code == 400 and "another sort order" in foreign.json()["detail"]


def test_job_rows_show_heartbeat_age_lease_and_attempts(project_team):
    job = Job.objects.create(project=project_team["project"], kind="noop", max_attempts=3)
    claimed = js.job_claim(job_id=job.pk, worker="gpu-1:42")
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(heartbeat_at=now - timedelta(seconds=40),
                                         lease_expires_at=now - timedelta(seconds=5), progress=0.25)
    row = job_list(project_team["project"], now=now, limit=10).items[0]
    assert row.attempt_label == f"{claimed.attempt}/3" and row.worker.startswith("gpu-1:42") and row.progress == 0.25
    assert row.heartbeat_age_seconds == pytest.approx(40) and row.lease_seconds_left == pytest.approx(-5)
    queued = Job.objects.create(project=project_team["project"], kind="noop")
    fresh = job_list(project_team["project"], now=now, limit=10).items[0]
    assert fresh.id == queued.pk and fresh.heartbeat_age_seconds is None and fresh.lease_seconds_left is None


def test_job_detail_has_the_log_tail(client, project_team, bearer):
    job = Job.objects.create(project=project_team["project"], kind="noop", log_tail="step 3 loss 1.2")
    body = client.get(f"/api/jobs/{job.pk}", **bearer("viewer")).json()
    assert body["log_tail"] == "step 3 loss 1.2" and body["attempt_label"] == "0/3"


def _queries(fn) -> int:
    with CaptureQueriesContext(connection) as ctx:
        fn()
    return len(ctx.captured_queries)


def test_a_page_of_jobs_costs_the_same_queries_whatever_its_length(client, project_team, bearer, many_jobs,
                                                                   django_assert_max_num_queries):
    runs = [Run.objects.create(project=project_team["project"], name=f"r{i}", kind="grpo") for i in range(3)]
    for i, job in enumerate(many_jobs):
        Job.objects.filter(pk=job.pk).update(run=runs[i % 3])
    with django_assert_max_num_queries(1):
        assert len(job_list(project_team["project"], limit=50).items) == 23
    url, headers = f"/api/projects/{project_team['project'].slug}/jobs?limit=", bearer("viewer")
    small = _queries(lambda: client.get(url + "1", **headers))
    large = _queries(lambda: client.get(url + "50", **headers))
    assert small == large, (small, large)


# ---------------------------------------------------------------------------------------
# Queues and workers
# ---------------------------------------------------------------------------------------


def test_queue_summary_counts_this_projects_jobs_and_alive_listeners(client, project_team, bearer,
                                                                     django_assert_max_num_queries):
    project = project_team["project"]
    for queue, state in [("train", "queued"), ("train", "queued"), ("train", "running"), ("train", "claimed"),
                         ("rollout", "queued"), ("train", "failed"), ("custom", "running")]:
        Job.objects.create(project=project, kind="x", queue=queue, state=state)
    Job.objects.create(project=project_team["other"], kind="x", queue="train", state="queued")
    _node("gpu@a", age=5, queues=["train", "rollout"])
    _node("gpu@b", age=ALIVE_SECONDS + 30, queues=["train"])  # lost
    _node("cpu@c", age=5, stopped=True, queues=["default"])  # stopped
    with django_assert_max_num_queries(2):
        rows = queue_summary(project)
    summary = {r.queue: (r.queued, r.running, r.workers_alive) for r in rows}
    assert summary == {"default": (0, 0, 0), "rollout": (1, 0, 1), "train": (2, 2, 1), "verify": (0, 0, 0),
                       "custom": (0, 1, 0)}
    body = client.get(f"/api/projects/{project.slug}/queues", **bearer("viewer")).json()
    assert [q["queue"] for q in body] == ["default", "rollout", "train", "verify", "custom"]
    assert body[2] == {"queue": "train", "queued": 2, "running": 2, "workers_alive": 1}


def test_workers_are_alive_stopped_or_lost_by_heartbeat(client, project_team, bearer):
    _node("gpu@a", age=ALIVE_SECONDS - 10)
    _node("gpu@b", age=ALIVE_SECONDS + 10)
    _node("cpu@c", age=1, stopped=True)
    body = client.get("/api/workers", **bearer("viewer")).json()
    assert {w["name"]: (w["alive"], w["status"]) for w in body["items"]} == {
        "gpu@a": (True, "alive"), "gpu@b": (False, "lost"), "cpu@c": (False, "stopped")}
    assert body["next"] is None


def test_worker_pages_walk_every_row_once(client, project_team, bearer):
    names = [f"w{i:02d}@host" for i in range(11)]
    for name in reversed(names):
        _node(name, age=1)
    items = _walk(client, "/api/workers?limit=4", bearer("viewer"))
    assert [w["name"] for w in items] == names
    page = worker_list(limit=100)
    assert len(page.items) == 11 and page.next_cursor is None
