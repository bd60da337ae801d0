"""Deleting an experiment with all its runs: what goes (every stage run, the evaluations of their checkpoints,
their rows and folders), what stays (its dataset, verifier and model, other runs), what keeps it (a running
stage, a promotion, reviews for a non-owner), and that a stopped attempt deletes nothing.

The experiments are real: one recorded from finished runs (experiment_record, as the demo's example is) and one
started with experiment_create (its baseline's job queued); the runs are scored and ingested as a worker would.
"""

from __future__ import annotations

import pytest
from pipeline_data import make_finished_experiment, make_pipeline_project, make_pipeline_run

from webapp.datasets.models import TaskDataset
from webapp.projects.models import AuditEvent
from webapp.runs.models import Checkpoint, Experiment, Job, JobState, MetricPoint, Run
from webapp.runs.selectors.experiment_delete import (
    EXPERIMENT_DELETE_JOB_KIND,
    experiment_delete_plan,
    experiments_being_deleted,
)
from webapp.runs.selectors.run_delete import run_delete_plan
from webapp.runs.services.experiment_delete import (
    ExperimentDeleteRefused,
    experiment_delete_execute,
    experiment_delete_start,
)
from webapp.runs.services.experiments import experiment_create
from webapp.runs.services.paths import run_folder
from webapp.runs.services.promotion import alias_move
from webapp.trajectories.models import Review, Trajectory

pytestmark = pytest.mark.usefixtures("jobs_without_broker")
NAME = 'exp <b>"one"</b>'


@pytest.fixture
def world(project_team):
    """A finished experiment (baseline, GRPO with a checkpoint, held-out evaluation), an extra evaluation of its
    candidate made by hand, and a run outside it."""
    project, owner = project_team["project"], project_team["owner"]
    setup = make_pipeline_project(project, owner)
    experiment, runs = make_finished_experiment(project, owner, name=NAME, setup=setup, checkpoint_bytes=1024)
    candidate = Checkpoint.objects.get(run=runs["grpo"])
    extra_eval = make_pipeline_run(project, owner, name="eval of the candidate", kind="eval", steps=1, setup=setup)
    Run.objects.filter(pk=extra_eval.pk).update(parent_checkpoint=candidate)
    outside = make_pipeline_run(project, owner, name="outside", steps=1, setup=setup)
    return {"project": project, "setup": setup, "experiment": experiment, "runs": runs, "candidate": candidate,
            "extra_eval": extra_eval, "outside": outside, **project_team}


def _delete(world, check=lambda: None):
    job = experiment_delete_start(experiment=world["experiment"], actor=world["owner"], confirm_name=NAME)
    return job, experiment_delete_execute(project_id=world["project"].pk, payload=job.payload, check=check)


def _gone(run_ids: list[int]) -> bool:
    return not (Run.objects.filter(pk__in=run_ids).exists() or Trajectory.objects.filter(run_id__in=run_ids).exists()
                or MetricPoint.objects.filter(run_id__in=run_ids).exists())


def test_the_plan_counts_every_run_and_what_they_hold(world):
    plan = experiment_delete_plan(world["experiment"], actor=world["owner"])
    stages = [world["runs"][stage].pk for stage in ("baseline", "grpo", "held_out")]
    assert plan.allowed and plan.run_ids == [*stages, world["extra_eval"].pk]
    assert plan.trajectories == Trajectory.objects.filter(run_id__in=plan.run_ids).count() > 0
    assert plan.checkpoints == 1 and plan.jobs == 4 and plan.folder.bytes == 1024
    # Alone, a stage run is kept by its experiment, and the page says how to delete it.
    alone = run_delete_plan(world["runs"]["grpo"], actor=world["owner"])
    assert any("delete the experiment instead" in b for b in alone.blockers)


