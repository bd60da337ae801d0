"""Big run imports off the request: an upload over the inline limit (the page automatically, the API also
on ?background=1) is kept in the data directory's imports area and imported by a "run_import" job,
whose page follows its progress and ends with the report and the run, or with why nothing was
imported. The job runs here through the real job runner (workers.runner.run_job), as a worker runs
it; tests/workers/test_import_job_worker.py runs one through a real Celery worker.
"""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from training.events import EventWriter
from webapp.runs.models import Job, JobState, MetricPoint, Run
from webapp.runs.services import jobs as job_services
from webapp.runs.services.run_import import IMPORT_JOB_KIND, import_archive_dir
from workers import import_jobs
from workers.runner import JobCancelled, JobContext, run_job

# run_job closes the connection as a worker does: the rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_broker(settings, tmp_path, monkeypatch):
    """Every upload goes through a job, run here by the test (no Celery message), in a data dir of its own."""
    monkeypatch.setattr(job_services, "enqueue_job_message", lambda job_id, queue: None)
    settings.DATA_DIR = tmp_path / "data"
    settings.CRUCIBLE_RUN_IMPORT_INLINE_MAX_BYTES = 0


def _run_folder(tmp_path: Path, steps: int = 3) -> Path:
    run_dir = tmp_path / "cluster-run"
    with EventWriter(run_dir) as events:
        events.log("sft job on cpu")
        for step in range(steps):
            events.metric(step, {"loss": 1.0 / (step + 1), "lr": 0.001})
        events.done(step=steps)
    return run_dir


