"""Deleting a run: what goes with it, what it leaves, what stops it, and that a stopped attempt deletes nothing.

The runs are real (scored by the real verifier, ingested as a worker would); the deletion runs through
webapp.runs.services.run_delete as the "run_delete" job handler calls it, and once through the real
job runner (workers.runner.run_job).
"""

from __future__ import annotations

import pytest
from pipeline_data import make_pipeline_project, make_pipeline_run

from webapp.datasets.models import Task
from webapp.projects.models import AuditEvent
from webapp.runs.models import (
    Checkpoint,
    Experiment,
    Job,
    JobState,
    MetricPoint,
    Run,
)
from webapp.runs.selectors.run_delete import RUN_DELETE_JOB_KIND, run_delete_plan
from webapp.runs.services import jobs as job_services
from webapp.runs.services.paths import run_folder
from webapp.runs.services.promotion import alias_move
from webapp.runs.services.run_delete import (
    RunDeleteRefused,
    run_delete_execute,
    run_delete_start,
    runs_delete_start,
)
from webapp.trajectories.models import (
    BucketRollup,
    QueueItem,
    Rescore,
    RescoreResult,
    Review,
    ReviewQueue,
    StepRollup,
    Trajectory,
)
from webapp.verifiers.models import VerifierCheck, VerifierCheckItem

pytestmark = pytest.mark.usefixtures("jobs_without_broker")


def _checkpoint(run: Run, step: int) -> Checkpoint:
    folder = run_folder(run) / "checkpoints" / f"step_{step}"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(b"w" * 4096)
    return Checkpoint.objects.create(run=run, step=step, storage_uri=str(folder))


@pytest.fixture
def world(project_team):
    """A GRPO run with a checkpoint, an evaluation of it, people's work on its trajectories, and a run that stays."""
    project, owner, reviewer = project_team["project"], project_team["owner"], project_team["reviewer"]
    setup = make_pipeline_project(project, owner)
    doomed = make_pipeline_run(project, owner, name="grpo doomed", setup=setup)
    keeper = make_pipeline_run(project, owner, name="grpo keeper", setup=setup)
    checkpoint = _checkpoint(doomed, 2)
    (run_folder(doomed) / "events.jsonl").write_text("{}\n")
    evaluation = make_pipeline_run(project, owner, name="eval of step 2", kind="eval", steps=1, setup=setup)
    Run.objects.filter(pk=evaluation.pk).update(parent_checkpoint=checkpoint)
    (run_folder(evaluation) / "events.jsonl").parent.mkdir(parents=True)
    (run_folder(evaluation) / "events.jsonl").write_text("{}\n")

    mine = list(Trajectory.objects.filter(run=doomed).order_by("id")[:4])
    theirs = list(Trajectory.objects.filter(run=keeper).order_by("id")[:4])
    Trajectory.objects.filter(pk=theirs[3].pk).update(checkpoint=checkpoint)
    queue = ReviewQueue.objects.create(project=project, name="pairs", kind="pair")
    pair = QueueItem.objects.create(queue=queue, position=0, trajectory=theirs[0], other=mine[0])
    kept_item = QueueItem.objects.create(queue=queue, position=1, trajectory=theirs[1], other=theirs[2])
    Review.objects.create(trajectory=mine[1], reviewer=reviewer, verdict="agree")
    Review.objects.create(trajectory=theirs[0], reviewer=reviewer, verdict="agree", item=pair, preferred_over=mine[0])
    kept_review = Review.objects.create(trajectory=theirs[1], reviewer=reviewer, verdict="agree", item=kept_item,
                                        preferred_over=theirs[2])
    task = setup[0].tasks.first()
    Task.objects.filter(pk=task.pk).update(origin_trajectory=mine[2])
    check = VerifierCheck.objects.create(version=setup[1].latest_version, size=3, labelled=3, agreed=2)
    for position, (trajectory, right) in enumerate([(mine[0], True), (theirs[0], True), (theirs[1], False)]):
        VerifierCheckItem.objects.create(sanity_check=check, position=position, trajectory=trajectory,
                                         scored=True, human_right=right)
    rescore = Rescore.objects.create(project=project, run=doomed, verifier_version=setup[1].latest_version)
    RescoreResult.objects.create(rescore=rescore, trajectory=mine[0], reward=1.0, passed=True)
    return {"project": project, "setup": setup, "doomed": doomed, "keeper": keeper, "evaluation": evaluation,
            "checkpoint": checkpoint, "task": task, "check": check, "kept_item": kept_item,
            "kept_review": kept_review, **project_team}


def _rows(run_ids: list[int]) -> dict[str, int]:
    return {
        "trajectories": Trajectory.objects.filter(run_id__in=run_ids).count(),
        "metrics": MetricPoint.objects.filter(run_id__in=run_ids).count(),
        "step rollups": StepRollup.objects.filter(run_id__in=run_ids).count(),
        "bucket rollups": BucketRollup.objects.filter(run_id__in=run_ids).count(),
        "checkpoints": Checkpoint.objects.filter(run_id__in=run_ids).count(),
        "jobs": Job.objects.filter(run_id__in=run_ids).count(),
        "runs": Run.objects.filter(pk__in=run_ids).count(),
        "rescores": Rescore.objects.filter(run_id__in=run_ids).count(),
    }


