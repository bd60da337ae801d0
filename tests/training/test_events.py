"""The event log: validation, seq across restarts, and tailing a file being written."""

from __future__ import annotations

import json
import threading

import pytest

from training.events import EVENTS_FILE, EventError, EventWriter, read_events, validate_event


def _trajectory_fields(**overrides):
    fields = {
        "step": 1,
        "task_id": "t-1",
        "sample_index": 0,
        "group_id": "g-1",
        "turns": [{"role": "assistant", "content": '{"name": "x"}'}],
        "reward": 1.0,
        "components": {"format": 1.0},
        "passed": True,
        "failure_bucket": None,
        "flags": [],
        "tokens_in": 12,
        "tokens_out": 7,
        "latency_ms": 31.5,
        "advantage": 0.8,
        "truncated": False,
    }
    return {**fields, **overrides}


def test_writer_appends_one_json_object_per_line(tmp_path):
    with EventWriter(tmp_path, attempt=2) as writer:
        writer.metric(1, {"reward": 0.5, "loss": 0.0})
        writer.trajectory(**_trajectory_fields())
        writer.checkpoint(
            step=1,
            path="checkpoints/step_1",
            kind="adapter",
            content_hash="ab",
            metrics={"validation/success_rate": 0.2},
        )
        writer.progress(1, 4)
        writer.log("hello")
        writer.done(step=1)
    lines = (tmp_path / EVENTS_FILE).read_text().splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == [
        "metric",
        "trajectory",
        "checkpoint",
        "progress",
        "log",
        "done",
    ]
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5, 6]
    assert all(e["attempt"] == 2 and isinstance(e["time"], float) for e in events)
    assert events[0]["metrics"] == {"reward": 0.5, "loss": 0.0}
    assert events[3]["fraction"] == 0.25


def test_seq_continues_after_reopen(tmp_path):
    with EventWriter(tmp_path) as writer:
        writer.log("first")
        writer.log("second")
    with EventWriter(tmp_path, attempt=2) as writer:
        assert writer.last_seq == 2
        event = writer.log("after restart")
    assert event["seq"] == 3
    events, _ = read_events(tmp_path / EVENTS_FILE)
    assert [e["seq"] for e in events] == [1, 2, 3]


def test_reopen_cuts_torn_last_line(tmp_path):
    with EventWriter(tmp_path) as writer:
        writer.log("complete")
    path = tmp_path / EVENTS_FILE
    with open(path, "ab") as f:
        f.write(b'{"type":"log","seq":2,"ti')  # the process died mid-write
    with EventWriter(tmp_path) as writer:
        writer.log("after crash")
    events, _ = read_events(path)
    assert [(e["seq"], e["message"]) for e in events] == [(1, "complete"), (2, "after crash")]


def test_seq_recovery_reads_lines_longer_than_one_block(tmp_path):
    with EventWriter(tmp_path) as writer:
        writer.log("short")
        writer.log("x" * 200_000)
    assert EventWriter(tmp_path).last_seq == 2


def test_read_events_leaves_partial_line_for_next_read(tmp_path):
    path = tmp_path / EVENTS_FILE
    with EventWriter(tmp_path) as writer:
        writer.log("one")
    whole = json.dumps({"type": "log", "seq": 2, "time": 1.0, "message": "two"}) + "\n"
    with open(path, "a") as f:
        f.write(whole[:10])
    events, offset = read_events(path)
    assert [e["seq"] for e in events] == [1]
    assert offset == len((tmp_path / EVENTS_FILE).read_bytes()) - 10

    again, same_offset = read_events(path, offset)
    assert again == [] and same_offset == offset

    with open(path, "a") as f:
        f.write(whole[10:])
    rest, end = read_events(path, offset)
    assert [e["message"] for e in rest] == ["two"]
    assert end == path.stat().st_size


