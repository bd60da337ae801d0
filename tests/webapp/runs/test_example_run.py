"""The demo's example run: the recorded CPU-recipe archive, imported by crucible_setup, once."""

from __future__ import annotations

import io
import tarfile

import pytest
from django.core.management import call_command
from django.urls import reverse

from webapp.datasets.models import TaskDataset
from webapp.runs.models import Checkpoint, CheckpointAlias, Experiment, MetricPoint, Run
from webapp.runs.selectors.checkpoints import checkpoint_rows
from webapp.runs.selectors.runs import run_detail
from webapp.runs.services.example_run import (
    EXAMPLE_ALIAS,
    EXAMPLE_ARCHIVE,
    EXAMPLE_DATASET,
    EXAMPLE_EXPERIMENT,
    EXAMPLE_QUEUE,
    STAGES,
    TASKS_FILE,
    example_manifest,
)
from webapp.trajectories.models import ReviewQueue, Trajectory

pytestmark = pytest.mark.django_db

WANTED = {"events.jsonl", "run.json", "COMPLETE", "run_config.json"}


def _setup() -> str:
    out = io.StringIO()
    call_command("crucible_setup", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_archive_is_small_and_holds_only_what_the_import_reads():
    assert EXAMPLE_ARCHIVE.stat().st_size < 5 * 1024 * 1024
    with tarfile.open(EXAMPLE_ARCHIVE, "r:xz") as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    assert {n.split("/")[0] for n in names} == {*STAGES, TASKS_FILE}
    assert {n.rsplit("/", 1)[-1] for n in names if "/" in n} <= WANTED, "no weights, no logs"
    manifest = example_manifest()
    assert manifest["recorded_with"][:2] == ["python", "scripts/cpu_recipe.py"]
    assert set(manifest["stages"]) == set(STAGES)
    assert manifest["tasks"]["held_out"] > 0 and manifest["tasks"]["train"] > 0


def test_setup_imports_every_stage_with_its_data_and_a_review_queue_once(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    first = _setup()
    assert f"{len(STAGES)} stages of a recorded CPU-recipe run imported" in first
    runs = {r.name: r for r in Run.objects.filter(project__slug="demo")}
    assert set(runs) == set(STAGES.values())
    grpo, sft = runs[STAGES["grpo"]], runs[STAGES["sft"]]
    assert (grpo.kind, sft.kind, runs[STAGES["baseline"]].kind) == ("grpo", "sft", "eval")
    assert all(r.is_imported and "example" in r.import_info for r in runs.values())
    held_out = runs[STAGES["grpo_held_out"]]
    held_out_tasks = example_manifest()["tasks"]["held_out"]
    assert Trajectory.objects.filter(run=held_out, split="held_out").count() == held_out_tasks
    assert MetricPoint.objects.filter(run=held_out, name="success_rate").exists()
    grpo_steps = example_manifest()["stages"]["grpo"]["train"]["step"]
    assert MetricPoint.objects.filter(run=grpo, split="train", name="reward").count() == grpo_steps
    assert Checkpoint.objects.filter(run__in=[sft, grpo]).count() >= 2
    queue = ReviewQueue.objects.get(project__slug="demo", name=EXAMPLE_QUEUE)
    assert queue.items.exists() and not queue.items.filter(trajectory__passed=True).exists()

    counts = (Run.objects.count(), Trajectory.objects.count(), MetricPoint.objects.count(), ReviewQueue.objects.count())
    again = _setup()
    assert "already imported; nothing changed" in again
    assert counts == (Run.objects.count(), Trajectory.objects.count(), MetricPoint.objects.count(),
                      ReviewQueue.objects.count())


def test_every_page_of_the_demo_says_it_holds_example_data(client, settings, tmp_path, django_user_model,
                                                          project_team):
    settings.DATA_DIR = tmp_path
    _setup()
    client.force_login(django_user_model.objects.get(username="admin"))
    grpo = Run.objects.get(name=STAGES["grpo"])
    for name, args in (("project", ["demo"]), ("run_list", ["demo"]), ("run_detail", ["demo", grpo.pk]),
                       ("trajectory_list", ["demo"]), ("failures", ["demo"]), ("review", ["demo"]),
                       ("checkpoint_list", ["demo"]), ("dataset_list", ["demo"])):
        body = client.get(reverse(f"dashboard:{name}", args=args)).content.decode()
        assert 'id="example-note"' in body and "recorded by scripts/cpu_recipe.py" in body, name
    client.force_login(project_team["owner"])
    other = client.get(reverse("dashboard:project", args=[project_team["project"].slug])).content.decode()
    assert 'id="example-note"' not in other


def test_the_example_runs_tick_no_step_of_the_overview(settings, tmp_path):
    from webapp.dashboard.views.overview import start_steps
    from webapp.projects.models import Project

    settings.DATA_DIR = tmp_path
    _setup()
    steps = {s.label: s.done for s in start_steps(Project.objects.get(slug="demo"))}
    assert steps["Import a dataset of tasks"] and steps["Register the model to train"]
    assert not steps["Measure a baseline on held-out tasks"] and not steps["GRPO with verifiable rewards"]


def _latest(run: Run, name: str, split: str) -> float:
    return MetricPoint.objects.filter(run=run, name=name, split=split).order_by("-step").first().value


def test_every_example_trajectory_has_its_task_from_the_imported_dataset(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    _setup()
    dataset = TaskDataset.objects.get(project__slug="demo", name=EXAMPLE_DATASET)
    assert set(dataset.tasks.values_list("split", flat=True)) == {"train", "validation", "held_out"}
    runs = Run.objects.filter(project__slug="demo", import_info__has_key="example")
    assert runs.count() == len(STAGES) and all(r.dataset_id == dataset.pk for r in runs)
    assert all(r.verifier_version is not None and r.model is not None for r in runs)
    example = Trajectory.objects.filter(run__in=runs)
    assert example.exists() and not example.filter(task__isnull=True).exists()
    assert not example.exclude(task__dataset=dataset).exists()


def test_the_evaluations_are_tied_to_the_checkpoints_they_measured(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    _setup()
    runs = {stage: Run.objects.get(name=name) for stage, name in STAGES.items()}
    sft_checkpoint = Checkpoint.objects.filter(run=runs["sft"]).order_by("-step").first()
    grpo_checkpoint = Checkpoint.objects.filter(run=runs["grpo"]).order_by("-step").first()
    assert runs["baseline"].parent_checkpoint is None  # the base model
    assert runs["grpo"].parent_checkpoint == sft_checkpoint
    for stage in ("sft_held_out", "sft_validation"):
        assert runs[stage].parent_checkpoint == sft_checkpoint, stage
    for stage in ("grpo_held_out", "grpo_validation"):
        assert runs[stage].parent_checkpoint == grpo_checkpoint, stage
    rows = {row.id: row for row in checkpoint_rows([sft_checkpoint, grpo_checkpoint])}
    for checkpoint, stage in ((sft_checkpoint, "sft"), (grpo_checkpoint, "grpo")):
        row = rows[checkpoint.pk]
        assert row.held_out["success_rate"] == _latest(runs[f"{stage}_held_out"], "success_rate", "held_out")
        assert row.validation["success_rate"] == _latest(runs[f"{stage}_validation"], "success_rate", "validation")


def test_the_example_experiment_decides_its_gates_on_its_own_numbers_once(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    _setup()
    experiment = Experiment.objects.get(project__slug="demo", name=EXAMPLE_EXPERIMENT)
    baseline, held_out = Run.objects.get(name=STAGES["baseline"]), Run.objects.get(name=STAGES["grpo_held_out"])
    assert experiment.state == "succeeded" and experiment.stages["held_out"]["run"] == held_out.pk
    assert {r.stage for r in experiment.runs.all()} == {"baseline", "sft", "grpo", "held_out"}
    assert experiment.candidate_checkpoint.run.name == STAGES["grpo"]
    assert experiment.created_at == baseline.started_at < experiment.finished_at == held_out.finished_at
    gates = {g["gate"]: g for g in experiment.gates}
    success = gates["held-out success"]
    assert success["baseline"] == _latest(baseline, "success_rate", "held_out")
    assert success["candidate"] == _latest(held_out, "success_rate", "held_out")
    assert success["passed"] == (success["candidate"] > success["baseline"])
    assert experiment.gates_passed == all(g["passed"] for g in experiment.gates)
    alias = CheckpointAlias.objects.filter(project__slug="demo", name=EXAMPLE_ALIAS).first()
    assert (alias is not None) == experiment.gates_passed
    if alias is not None:
        assert alias.checkpoint == experiment.candidate_checkpoint
    _setup()
    assert Experiment.objects.filter(project__slug="demo").count() == 1
    assert TaskDataset.objects.filter(project__slug="demo", name=EXAMPLE_DATASET).count() == 1


def test_the_shipped_example_shows_grpo_beating_sft_and_the_baseline_with_its_gates_passed(settings, tmp_path):
    """What the demo's first page promises: the recorded recipe's GRPO checkpoint beats SFT and the base
    model on held-out tasks, passes every gate of its experiment on those numbers, and is promoted."""
    settings.DATA_DIR = tmp_path
    _setup()
    runs = {r.name: r for r in Run.objects.filter(project__slug="demo")}
    base, sft, grpo = (_latest(runs[STAGES[s]], "success_rate", "held_out")
                       for s in ("baseline", "sft_held_out", "grpo_held_out"))
    assert grpo > sft > base, (base, sft, grpo)
    experiment = Experiment.objects.get(project__slug="demo", name=EXAMPLE_EXPERIMENT)
    assert experiment.gates_passed, experiment.gates
    unsafe = next(g for g in experiment.gates if g["gate"] == "unsafe actions")
    assert unsafe["rule"] == "candidate <= max(baseline, 0.05)", "the allowance the example accepts is shown"
    alias = CheckpointAlias.objects.get(project__slug="demo", name=EXAMPLE_ALIAS)
    assert alias.checkpoint == experiment.candidate_checkpoint
    value, source = run_detail(runs[STAGES["grpo"]]).checkpoint_headline["held_out/success_rate"]
    assert value == grpo, "the GRPO run's header shows its checkpoint's held-out success, not a dash"
    assert f"step-{experiment.candidate_checkpoint.step} checkpoint" in source
