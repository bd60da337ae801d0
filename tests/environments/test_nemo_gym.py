"""NeMo Gym rows <-> Crucible values, and the JSONL helpers."""

from __future__ import annotations

import json

import pytest

from environments.nemo_gym import (
    read_crucible_jsonl,
    read_nemo_jsonl,
    rollout_row_to_task_and_trajectory,
    task_row_to_task,
    task_to_task_row,
    trajectory_to_rollout_row,
    write_crucible_jsonl,
    write_jsonl,
)
from environments.types import FailureBucket, Task, Trajectory, VerifyResult
from environments.workplace.tools import TOOL_SPECS

ROW = {
    "id": 7,
    "responses_create_params": {
        "input": [{"role": "system", "content": "Today is Thursday."},
                  {"role": "user", "content": "Delete task 00000001"}],
        "tools": [s.to_responses() for s in TOOL_SPECS[:5]],
        "parallel_tool_calls": False,
        "temperature": 1,
    },
    "ground_truth": [{"name": "email_delete_email", "arguments": '{"email_id": "00000001"}'}],
    "category": "workplace_assistant_email",
    "environment_name": "workplace_assistant",
}

ROLLOUT = {
    "responses_create_params": {"input": ROW["responses_create_params"]["input"],
                                "tools": ROW["responses_create_params"]["tools"]},
    "response": {"id": "resp_1", "status": "completed", "output": [
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "name": "email_search_emails", "arguments": '{"query": "x"}',
         "call_id": "c1"},
        {"type": "function_call", "name": "email_delete_email", "arguments": '{"email_id": "1"}',
         "call_id": "c2"},
        {"type": "function_call_output", "call_id": "c1", "output": '{"output": "No emails found."}'},
        {"type": "function_call_output", "call_id": "c2", "output": '{"output": "Email not found."}'},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Could not ", "annotations": []},
                     {"type": "output_text", "text": "find it.", "annotations": []}]},
    ]},
    "reward": 0.0,
}


def test_task_row_round_trips_exactly():
    task = task_row_to_task(ROW)
    assert task.id == "7" and task.category == "email" and task.environment == "workplace"
    assert task.ground_truth == [{"name": "email_delete_email", "arguments": {"email_id": "00000001"}}]
    assert [t["name"] for t in task.tools] == [s.name for s in TOOL_SPECS[:5]]
    assert task_to_task_row(task) == ROW
    assert json.dumps(task_to_task_row(task), sort_keys=True) == json.dumps(ROW, sort_keys=True)


def test_workplace_tools_keep_their_write_flags_on_import():
    specs = {s.name: s for s in task_row_to_task(ROW).tool_specs()}
    assert specs["email_delete_email"].destructive and specs["email_send_email"].writes
    assert not specs["email_search_emails"].writes


def test_crucible_task_exports_with_nemo_names():
    task = Task(id="wp-1", messages=[{"role": "user", "content": "hi"}],
                tools=[s.to_dict() for s in TOOL_SPECS[:2]], category="calendar", environment="workplace",
                ground_truth=[{"name": "calendar_delete_event", "arguments": {"event_id": "00000001"}}])
    row = task_to_task_row(task)
    assert row["category"] == "workplace_assistant_calendar"
    assert row["environment_name"] == "workplace_assistant"
    assert row["ground_truth"][0]["arguments"] == '{"event_id": "00000001"}'
    assert row["responses_create_params"]["tools"][0] == TOOL_SPECS[0].to_responses()
    assert task_row_to_task(row).ground_truth == task.ground_truth


def test_rollout_row_becomes_turns():
    task, trajectory = rollout_row_to_task_and_trajectory(ROLLOUT)
    assert task.id.startswith("nemo-") and task.ground_truth is None
    assert [t["role"] for t in trajectory.turns] == ["assistant", "tool", "tool", "assistant"]
    assert [c["name"] for c in trajectory.turns[0]["tool_calls"]] == ["email_search_emails", "email_delete_email"]
    assert trajectory.turns[1] == {"role": "tool", "tool_call_id": "c1", "content": '{"output": "No emails found."}'}
    assert trajectory.turns[3]["content"] == "Could not find it."
    assert not trajectory.truncated and trajectory.metadata["nemo_gym"]["reward"] == 0.0


def test_rollout_round_trip_keeps_calls_outputs_and_reward():
    task, trajectory = rollout_row_to_task_and_trajectory(ROLLOUT)
    result = VerifyResult(reward=1.0, passed=True, components={"state_match": 1.0})
    row = trajectory_to_rollout_row(task, trajectory, result)
    assert row["reward"] == 1.0 and row["crucible"]["components"] == {"state_match": 1.0}
    again_task, again = rollout_row_to_task_and_trajectory(row)
    assert again.turns == trajectory.turns and again_task.messages == task.messages
    kinds = [item["type"] for item in row["response"]["output"]]
    assert kinds == ["function_call", "function_call", "function_call_output", "function_call_output", "message"]


def test_truncated_responses_are_marked():
    row = {**ROLLOUT, "response": {**ROLLOUT["response"], "status": "incomplete",
                                   "incomplete_details": {"reason": "max_output_tokens"}}}
    assert rollout_row_to_task_and_trajectory(row)[1].truncated
    exported = trajectory_to_rollout_row(*rollout_row_to_task_and_trajectory(row), None)
    assert exported["response"]["status"] == "incomplete" and exported["reward"] is None


def test_malformed_rows_raise_clear_errors():
    with pytest.raises(ValueError, match="responses_create_params"):
        task_row_to_task({"id": 1})
    with pytest.raises(ValueError, match="response.output"):
        rollout_row_to_task_and_trajectory({**ROW, "response": {}})


def test_jsonl_helpers_round_trip(tmp_path):
    task = task_row_to_task(ROW)
    trajectory = Trajectory(turns=[{"role": "assistant", "content": "x"}])
    result = VerifyResult(reward=0.0, passed=False, failure_bucket=FailureBucket.NO_TOOL_CALL)
    path = tmp_path / "records.jsonl"
    assert write_crucible_jsonl(path, [(task, trajectory, result), (task, None, None)]) == 2
    records = list(read_crucible_jsonl(path))
    assert records[0][0] == task and records[0][1] == trajectory
    assert records[0][2].failure_bucket == FailureBucket.NO_TOOL_CALL
    assert records[1][1] is None and records[1][2] is None

    nemo = tmp_path / "nemo.jsonl"
    write_jsonl(nemo, [ROW, ROLLOUT])
    loaded = list(read_nemo_jsonl(nemo))
    assert loaded[0][1] is None and loaded[1][1] is not None

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROW) + "\nnot json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        list(read_nemo_jsonl(bad))