def test_read_events_in_bounded_batches(tmp_path):
    with EventWriter(tmp_path) as writer:
        for i in range(20):
            writer.log(f"message {i}")
    path = tmp_path / EVENTS_FILE
    seen, offset = [], 0
    while True:
        batch, offset = read_events(path, offset, max_bytes=150)
        if not batch:
            break
        seen.extend(e["seq"] for e in batch)
    assert seen == list(range(1, 21))


def test_read_events_reads_a_line_longer_than_max_bytes(tmp_path):
    with EventWriter(tmp_path) as writer:
        writer.log("y" * 1000)
    events, offset = read_events(tmp_path / EVENTS_FILE, max_bytes=100)
    assert len(events) == 1 and offset == (tmp_path / EVENTS_FILE).stat().st_size


def test_missing_file_reads_as_no_events(tmp_path):
    assert read_events(tmp_path / EVENTS_FILE, 0) == ([], 0)


def test_concurrent_writers_in_threads_keep_lines_whole(tmp_path):
    writer = EventWriter(tmp_path)
    threads = [
        threading.Thread(target=lambda i=i: [writer.log(f"{i}-{n}" * 50) for n in range(50)])
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    events, _ = read_events(tmp_path / EVENTS_FILE)
    assert [e["seq"] for e in events] == list(range(1, 201))


def test_non_finite_metrics_are_written_as_null(tmp_path):
    with EventWriter(tmp_path) as writer:
        event = writer.metric(3, {"loss": float("nan"), "grad_norm": float("inf"), "reward": 1})
    assert event["metrics"] == {"loss": None, "grad_norm": None, "reward": 1}
    (written,), _ = read_events(tmp_path / EVENTS_FILE)
    assert written["metrics"]["loss"] is None


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"type": "telemetry", "seq": 1, "time": 0.0}, "unknown event type 'telemetry'"),
        (
            {"type": "metric", "seq": 1, "time": 0.0, "step": 1, "split": "train"},
            "missing the field 'metrics'",
        ),
        (
            {"type": "metric", "seq": 1, "time": 0.0, "step": "1", "split": "train", "metrics": {}},
            "'step' must be integer",
        ),
        (
            {
                "type": "metric",
                "seq": 1,
                "time": 0.0,
                "step": 1,
                "split": "train",
                "metrics": {"x": "high"},
            },
            "'metrics.x' must be number or null",
        ),
        (
            {
                "type": "trajectory",
                "seq": 1,
                "time": 0.0,
                "task_id": "t",
                "turns": [],
                "reward": True,
                "passed": True,
            },
            "'reward' must be number or null",
        ),
        (
            {
                "type": "checkpoint",
                "seq": 1,
                "time": 0.0,
                "step": 1,
                "path": "p",
                "kind": "lora",
                "content_hash": "h",
            },
            "'kind' must be one of",
        ),
        (
            {"type": "log", "seq": 1, "time": 0.0, "message": "m", "level": "loud"},
            "'level' must be one of",
        ),
        ({"type": "error", "seq": 1, "time": 0.0}, "missing the field 'message'"),
        (
            {"type": "log", "seq": 1, "time": 0.0, "message": "m", "attempt": "2"},
            "'attempt' must be integer or null",
        ),
    ],
)
def test_validate_event_rejects_with_field_named(event, message):
    with pytest.raises(EventError, match=message):
        validate_event(event)


def test_writer_rejects_invalid_event_and_writes_nothing(tmp_path):
    with EventWriter(tmp_path) as writer:
        with pytest.raises(EventError, match="unknown event type"):
            writer.emit("telemetry", value=1)
        with pytest.raises(EventError, match="not plain JSON"):
            writer.trajectory(**_trajectory_fields(components={"x": object()}))
        assert writer.last_seq == 0
        assert writer.log("ok")["seq"] == 1
    assert len((tmp_path / EVENTS_FILE).read_text().splitlines()) == 1


def test_trajectory_with_infrastructure_failure_has_null_reward(tmp_path):
    with EventWriter(tmp_path) as writer:
        event = writer.trajectory(
            **_trajectory_fields(reward=None, passed=None, failure_bucket="verifier_error")
        )
    assert event["reward"] is None
