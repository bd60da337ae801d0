"""json_tool_call environment and verifier: good and bad completions side by side."""

from __future__ import annotations

import json
import math
import time

import pytest

from environments.json_tool_call import (
    JsonToolCallEnvironment,
    JsonToolCallVerifier,
    make_task,
    render_compact_prompt,
)
from environments.types import FailureBucket, Task, ToolCall, ToolSpec, Trajectory

TOOLS = [
    ToolSpec(
        "get_weather", "Current weather for a city.\nMore detail that the prompt omits.",
        {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]},
    ),
    ToolSpec(
        "create_event", "Create a calendar event.",
        {"type": "object", "properties": {"title": {"type": "string"}, "hour": {"type": "integer"}}, "required": ["title", "hour"], "additionalProperties": False},
        writes=True,
    ),
    ToolSpec(
        "delete_file", "Delete a file.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        writes=True, destructive=True,
    ),
]
WEATHER_TASK = make_task("w1", "What's the weather in Paris for 3 days?", TOOLS, ToolCall("get_weather", {"city": "Paris", "days": 3}))
EVENT_TASK = make_task("e1", "Book standup at 9.", TOOLS, ToolCall("create_event", {"title": "Standup", "hour": 9}))

GOOD = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
COMPONENT_NAMES = ["valid_json", "correct_tool", "correct_arguments", "schema_valid", "unsafe"]

# (id, output, config, passed, bucket, components as [valid_json, correct_tool, correct_arguments, schema_valid, unsafe])
CASES = [
    ("exact", GOOD, {}, True, None, [1, 1, 1, 1, 0]),
    ("key_order_irrelevant", '{"arguments": {"days": 3, "city": "Paris"}, "name": "get_weather"}', {}, True, None, [1, 1, 1, 1, 0]),
    ("float_equals_int", '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3.0}}', {}, True, None, [1, 1, 1, 1, 0]),
    ("whitespace_in_string", '{"name": "get_weather", "arguments": {"city": " Paris ", "days": 3}}', {}, True, None, [1, 1, 1, 1, 0]),
    ("fenced", f"```json\n{GOOD}\n```", {}, True, None, [1, 1, 1, 1, 0]),
    ("hermes_tags", f"<tool_call>\n{GOOD}\n</tool_call>", {}, True, None, [1, 1, 1, 1, 0]),
    ("prose_lenient", f"Sure! {GOOD}", {}, True, None, [1, 1, 1, 1, 0]),
    ("prose_strict", f"Sure! {GOOD}", {"mode": "strict"}, False, FailureBucket.INVALID_JSON, [0, 1, 1, 1, 0]),
    ("string_number_not_equal", '{"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}', {}, False, FailureBucket.WRONG_ARGUMENTS, [1, 1, 0, 0, 0]),
    ("case_differs", '{"name": "get_weather", "arguments": {"city": "paris", "days": 3}}', {}, False, FailureBucket.WRONG_ARGUMENTS, [1, 1, 0, 1, 0]),
    ("case_differs_insensitive", '{"name": "get_weather", "arguments": {"city": "paris", "days": 3}}', {"case_insensitive_strings": True}, True, None, [1, 1, 1, 1, 0]),
    ("missing_argument", '{"name": "get_weather", "arguments": {"city": "Paris"}}', {}, False, FailureBucket.WRONG_ARGUMENTS, [1, 1, 0, 1, 0]),
    ("unknown_tool", '{"name": "weather", "arguments": {"city": "Paris", "days": 3}}', {}, False, FailureBucket.UNKNOWN_TOOL, [1, 0, 0, 0, 0]),
    ("unrequested_write", '{"name": "create_event", "arguments": {"title": "x", "hour": 1}}', {}, False, FailureBucket.EXTRA_WRITE, [1, 0, 0, 1, 1]),
    ("unrequested_delete", '{"name": "delete_file", "arguments": {"path": "/etc"}}', {}, False, FailureBucket.UNSAFE_ACTION, [1, 0, 0, 1, 1]),
    ("two_calls", f"[{GOOD}, {GOOD}]", {}, False, FailureBucket.WRONG_TOOL, [1, 1, 1, 1, 0]),
    ("python_dict", "{'name': 'get_weather', 'arguments': {'city': 'Paris', 'days': 3}}", {}, False, FailureBucket.INVALID_JSON, [0, 0, 0, 0, 0]),
    ("prose_only", "It is sunny in Paris.", {}, False, FailureBucket.NO_TOOL_CALL, [0, 0, 0, 0, 0]),
    ("unclosed", '{"name": "get_weather", "arguments": {"city": "Par', {}, False, FailureBucket.TRUNCATED, [0, 0, 0, 0, 0]),
]


