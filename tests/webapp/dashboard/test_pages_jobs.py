"""The jobs and workers page: queues, filters in the URL, keyset pages, retry for editors, workers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from webapp.runs.models import Job, WorkerNode


@pytest.fixture
def jobs(project_team):
    project = project_team["project"]
    made = [Job.objects.create(project=project, kind="noop", queue="default") for _ in range(55)]
    failed = Job.objects.create(project=project, kind="eval", queue="rollout", state="failed", error="CUDA OOM <b>",
                                history=[{"worker": "gpu@h1", "outcome": "failed", "reason": "oom"}])
    return made, failed


def test_queues_filters_and_pages(client, project_team, jobs):
    client.force_login(project_team["viewer"])
    slug = project_team["project"].slug
    body = client.get(f"/p/{slug}/jobs/").content.decode()
    assert 'data-queue="default"' in body and "55 queued" in body
    assert body.count('data-job="') == 50 and 'rel="next"' in body
    filtered = client.get(f"/p/{slug}/jobs/?state=failed").content.decode()
    assert filtered.count('data-job="') == 1 and "CUDA OOM &lt;b&gt;" in filtered and "gpu@h1: failed" in filtered
    refused = client.get(f"/p/{slug}/jobs/?state=nope").content.decode()
    assert "nope" in refused and 'class="error"' in refused
    junk = client.get(f"/p/{slug}/jobs/?after=garbage")
    assert junk.status_code == 200 and "start again from the first page" in junk.content.decode()


def test_the_second_page_follows_the_first(client, project_team, jobs):
    client.force_login(project_team["viewer"])
    slug = project_team["project"].slug
    first = client.get(f"/p/{slug}/jobs/?queue=default")
    cursor = first.context["page"].next_cursor
    second = client.get(f"/p/{slug}/jobs/?queue=default&after={cursor}")
    ids = [j.id for j in first.context["jobs"]] + [j.id for j in second.context["jobs"]]
    assert len(ids) == len(set(ids)) == 55


@pytest.mark.parametrize(("role", "allowed"), [("viewer", False), ("reviewer", False), ("editor", True),
                                               ("owner", True)])
def test_retry_needs_editor(client, project_team, jobs, role, allowed):
    _, failed = jobs
    slug = project_team["project"].slug
    client.force_login(project_team[role])
    page = client.get(f"/p/{slug}/jobs/?state=failed").content.decode()
    assert (f"/jobs/{failed.pk}/retry/" in page) is allowed
    response = client.post(f"/p/{slug}/jobs/{failed.pk}/retry/")
    assert response.status_code == (302 if allowed else 403)
    failed.refresh_from_db()
    assert (failed.state == "queued") is allowed


def test_workers_show_alive_or_lost(client, project_team):
    now = timezone.now()
    WorkerNode.objects.create(name="cpu@a", hostname="a", queues=["default"], started_at=now, heartbeat_at=now)
    WorkerNode.objects.create(name="gpu@b", hostname="b", queues=["train"], started_at=now,
                              heartbeat_at=now - timedelta(hours=1), gpus=[{"name": "H100", "memory_mb": 81920}])
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project_team['project'].slug}/jobs/").content.decode()
    assert "cpu@a" in body and "H100 (81920 MB)" in body
    assert ">alive<" in body and ">lost<" in body


def test_outsiders_get_404(client, project_team, jobs):
    client.force_login(project_team["outsider"])
    _, failed = jobs
    slug = project_team["project"].slug
    assert client.get(f"/p/{slug}/jobs/").status_code == 404
    assert client.post(f"/p/{slug}/jobs/{failed.pk}/retry/").status_code == 404