def _zip(run_dir: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(run_dir / "events.jsonl", "cluster-run/events.jsonl")
    return buffer.getvalue()


def _damaged(data: bytes) -> bytes:
    """A wrong CRC-32 in the central directory: the zip opens, its entry does not read whole."""
    forged = bytearray(data)
    struct.pack_into("<I", forged, forged.index(b"PK\x01\x02") + 16, 0x12345678)
    return bytes(forged)


def _upload(data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile("cluster-run.zip", data, content_type="application/zip")


def _archives() -> list[Path]:
    return sorted(import_archive_dir().glob("*.zip"))


def _post_page(client, project_team, data: bytes, name: str = ""):
    client.force_login(project_team["editor"])
    return client.post(f"/p/{project_team['project'].slug}/runs/import/", {"archive": _upload(data), "name": name})


def test_a_big_upload_becomes_a_job_whose_page_ends_with_the_report_and_the_run(client, project_team, tmp_path):
    slug = project_team["project"].slug
    response = _post_page(client, project_team, _zip(_run_folder(tmp_path, steps=5)), name="cluster <b>7</b>")
    job = Job.objects.get(kind=IMPORT_JOB_KIND)
    assert response.status_code == 302 and response["Location"] == f"/p/{slug}/runs/import/jobs/{job.pk}/"
    assert job.queue == "default" and job.state == JobState.QUEUED and "/" not in job.payload["archive"]
    assert len(_archives()) == 1 and not Run.objects.exists()  # kept for the worker; nothing imported yet
    waiting = client.get(response["Location"])
    assert waiting.status_code == 200 and 'hx-trigger="every 2s"' in waiting.content.decode()

    assert run_job(job.pk, worker="test") == "succeeded"
    run = Run.objects.get(project=project_team["project"])
    assert run.name == "cluster <b>7</b>" and MetricPoint.objects.filter(run=run).count() == 10
    assert _archives() == []  # removed once imported
    page = client.get(response["Location"])
    body = page.content.decode()
    assert page.status_code == 200 and "every 2s" not in body
    assert f'href="/p/{slug}/runs/{run.pk}/"' in body and 'id="import-report"' in body
    assert "cluster &lt;b&gt;7&lt;/b&gt;" in body and "<b>7</b>" not in body
    client.force_login(project_team["viewer"])
    assert client.get(response["Location"]).status_code == 200


def test_a_damaged_zip_through_the_job_fails_it_with_the_422_message_and_writes_nothing(client, project_team,
                                                                                         tmp_path):
    response = _post_page(client, project_team, _damaged(_zip(_run_folder(tmp_path))))
    job = Job.objects.get(kind=IMPORT_JOB_KIND)
    assert run_job(job.pk, worker="test") == "failed"
    job.refresh_from_db()
    assert job.error.startswith("RunImportError: The zip is damaged")
    assert not Run.objects.exists() and not MetricPoint.objects.exists() and _archives() == []
    page = client.get(response["Location"])
    body = page.content.decode()
    assert page.status_code == 200 and 'id="import-job-error"' in body
    assert "Nothing was imported: The zip is damaged" in body and "RunImportError" not in body


def test_a_stopped_import_job_leaves_nothing_and_its_retry_does_the_whole_import(client, project_team, tmp_path):
    """Cancelled after its first batch was stored (2,000 events): rolled back; Retry imports everything."""
    _post_page(client, project_team, _zip(_run_folder(tmp_path, steps=2500)))
    job = Job.objects.get(kind=IMPORT_JOB_KIND)
    claimed = job_services.job_claim(job_id=job.pk, worker="test")
    ctx = JobContext(job_id=job.pk, attempt=claimed.attempt, kind=job.kind, payload=claimed.payload, run_id=None)
    ctx.cancel_requested.set()
    with pytest.raises(JobCancelled):
        import_jobs.run_import_job(ctx)
    assert ctx.progress == 0 and not Run.objects.exists() and not MetricPoint.objects.exists()
    assert len(_archives()) == 1  # kept, so the job can be run again
    job_services.job_mark_cancelled(job_id=job.pk, attempt=claimed.attempt)

    job_services.job_retry(job=Job.objects.get(pk=job.pk))
    assert run_job(job.pk, worker="test") == "succeeded"
    run = Run.objects.get(project=project_team["project"])
    assert MetricPoint.objects.filter(run=run).count() == 5000 and run.import_info["complete"]
    job.refresh_from_db()
    assert job.payload["result"]["stored"]["metric"] == 5000 and job.progress == 1.0


def test_a_job_whose_zip_is_gone_says_to_upload_it_again(client, project_team, tmp_path):
    _post_page(client, project_team, _zip(_run_folder(tmp_path)))
    job = Job.objects.get(kind=IMPORT_JOB_KIND)
    for path in _archives():
        path.unlink()
    assert run_job(job.pk, worker="test") == "failed"
    job.refresh_from_db()
    assert "upload it again" in job.error and not Run.objects.exists()


def test_small_uploads_still_import_within_the_request(client, project_team, tmp_path, settings):
    settings.CRUCIBLE_RUN_IMPORT_INLINE_MAX_BYTES = 2 * 1024 ** 2
    response = _post_page(client, project_team, _zip(_run_folder(tmp_path)))
    assert response.status_code == 302 and response["Location"].endswith("#import-report")
    assert Run.objects.count() == 1 and not Job.objects.exists()


def test_the_api_answers_202_with_the_job_and_follows_it_to_the_report(client, project_team, bearer, tmp_path,
                                                                       settings):
    settings.CRUCIBLE_RUN_IMPORT_INLINE_MAX_BYTES = 2 * 1024 ** 2  # small: only ?background=1 makes a job
    slug = project_team["project"].slug
    data = _zip(_run_folder(tmp_path))
    response = client.post(f"/api/projects/{slug}/runs/import?background=1", {"file": _upload(data)},
                           **bearer("editor"))
    assert response.status_code == 202, response.content
    answer = response.json()
    job = Job.objects.get(pk=answer["job_id"])
    assert answer["state"] == "queued" and answer["page_url"] == f"/p/{slug}/runs/import/jobs/{job.pk}/"
    assert answer["job_url"] == f"/api/projects/{slug}/runs/import/jobs/{job.pk}"
    queued = client.get(answer["job_url"], **bearer("viewer")).json()
    assert queued["state"] == "queued" and queued["report"] is None
    assert run_job(job.pk, worker="test") == "succeeded"
    done = client.get(answer["job_url"], **bearer("viewer")).json()
    assert done["state"] == "succeeded" and done["report"]["created"] and done["report"]["stored"]["metric"] == 6
    assert done["report"]["run_id"] == Run.objects.get().pk


def test_the_api_job_of_a_damaged_zip_reports_the_422_message(client, project_team, bearer, tmp_path):
    slug = project_team["project"].slug
    response = client.post(f"/api/projects/{slug}/runs/import", {"file": _upload(_damaged(_zip(_run_folder(tmp_path))))},
                           **bearer("editor"))
    assert response.status_code == 202  # over the inline limit (0 here): a job
    assert run_job(response.json()["job_id"], worker="test") == "failed"
    state = client.get(response.json()["job_url"], **bearer("editor")).json()
    assert state["state"] == "failed" and state["error"].startswith("The zip is damaged") and state["report"] is None
    assert not Run.objects.exists()


def test_a_viewer_cannot_start_an_import_job_and_another_projects_job_is_not_found(client, project_team, bearer,
                                                                                  tmp_path):
    slug = project_team["project"].slug
    data = _zip(_run_folder(tmp_path))
    assert client.post(f"/api/projects/{slug}/runs/import?background=1", {"file": _upload(data)},
                       **bearer("viewer")).status_code == 403
    assert not Job.objects.exists() and _archives() == []
    created = client.post(f"/api/projects/{slug}/runs/import?background=1", {"file": _upload(data)},
                          **bearer("editor")).json()
    other = project_team["other"].slug
    assert client.get(f"/api/projects/{other}/runs/import/jobs/{created['job_id']}",
                      **bearer("editor")).status_code == 404
    client.force_login(project_team["outsider"])
    assert client.get(created["page_url"]).status_code == 404
    assert client.get(f"/p/{other}/runs/import/jobs/{created['job_id']}/").status_code == 404
