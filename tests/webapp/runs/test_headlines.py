"""Run.headline_*: the runs table's headline values, stored for its sort, kept equal to what its cells show.

Every path that changes a value is driven through the services that do it (metric ingestion,
a resumed attempt's discard, the job services' status changes, run import), and after each
the stored values are compared with the live expression the cells use, for every run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection

from tests.webapp.plans import plan_without_sort
from training.events import EventWriter
from webapp.runs.models import HEADLINE_SORT_KEYS, Checkpoint, Run, RunStatus
from webapp.runs.selectors.headlines import METRIC_SORTS, headline_value
from webapp.runs.selectors.runs import run_list
from webapp.runs.services import jobs as js
from webapp.runs.services.headlines import all_headlines_refresh
from webapp.runs.services.ingest import EventIngestor, discard_superseded_rows
from webapp.runs.services.run_import import run_import


@pytest.fixture
def project(project_team):
    return project_team["project"]


def stored(run: Run) -> dict[str, float | None]:
    run.refresh_from_db()
    return {key: getattr(run, f"headline_{key}") for key in HEADLINE_SORT_KEYS}


def assert_stored_is_live() -> None:
    """Every run's stored headlines equal the values the runs table's cells compute."""
    live = {f"live_{key}": headline_value(key) for key in HEADLINE_SORT_KEYS}
    rows = Run.objects.annotate(**live).values("pk", *[f"headline_{k}" for k in HEADLINE_SORT_KEYS], *live)
    differ = [row for row in rows if any(row[f"headline_{k}"] != row[f"live_{k}"] for k in HEADLINE_SORT_KEYS)]
    assert differ == []


def metric(step: int, split: str, **values: float) -> dict:
    return {"type": "metric", "step": step, "split": split, "metrics": values}


def started(run: Run) -> tuple[int, int]:
    """Queue, claim and start the run's job as a worker does: (job id, attempt)."""
    job = js.job_create(project=run.project, kind=run.kind, run=run)
    claimed = js.job_claim(job_id=job.pk, worker="w")
    js.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
    return job.pk, claimed.attempt


def test_the_metric_sorts_are_the_stored_headlines():
    assert tuple(METRIC_SORTS) == HEADLINE_SORT_KEYS


def test_ingestion_keeps_the_latest_step_whatever_order_the_steps_arrive_in_and_a_resume_takes_back_its_steps(
        project):
    run = Run.objects.create(project=project, name="grpo", kind="grpo")
    assert stored(run) == {"reward": None, "validation": None, "held_out": None}
    ingestor = EventIngestor(run, attempt=1)
    ingestor.ingest([metric(5, "train", reward=0.5, loss=2.0), metric(2, "validation", success_rate=0.25)])
    ingestor.ingest([metric(3, "train", reward=0.9)])  # an earlier step arriving late does not win
    assert stored(run) == {"reward": 0.5, "validation": 0.25, "held_out": None}
    ingestor.ingest([metric(5, "train", reward=0.1)])  # a re-delivered step is not stored again
    assert stored(run)["reward"] == 0.5
    ingestor.ingest([metric(6, "train", loss=1.0)])  # a step without the headline leaves it
    assert stored(run)["reward"] == 0.5
    discard_superseded_rows(run, resumed_from=4)  # the resumed attempt writes steps 5 and on again
    assert stored(run) == {"reward": 0.9, "validation": 0.25, "held_out": None}
    discard_superseded_rows(run, resumed_from=None)
    assert stored(run) == {"reward": None, "validation": None, "held_out": None}
    assert_stored_is_live()


def test_a_checkpoint_lends_its_evaluation_only_while_the_evaluation_has_succeeded(project):
    trained = Run.objects.create(project=project, name="grpo", kind="grpo")
    EventIngestor(trained, attempt=1).ingest([
        metric(10, "train", reward=0.7),
        {"type": "checkpoint", "step": 10, "path": "/ckpt/10", "kind": "adapter", "content_hash": "a"}])
    checkpoint = Checkpoint.objects.get(run=trained, step=10)
    evaluation = Run.objects.create(project=project, name="held-out eval", kind="eval", parent_checkpoint=checkpoint,
                                    config={"eval_split": "held_out"})
    job_id, attempt = started(evaluation)
    EventIngestor(evaluation, attempt=attempt).ingest([metric(0, "held_out", success_rate=0.62)])
    assert stored(trained)["held_out"] is None, "a running evaluation lends nothing yet"
    assert stored(evaluation)["held_out"] == 0.62, "an evaluation run shows its own result"
    js.job_succeed(job_id=job_id, attempt=attempt)
    assert stored(trained) == {"reward": 0.7, "validation": None, "held_out": 0.62}
    assert_stored_is_live()

    # Evaluated again: while the new attempt runs, the table shows no borrowed value, as its cell does.
    again = js.job_create(project=project, kind="eval", run=evaluation)
    assert stored(trained)["held_out"] is None
    claimed = js.job_claim(job_id=again.pk, worker="w")
    js.job_mark_running(job_id=again.pk, attempt=claimed.attempt)
    js.job_fail(job_id=again.pk, attempt=claimed.attempt, error="out of memory")
    assert stored(trained)["held_out"] is None
    js.job_retry(job=again)
    assert_stored_is_live()

    # The run's own result, once it records one, wins over its checkpoint's.
    EventIngestor(trained, attempt=1).ingest([metric(10, "held_out", success_rate=0.4)])
    assert stored(trained)["held_out"] == 0.4
    assert_stored_is_live()


