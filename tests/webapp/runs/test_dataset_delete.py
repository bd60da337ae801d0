"""Deleting a dataset version: what goes (its tasks), what stays (other versions, later versions with their own
tasks), what keeps it (runs, experiments, a queued deletion), and that a stopped attempt deletes nothing.

The versions are real (dataset_create, a split move), the runs are scored and ingested as a worker would
(pipeline_data); the deletion runs through webapp.runs.services.dataset_delete as the job handler calls it.
"""

from __future__ import annotations

import pytest
from pipeline_data import make_pipeline_project, make_pipeline_run, make_tasks

from webapp.datasets.models import Split, Task, TaskDataset
from webapp.datasets.selectors.datasets import TaskFilter
from webapp.datasets.services.datasets import dataset_create
from webapp.datasets.services.splits import dataset_split_move
from webapp.projects.models import AuditEvent
from webapp.runs.models import Experiment, Job, JobState
from webapp.runs.selectors.dataset_delete import (
    DATASET_DELETE_JOB_KIND,
    dataset_delete_plan,
    datasets_being_deleted,
)
from webapp.runs.services.dataset_delete import (
    DatasetDeleteRefused,
    dataset_delete_execute,
    dataset_delete_start,
)
from webapp.runs.services.run_config import ConfigError, run_config_check
from webapp.trajectories.models import Trajectory

pytestmark = pytest.mark.usefixtures("jobs_without_broker")


@pytest.fixture
def world(project_team):
    """A version with a later version made from it (a split move), another dataset that a run used, and the
    verifier and model a run needs."""
    project, owner = project_team["project"], project_team["owner"]
    used, verifier, model = make_pipeline_project(project, owner)
    doomed = dataset_create(project=project, name="mail <b>tasks</b>", tasks=make_tasks(6), actor=owner,
                            environment="json_tool_call")
    later, moved = dataset_split_move(dataset=doomed, flt=TaskFilter(), to_split=Split.HELD_OUT, actor=owner)
    run = make_pipeline_run(project, owner, name="grpo on tool calls", steps=1, setup=(used, verifier, model))
    return {"project": project, "doomed": doomed, "later": later, "moved": moved, "used": used,
            "verifier": verifier, "model": model, "run": run, **project_team}


def _delete(world, check=lambda: None):
    job = dataset_delete_start(dataset=world["doomed"], actor=world["editor"], confirm_name="mail <b>tasks</b> v1")
    return job, dataset_delete_execute(project_id=world["project"].pk, payload=job.payload, check=check)


def test_the_plan_counts_its_tasks_and_names_the_later_versions(world):
    plan = dataset_delete_plan(world["doomed"])
    assert plan.allowed and plan.tasks == 6 == Task.objects.filter(dataset=world["doomed"]).count()
    assert [(d.name, d.version) for d in plan.later_versions] == [("mail <b>tasks</b>", 2)]
    assert (plan.runs, plan.experiments, plan.blockers, plan.pending_job) == (0, 0, [], None)


def test_a_deletion_removes_the_version_and_its_tasks_and_leaves_every_other_row(world):
    doomed, later, used = world["doomed"], world["later"], world["used"]
    others = Task.objects.exclude(dataset=doomed).count()
    # A trajectory that names one of its tasks (none should, a run on it keeps the version) keeps its copy.
    trajectory = Trajectory.objects.filter(run=world["run"]).first()
    Trajectory.objects.filter(pk=trajectory.pk).update(task=doomed.tasks.first())

    job, report = _delete(world)

    assert not TaskDataset.objects.filter(pk=doomed.pk).exists() and not Task.objects.filter(dataset_id=doomed.pk)
    assert Task.objects.count() == others and later.tasks.count() == 6 and used.tasks.count() > 0
    assert report.removed == {"trajectory task links unset": 1, "later versions unlinked": 1, "tasks": 6,
                              "dataset versions": 1}
    assert report.label == "mail <b>tasks</b> v1" and not report.already_gone and "commit" in report.seconds
    kept = Trajectory.objects.get(pk=trajectory.pk)
    assert kept.task_id is None and kept.task_snapshot == trajectory.task_snapshot
    later.refresh_from_db()
    assert later.parent_id is None and later.lineage_detail["deleted_parent"] == "mail <b>tasks</b> v1"
    assert later.lineage_detail["split_move"]["moved"] == world["moved"]  # the rest of its lineage stays
    audit = list(AuditEvent.objects.filter(target_type="datasets.taskdataset", target_id=str(doomed.pk))
                 .values_list("action", flat=True).order_by("id"))
    assert audit == ["dataset.delete_requested", "dataset.delete"]
    assert job.payload["dataset_label"] == "mail <b>tasks</b> v1"


