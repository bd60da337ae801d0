"""REST API for deleting a run: GET /runs/{id}/deletion (the plan), DELETE /runs/{id} (202 and a job that the
real job runner executes), refusals as 409 with what to do, and the roles."""

from __future__ import annotations

import pytest
from pipeline_data import make_pipeline_run

from webapp.runs.models import Checkpoint, Job, Run
from webapp.runs.selectors.run_delete import RUN_DELETE_JOB_KIND
from webapp.runs.services.promotion import alias_move
from webapp.trajectories.models import Trajectory
from workers.runner import run_job

# run_job closes the connection as a worker does: the rows must be committed.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("jobs_without_broker")]


@pytest.fixture
def run(project_team):
    return make_pipeline_run(project_team["project"], project_team["owner"], name="grpo <b>old</b>", steps=2)


def test_the_plan_says_what_goes_and_who_may_read_it(client, bearer, run):
    answer = client.get(f"/api/runs/{run.pk}/deletion", **bearer("editor"))
    assert answer.status_code == 200, answer.content
    plan = answer.json()
    assert plan["run_name"] == "grpo <b>old</b>" and plan["blockers"] == [] and plan["pending_job_id"] is None
    assert plan["trajectories"] == Trajectory.objects.filter(run=run).count() > 0 and plan["jobs"] == 1
    assert client.get(f"/api/runs/{run.pk}/deletion", **bearer("viewer")).status_code == 403
    assert client.get(f"/api/runs/{run.pk}/deletion", **bearer("outsider")).status_code == 404
    assert client.delete(f"/api/runs/{run.pk}", **bearer("reviewer")).status_code == 403
    assert client.delete(f"/api/runs/{run.pk}", **bearer("outsider")).status_code == 404
    assert not Job.objects.filter(kind=RUN_DELETE_JOB_KIND).exists()


def test_delete_queues_a_job_that_the_runner_completes_and_the_run_is_gone(client, bearer, run):
    answer = client.delete(f"/api/runs/{run.pk}", **bearer("editor"))
    assert answer.status_code == 202, answer.content
    job = answer.json()
    assert job["kind"] == RUN_DELETE_JOB_KIND and job["state"] == "queued" and job["run_id"] is None
    again = client.delete(f"/api/runs/{run.pk}", **bearer("editor"))
    assert again.status_code == 409 and f"being deleted already (job {job['id']}" in again.json()["detail"]
    assert client.get(f"/api/runs/{run.pk}/deletion", **bearer("editor")).json()["pending_job_id"] == job["id"]

    assert run_job(job["id"]) == "succeeded"

    assert client.get(f"/api/runs/{run.pk}", **bearer("viewer")).status_code == 404
    assert not Trajectory.objects.filter(run_id=run.pk).exists()
    finished = client.get(f"/api/jobs/{job['id']}", **bearer("viewer")).json()
    assert finished["state"] == "succeeded" and "deleted 1 run(s)" in finished["log_tail"]
    assert Job.objects.get(pk=job["id"]).payload["result"]["removed"]["runs"] == 1


def test_a_promoted_run_answers_409_with_what_to_do(client, bearer, project_team, run):
    checkpoint = Checkpoint.objects.create(run=run, step=2, storage_uri="/nowhere")
    alias_move(checkpoint=checkpoint, name="production", actor=project_team["owner"], reason="ship")
    answer = client.delete(f"/api/runs/{run.pk}", **bearer("owner"))
    assert answer.status_code == 409
    assert "'production' (step 2)" in answer.json()["detail"] and "Point the alias" in answer.json()["detail"]
    assert Run.objects.filter(pk=run.pk).exists() and not Job.objects.filter(kind=RUN_DELETE_JOB_KIND).exists()
