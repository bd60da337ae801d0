"""Where a sanity check draws its outputs from: every stored output whose task is known, of any run kind and
split, imported runs included (issue #35: an imported run's outputs were refused with "run an evaluation first").

A run trained elsewhere names its tasks only by id: importing it links it to the project's dataset version that
holds those ids, so its trajectories know their task; a run imported before its dataset was is linked when it is
imported again. The run folders here are written with the training package's own EventWriter, the way the run
import tests write their variants.
"""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path

import pytest
from pipeline_data import XSS, make_tasks

from training.events import EventWriter
from webapp.datasets.services.datasets import dataset_create
from webapp.runs.models import Run
from webapp.runs.services.ingest import EventIngestor
from webapp.runs.services.run_import import run_import
from webapp.trajectories.models import Trajectory
from webapp.trajectories.services.sanity_checks import (
    CheckError,
    candidates,
    check_create,
    check_score_pending,
)
from webapp.verifiers.models import VerifierCheck
from webapp.verifiers.services.verifiers import verifier_create

TASKS = 6


def _write_run_folder(run_dir: Path, tasks: list, *, kind: str = "grpo", split: str = "train") -> Path:
    """A run folder as `python -m training run` leaves it: the model's turns only (no prompt), two samples per
    task and step, the first one the right call."""
    with EventWriter(run_dir, attempt=1) as events:
        events.log(f"{kind} job on cpu")
        for step in (1, 2):
            for task in tasks:
                for sample in range(2):
                    text = json.dumps(task.ground_truth[0]) if sample == 0 else "I cannot help with that."
                    events.trajectory(task_id=task.id, turns=[{"role": "assistant", "content": text}],
                                      reward=1.0 if sample == 0 else 0.0, passed=sample == 0, step=step,
                                      split=split, sample_index=sample, group_id=f"{split}-{step}-{task.id}")
            events.metric(step, {"reward": 0.5}, split=split)
        events.done(step=2)
    return run_dir


@pytest.fixture
def setup(project_team):
    project, editor = project_team["project"], project_team["editor"]
    verifier = verifier_create(project=project, name="calls", kind="json_tool_call", config={}, actor=editor)
    return {"project": project, "editor": editor, "version": verifier.latest_version}


@pytest.mark.parametrize(("kind", "split"), [("grpo", "train"), ("eval", "held_out")])
def test_an_imported_runs_outputs_are_sanity_checked(setup, tmp_path, kind, split):
    project, editor = setup["project"], setup["editor"]
    tasks = make_tasks(TASKS)
    dataset = dataset_create(project=project, name="calls", tasks=tasks, actor=editor, environment="json_tool_call")
    decoys = [dataclasses.replace(t, id=f"other-{i}") for i, t in enumerate(make_tasks(3))]
    dataset_create(project=project, name="other", tasks=decoys, actor=editor)  # none of the run's task ids
    report = run_import(project=project, run_dir=_write_run_folder(tmp_path / "run", tasks, kind=kind, split=split),
                        actor=editor)
    run = Run.objects.get(pk=report.run_id)
    assert run.is_imported and run.kind == kind
    assert run.dataset == dataset, "the dataset version holding the run's task ids is the run's dataset"
    stored = Trajectory.objects.filter(run=run)
    assert stored.count() == TASKS * 4 and not stored.filter(task__isnull=True).exists()
    assert {t.task.external_id for t in stored.select_related("task")} == {t.id for t in tasks}

    for source in (run, None):  # the run itself, and the whole project
        check = check_create(version=setup["version"], actor=editor, size=10, run=source, seed=3)
        assert check_score_pending(check).remaining == 0
        items = list(check.items.select_related("trajectory"))
        assert len(items) == 10 and all(i.scored and i.error == "" for i in items)
        assert all(i.passed == (i.trajectory.sample_index == 0) for i in items), "scored against the linked task"


def test_a_run_imported_before_its_dataset_is_linked_when_imported_again(setup, tmp_path):
    project, editor = setup["project"], setup["editor"]
    tasks = make_tasks(TASKS)
    folder = _write_run_folder(tmp_path / "run", tasks)
    first = run_import(project=project, run_dir=folder, actor=editor)
    run = Run.objects.get(pk=first.run_id)
    assert run.dataset is None and not Trajectory.objects.filter(run=run, task__isnull=False).exists()

    with pytest.raises(CheckError) as whole:
        check_create(version=setup["version"], actor=editor, size=10)
    assert "run an evaluation" in str(whole.value)
    assert "import a run whose dataset is in this project" in str(whole.value)
    with pytest.raises(CheckError) as of_run:
        check_create(version=setup["version"], actor=editor, size=10, run=run)
    assert "Import the dataset it used into this project, then import the run again" in str(of_run.value)

    dataset = dataset_create(project=project, name="calls", tasks=tasks, actor=editor)
    again = run_import(project=project, run_dir=folder, actor=editor)
    run.refresh_from_db()
    assert again.run_id == run.pk and again.nothing_new
    assert run.dataset == dataset and not Trajectory.objects.filter(run=run, task__isnull=True).exists()
    check = check_create(version=setup["version"], actor=editor, size=10, run=run, seed=1)
    assert check.size == 10