def _write_folder(run_dir: Path, config: dict, events: list[tuple[str, dict]], *, done: bool) -> None:
    import json

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps(config))
    with EventWriter(run_dir) as writer:
        for kind, fields in events:
            getattr(writer, kind)(**fields)
        if done:
            writer.done()


def test_an_imported_evaluation_lends_its_result_once_its_folder_says_it_finished(project, tmp_path):
    trained_dir, eval_dir = tmp_path / "sft", tmp_path / "eval"
    _write_folder(trained_dir, {"kind": "sft"}, [
        ("metric", {"step": 4, "metrics": {"loss": 0.3}}),
        ("checkpoint", {"step": 4, "path": "/elsewhere/sft/checkpoints/step_4", "kind": "adapter",
                        "content_hash": "c" * 64})], done=True)
    trained = Run.objects.get(pk=run_import(project=project, run_dir=trained_dir, actor=None).run_id)
    eval_config = {"kind": "eval", "init_checkpoint": "/elsewhere/sft/checkpoints/step_4", "eval_split": "validation"}
    _write_folder(eval_dir, eval_config, [("metric", {"step": 0, "split": "validation",
                                                      "metrics": {"success_rate": 0.55}})], done=False)
    first = run_import(project=project, run_dir=eval_dir, actor=None)
    assert first.status == RunStatus.FAILED, "a log without its done event was still running when it was copied"
    assert stored(trained)["validation"] is None
    with EventWriter(eval_dir) as writer:
        writer.done()
    second = run_import(project=project, run_dir=eval_dir, actor=None)
    assert second.run_id == first.run_id and second.status == RunStatus.SUCCEEDED
    assert stored(trained)["validation"] == 0.55
    assert_stored_is_live()


def test_a_repair_recomputes_values_changed_behind_the_services_back(project):
    run = Run.objects.create(project=project, name="grpo", kind="grpo")
    EventIngestor(run, attempt=1).ingest([metric(1, "train", reward=0.3)])
    Run.objects.filter(pk=run.pk).update(headline_reward=99.0, headline_held_out=1.0)
    assert all_headlines_refresh() == 1
    assert stored(run) == {"reward": 0.3, "validation": None, "held_out": None}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the plan is PostgreSQL's")
@pytest.mark.parametrize("sort", [f"{sign}{key}" for key in HEADLINE_SORT_KEYS for sign in ("-", "")])
def test_a_headline_sort_reads_its_page_from_the_index_of_its_order(project, sort):
    """What makes the sort cost the same at 100 runs as at 100,000: the page's query walks the index of
    its direction (run_<key>_<desc|asc>), which holds the very expression it orders by, and needs no sort
    step. Sorting is disabled in the planner so that a query the index does not match shows a Sort node
    (or an error of plan) instead of a sequential scan the planner might prefer on a small table."""
    for i in range(60):
        run = Run.objects.create(project=project, name=f"r{i}", kind="grpo")
        if i % 3:
            EventIngestor(run, attempt=1).ingest([metric(1, "train", reward=i / 60),
                                                  metric(1, "validation", success_rate=i / 60),
                                                  metric(1, "held_out", success_rate=i / 60)])
    first = run_list(project, sort=sort, limit=20)
    for after in (None, first.next_cursor):
        plan = plan_without_sort(lambda: run_list(project, sort=sort, after=after, limit=20), "ORDER BY")  # noqa: B023
        key = sort.lstrip("-")
        direction = "desc" if sort.startswith("-") else "asc"
        assert f"Index Scan using run_{key}_{direction} on runs_run" in plan, plan
        assert "Sort" not in plan, plan
