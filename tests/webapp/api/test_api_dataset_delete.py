"""REST API for deleting a dataset version: GET /datasets/{id}/deletion (the plan), DELETE /datasets/{id} (202 and
a job that the real job runner executes), refusals as 409 with what to do, and the roles."""

from __future__ import annotations

import json

import pytest
from pipeline_data import make_pipeline_project, make_pipeline_run, make_tasks

from webapp.datasets.models import Task, TaskDataset
from webapp.datasets.services.datasets import dataset_create
from webapp.runs.models import Job
from webapp.runs.selectors.dataset_delete import DATASET_DELETE_JOB_KIND
from workers.runner import run_job

# run_job closes the connection as a worker does: the rows must be committed.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("jobs_without_broker")]


@pytest.fixture
def dataset(project_team):
    return dataset_create(project=project_team["project"], name="mail <b>tasks</b>", tasks=make_tasks(4),
                          actor=project_team["owner"])


def test_the_plan_says_what_goes_and_who_may_read_it(client, bearer, dataset):
    answer = client.get(f"/api/datasets/{dataset.pk}/deletion", **bearer("editor"))
    assert answer.status_code == 200, answer.content
    plan = answer.json()
    assert (plan["name"], plan["version"], plan["tasks"], plan["runs"]) == ("mail <b>tasks</b>", 1, 4, 0)
    assert plan["blockers"] == [] and plan["pending_job_id"] is None and plan["later_versions"] == []
    assert client.get(f"/api/datasets/{dataset.pk}/deletion", **bearer("viewer")).status_code == 403
    assert client.get(f"/api/datasets/{dataset.pk}/deletion", **bearer("outsider")).status_code == 404
    assert client.delete(f"/api/datasets/{dataset.pk}", **bearer("reviewer")).status_code == 403
    assert client.delete(f"/api/datasets/{dataset.pk}", **bearer("outsider")).status_code == 404
    assert not Job.objects.filter(kind=DATASET_DELETE_JOB_KIND).exists()


def test_delete_queues_a_job_that_the_runner_completes_and_the_version_is_gone(client, bearer, dataset):
    answer = client.delete(f"/api/datasets/{dataset.pk}", **bearer("editor"))
    assert answer.status_code == 202, answer.content
    job = answer.json()
    assert job["kind"] == DATASET_DELETE_JOB_KIND and job["state"] == "queued" and job["run_id"] is None
    again = client.delete(f"/api/datasets/{dataset.pk}", **bearer("editor"))
    assert again.status_code == 409 and f"being deleted already (job {job['id']}" in again.json()["detail"]
    assert client.get(f"/api/datasets/{dataset.pk}/deletion", **bearer("editor")).json()["pending_job_id"] == job["id"]
    listed = client.get(f"/api/projects/{dataset.project.slug}/jobs", **bearer("viewer")).json()["items"]
    assert [row["subject"] for row in listed if row["id"] == job["id"]] == ["mail <b>tasks</b> v1"]

    assert run_job(job["id"]) == "succeeded"

    assert client.get(f"/api/datasets/{dataset.pk}", **bearer("viewer")).status_code == 404
    assert not Task.objects.filter(dataset_id=dataset.pk).exists()
    finished = client.get(f"/api/jobs/{job['id']}", **bearer("viewer")).json()
    assert finished["state"] == "succeeded" and "deleted mail <b>tasks</b> v1: " in finished["log_tail"]
    assert finished["subject"] == "mail <b>tasks</b> v1"
    assert Job.objects.get(pk=job["id"]).payload["result"]["removed"]["tasks"] == 4


def test_a_version_a_run_used_answers_409_with_what_to_do(client, bearer, project_team):
    setup = make_pipeline_project(project_team["project"], project_team["owner"])
    make_pipeline_run(project_team["project"], project_team["owner"], name="grpo", steps=1, setup=setup)
    answer = client.delete(f"/api/datasets/{setup[0].pk}", **bearer("owner"))
    assert answer.status_code == 409
    assert "1 run used this version" in answer.json()["detail"] and "delete those runs first" in answer.json()["detail"]
    assert TaskDataset.objects.filter(pk=setup[0].pk).exists()


def test_a_new_run_on_a_version_being_deleted_is_a_422_naming_the_dataset(client, bearer, project_team):
    dataset, _verifier, _model = make_pipeline_project(project_team["project"], project_team["owner"])
    job = client.delete(f"/api/datasets/{dataset.pk}", **bearer("editor")).json()
    body = {"name": "late grpo", "kind": "grpo", "config": {"device": "cpu", "max_steps": 2},
            "dataset": "tool calls", "verifier": "tool_call_verifier", "model": "tiny"}
    answer = client.post(f"/api/projects/{project_team['project'].slug}/runs", json.dumps(body),
                         content_type="application/json", **bearer("editor"))
    assert answer.status_code == 422, answer.content
    assert f"'tool calls v1' is being deleted (job {job['id']})" in answer.json()["errors"]["dataset"]