def test_of_several_versions_the_one_holding_the_ids_wins_then_the_newest(setup, tmp_path):
    project, editor = setup["project"], setup["editor"]
    tasks = make_tasks(TASKS)
    dataset_create(project=project, name="calls", tasks=tasks[:2], actor=editor)  # a third of the ids: too few
    older = dataset_create(project=project, name="calls", tasks=tasks, actor=editor)
    newer = dataset_create(project=project, name="calls", tasks=[*tasks, *make_tasks(TASKS + 3)[TASKS:]], actor=editor)
    assert (older.version, newer.version) == (2, 3)
    report = run_import(project=project, run_dir=_write_run_folder(tmp_path / "run", tasks), actor=editor)
    run = Run.objects.get(pk=report.run_id)
    assert run.dataset == newer
    assert set(Trajectory.objects.filter(run=run).values_list("task__dataset", flat=True)) == {newer.pk}


def test_a_run_whose_ids_no_dataset_holds_stays_unlinked(setup, tmp_path):
    project, editor = setup["project"], setup["editor"]
    dataset_create(project=project, name="calls", tasks=make_tasks(TASKS)[:2], actor=editor)
    report = run_import(project=project, run_dir=_write_run_folder(tmp_path / "run", make_tasks(TASKS)), actor=editor)
    assert Run.objects.get(pk=report.run_id).dataset is None


def test_a_run_of_this_server_without_a_dataset_is_not_linked_by_its_ids(setup):
    """Only imports guess the dataset: a run started here without one ran on its environment's own tasks."""
    project, editor = setup["project"], setup["editor"]
    tasks = make_tasks(TASKS)
    dataset_create(project=project, name="calls", tasks=tasks, actor=editor)
    run = Run.objects.create(project=project, name="built-in tasks", kind="eval", status="succeeded")
    EventIngestor(run, attempt=1).ingest([
        {"type": "trajectory", "task_id": t.id, "turns": [{"role": "assistant", "content": "x"}], "reward": 0.0,
         "passed": False, "step": 0, "split": "validation"} for t in tasks])
    run.refresh_from_db()
    assert run.dataset is None and not Trajectory.objects.filter(run=run, task__isnull=False).exists()
    with pytest.raises(CheckError, match="it ran on its environment's own tasks"):
        check_create(version=setup["version"], actor=editor, size=10, run=run)


def test_outputs_without_turns_are_not_drawn(setup, tmp_path):
    project, editor = setup["project"], setup["editor"]
    tasks = make_tasks(TASKS)
    dataset_create(project=project, name="calls", tasks=tasks, actor=editor)
    report = run_import(project=project, run_dir=_write_run_folder(tmp_path / "run", tasks), actor=editor)
    empty = list(Trajectory.objects.filter(run_id=report.run_id, sample_index=1).values_list("pk", flat=True))
    Trajectory.objects.filter(pk__in=empty).update(turns=[])
    drawn = {pk for pk, _ in candidates(setup["version"], report.run_id)}
    assert len(drawn) == TASKS * 2 and not drawn & set(empty)


def test_the_pages_check_an_imported_run_and_the_judging_screen_shows_the_request(client, setup, tmp_path):
    project, editor = setup["project"], setup["editor"]
    tasks = make_tasks(TASKS, hostile=True)
    dataset_create(project=project, name="calls", tasks=tasks, actor=editor)
    report = run_import(project=project, run_dir=_write_run_folder(tmp_path / "run", tasks), actor=editor)
    version = setup["version"]
    base = f"/p/{project.slug}/verifiers/"
    client.force_login(editor)
    started = client.post(f"{base}{version.verifier_id}/versions/1/check/",
                          {"size": "10", "run": str(report.run_id), "method": "stratified", "seed": "2"})
    assert started.status_code == 302, started.content.decode()[-2000:]
    check = VerifierCheck.objects.get()
    assert check.items.filter(scored=True).count() == 10

    for item in check.items.select_related("trajectory__task"):
        body = client.get(f"{base}checks/{check.pk}/label/?item={item.position}").content.decode()
        request = item.trajectory.task.messages[-1]["content"]
        assert XSS[1] in request, "the hostile tasks carry markup in their request"
        card = body[body.index('id="item-request"'):body.index('id="item-verdict"')]
        assert html.escape(request, quote=False) in card, "the request, escaped, on the judging screen"
        assert body.index('id="request-text"') < body.index("<h2>The output"), "above the output being judged"
        for probe in XSS:
            assert probe not in body


def test_the_form_says_what_would_give_outputs(client, setup):
    client.force_login(setup["editor"])
    version = setup["version"]
    response = client.post(f"/p/{setup['project'].slug}/verifiers/{version.verifier_id}/versions/1/check/",
                           {"size": "10", "run": "", "method": "random"})
    assert response.status_code == 422
    body = response.content.decode()
    assert "run an evaluation on one of this project&#x27;s datasets, or import a run whose dataset is in this project" in body
