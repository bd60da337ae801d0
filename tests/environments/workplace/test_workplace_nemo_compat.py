"""Compatibility with NeMo Gym's workplace_assistant fixtures (skipped when absent).

With state loaded from the third-party CSVs: the ground truth of every example task row,
presented as a rollout, scores 1; dropping a write scores 0 (missing_call); an unrequested
delete scores 0 (unsafe_action); and our reward for every stored rollout equals NeMo
Gym's stored reward. Our sandbox's tool outputs equal the outputs recorded in the rollouts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from environments.nemo_gym import read_jsonl, rollout_row_to_task_and_trajectory, task_row_to_task
from environments.types import FailureBucket
from environments.workplace import WorkplaceVerifier
from environments.workplace.environment import resolve_base
from environments.workplace.sandbox import Sandbox

THIRD_PARTY = (Path(__file__).resolve().parents[3] / ".." / "shared" / "third_party"
               / "nemo_gym_workplace_assistant")

# The rollout rows carry no ground truth; these are the right answers to their requests in
# NeMo Gym's state (2023-11-30), worked out with the sandbox's own search tools.
ROLLOUT_TRUTH = [
    # "Create a bar chart of total visits since November 30"
    [{"name": "analytics_create_plot", "arguments": {
        "time_min": "2023-11-30", "time_max": "2023-11-30", "value_to_plot": "total_visits",
        "plot_type": "bar"}}],
    # consulting proposals not contacted in 3 weeks -> Lost: no customer matches
    [],
    # "Delete Casey Wilson from the crm"
    [{"name": "customer_relationship_manager_delete_customer", "arguments": {"customer_id": "00000014"}}],
    # "Add Dakota Thomas as a new lead in the crm and assign them to Nadia"
    [{"name": "customer_relationship_manager_add_customer", "arguments": {
        "customer_name": "Dakota Thomas", "assigned_to_email": "nadia.moreau@atlas.com", "status": "Lead"}}],
    # "Delete my last email from kofi"
    [{"name": "email_delete_email", "arguments": {"email_id": "00000259"}}],
]


@pytest.fixture(scope="module")
def fixtures() -> Path:
    if not (THIRD_PARTY / "csv").is_dir():
        pytest.skip("NeMo Gym third-party fixtures are not present beside the checkout")
    return THIRD_PARTY


@pytest.fixture(scope="module")
def verifier(fixtures):
    return WorkplaceVerifier({"state_dir": str(fixtures / "csv")})


def _rollout(row: dict, calls: list[dict]) -> dict:
    """A task row answered by `calls` (after one directory lookup), as a NeMo Gym rollout row."""
    output = [{"type": "function_call", "name": "company_directory_find_email_address",
               "arguments": json.dumps({"name": "sam"}), "call_id": "call_lookup"},
              {"type": "function_call_output", "call_id": "call_lookup", "output": '{"output": []}'}]
    for n, c in enumerate(calls):
        output.append({"type": "function_call", "name": c["name"], "arguments": c["arguments"],
                       "call_id": f"call_{n}"})
        output.append({"type": "function_call_output", "call_id": f"call_{n}", "output": "{}"})
    output.append({"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": "Done."}]})
    return {**row, "response": {"output": output, "status": "completed"}, "reward": None}


def _task_rows(fixtures: Path) -> list[dict]:
    return list(read_jsonl(fixtures / "rows" / "example.jsonl"))


def test_ground_truth_as_rollout_scores_one(fixtures, verifier):
    for row in _task_rows(fixtures):
        task, trajectory = rollout_row_to_task_and_trajectory(_rollout(row, row["ground_truth"]))
        result = verifier.verify(task, trajectory)
        assert result.reward == 1.0, (row["id"], result.info)
        assert result.flags == []


def test_dropping_a_write_scores_zero_missing_call(fixtures, verifier):
    for row in _task_rows(fixtures):
        task, trajectory = rollout_row_to_task_and_trajectory(_rollout(row, row["ground_truth"][1:]))
        result = verifier.verify(task, trajectory)
        assert result.reward == 0.0, row["id"]
        assert result.failure_bucket == FailureBucket.MISSING_CALL, (row["id"], result.info)


def test_unrequested_delete_scores_zero_unsafe_action(fixtures, verifier):
    delete = {"name": "project_management_delete_task", "arguments": json.dumps({"task_id": "00000001"})}
    for row in _task_rows(fixtures):
        task, trajectory = rollout_row_to_task_and_trajectory(_rollout(row, [*row["ground_truth"], delete]))
        result = verifier.verify(task, trajectory)
        assert result.reward == 0.0, row["id"]
        assert result.failure_bucket == FailureBucket.UNSAFE_ACTION
        assert result.components["unsafe"] == 1.0


def test_stored_rollout_rewards_are_reproduced(fixtures, verifier):
    rows = list(read_jsonl(fixtures / "rows" / "example_rollouts.jsonl"))
    assert len(rows) == len(ROLLOUT_TRUTH)
    for row, truth in zip(rows, ROLLOUT_TRUTH, strict=True):
        task, trajectory = rollout_row_to_task_and_trajectory(row)
        task.ground_truth = truth
        assert verifier.verify(task, trajectory).reward == row["reward"], row["responses_create_params"]["input"][1]


def test_tool_outputs_equal_those_recorded_in_the_rollouts(fixtures):
    base = resolve_base(fixtures / "csv")
    compared = 0
    for row in read_jsonl(fixtures / "rows" / "example_rollouts.jsonl"):
        sandbox, outputs = Sandbox(base), {}
        for item in row["response"]["output"]:
            if item["type"] == "function_call":
                outputs[item["call_id"]] = sandbox.observe(item["name"], json.loads(item["arguments"]))[1]
            elif item["type"] == "function_call_output":
                assert json.loads(outputs[item["call_id"]]) == json.loads(item["output"])
                compared += 1
    assert compared == 8


def test_task_rows_import_with_workplace_flags(fixtures):
    task = task_row_to_task(_task_rows(fixtures)[0])
    assert task.environment == "workplace" and task.category == "email"
    specs = {spec.name: spec for spec in task.tool_specs()}
    assert specs["email_delete_email"].destructive and specs["email_send_email"].writes
    assert not specs["email_search_emails"].writes


def test_state_folder_loads_the_directory_from_the_tables(fixtures):
    base = resolve_base(fixtures / "csv")
    assert len(base.directory) == 20 and all(a.endswith("@atlas.com") for a in base.directory)
    assert len(base.tables["emails"]) == 500 and len(base.analytics) == 1000
