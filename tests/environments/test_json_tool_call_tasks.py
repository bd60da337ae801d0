"""Workplace tasks turned into one-call json_tool_call tasks."""

from __future__ import annotations

import json

import pytest

from environments.json_tool_call import JsonToolCallVerifier
from environments.json_tool_call_tasks import (
    MAX_TOOLS,
    MIN_TOOLS,
    convert_task,
    pick_tools,
    workplace_json_tasks,
)
from environments.types import Trajectory
from environments.workplace.generator import HELD_OUT_TEMPLATES, generate_tasks
from environments.workplace.tools import toolkit_of


@pytest.fixture(scope="module")
def converted():
    return workplace_json_tasks(600, seed=0)


def test_every_task_offers_the_expected_tool_among_three_to_six(converted):
    for task in converted:
        names = [t["name"] for t in task.tools]
        expected = task.ground_truth[0]["name"]
        assert MIN_TOOLS <= len(names) <= MAX_TOOLS
        assert expected in names and len(set(names)) == len(names)
        assert expected in task.messages[0]["content"]


def test_distractors_come_from_the_same_and_other_toolkits():
    tools = pick_tools("some-task", "calendar_update_event", count=6)
    kits = [toolkit_of(t.name) for t in tools]
    assert kits.count("calendar") >= 2 and len(set(kits)) >= 2


def test_tools_are_deterministic_per_task_and_vary_across_tasks():
    first = [t.name for t in pick_tools("task-a", "email_send_email")]
    assert first == [t.name for t in pick_tools("task-a", "email_send_email")]
    others = {tuple(t.name for t in pick_tools(f"task-{i}", "email_send_email")) for i in range(20)}
    assert len(others) > 5


def test_ground_truth_passes_the_verifier_and_a_wrong_call_does_not(converted):
    verifier = JsonToolCallVerifier()
    for task in converted[:50]:
        call = task.ground_truth[0]
        good = Trajectory.from_completion(
            json.dumps({"name": call["name"], "arguments": call["arguments"]})
        )
        assert verifier.verify(task, good).passed, task.id
        bad = Trajectory.from_completion(json.dumps({"name": call["name"], "arguments": {}}))
        assert not verifier.verify(task, bad).passed


def test_lookup_results_are_in_the_request_so_the_call_is_determined(converted):
    for task in converted:
        request = task.messages[-1]["content"]
        for name, value in task.ground_truth[0]["arguments"].items():
            if name.endswith("_id") or (isinstance(value, str) and "@" in value):
                assert value in request, (task.id, name)


def test_split_and_template_are_kept_so_held_out_templates_stay_held_out():
    source = generate_tasks(400, seed=1)
    for original in source:
        task = convert_task(original)
        if task is None:
            assert len(original.ground_truth) > 1
            continue
        assert task.split == original.split
        assert task.metadata["template"] == original.metadata["template"]
        if task.metadata["template"] in HELD_OUT_TEMPLATES:
            assert task.split == "held_out"


def test_min_held_out_generates_enough_held_out_template_tasks():
    tasks = workplace_json_tasks(500, seed=0, min_held_out=60)
    held = [t for t in tasks if t.split == "held_out"]
    assert len(held) >= 60
    assert any(t.metadata["template"] in HELD_OUT_TEMPLATES for t in held)
