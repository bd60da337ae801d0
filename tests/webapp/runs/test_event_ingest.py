"""Event ingestion: batched, idempotent, with exact rollups (runs on SQLite and PostgreSQL)."""

from __future__ import annotations

import time

import pytest

from webapp.runs.models import Checkpoint, MetricPoint, Run
from webapp.runs.services.ingest import EventIngestor
from webapp.trajectories.models import BucketRollup, StepRollup, Trajectory


@pytest.fixture
def run(project_team):
    return Run.objects.create(project=project_team["project"], name="grpo", kind="grpo")


def traj(task: str, sample: int, reward: float | None, *, step: int = 1, bucket: str | None = None, split: str = "train"):
    return {
        "type": "trajectory", "seq": 0, "time": time.time(), "task_id": task, "sample_index": sample,
        "step": step, "split": split, "turns": [{"role": "assistant", "content": "<b>" + "x" * 2000}],
        "reward": reward, "passed": reward == 1.0, "failure_bucket": bucket, "components": {"valid_json": 1.0},
        "tokens_in": 50, "tokens_out": 20, "latency_ms": 12.5,
    }


def test_reingesting_the_same_events_changes_nothing(run):
    events = [
        {"type": "metric", "seq": 1, "time": time.time(), "step": 1, "split": "train",
         "metrics": {"reward": 0.5, "loss": float("nan"), "kl": None}},
        traj("t1", 0, 1.0), traj("t1", 1, 0.0, bucket="wrong_tool"), traj("t2", 0, None, bucket="verifier_error"),
        {"type": "checkpoint", "seq": 5, "time": time.time(), "step": 1, "path": "/ckpt/1", "kind": "adapter",
         "content_hash": "abc"},
    ]
    ingestor = EventIngestor(run, attempt=1)
    first = ingestor.ingest(events)
    assert (first.metrics, first.trajectories, first.checkpoints) == (1, 3, 1)
    second = EventIngestor(run, attempt=2).ingest(events)
    assert second.trajectories == 0
    assert MetricPoint.objects.filter(run=run).count() == 1  # NaN and null are not stored
    assert Trajectory.objects.filter(run=run).count() == 3
    assert Checkpoint.objects.filter(run=run).count() == 1
    rollup = StepRollup.objects.get(run=run, step=1, split="train")
    assert (rollup.count, rollup.scored, rollup.passed) == (3, 2, 1)
    assert rollup.reward_mean == 0.5 and (rollup.reward_min, rollup.reward_max) == (0.0, 1.0)
    buckets = dict(BucketRollup.objects.filter(run=run).values_list("bucket", "count"))
    assert buckets == {"wrong_tool": 1, "verifier_error": 1}


def test_rollups_accumulate_across_batches_and_splits(run):
    ingestor = EventIngestor(run, attempt=1)
    ingestor.ingest([traj("a", 0, 0.2), traj("b", 0, 0.4)])
    ingestor.ingest([traj("a", 0, 0.2), traj("c", 0, 0.9), traj("v", 0, 1.0, split="validation", step=1)])
    train = StepRollup.objects.get(run=run, step=1, split="train")
    assert train.count == 3
    assert train.reward_min == pytest.approx(0.2) and train.reward_max == pytest.approx(0.9)
    assert train.reward_mean == pytest.approx(0.5)
    assert StepRollup.objects.get(run=run, step=1, split="validation").passed == 1


def test_duplicates_inside_one_batch_are_collapsed(run):
    report = EventIngestor(run, attempt=1).ingest([traj("a", 0, 1.0), traj("a", 0, 0.0)])
    assert report.trajectories == 1
    assert Trajectory.objects.get(run=run).reward == 1.0


def test_untrusted_text_and_bad_buckets_are_stored_safely(run):
    event = traj("t", 0, 0.0, bucket="definitely_not_a_bucket")
    event["turns"] = [{"role": "assistant", "content": "'); DROP TABLE trajectories_trajectory; --\x00\u202e"}]
    EventIngestor(run, attempt=1).ingest([event])
    row = Trajectory.objects.get(run=run)
    assert row.failure_bucket == ""
    assert row.turns[0]["content"] == "'); DROP TABLE trajectories_trajectory; --\ufffd\u202e"


def test_a_resumed_attempt_supersedes_what_the_last_one_wrote_after_its_checkpoint(run):
    from webapp.runs.services.ingest import discard_superseded_rows

    first = [
        {**traj("a", 0, 1.0, step=1), "attempt": 1},
        {"type": "checkpoint", "step": 1, "path": "/c/1", "kind": "adapter", "content_hash": "h", "attempt": 1},
        {**traj("a", 0, 0.0, step=2), "attempt": 1},
        {"type": "metric", "step": 2, "split": "train", "metrics": {"reward": 0.0}, "attempt": 1},
    ]
    EventIngestor(run, attempt=1).ingest(first)
    # attempt 2 resumes from the checkpoint of step 1 and re-reads the file from the start
    discard_superseded_rows(run, resumed_from=1)
    second = EventIngestor(run, attempt=2, resumed_from=1)
    second.ingest(first)
    assert list(Trajectory.objects.filter(run=run).values_list("step", flat=True)) == [1]
    assert not MetricPoint.objects.filter(run=run, step=2).exists()
    second.ingest([{**traj("a", 0, 1.0, step=2), "attempt": 2},
                   {"type": "metric", "step": 2, "split": "train", "metrics": {"reward": 1.0}, "attempt": 2}])
    assert Trajectory.objects.get(run=run, step=2).reward == 1.0
    assert MetricPoint.objects.get(run=run, step=2).value == 1.0
    assert StepRollup.objects.get(run=run, step=2).count == 1
