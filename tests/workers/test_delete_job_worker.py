"""End to end: a run, an experiment or a dataset version deleted on its page is deleted by a real `celery
worker` process.

The worker finds the "run_delete", "experiment_delete" and "dataset_delete" handlers through workers.runner's handler modules,
deletes the rows in one transaction (and a run's folder in the shared data directory), and keeps what it
removed in the job.
"""

from __future__ import annotations

import pytest
from pipeline_data import (
    make_finished_experiment,
    make_pipeline_project,
    make_pipeline_run,
    make_tasks,
)

from tests.workers.conftest import wait_for
from webapp.datasets.models import Task, TaskDataset
from webapp.datasets.services.datasets import dataset_create
from webapp.runs.models import FINAL_JOB_STATES, Checkpoint, Job, MetricPoint, Run
from webapp.runs.selectors.dataset_delete import DATASET_DELETE_JOB_KIND
from webapp.runs.selectors.experiment_delete import EXPERIMENT_DELETE_JOB_KIND
from webapp.runs.selectors.run_delete import RUN_DELETE_JOB_KIND, run_files_folder
from webapp.runs.services import jobs as job_services
from webapp.trajectories.models import Trajectory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_worker_deletes_the_run_its_rows_and_its_folder(client, project_team, monkeypatch, live_worker):
    monkeypatch.setitem(job_services.QUEUE_BY_KIND, RUN_DELETE_JOB_KIND, live_worker.queue)
    project, owner = project_team["project"], project_team["owner"]
    setup = make_pipeline_project(project, owner)
    run = make_pipeline_run(project, owner, name="grpo to delete", steps=2, setup=setup)
    keeper = make_pipeline_run(project, owner, name="grpo to keep", steps=2, setup=setup)
    folder = run_files_folder(run) / "checkpoints" / "step_2"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(b"w" * 2048)
    Checkpoint.objects.create(run=run, step=2, storage_uri=str(folder))

    client.force_login(project_team["editor"])
    response = client.post(f"/p/{project.slug}/runs/{run.pk}/delete/", {"confirm": "grpo to delete"})
    assert response.status_code == 302
    job = Job.objects.get(kind=RUN_DELETE_JOB_KIND)
    done = wait_for(lambda: (j := Job.objects.get(pk=job.pk)).state in FINAL_JOB_STATES and j, timeout=90,
                    what=f"deletion job {job.pk} to finish:\n{live_worker.log()[-3000:]}")

    assert done.state == "succeeded", done.error + live_worker.log()[-3000:]
    assert not Run.objects.filter(pk=run.pk).exists() and not run_files_folder(run).exists()
    assert not Trajectory.objects.filter(run_id=run.pk).exists() and not MetricPoint.objects.filter(run_id=run.pk)
    assert Trajectory.objects.filter(run=keeper).exists() and done.progress == 1.0
    assert done.payload["result"]["freed_bytes"] >= 2048 and "deleted 1 run(s)" in done.log_tail
    listed = client.get(f"/p/{project.slug}/runs/").content.decode()
    assert f'/runs/{keeper.pk}/"' in listed and f'/runs/{run.pk}/"' not in listed


def test_a_worker_deletes_a_dataset_version_and_its_tasks(client, project_team, monkeypatch, live_worker):
    monkeypatch.setitem(job_services.QUEUE_BY_KIND, DATASET_DELETE_JOB_KIND, live_worker.queue)
    project, owner = project_team["project"], project_team["owner"]
    doomed = dataset_create(project=project, name="imported wrong", tasks=make_tasks(8), actor=owner)
    kept = dataset_create(project=project, name="imported right", tasks=make_tasks(3), actor=owner)

    client.force_login(project_team["editor"])
    response = client.post(f"/p/{project.slug}/datasets/{doomed.pk}/delete/", {"confirm": "imported wrong v1"})
    assert response.status_code == 302
    job = Job.objects.get(kind=DATASET_DELETE_JOB_KIND)
    done = wait_for(lambda: (j := Job.objects.get(pk=job.pk)).state in FINAL_JOB_STATES and j, timeout=90,
                    what=f"deletion job {job.pk} to finish:\n{live_worker.log()[-3000:]}")

    assert done.state == "succeeded", done.error + live_worker.log()[-3000:]
    assert not TaskDataset.objects.filter(pk=doomed.pk).exists() and not Task.objects.filter(dataset_id=doomed.pk)
    assert kept.tasks.count() == 3 and done.progress == 1.0 and done.payload["result"]["removed"]["tasks"] == 8
    listed = client.get(f"/p/{project.slug}/datasets/").content.decode()
    assert f"/datasets/{kept.pk}/" in listed and f"/datasets/{doomed.pk}/" not in listed


def test_a_worker_deletes_an_experiment_with_its_runs(client, project_team, monkeypatch, live_worker):
    monkeypatch.setitem(job_services.QUEUE_BY_KIND, EXPERIMENT_DELETE_JOB_KIND, live_worker.queue)
    project, owner = project_team["project"], project_team["owner"]
    experiment, runs = make_finished_experiment(project, owner, name="sweep 3", checkpoint_bytes=2048)

    client.force_login(project_team["editor"])
    response = client.post(f"/p/{project.slug}/experiments/{experiment.pk}/delete/", {"confirm": "sweep 3"})
    assert response.status_code == 302
    job = Job.objects.get(kind=EXPERIMENT_DELETE_JOB_KIND)
    done = wait_for(lambda: (j := Job.objects.get(pk=job.pk)).state in FINAL_JOB_STATES and j, timeout=90,
                    what=f"deletion job {job.pk} to finish:\n{live_worker.log()[-3000:]}")

    assert done.state == "succeeded", done.error + live_worker.log()[-3000:]
    run_ids = [run.pk for run in runs.values()]
    assert not Run.objects.filter(pk__in=run_ids).exists() and not Trajectory.objects.filter(run_id__in=run_ids)
    assert not run_files_folder(runs["grpo"]).exists() and done.payload["result"]["freed_bytes"] >= 2048
    listed = client.get(f"/p/{project.slug}/experiments/").content.decode()
    assert f"/experiments/{experiment.pk}/" not in listed