def _delete(world, actor=None) -> tuple[Job, object]:
    job = run_delete_start(run=world["doomed"], actor=actor or world["owner"], confirm_name="grpo doomed")
    return job, run_delete_execute(project_id=world["project"].pk, payload=job.payload)


def test_the_plan_counts_what_goes_and_an_editor_may_not_delete_other_peoples_labels(world):
    plan = run_delete_plan(world["doomed"], actor=world["owner"])
    assert plan.allowed and [r.name for r in plan.evaluations] == ["eval of step 2"]
    mine = Trajectory.objects.filter(run_id__in=plan.run_ids).count()
    assert plan.trajectories == mine > 0 and plan.reviews == 2 and plan.checkpoints == 1 and plan.jobs == 2
    assert plan.folder.files == 3 and plan.folder.bytes == 4096 + 3 + 3
    refused = run_delete_plan(world["doomed"], actor=world["editor"])
    assert not refused.allowed and "only an owner" in refused.blockers[0] and "2 reviews" in refused.blockers[0]
    with pytest.raises(RunDeleteRefused, match="only an owner"):
        run_delete_start(run=world["doomed"], actor=world["editor"], confirm_name="grpo doomed")
    assert not Job.objects.filter(kind=RUN_DELETE_JOB_KIND).exists()


def test_a_deletion_removes_the_run_its_evaluation_and_their_files_and_leaves_everyone_elses_rows(world):
    doomed, keeper, evaluation = world["doomed"], world["keeper"], world["evaluation"]
    folders = [run_folder(doomed), run_folder(evaluation)]
    keeper_before = _rows([keeper.pk])
    trajectories = Trajectory.objects.filter(run__in=[doomed, evaluation]).count()

    job, report = _delete(world)

    assert _rows([doomed.pk, evaluation.pk]) == dict.fromkeys(keeper_before, 0)
    assert _rows([keeper.pk]) == keeper_before
    assert not any(folder.exists() for folder in folders) and report.freed_bytes == 4096 + 3 + 3
    assert report.folder_errors == [] and [r["name"] for r in report.runs] == ["grpo doomed", "eval of step 2"]
    assert report.removed["trajectories"] == trajectories > 0 and report.removed["runs"] == 2
    # Reviews that named one of its trajectories on either side went; the others' stayed with their items.
    assert Review.objects.filter(pk=world["kept_review"].pk, item=world["kept_item"]).exists()
    assert Review.objects.count() == 1 and QueueItem.objects.count() == 1
    # The derived task stays, without its origin; the project-wide check is recounted from its items left.
    assert Task.objects.get(pk=world["task"].pk).origin_trajectory_id is None
    check = VerifierCheck.objects.get(pk=world["check"].pk)
    assert (check.size, check.labelled, check.agreed) == (2, 2, 1)
    assert VerifierCheckItem.objects.filter(sanity_check=check).count() == 2
    assert RescoreResult.objects.count() == 0
    # The keeper's trajectory that named the deleted checkpoint keeps everything else.
    assert Trajectory.objects.filter(run=keeper, checkpoint__isnull=False).count() == 0
    audit = list(AuditEvent.objects.filter(target_type="runs.run", target_id=str(doomed.pk))
                 .values_list("action", flat=True).order_by("id"))
    assert audit == ["run.delete_requested", "run.delete"]


def test_what_keeps_a_run_is_said_and_nothing_is_queued(world):
    doomed, owner, checkpoint = world["doomed"], world["owner"], world["checkpoint"]

    def refusal() -> str:
        with pytest.raises(RunDeleteRefused) as caught:
            run_delete_start(run=doomed, actor=owner, confirm_name="grpo doomed")
        return str(caught.value)

    with pytest.raises(RunDeleteRefused, match="Type the run's name") as typed:
        run_delete_start(run=doomed, actor=owner, confirm_name="grpo")
    assert typed.value.status == 422

    export = job_services.job_create(project=world["project"], kind="export", payload={"run_id": doomed.pk})
    assert f"job {export.pk} (export, queued)" in refusal()
    Job.objects.filter(pk=export.pk).update(state=JobState.CANCELLED)

    evaluation_job = Job.objects.filter(run=world["evaluation"]).get()
    Job.objects.filter(pk=evaluation_job.pk).update(state=JobState.RUNNING)
    assert f"job {evaluation_job.pk} (eval, running)" in refusal()
    Job.objects.filter(pk=evaluation_job.pk).update(state=JobState.SUCCEEDED)

    alias_move(checkpoint=checkpoint, name="production", actor=owner, reason="test")
    assert "'production' (step 2)" in refusal()
    other = _checkpoint(world["keeper"], 3)
    alias_move(checkpoint=other, name="production", actor=owner, reason="moved on")
    assert "promoted once" in refusal()

    assert Job.objects.filter(kind=RUN_DELETE_JOB_KIND).count() == 0
    assert Run.objects.filter(pk=doomed.pk).exists()


