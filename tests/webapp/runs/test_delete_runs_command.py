"""`manage.py delete_runs`: a dry run lists what would go and what stays (and changes nothing); --yes queues a
job per run; --yes --now deletes in the process, files included; filters (age, status, kind, name) and bad
input. The runs are real (scored and ingested as a worker would)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from pipeline_data import make_pipeline_project, make_pipeline_run

from webapp.runs.models import Checkpoint, Job, Run
from webapp.runs.selectors.run_delete import RUN_DELETE_JOB_KIND
from webapp.runs.services.paths import run_folder
from webapp.runs.services.promotion import alias_move
from webapp.trajectories.models import Review, Trajectory

pytestmark = pytest.mark.usefixtures("jobs_without_broker")


@pytest.fixture
def world(project_team):
    """Old runs (a failed sweep, an evaluation, a promoted one, a reviewed one) and a recent one."""
    project, owner = project_team["project"], project_team["owner"]
    setup = make_pipeline_project(project, owner)
    runs = {name: make_pipeline_run(project, owner, name=name, kind=kind, steps=1, setup=setup)
            for name, kind in [("sweep <a>", "grpo"), ("sweep b", "grpo"), ("eval old", "eval"),
                               ("promoted", "grpo"), ("reviewed", "grpo"), ("recent", "grpo")]}
    Run.objects.filter(pk=runs["sweep b"].pk).update(status="failed")
    Run.objects.exclude(pk=runs["recent"].pk).update(created_at=timezone.now() - timedelta(days=40))
    alias_move(checkpoint=Checkpoint.objects.create(run=runs["promoted"], step=1, storage_uri="/nowhere"),
               name="production", actor=owner, reason="ship")
    Review.objects.create(trajectory=Trajectory.objects.filter(run=runs["reviewed"]).first(),
                          reviewer=project_team["reviewer"], verdict="agree")
    folder = run_folder(runs["sweep <a>"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "events.jsonl").write_text("{}\n")
    return {"project": project, "runs": runs}


def _call(*args) -> str:
    out = StringIO()
    call_command("delete_runs", *args, stdout=out)
    return out.getvalue()


def test_a_dry_run_lists_what_would_go_and_what_stays_and_changes_nothing(world):
    before = Run.objects.count()
    out = _call("--project", world["project"].slug, "--older-than", "30")
    assert "would delete #" in out and "'sweep <a>'" in out and "'eval old'" in out and "'recent'" not in out
    assert "keep #" in out and "'production' (step 1)" in out and "--include-reviewed deletes them too" in out
    assert "3 run(s) would go" in out and "2 kept" in out and "add --yes" in out
    assert Run.objects.count() == before and not Job.objects.filter(kind=RUN_DELETE_JOB_KIND).exists()


def test_filters_narrow_the_choice(world):
    slug = world["project"].slug
    assert "1 run(s) would go" in _call("--project", slug, "--older-than", "30", "--status", "failed")
    only_evals = _call("--project", slug, "--older-than", "30", "--kind", "eval")
    assert "'eval old'" in only_evals and "'sweep" not in only_evals
    assert "'sweep b'" in _call("--project", slug, "--older-than", "30", "--name-contains", "SWEEP B")
    assert "'recent'" in _call("--project", slug, "--older-than", "0", "--limit", "10")


def test_yes_queues_a_job_per_run_and_now_deletes_in_the_process(world):
    slug, runs = world["project"].slug, world["runs"]
    queued = _call("--project", slug, "--older-than", "30", "--kind", "eval", "--yes")
    job = Job.objects.get(kind=RUN_DELETE_JOB_KIND)
    assert f"queued job {job.pk} to delete #{runs['eval old'].pk}" in queued and job.payload["run_id"] == runs["eval old"].pk

    deleted = _call("--project", slug, "--older-than", "30", "--name-contains", "sweep", "--include-reviewed",
                    "--yes", "--now")
    assert deleted.count("deleted #") == 2
    assert not Run.objects.filter(pk__in=[runs["sweep <a>"].pk, runs["sweep b"].pk]).exists()
    assert not run_folder(runs["sweep <a>"]).exists() and Run.objects.filter(pk=runs["recent"].pk).exists()
    reviewed = _call("--project", slug, "--older-than", "30", "--name-contains", "reviewed", "--include-reviewed",
                     "--yes", "--now")
    assert "deleted #" in reviewed and not Run.objects.filter(pk=runs["reviewed"].pk).exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--project", "nope", "--older-than", "1"], "No project with the slug 'nope'"),
    (["--older-than", "1", "--status", "running"], "--status running: choose among"),
    (["--older-than", "-1"], "--older-than takes days"),
    (["--older-than", "1", "--limit", "0"], "--limit 1 to 1000"),
    (["--older-than", "1", "--now"], "give --yes with it"),
])
def test_bad_input_says_what_to_do_and_changes_nothing(world, args, message):
    if "--project" not in args:
        args = ["--project", world["project"].slug, *args]
    with pytest.raises(CommandError, match=message):
        _call(*args)
    assert Run.objects.count() == 6 and not Job.objects.filter(kind=RUN_DELETE_JOB_KIND).exists()
