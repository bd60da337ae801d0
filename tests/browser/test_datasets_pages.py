"""Datasets in a real browser: import a file with bad lines, read the report, create the version and
find it; generate 50 tasks with a preview first; hostile text in a file stays text (no dialog)."""

from __future__ import annotations

import json
import re

import pytest
from browser_session import login
from pipeline_data import make_tasks

from webapp.datasets.models import TaskDataset
from webapp.datasets.services.datasets import dataset_create
from webapp.runs.models import Job
from webapp.runs.services import jobs as js

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS = "<script>alert(1)</script>"


def _row(i: int, **task) -> str:
    body = {"id": f"b{i}", "messages": [{"role": "user", "content": f"Book room {i} {XSS}"}],
            "ground_truth": [{"name": "book", "arguments": {"room": i}}], "category": "calendar", **task}
    return json.dumps({"task": body, "trajectory": None, "result": None})


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    return settings.DATA_DIR


def _dialogs(page) -> list[str]:
    seen: list[str] = []
    page.on("dialog", lambda dialog: (seen.append(dialog.message), dialog.dismiss()))
    return seen


def test_import_a_file_with_bad_lines_read_the_report_and_create_the_version(page, live_server, project_team,
                                                                             data_dir, tmp_path):
    dialogs = _dialogs(page)
    path = tmp_path / "rooms.jsonl"
    path.write_text("\n".join([
        _row(1), _row(2, split="held_out"), "{not json", _row(3), "also not json", _row(1, id="again"),
        json.dumps({XSS: "prompt"}),
    ]) + "\n")
    login(page, live_server, "editor")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/datasets/")
    page.click("#import-tasks")
    page.set_input_files("#import-file", str(path))
    page.fill("#import-name", "rooms")
    page.click("#check-file")
    page.wait_for_url(re.compile(r"/datasets/import/[A-Za-z0-9_-]{24}/$"))

    assert page.inner_text("#report-accepted") == "3"
    assert page.inner_text("#report-rejected") == "3"
    assert page.inner_text("#report-duplicates") == "1"
    assert page.inner_text("#report-format") == "crucible"
    lines = page.locator("#rejected-rows tbody tr td:first-child").all_inner_texts()
    assert lines == ["3", "5", "7"]
    assert XSS in page.inner_text("#rejected-rows")  # the hostile key, shown as text
    assert "duplicate of line 1" in page.inner_text("#duplicate-rows")
    assert not TaskDataset.objects.filter(name="rooms").exists()

    page.click("#create-version")
    page.wait_for_url(re.compile(rf"/p/{slug}/datasets/\d+/$"))
    assert page.inner_text("#task-count") == "3"
    assert XSS in page.inner_text("table.tasks")
    page.goto(f"{live_server.url}/p/{slug}/datasets/")
    row = page.locator("table.versions tbody tr", has_text="rooms")
    assert "Import" in row.inner_text() and "rooms.jsonl" in row.inner_text()
    row.locator("a.version-link").click()
    page.wait_for_url(re.compile(rf"/p/{slug}/datasets/\d+/$"))
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/tasks/\d+/$"))
    assert "rooms.jsonl" in page.inner_text(".provenance") and XSS in page.inner_text(".messages-list")
    assert dialogs == []


def test_generate_fifty_tasks_with_a_preview(page, live_server, project_team, data_dir):
    login(page, live_server, "editor")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/datasets/")
    page.click("#generate-tasks")
    page.fill("#gen-n", "50")
    page.fill("#gen-seed", "7")
    page.fill("#gen-name", "synthetic")
    page.click("#preview-tasks")
    page.wait_for_function("() => document.querySelectorAll('#preview li.preview-task').length === 10")
    assert page.inner_text("#gen-accepted") == "50"
    assert not TaskDataset.objects.filter(name="synthetic").exists()
    page.click("#create-generated")
    page.wait_for_url(re.compile(rf"/p/{slug}/datasets/\d+/$"))
    assert page.inner_text("#task-count") == "50"
    dataset = TaskDataset.objects.get(name="synthetic")
    assert dataset.lineage == "generation" and dataset.lineage_detail["seed"] == 7


def test_an_editor_deletes_a_version_after_typing_its_name_and_number(page, live_server, project_team, monkeypatch):
    monkeypatch.setattr(js, "enqueue_job_message", lambda job_id, queue: None)  # no worker here: the job is queued
    project = project_team["project"]
    dataset = dataset_create(project=project, name="bad <i>import</i>", tasks=make_tasks(3),
                             actor=project_team["owner"])
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{project.slug}/datasets/{dataset.pk}/")
    page.click("#delete-version")
    page.wait_for_selector("[data-dataset-delete]")
    assert "3 tasks" in page.inner_text("[data-plan]")
    page.fill("#confirm-name", "bad <i>import</i>")
    page.click("button.danger")
    assert "name and number" in page.inner_text("[data-error]") and not Job.objects.filter(kind="dataset_delete")
    page.fill("#confirm-name", "bad <i>import</i> v1")
    page.click("button.danger")
    page.wait_for_url(f"{live_server.url}/p/{project.slug}/datasets/")
    job = Job.objects.get(kind="dataset_delete")
    assert f"bad <i>import</i> v1 is being deleted (job {job.pk})" in page.inner_text(".messages")
    assert page.locator(f'tr[data-dataset="{dataset.pk}"] [data-deleting]').count() == 1