@pytest.mark.parametrize("link", ["child run", "experiment", "verifier check"])
def test_a_run_that_other_records_read_stays(world, link):
    doomed = world["doomed"]
    if link == "child run":
        child = make_pipeline_run(world["project"], world["owner"], name="grpo from step 2", setup=world["setup"])
        Run.objects.filter(pk=child.pk).update(parent_checkpoint=world["checkpoint"])
        expected = f"trained from its checkpoints: #{child.pk} 'grpo from step 2'"
    elif link == "experiment":
        dataset, verifier, model = world["setup"]
        experiment = Experiment.objects.create(project=world["project"], name="exp", dataset=dataset,
                                               verifier_version=verifier.latest_version, model=model)
        Run.objects.filter(pk=doomed.pk).update(experiment=experiment, stage="grpo")
        expected = "is the grpo stage of experiment 'exp'"
    else:
        VerifierCheck.objects.create(version=world["setup"][1].latest_version, run=doomed)
        expected = "Verifier checks were drawn from its outputs"
    doomed.refresh_from_db()
    plan = run_delete_plan(doomed, actor=world["owner"])
    assert not plan.allowed and any(expected in b for b in plan.blockers), plan.blockers
    with pytest.raises(RunDeleteRefused, match="cannot be deleted"):
        run_delete_start(run=doomed, actor=world["owner"])


def test_the_job_checks_again_and_refuses_when_the_run_was_promoted_after_it_was_queued(world):
    job = run_delete_start(run=world["doomed"], actor=world["owner"])
    with pytest.raises(RunDeleteRefused, match="being deleted already"):
        run_delete_start(run=world["doomed"], actor=world["owner"])
    alias_move(checkpoint=world["checkpoint"], name="production", actor=world["owner"], reason="test")
    with pytest.raises(RunDeleteRefused, match="Nothing was deleted"):
        run_delete_execute(project_id=world["project"].pk, payload=job.payload)
    assert _rows([world["doomed"].pk])["trajectories"] > 0 and run_folder(world["doomed"]).is_dir()


def test_a_deletion_stopped_between_two_statements_leaves_the_run_whole(world):
    doomed, evaluation = world["doomed"], world["evaluation"]
    before = _rows([doomed.pk, evaluation.pk])
    reviews, tasks = Review.objects.count(), Task.objects.filter(origin_trajectory__isnull=False).count()
    job = run_delete_start(run=doomed, actor=world["owner"])
    calls = {"n": 0}

    def stop_at_the_eighth() -> None:
        calls["n"] += 1
        if calls["n"] == 8:  # after the trajectories went, before the metrics
            raise RuntimeError("cancelled")

    with pytest.raises(RuntimeError, match="cancelled"):
        run_delete_execute(project_id=world["project"].pk, payload=job.payload, check=stop_at_the_eighth)
    assert _rows([doomed.pk, evaluation.pk]) == before
    assert Review.objects.count() == reviews and Task.objects.filter(origin_trajectory__isnull=False).count() == tasks
    assert run_folder(doomed).is_dir() and run_folder(evaluation).is_dir()


def test_a_run_deleted_already_is_a_success_with_nothing_removed(world):
    job, _ = _delete(world)
    again = run_delete_execute(project_id=world["project"].pk, payload=job.payload)
    assert again.already_gone and again.removed == {}


def test_a_link_in_place_of_the_run_folder_is_removed_and_its_target_kept(world, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious.bin").write_bytes(b"x")
    evaluation_folder = run_folder(world["evaluation"])
    for child in evaluation_folder.iterdir():
        child.unlink()
    evaluation_folder.rmdir()
    evaluation_folder.symlink_to(target, target_is_directory=True)
    _delete(world)
    assert not evaluation_folder.is_symlink() and (target / "precious.bin").read_bytes() == b"x"


def test_several_runs_queue_a_job_each_and_a_run_that_changed_since_the_page_is_kept(world):
    owner = world["owner"]
    plans = [run_delete_plan(world["doomed"], actor=owner), run_delete_plan(world["keeper"], actor=owner)]
    with pytest.raises(RunDeleteRefused, match="Type 2, the number of runs") as typed:
        runs_delete_start(plans=plans, actor=owner, confirm_count="1")
    assert typed.value.status == 422
    alias_move(checkpoint=_checkpoint(world["keeper"], 3), name="production", actor=owner, reason="meanwhile")
    outcome = runs_delete_start(plans=plans, actor=owner, confirm_count=" 2 ")
    assert [job.payload["run_id"] for job in outcome.jobs] == [world["doomed"].pk]
    assert list(outcome.kept) == [world["keeper"].pk] and "'production' (step 3)" in outcome.kept[world["keeper"].pk]
    again = [run_delete_plan(world["doomed"], actor=owner), run_delete_plan(world["keeper"], actor=owner)]
    with pytest.raises(RunDeleteRefused, match="None of these runs can be deleted now") as none:
        runs_delete_start(plans=again, actor=owner, confirm_count="0")
    assert none.value.status == 409 and "being deleted already" in str(none.value)
