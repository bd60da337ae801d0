"""Tool-call parser: good and bad completions side by side, plus a never-raises property."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from environments.parsing import (
    ERROR_CODES,
    MAX_INPUT_CHARS,
    ParseResult,
    calls_from_message,
    calls_from_trajectory,
    parse_tool_calls,
)
from environments.types import ToolSpec, Trajectory

TOOLS = [
    ToolSpec(
        "get_weather",
        "Weather for a city.",
        {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    ),
    ToolSpec(
        "send_email",
        "Send an email.",
        {
            "type": "object",
            "properties": {
                "to": {"type": "string"},
                "subject": {"type": "string"},
                "body": {"type": "string"},
            },
            "required": ["to", "subject", "body"],
            "additionalProperties": False,
        },
        writes=True,
        destructive=True,
    ),
    ToolSpec(
        "add",
        "Add numbers.",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    ),
    ToolSpec(
        "set_flags",
        "Set flags.",
        {
            "type": "object",
            "properties": {
                "on": {"type": "boolean"},
                "names": {"type": "array"},
                "options": {"type": "object"},
                "note": {"type": ["string", "null"]},
            },
        },
    ),
    ToolSpec("ping", "No arguments.", {"type": "object", "properties": {}}),
]

W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
W2 = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
PARIS = [("get_weather", {"city": "Paris"})]
PARIS_OSLO = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})]

# (id, text, mode, expected calls, expected error codes in order, expected format)
CASES = [
    # ---- good: bare JSON and its variants
    ("bare_object", W, "strict", PARIS, [], "json"),
    ("bare_object_whitespace", f"\n\n  {W}  \n", "strict", PARIS, [], "json"),
    ("tool_key", '{"tool": "get_weather", "arguments": {"city": "Paris"}}', "strict", PARIS, [], "json"),
    ("tool_name_key", '{"tool_name": "get_weather", "args": {"city": "Paris"}}', "strict", PARIS, [], "json"),
    ("parameters_key", '{"name": "get_weather", "parameters": {"city": "Paris"}}', "strict", PARIS, [], "json"),
    ("arguments_as_string", '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}', "strict", PARIS, [], "json"),
    ("function_wrapper", '{"type": "function", "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}', "strict", PARIS, [], "json"),
    ("function_as_string", '{"function": "get_weather", "arguments": {"city": "Paris"}}', "strict", PARIS, [], "json"),
    ("tool_call_wrapper", '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}', "strict", PARIS, [], "json"),
    ("no_arguments_key", '{"name": "ping"}', "strict", [("ping", {})], [], "json"),
    ("null_arguments", '{"name": "ping", "arguments": null}', "strict", [("ping", {})], [], "json"),
    ("empty_string_arguments", '{"name": "ping", "arguments": ""}', "strict", [("ping", {})], [], "json"),
    ("extra_top_level_key_ignored", '{"name": "get_weather", "arguments": {"city": "Paris"}, "thought": "rain?"}', "strict", PARIS, [], "json"),
    ("unicode_argument", '{"name": "get_weather", "arguments": {"city": "Zürich"}}', "strict", [("get_weather", {"city": "Zürich"})], [], "json"),
    ("optional_argument", '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}', "strict", [("get_weather", {"city": "Paris", "unit": "C"})], [], "json"),
    # ---- good: lists
    ("json_list", f"[{W}, {W2}]", "strict", PARIS_OSLO, [], "json_list"),
    ("json_list_single", f"[{W}]", "strict", PARIS, [], "json_list"),
    ("mistral_prefix_lenient", f"[TOOL_CALLS][{W}]", "lenient", PARIS, [], "json_list"),
    ("mistral_prefix_strict", f"[TOOL_CALLS][{W}]", "strict", PARIS, ["trailing_text"], "json_list"),
    # ---- good: fences
    ("fenced_json", f"```json\n{W}\n```", "strict", PARIS, [], "fenced"),
    ("fenced_bare", f"```\n{W}\n```", "strict", PARIS, [], "fenced"),
    ("fenced_two_blocks", f"```json\n{W}\n```\n```json\n{W2}\n```", "strict", PARIS_OSLO, [], "fenced"),
    ("fenced_in_prose_lenient", f"I'll check the weather.\n```json\n{W}\n```\nLet me know!", "lenient", PARIS, [], "fenced"),
    ("fenced_in_prose_strict", f"I'll check the weather.\n```json\n{W}\n```", "strict", PARIS, ["trailing_text"], "fenced"),
    ("fenced_list", f"```json\n[{W}, {W2}]\n```", "strict", PARIS_OSLO, [], "fenced"),
    ("fenced_python_then_json", f"```python\nprint(1)\n```\n{W}", "lenient", PARIS, [], "json"),
    # ---- good: Hermes / Qwen tags
    ("tags_one", f"<tool_call>\n{W}\n</tool_call>", "strict", PARIS, [], "tool_call_tags"),
    ("tags_two", f"<tool_call>{W}</tool_call>\n<tool_call>{W2}</tool_call>", "strict", PARIS_OSLO, [], "tool_call_tags"),
    ("tags_with_think_lenient", f"<think>Paris weather.</think>\n<tool_call>\n{W}\n</tool_call>", "lenient", PARIS, [], "tool_call_tags"),
    ("tags_with_think_strict", f"<think>Paris weather.</think>\n<tool_call>\n{W}\n</tool_call>", "strict", PARIS, ["trailing_text"], "tool_call_tags"),
    ("tags_unclosed_but_complete", f"<tool_call>\n{W}\n", "lenient", PARIS, [], "tool_call_tags"),
    ("tags_with_fence_inside", f"<tool_call>\n```json\n{W}\n```\n</tool_call>", "strict", PARIS, [], "tool_call_tags"),
    # ---- good: OpenAI chat and Responses API shapes
    ("openai_message", json.dumps({"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}), "strict", PARIS, [], "openai_tool_calls"),
    ("openai_tool_calls_list", json.dumps([{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]), "strict", PARIS, [], "json_list"),
    ("responses_items", json.dumps([{"type": "reasoning", "summary": []}, {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Paris"}', "call_id": "c1"}]), "strict", PARIS, [], "responses_function_call"),
    ("responses_single_item", json.dumps({"type": "function_call", "name": "get_weather", "arguments": '{"city": "Paris"}', "call_id": "c1"}), "strict", PARIS, [], "responses_function_call"),
    ("responses_object", json.dumps({"object": "response", "output": [{"type": "message", "content": []}, {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Paris"}'}]}), "strict", PARIS, [], "responses_function_call"),
    # ---- good: realistic small-model prose (SmolLM2 style) in lenient mode
    ("smollm_prose_before", f"Sure! Here is the function call:\n{W}", "lenient", PARIS, [], "json"),
    ("smollm_prose_after", f"{W}\nThis will get the weather in Paris.", "lenient", PARIS, [], "json"),
    ("smollm_prose_both_sides", f"To answer, I call get_weather.\n{W}\nHope this helps!", "lenient", PARIS, [], "json"),
    ("prose_with_braces_before", 'Use {curly} braces. ' + W, "lenient", PARIS, [], "json"),
    ("prose_with_citation_before", "See [1] for details. " + W, "lenient", PARIS, [], "json"),
    ("two_objects_in_prose", f"First {W} then {W2}.", "lenient", PARIS_OSLO, [], "json"),
    # ---- bad: strict format violations
    ("strict_prose_before", f"Sure! {W}", "strict", PARIS, ["trailing_text"], "json"),
    ("strict_prose_after", f"{W} Done.", "strict", PARIS, ["trailing_text"], "json"),
    ("strict_json_lines_are_only_calls", f"{W}\n{W2}", "strict", PARIS_OSLO, [], "json"),
    ("strict_two_objects_with_and", f"{W} and {W2}", "strict", PARIS_OSLO, ["trailing_text"], "json"),
    # ---- bad: not JSON
    ("python_dict_repr", "{'name': 'get_weather', 'arguments': {'city': 'Paris'}}", "lenient", [], ["not_json"], None),
    ("single_quoted_values", '{"name": \'get_weather\', "arguments": {}}', "lenient", [], ["not_json"], None),
    ("unquoted_keys", '{name: "get_weather", arguments: {city: "Paris"}}', "lenient", [], ["not_json"], None),
    ("trailing_comma", '{"name": "get_weather", "arguments": {"city": "Paris",}}', "lenient", [], ["not_json"], None),
    ("python_true", '{"name": "set_flags", "arguments": {"on": True}}', "lenient", [], ["not_json"], None),
    ("fenced_python_dict", "```json\n{'name': 'get_weather'}\n```", "lenient", [], ["not_json"], None),
    ("tag_with_python_dict", "<tool_call>{'name': 'get_weather'}</tool_call>", "lenient", [], ["not_json"], None),
    ("function_call_syntax", 'get_weather(city="Paris")', "lenient", [], ["no_tool_call"], None),
    # ---- bad: truncated
    ("unclosed_brace", '{"name": "get_weather", "arguments": {"city": "Paris"}', "lenient", [], ["truncated"], None),
    ("unclosed_string", '{"name": "get_weather", "arguments": {"city": "Par', "lenient", [], ["truncated"], None),
    ("prose_then_unclosed", 'Here you go: {"name": "get_weather", "argu', "lenient", [], ["truncated"], None),
    ("unclosed_tag_incomplete", '<tool_call>\n{"name": "get_weather", "arguments": {"ci', "lenient", [], ["truncated"], None),
    ("unclosed_fence_incomplete", '```json\n{"name": "get_weather", "arguments": {"ci', "lenient", [], ["truncated"], None),
    # ---- bad: no tool call
    ("empty", "", "lenient", [], ["no_tool_call"], None),
    ("whitespace_only", "   \n\t", "strict", [], ["no_tool_call"], None),
    ("prose_only", "The weather in Paris is usually mild in spring.", "lenient", [], ["no_tool_call"], None),
    ("refusal", "I'm sorry, I can't help with that.", "strict", [], ["no_tool_call"], None),
    ("empty_openai_tool_calls", '{"role": "assistant", "content": "hi", "tool_calls": []}', "strict", [], ["no_tool_call"], None),
    # ---- bad: JSON but not a call
    ("json_answer_object", '{"answer": "sunny"}', "strict", [], ["bad_shape"], None),
    ("json_number", "[1, 2, 3]", "strict", [], ["bad_shape"], None),
    ("flattened_arguments", '{"name": "get_weather", "city": "Paris"}', "strict", [], ["bad_shape"], "json"),
    ("name_not_string", '{"name": 42, "arguments": {}}', "strict", [], ["bad_shape"], "json"),
    ("list_with_non_call", f'[{W}, "oops"]', "strict", PARIS, ["bad_shape"], "json_list"),
    ("prose_with_non_call_json", 'The config is {"debug": true}.', "lenient", [], ["bad_shape"], None),
    # ---- bad: arguments not an object
    ("arguments_list", '{"name": "get_weather", "arguments": ["Paris"]}', "strict", [], ["arguments_not_object"], "json"),
    ("arguments_bad_string", '{"name": "get_weather", "arguments": "city=Paris"}', "strict", [], ["arguments_not_object"], "json"),
    ("arguments_number", '{"name": "get_weather", "arguments": 3}', "strict", [], ["arguments_not_object"], "json"),
    # ---- bad: schema
    ("unknown_tool", '{"name": "get_forecast", "arguments": {"city": "Paris"}}', "strict", [("get_forecast", {"city": "Paris"})], ["unknown_tool"], "json"),
    ("unknown_tool_case", '{"name": "Get_Weather", "arguments": {"city": "Paris"}}', "strict", [("Get_Weather", {"city": "Paris"})], ["unknown_tool"], "json"),
    ("unexpected_argument_listed_props", '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}', "strict", [("get_weather", {"city": "Paris", "days": 3})], ["unexpected_argument"], "json"),
    ("unexpected_argument_additional_false", '{"name": "send_email", "arguments": {"to": "a@b.c", "subject": "s", "body": "b", "cc": "x"}}', "strict", [("send_email", {"to": "a@b.c", "subject": "s", "body": "b", "cc": "x"})], ["unexpected_argument"], "json"),
    ("missing_argument", '{"name": "get_weather", "arguments": {}}', "strict", [("get_weather", {})], ["missing_argument"], "json"),
    ("missing_two_arguments", '{"name": "send_email", "arguments": {"to": "a@b.c"}}', "strict", [("send_email", {"to": "a@b.c"})], ["missing_argument", "missing_argument"], "json"),
    ("wrong_type_string", '{"name": "get_weather", "arguments": {"city": 75001}}', "strict", [("get_weather", {"city": 75001})], ["wrong_type"], "json"),
    ("integer_accepts_int", '{"name": "add", "arguments": {"a": 3, "b": 4}}', "strict", [("add", {"a": 3, "b": 4})], [], "json"),
    ("integer_accepts_3_0", '{"name": "add", "arguments": {"a": 3.0, "b": 4}}', "strict", [("add", {"a": 3.0, "b": 4})], [], "json"),
    ("integer_rejects_3_5", '{"name": "add", "arguments": {"a": 3.5, "b": 4}}', "strict", [("add", {"a": 3.5, "b": 4})], ["wrong_type"], "json"),
    ("integer_rejects_true", '{"name": "add", "arguments": {"a": true, "b": 4}}', "strict", [("add", {"a": True, "b": 4})], ["wrong_type"], "json"),
    ("integer_rejects_string", '{"name": "add", "arguments": {"a": "3", "b": 4}}', "strict", [("add", {"a": "3", "b": 4})], ["wrong_type"], "json"),
    ("number_accepts_int", '{"name": "add", "arguments": {"a": 1, "b": 2}}', "strict", [("add", {"a": 1, "b": 2})], [], "json"),
    ("number_rejects_false", '{"name": "add", "arguments": {"a": 1, "b": false}}', "strict", [("add", {"a": 1, "b": False})], ["wrong_type"], "json"),
    ("boolean_rejects_string", '{"name": "set_flags", "arguments": {"on": "true"}}', "strict", [("set_flags", {"on": "true"})], ["wrong_type"], "json"),
    ("array_rejects_string", '{"name": "set_flags", "arguments": {"names": "a,b"}}', "strict", [("set_flags", {"names": "a,b"})], ["wrong_type"], "json"),
    ("object_rejects_array", '{"name": "set_flags", "arguments": {"options": []}}', "strict", [("set_flags", {"options": []})], ["wrong_type"], "json"),
    ("type_union_accepts_null", '{"name": "set_flags", "arguments": {"note": null}}', "strict", [("set_flags", {"note": None})], [], "json"),
    ("errors_point_at_second_call", f'[{W}, {{"name": "get_weather", "arguments": {{}}}}]', "strict", [("get_weather", {"city": "Paris"}), ("get_weather", {})], ["missing_argument"], "json_list"),
]


@pytest.mark.parametrize(
    ("text", "mode", "calls", "codes", "fmt"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_parse_table(text: str, mode: str, calls: list, codes: list[str], fmt: str | None) -> None:
    result = parse_tool_calls(text, TOOLS, mode=mode)
    assert [(c.name, c.arguments) for c in result.calls] == calls
    assert [e.code for e in result.errors] == codes, [e.message for e in result.errors]
    assert result.format == fmt
    assert result.ok == (not codes and bool(calls))


def test_table_is_large_and_ids_unique() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) >= 60
    assert len(set(ids)) == len(ids)


def test_without_tools_nothing_is_validated() -> None:
    result = parse_tool_calls('{"name": "anything", "arguments": {"x": 1.5}}')
    assert result.ok
    assert result.calls[0].name == "anything"


def test_empty_tool_list_makes_every_call_unknown() -> None:
    assert parse_tool_calls(W, []).first_error_code == "unknown_tool"


def test_additional_properties_true_allows_extras() -> None:
    tool = ToolSpec("f", "", {"type": "object", "properties": {"a": {}}, "additionalProperties": True})
    assert parse_tool_calls('{"name": "f", "arguments": {"b": 1}}', [tool]).ok


def test_schema_without_properties_allows_any_argument() -> None:
    tool = ToolSpec("f", "", {"type": "object"})
    assert parse_tool_calls('{"name": "f", "arguments": {"b": 1}}', [tool]).ok


def test_error_messages_name_the_problem() -> None:
    missing = parse_tool_calls('{"name": "send_email", "arguments": {"to": "x"}}', TOOLS)
    assert "'subject'" in missing.errors[0].message
    unknown = parse_tool_calls('{"name": "nope", "arguments": {}}', TOOLS)
    assert "'nope'" in unknown.errors[0].message and "get_weather" in unknown.errors[0].message
    repr_dict = parse_tool_calls("{'name': 'x'}", TOOLS)
    assert "double quotes" in repr_dict.errors[0].message
    typed = parse_tool_calls('{"name": "add", "arguments": {"a": 3.5, "b": 1}}', TOOLS)
    assert "integer" in typed.errors[0].message and "'a'" in typed.errors[0].message


def test_call_ids_are_kept() -> None:
    text = json.dumps([{"type": "function_call", "name": "ping", "arguments": "{}", "call_id": "abc"}])
    assert parse_tool_calls(text, TOOLS).calls[0].call_id == "abc"


def test_call_index_points_at_offending_call() -> None:
    text = f'[{W}, {{"name": "add", "arguments": {{"a": "x", "b": 1}}}}]'
    result = parse_tool_calls(text, TOOLS)
    assert [(e.code, e.call_index) for e in result.errors] == [("wrong_type", 1)]


def test_over_long_input_is_rejected_quickly() -> None:
    text = "{" * (MAX_INPUT_CHARS + 1)
    start = time.perf_counter()
    result = parse_tool_calls(text)
    assert result.first_error_code == "not_json"
    assert "limit" in result.errors[0].message
    assert time.perf_counter() - start < 0.1


@pytest.mark.parametrize(
    "text",
    [
        "{" * 50_000,
        "[" * 50_000,
        '{"a": "' + "x" * 150_000,
        ("{ " * 20_000) + W,
        '{"k":' * 30_000,
        "<tool_call>" * 10_000,
        "```" * 20_000,
    ],
    ids=["braces", "brackets", "open_string", "braces_then_call", "nested_keys", "tags", "fences"],
)
def test_adversarial_inputs_are_fast_and_do_not_raise(text: str) -> None:
    start = time.perf_counter()
    result = parse_tool_calls(text, TOOLS)
    assert isinstance(result, ParseResult)
    assert time.perf_counter() - start < 2.0


def test_deeply_nested_arguments_do_not_raise() -> None:
    deep = "[" * 5000 + "]" * 5000
    result = parse_tool_calls('{"name": "set_flags", "arguments": {"names": ' + deep + "}}", TOOLS)
    assert isinstance(result, ParseResult)


def test_non_text_input_is_an_error_not_an_exception() -> None:
    assert parse_tool_calls(None).first_error_code == "no_tool_call"  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400), st.sampled_from(["strict", "lenient"]))
def test_never_raises_on_arbitrary_text(text: str, mode: str) -> None:
    result = parse_tool_calls(text, TOOLS, mode=mode)
    assert result.calls or result.errors, "an output without a call must say why"
    assert all(error.code in ERROR_CODES and error.message for error in result.errors)
    assert result.ok == (bool(result.calls) and not result.errors)
    json.dumps(result.to_dict())  # what the trace stores: plain JSON


_JSON_ALPHABET = st.sampled_from(list('{}[]":,\'` \n<>/abcnlmetug0123456789.-_') + ["<tool_call>", "</tool_call>", "```json\n", '"name"', '"arguments"', "true", "null"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_JSON_ALPHABET, max_size=60).map("".join), st.sampled_from(["strict", "lenient"]))
def test_never_raises_on_json_like_text(text: str, mode: str) -> None:
    result = parse_tool_calls(text, TOOLS, mode=mode)
    assert all(e.code in {
        "not_json", "trailing_text", "no_tool_call", "unknown_tool", "unexpected_argument",
        "missing_argument", "wrong_type", "bad_shape", "arguments_not_object", "truncated",
    } for e in result.errors)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["name", "tool", "function", "arguments", "parameters", "tool_calls", "type", "output", "id"]), _json_values, max_size=4))
def test_never_raises_on_arbitrary_json_objects(obj: dict) -> None:
    assert isinstance(parse_tool_calls(json.dumps(obj), TOOLS), ParseResult)


# ---------------------------------------------------------------- messages and trajectories


def test_message_structured_tool_calls_win_over_content() -> None:
    message = {
        "role": "assistant",
        "content": "ignored prose",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
    }
    result = calls_from_message(message, TOOLS, mode="strict")
    assert result.ok and result.format == "openai_tool_calls"
    assert result.calls[0].call_id == "c1"


def test_message_accepts_our_own_tool_call_dicts() -> None:
    message = {"role": "assistant", "content": "", "tool_calls": [{"name": "ping", "arguments": {}, "call_id": None}]}
    assert calls_from_message(message, TOOLS).ok


def test_message_without_tool_calls_parses_content() -> None:
    result = calls_from_message({"role": "assistant", "content": f"<tool_call>{W}</tool_call>"}, TOOLS)
    assert result.ok and result.format == "tool_call_tags"


def test_message_content_parts_are_joined() -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": W[:20]}, {"type": "text", "text": W[20:]}]}
    assert calls_from_message(message, TOOLS).ok


def test_message_strict_mode_applies_to_content() -> None:
    result = calls_from_message({"role": "assistant", "content": f"ok {W}"}, TOOLS, mode="strict")
    assert result.first_error_code == "trailing_text"


def test_trajectory_concatenates_calls_in_order_and_ignores_final_prose() -> None:
    trajectory = Trajectory(turns=[
        {"role": "assistant", "content": W},
        {"role": "tool", "tool_call_id": "x", "content": "sunny"},
        {"role": "assistant", "content": f"```json\n{W2}\n```"},
        {"role": "tool", "tool_call_id": "y", "content": "rain"},
        {"role": "assistant", "content": "Paris is sunny, Oslo is rainy."},
    ])
    result = calls_from_trajectory(trajectory, TOOLS)
    assert [c.arguments["city"] for c in result.calls] == ["Paris", "Oslo"]
    assert result.errors == []


def test_trajectory_offsets_call_indices_across_turns() -> None:
    trajectory = Trajectory(turns=[
        {"role": "assistant", "content": W},
        {"role": "assistant", "content": '{"name": "get_weather", "arguments": {}}'},
    ])
    result = calls_from_trajectory(trajectory, TOOLS)
    assert [(e.code, e.call_index) for e in result.errors] == [("missing_argument", 1)]


def test_trajectory_without_any_call_reports_no_tool_call_once() -> None:
    trajectory = Trajectory(turns=[{"role": "assistant", "content": "hi"}, {"role": "assistant", "content": "bye"}])
    assert calls_from_trajectory(trajectory, TOOLS).error_codes() == ["no_tool_call"]


def test_truncated_trajectory_without_calls_reports_truncated_first() -> None:
    trajectory = Trajectory.from_completion('{"name": "get_weather", "argu', truncated=True)
    assert calls_from_trajectory(trajectory, TOOLS).first_error_code == "truncated"


def test_truncated_trajectory_with_a_call_is_not_reported_truncated() -> None:
    trajectory = Trajectory.from_completion(W + " and then", truncated=True)
    result = calls_from_trajectory(trajectory, TOOLS)
    assert result.ok


def test_fast_path_is_fast() -> None:
    start = time.perf_counter()
    for _ in range(2000):
        parse_tool_calls(W, TOOLS, mode="strict")
    per_call = (time.perf_counter() - start) / 2000
    assert per_call < 200e-6


def test_unknown_mode_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="strict"):
        parse_tool_calls(W, TOOLS, mode="loose")  # type: ignore[arg-type]