@pytest.mark.parametrize(("text", "config", "passed", "bucket", "components"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_verify_table(text: str, config: dict, passed: bool, bucket: FailureBucket | None, components: list[int]) -> None:
    result = JsonToolCallVerifier(config).verify(WEATHER_TASK, Trajectory.from_completion(text))
    assert result.passed is passed
    assert result.failure_bucket == bucket
    assert result.components == dict(zip(COMPONENT_NAMES, map(float, components), strict=True))
    assert result.reward == (1.0 if passed else 0.0)
    assert result.error is None


def test_expected_write_is_not_unsafe() -> None:
    text = '{"name": "create_event", "arguments": {"title": "Standup", "hour": 9}}'
    result = JsonToolCallVerifier().verify(EVENT_TASK, Trajectory.from_completion(text))
    assert result.passed and result.components["unsafe"] == 0.0


def test_shaped_reward_reports_reward_components() -> None:
    verifier = JsonToolCallVerifier({"reward": "shaped"})
    wrong_args = verifier.verify(WEATHER_TASK, Trajectory.from_completion('{"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}'))
    assert math.isclose(wrong_args.reward, 0.1 + 0.2)
    assert wrong_args.info["reward_components"]["completion"] == 0.0
    unsafe = verifier.verify(WEATHER_TASK, Trajectory.from_completion('{"name": "delete_file", "arguments": {"path": "/"}}'))
    assert math.isclose(unsafe.reward, 0.2 - 1.0)
    good = verifier.verify(WEATHER_TASK, Trajectory.from_completion(GOOD))
    assert math.isclose(good.reward, 1.6)


def test_custom_weights_override_defaults() -> None:
    verifier = JsonToolCallVerifier({"reward": "shaped", "weights": {"right_tool": 0.5, "valid_artifact": 0, "partial_success": 0, "completion": 0}})
    result = verifier.verify(WEATHER_TASK, Trajectory.from_completion('{"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}'))
    assert math.isclose(result.reward, 0.5)


@pytest.mark.parametrize("config", [{"mode": "loose"}, {"reward": "dense"}, {"weights": {"bonus": 1}}])
def test_bad_config_is_rejected(config: dict) -> None:
    with pytest.raises(ValueError):
        JsonToolCallVerifier(config)


def test_structured_openai_tool_calls_are_verified() -> None:
    turn = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 3})}}]}
    assert JsonToolCallVerifier().verify(WEATHER_TASK, Trajectory(turns=[turn])).passed


def test_truncated_trajectory_is_bucketed_truncated() -> None:
    result = JsonToolCallVerifier().verify(WEATHER_TASK, Trajectory.from_completion('{"name": "get_wea', truncated=True))
    assert result.failure_bucket == FailureBucket.TRUNCATED
    assert "truncated" in result.flags


def test_malformed_ground_truth_is_a_verifier_error_not_zero() -> None:
    task = Task(id="bad", messages=[], tools=[t.to_dict() for t in TOOLS], ground_truth=[{"arguments": {}}])
    result = JsonToolCallVerifier().verify(task, Trajectory.from_completion(GOOD))
    assert result.reward is None and result.failure_bucket == FailureBucket.VERIFIER_ERROR
    assert "ground_truth" in result.error


def test_verifier_reuses_task_facts_but_not_across_tasks() -> None:
    verifier = JsonToolCallVerifier()
    assert verifier.verify(WEATHER_TASK, Trajectory.from_completion(GOOD)).passed
    assert not verifier.verify(EVENT_TASK, Trajectory.from_completion(GOOD)).passed


def test_compact_prompt_lists_one_line_per_tool() -> None:
    system, user = render_compact_prompt(WEATHER_TASK)
    assert user == {"role": "user", "content": "What's the weather in Paris for 3 days?"}
    lines = system["content"].splitlines()
    assert "- get_weather(city: string, days?: integer) - Current weather for a city." in lines
    assert "- create_event(title: string, hour: integer) - Create a calendar event." in lines
    assert "More detail" not in system["content"]
    assert "exactly one tool call" in lines[0]


def test_compact_prompt_falls_back_to_last_user_message() -> None:
    task = Task(id="t", messages=[{"role": "user", "content": "first"}, {"role": "user", "content": "second"}], tools=[])
    assert render_compact_prompt(task)[1]["content"] == "second"


def test_environment_is_single_step_and_serialisable() -> None:
    env = JsonToolCallEnvironment()
    state = env.reset(WEATHER_TASK)
    state, observation = env.step(state, ToolCall("get_weather", {"city": "Paris"}))
    assert json.loads(json.dumps(env.final_state(state))) == {"calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "call_id": None}]}
    assert [t.name for t in env.tools(WEATHER_TASK)] == ["get_weather", "create_event", "delete_file"]


def test_task_round_trips_through_json() -> None:
    again = Task.from_dict(json.loads(json.dumps(WEATHER_TASK.to_dict())))
    assert JsonToolCallVerifier().verify(again, Trajectory.from_completion(GOOD)).passed


def test_verification_throughput_floor() -> None:
    """A loose floor (shared CI cores); bench/verify_json_tool_call.py measures the real rate."""
    verifier = JsonToolCallVerifier()
    trajectory = Trajectory.from_completion(GOOD)
    start = time.perf_counter()
    for _ in range(3000):
        verifier.verify(WEATHER_TASK, trajectory)
    assert 3000 / (time.perf_counter() - start) > 5000


def test_compact_prompt_shows_the_values_a_parameter_accepts() -> None:
    """Workplace tools list their field names only in prose; the prompt must keep them."""
    update = ToolSpec(
        name="update_task",
        description="Updates a task by ID.",
        parameters={
            "type": "object",
            "properties": {
                "task_id": {"type": "string", "description": "8-digit ID of the task"},
                "field": {"type": "string", "description": "Available fields are: 'task_name', 'due_date'"},
                "plot": {"type": "string", "enum": ["bar", "line"]},
                "city": {"type": "string", "description": "A city, e.g. 'Paris' or 'Oslo'"},
            },
            "required": ["task_id", "field"],
        },
    )
    task = make_task("t", "Move it", [update], ToolCall(name="update_task", arguments={}))
    line = task.messages[0]["content"].splitlines()[-1]
    assert line == (
        '- update_task(task_id: string, field: "task_name"|"due_date", plot?: "bar"|"line", '
        "city?: string)"
        " - Updates a task by ID."
    )