def test_a_deletion_removes_the_experiment_and_all_its_runs_and_leaves_the_rest(world):
    plan = experiment_delete_plan(world["experiment"], actor=world["owner"])
    outside = Trajectory.objects.filter(run=world["outside"]).count()
    folder = run_folder(world["runs"]["grpo"])

    job, report = _delete(world)

    assert _gone(plan.run_ids) and not Experiment.objects.filter(pk=world["experiment"].pk).exists()
    assert not folder.exists() and report.freed_bytes >= 1024 and report.folder_errors == []
    assert report.removed["runs"] == 4 and report.removed["experiments"] == 1 and "commit" in report.seconds
    assert [r["stage"] for r in report.runs] == ["baseline", "grpo", "held_out", ""]
    assert Trajectory.objects.filter(run=world["outside"]).count() == outside > 0
    dataset, verifier, model = world["setup"]
    assert TaskDataset.objects.filter(pk=dataset.pk).exists() and verifier.versions.exists()
    audit = list(AuditEvent.objects.filter(target_type="runs.experiment", target_id=str(world["experiment"].pk))
                 .values_list("action", flat=True).order_by("id"))
    assert audit == ["experiment.delete_requested", "experiment.delete"]
    assert job.payload["experiment_name"] == NAME
    # A second attempt (the job retried after its commit) finds it gone and removes nothing.
    assert not experiment_delete_execute(project_id=world["project"].pk, payload=job.payload).removed


def test_a_promoted_candidate_or_an_editor_facing_reviews_keeps_it(world):
    Review.objects.create(trajectory=Trajectory.objects.filter(run=world["runs"]["grpo"]).first(),
                          reviewer=world["reviewer"], verdict="agree")
    with pytest.raises(ExperimentDeleteRefused, match="only an owner"):
        experiment_delete_start(experiment=world["experiment"], actor=world["editor"], confirm_name=NAME)
    alias_move(checkpoint=world["candidate"], name="production", actor=world["owner"], reason="ship")
    with pytest.raises(ExperimentDeleteRefused, match="'production' \\(step 1\\)") as refused:
        experiment_delete_start(experiment=world["experiment"], actor=world["owner"], confirm_name=NAME)
    assert refused.value.status == 409 and not Job.objects.filter(kind=EXPERIMENT_DELETE_JOB_KIND).exists()


def test_a_running_experiment_is_kept_until_its_stage_is_cancelled(project_team):
    project, owner = project_team["project"], project_team["owner"]
    dataset, verifier, model = make_pipeline_project(project, owner)
    running = experiment_create(project=project, name="live", dataset=dataset,
                                verifier_version=verifier.latest_version, model=model, actor=owner)
    plan = experiment_delete_plan(running, actor=owner)
    baseline_job = Job.objects.get(run__experiment=running, run__stage="baseline")
    assert "is still running" in plan.blockers[0]
    assert any(f"job {baseline_job.pk} (eval, queued)" in b for b in plan.blockers)
    with pytest.raises(ExperimentDeleteRefused, match="still running"):
        experiment_delete_start(experiment=running, actor=owner, confirm_name="live")


def test_the_typed_name_a_second_request_and_the_marks(world):
    experiment = world["experiment"]
    with pytest.raises(ExperimentDeleteRefused, match="Type the experiment's name") as typed:
        experiment_delete_start(experiment=experiment, actor=world["owner"], confirm_name="exp")
    assert typed.value.status == 422
    job = experiment_delete_start(experiment=experiment, actor=world["owner"], confirm_name=f" {NAME} ")
    with pytest.raises(ExperimentDeleteRefused, match=f"being deleted already \\(job {job.pk}, queued\\)"):
        experiment_delete_start(experiment=experiment, actor=world["owner"])
    assert experiments_being_deleted(world["project"].pk, [experiment.pk]) == {experiment.pk}
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    assert experiments_being_deleted(world["project"].pk, [experiment.pk]) == set()


def test_a_stop_between_statements_leaves_the_experiment_whole(world):
    calls = []

    def stop_late():
        calls.append(1)
        if len(calls) == 12:
            raise RuntimeError("cancelled")

    with pytest.raises(RuntimeError, match="cancelled"):
        _delete(world, check=stop_late)
    plan = experiment_delete_plan(world["experiment"], actor=world["owner"])
    assert len(plan.runs) == 4 and plan.trajectories > 0 and run_folder(world["runs"]["grpo"]).exists()


def test_an_experiment_without_runs_goes_too(project_team):
    project, owner = project_team["project"], project_team["owner"]
    dataset, verifier, model = make_pipeline_project(project, owner)
    empty = Experiment.objects.create(project=project, name="failed at once", dataset=dataset,
                                      verifier_version=verifier.latest_version, model=model, state="failed")
    job = experiment_delete_start(experiment=empty, actor=owner)
    report = experiment_delete_execute(project_id=project.pk, payload=job.payload)
    assert report.removed["experiments"] == 1 and report.runs == [] and not Experiment.objects.filter(pk=empty.pk)
