"""REST API for deleting an experiment: GET /experiments/{id}/deletion (the plan), DELETE /experiments/{id} (202
and a job that the real job runner executes, the runs gone with it), refusals as 409 with what to do, and roles."""

from __future__ import annotations

import pytest
from pipeline_data import make_finished_experiment, make_pipeline_project

from webapp.runs.models import Experiment, Job, Run
from webapp.runs.selectors.experiment_delete import EXPERIMENT_DELETE_JOB_KIND
from webapp.runs.services.experiments import experiment_create
from webapp.trajectories.models import Trajectory
from workers.runner import run_job

# run_job closes the connection as a worker does: the rows must be committed.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("jobs_without_broker")]


@pytest.fixture
def experiment(project_team):
    return make_finished_experiment(project_team["project"], project_team["owner"], name="exp <b>1</b>")[0]


def test_the_plan_says_what_goes_and_who_may_read_it(client, bearer, experiment):
    answer = client.get(f"/api/experiments/{experiment.pk}/deletion", **bearer("editor"))
    assert answer.status_code == 200, answer.content
    plan = answer.json()
    assert plan["name"] == "exp <b>1</b>" and plan["blockers"] == [] and plan["pending_job_id"] is None
    assert [r["stage"] for r in plan["runs"]] == ["baseline", "grpo", "held_out"] and plan["trajectories"] > 0
    assert client.get(f"/api/experiments/{experiment.pk}/deletion", **bearer("viewer")).status_code == 403
    assert client.get(f"/api/experiments/{experiment.pk}/deletion", **bearer("outsider")).status_code == 404
    assert client.delete(f"/api/experiments/{experiment.pk}", **bearer("reviewer")).status_code == 403
    assert client.delete(f"/api/experiments/{experiment.pk}", **bearer("outsider")).status_code == 404
    assert not Job.objects.filter(kind=EXPERIMENT_DELETE_JOB_KIND).exists()


def test_delete_queues_a_job_that_the_runner_completes_and_everything_is_gone(client, bearer, experiment):
    run_ids = list(Run.objects.filter(experiment=experiment).values_list("pk", flat=True))
    answer = client.delete(f"/api/experiments/{experiment.pk}", **bearer("editor"))
    assert answer.status_code == 202, answer.content
    job = answer.json()
    assert job["kind"] == EXPERIMENT_DELETE_JOB_KIND and job["state"] == "queued" and job["run_id"] is None
    again = client.delete(f"/api/experiments/{experiment.pk}", **bearer("editor"))
    assert again.status_code == 409 and f"being deleted already (job {job['id']}" in again.json()["detail"]

    assert run_job(job["id"]) == "succeeded"

    assert client.get(f"/api/experiments/{experiment.pk}", **bearer("viewer")).status_code == 404
    assert not Experiment.objects.filter(pk=experiment.pk).exists() and len(run_ids) == 3
    assert not Run.objects.filter(pk__in=run_ids).exists() and not Trajectory.objects.filter(run_id__in=run_ids)
    finished = client.get(f"/api/jobs/{job['id']}", **bearer("viewer")).json()
    assert finished["state"] == "succeeded" and "deleted the experiment and 3 run(s)" in finished["log_tail"]
    assert finished["subject"] == "exp <b>1</b>"


def test_a_running_experiment_answers_409_with_what_to_do(client, bearer, project_team):
    project, owner = project_team["project"], project_team["owner"]
    dataset, verifier, model = make_pipeline_project(project, owner)
    running = experiment_create(project=project, name="live", dataset=dataset,
                                verifier_version=verifier.latest_version, model=model, actor=owner)
    answer = client.delete(f"/api/experiments/{running.pk}", **bearer("owner"))
    assert answer.status_code == 409 and "cancel the job of its running stage" in answer.json()["detail"]
