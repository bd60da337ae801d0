"""The "export" job: the checkpoints page queues it, a worker merges the LoRA checkpoint, the page offers it."""

from __future__ import annotations

import io
import zipfile

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.training.conftest import json_tasks_file, tiny_model_dir, tokenizer  # noqa: F401  (fixtures)
from tests.training.test_export import _trained_lora_checkpoint
from webapp.runs.models import Checkpoint, Job, JobState, Run
from workers.runner import run_job

# run_job closes the connection between attempts, as a worker does: the rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def data_dir(settings, tmp_path, monkeypatch):
    """A data directory of the test's own; the job runs here, so no Celery message is sent."""
    from webapp.runs.services import jobs

    monkeypatch.setattr(jobs, "enqueue_job_message", lambda job_id, queue: None)
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    settings.DATA_DIR = data
    settings.CRUCIBLE_RUNS_DIR = data / "runs"
    return data


def test_export_job_merges_the_adapters_and_the_page_offers_the_result(
        client, project_team, data_dir, tiny_model_dir, json_tasks_file):  # noqa: F811
    run = Run.objects.create(project=project_team["project"], name="sft-lora", kind="sft")
    job, folder = _trained_lora_checkpoint(tiny_model_dir, json_tasks_file, data_dir / "runs" / run.folder_name)
    checkpoint = Checkpoint.objects.create(run=run, step=1, storage_uri=str(folder), kind="adapter")
    slug = project_team["project"].slug
    client.force_login(project_team["editor"])
    client.post(f"/p/{slug}/checkpoints/{checkpoint.pk}/export/")
    export = Job.objects.get(kind="export")

    assert run_job(export.pk, worker="test") == "succeeded"
    export.refresh_from_db()
    out = data_dir / "runs" / run.folder_name / "exports" / "step_1"
    assert export.progress == 1.0 and f"exported checkpoint {checkpoint.pk}" in export.log_tail
    merged = AutoModelForCausalLM.from_pretrained(out)
    assert not hasattr(merged, "peft_config")
    ids = torch.tensor([job.tokenizer.encode("Schedule a meeting")])
    job.model.eval()
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, job.model(ids).logits, atol=1e-4)

    page = client.get(f"/p/{slug}/checkpoints/").content.decode()
    assert f"/checkpoints/{checkpoint.pk}/export/download/" in page
    response = client.get(f"/p/{slug}/checkpoints/{checkpoint.pk}/export/download/")
    names = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))).namelist()
    assert f"sft-lora-{run.pk}-step1-merged/config.json" in names


def test_export_of_a_deleted_folder_fails_with_a_clear_error(project_team, data_dir):
    run = Run.objects.create(project=project_team["project"], name="grpo", kind="grpo")
    folder = data_dir / "runs" / run.folder_name / "checkpoints" / "step_3"
    checkpoint = Checkpoint.objects.create(run=run, step=3, storage_uri=str(folder))
    job = Job.objects.create(project=project_team["project"], kind="export", queue="rollout",
                             payload={"checkpoint_id": checkpoint.pk, "source": str(folder),
                                      "out": str(data_dir / "runs" / run.folder_name / "exports" / "step_3")})
    assert run_job(job.pk, worker="test") == "failed"
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "is gone" in job.error and "keep_top_k" in job.error


def test_an_attempt_that_finds_the_export_complete_does_nothing_more(project_team, data_dir, monkeypatch):
    import training.export

    def never(*args, **kwargs):
        raise AssertionError("exported twice")

    monkeypatch.setattr(training.export, "export_checkpoint", never)
    run = Run.objects.create(project=project_team["project"], name="grpo", kind="grpo")
    out = data_dir / "runs" / run.folder_name / "exports" / "step_3"
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    checkpoint = Checkpoint.objects.create(run=run, step=3, storage_uri=str(data_dir / "gone"))
    job = Job.objects.create(project=project_team["project"], kind="export", queue="rollout",
                             payload={"checkpoint_id": checkpoint.pk, "out": str(out)})
    assert run_job(job.pk, worker="test") == "succeeded"
