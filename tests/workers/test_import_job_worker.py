"""End to end: a big run import uploaded through the page is imported by a real `celery worker` process.

The worker finds the "run_import" handler through the tasks module Celery discovers (workers/tasks.py
imports workers/import_jobs.py), reads the zip from the shared data directory's imports area, and
keeps the report in the job for its page. A damaged zip fails the job with the message the inline
import answers as a 422, and nothing is written.
"""

from __future__ import annotations

import io
import struct
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.workers.conftest import wait_for
from training.events import EventWriter
from webapp.runs.models import FINAL_JOB_STATES, Job, MetricPoint, Run
from webapp.runs.services import jobs as job_services
from webapp.runs.services.run_import import IMPORT_JOB_KIND

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def to_live_worker(settings, monkeypatch, live_worker):
    """Every upload goes through a job, on the live worker's queue (the data directory is the worker's too)."""
    settings.CRUCIBLE_RUN_IMPORT_INLINE_MAX_BYTES = 0
    monkeypatch.setitem(job_services.QUEUE_BY_KIND, IMPORT_JOB_KIND, live_worker.queue)
    return live_worker


def _zip(tmp_path, steps: int) -> bytes:
    run_dir = tmp_path / "cluster-run"
    with EventWriter(run_dir) as events:
        events.log("sft job on cpu")
        for step in range(steps):
            events.metric(step, {"loss": 1.0 / (step + 1)})
        events.done(step=steps)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(run_dir / "events.jsonl", "cluster-run/events.jsonl")
    return buffer.getvalue()


def _upload(client, project_team, data: bytes):
    client.force_login(project_team["editor"])
    response = client.post(f"/p/{project_team['project'].slug}/runs/import/",
                           {"archive": SimpleUploadedFile("cluster-run.zip", data, content_type="application/zip")})
    assert response.status_code == 302
    return response["Location"], Job.objects.get(kind=IMPORT_JOB_KIND)


def _final(job: Job, worker) -> Job:
    return wait_for(lambda: (j := Job.objects.get(pk=job.pk)).state in FINAL_JOB_STATES and j, timeout=90,
                    what=f"import job {job.pk} to finish:\n{worker.log()[-3000:]}")


def test_a_worker_imports_the_upload_and_the_page_shows_the_run(client, project_team, tmp_path, to_live_worker):
    page_url, job = _upload(client, project_team, _zip(tmp_path, steps=4500))
    done = _final(job, to_live_worker)
    assert done.state == "succeeded", done.error + to_live_worker.log()[-3000:]
    run = Run.objects.get(project=project_team["project"])
    assert MetricPoint.objects.filter(run=run).count() == 4500 and done.progress == 1.0
    assert "MB of events" in done.log_tail
    body = client.get(page_url).content.decode()
    assert f'href="/p/{project_team["project"].slug}/runs/{run.pk}/"' in body and 'id="import-report"' in body


def test_a_damaged_zip_fails_the_workers_job_and_writes_nothing(client, project_team, tmp_path, to_live_worker):
    data = bytearray(_zip(tmp_path, steps=3))
    struct.pack_into("<I", data, data.index(b"PK\x01\x02") + 16, 0x12345678)  # a wrong CRC-32
    page_url, job = _upload(client, project_team, bytes(data))
    done = _final(job, to_live_worker)
    assert done.state == "failed" and "The zip is damaged" in done.error
    assert not Run.objects.exists()
    page = client.get(page_url)
    assert page.status_code == 200 and "Nothing was imported: The zip is damaged" in page.content.decode()