def test_a_run_or_an_experiment_keeps_the_version_and_nothing_is_queued(world):
    used = world["used"]
    plan = dataset_delete_plan(used)
    assert plan.runs == 1 and f"#{world['run'].pk} 'grpo on tool calls'" in plan.blockers[0]
    with pytest.raises(DatasetDeleteRefused, match="delete those runs first") as refused:
        dataset_delete_start(dataset=used, actor=world["owner"], confirm_name="tool calls v1")
    assert refused.value.status == 409

    Experiment.objects.create(project=world["project"], name="exp <i>1</i>", dataset=world["doomed"],
                              verifier_version=world["verifier"].latest_version, model=world["model"])
    with pytest.raises(DatasetDeleteRefused, match=r"Experiment 'exp <i>1</i>' is on this version"):
        dataset_delete_start(dataset=world["doomed"], actor=world["owner"], confirm_name="mail <b>tasks</b> v1")
    assert not Job.objects.filter(kind=DATASET_DELETE_JOB_KIND).exists()


def test_the_typed_name_must_be_the_versions_and_a_second_request_queues_nothing(world):
    doomed = world["doomed"]
    for typed in ("mail <b>tasks</b>", "mail <b>tasks</b> v2", ""):
        with pytest.raises(DatasetDeleteRefused, match="Type 'mail <b>tasks</b> v1'") as caught:
            dataset_delete_start(dataset=doomed, actor=world["editor"], confirm_name=typed)
        assert caught.value.status == 422
    job = dataset_delete_start(dataset=doomed, actor=world["editor"], confirm_name="  mail <b>tasks</b>   v1 ")
    with pytest.raises(DatasetDeleteRefused, match=f"being deleted already \\(job {job.pk}, queued\\)"):
        dataset_delete_start(dataset=doomed, actor=world["editor"])
    assert dataset_delete_plan(doomed).pending_job == job
    assert datasets_being_deleted(world["project"].pk, [doomed.pk, world["used"].pk]) == {doomed.pk}
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    assert datasets_being_deleted(world["project"].pk, [doomed.pk]) == set()


def test_a_new_run_on_a_version_being_deleted_is_refused(world):
    dataset_delete_start(dataset=world["doomed"], actor=world["editor"])
    with pytest.raises(ConfigError) as refused:
        run_config_check({}, project=world["project"], kind="grpo", model=world["model"], dataset=world["doomed"],
                         verifier_version=world["verifier"].latest_version)
    assert "is being deleted" in refused.value.by_field()["dataset"]


def test_a_run_started_after_the_job_was_queued_makes_the_job_refuse(world):
    job = dataset_delete_start(dataset=world["doomed"], actor=world["editor"])
    # The run's form was checked before the job was queued: out of the way while the run is made.
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    make_pipeline_run(world["project"], world["owner"], name="late run", steps=1,
                      setup=(world["doomed"], world["verifier"], world["model"]))
    Job.objects.filter(pk=job.pk).update(state=JobState.QUEUED)
    with pytest.raises(DatasetDeleteRefused, match="'late run'.*Nothing was deleted"):
        dataset_delete_execute(project_id=world["project"].pk, payload=job.payload)
    assert Task.objects.filter(dataset=world["doomed"]).count() == 6


def test_a_stop_between_statements_leaves_the_version_whole(world):
    calls = []

    def stop_at_the_third_statement():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("cancelled")

    with pytest.raises(RuntimeError, match="cancelled"):
        _delete(world, check=stop_at_the_third_statement)
    assert Task.objects.filter(dataset=world["doomed"]).count() == 6
    world["later"].refresh_from_db()
    assert world["later"].parent_id == world["doomed"].pk and "deleted_parent" not in world["later"].lineage_detail


def test_a_version_gone_already_is_a_success_with_nothing_removed(world):
    job, _report = _delete(world)
    again = dataset_delete_execute(project_id=world["project"].pk, payload=job.payload)
    assert again.already_gone and again.removed == {}
    other_project = dataset_delete_execute(project_id=world["other"].pk, payload={"dataset_id": world["used"].pk})
    assert other_project.already_gone and TaskDataset.objects.filter(pk=world["used"].pk).exists()


def test_a_deleted_versions_number_is_never_given_again(client, world):
    later = world["later"]  # mail <b>tasks</b> v2, the newest
    job = dataset_delete_start(dataset=later, actor=world["editor"])
    dataset_delete_execute(project_id=world["project"].pk, payload=job.payload)
    client.force_login(world["editor"])
    form = client.get(f"/p/{world['project'].slug}/datasets/import/").content.decode()
    assert "mail &lt;b&gt;tasks&lt;/b&gt; (v1 → v3)" in form  # what the import form says it will make
    again = dataset_create(project=world["project"], name="mail <b>tasks</b>", tasks=make_tasks(2), actor=world["owner"])
    assert again.version == 3
