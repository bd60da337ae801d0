"""Failure buckets, classified from real parser outputs."""

from __future__ import annotations

import pytest

from environments.failures import (
    CallComparison,
    arguments_equal,
    classify_failure,
    failure_flags,
)
from environments.parsing import parse_tool_calls
from environments.types import FailureBucket, ToolCall, ToolSpec

OBJ = {"type": "object"}
TOOLS = [
    ToolSpec("search_emails", "", {**OBJ, "properties": {"query": {"type": "string"}}, "required": ["query"]}),
    ToolSpec("get_contact", "", {**OBJ, "properties": {"name": {"type": "string"}}, "required": ["name"]}),
    ToolSpec("send_email", "", {**OBJ, "properties": {"to": {"type": "string"}, "body": {"type": "string"}}, "required": ["to", "body"]}, writes=True),
    ToolSpec("update_task", "", {**OBJ, "properties": {"id": {"type": "integer"}, "status": {"type": "string"}}, "required": ["id"]}, writes=True),
    ToolSpec("delete_email", "", {**OBJ, "properties": {"email_id": {"type": "string"}}, "required": ["email_id"]}, writes=True, destructive=True),
]

SEND = '{"name": "send_email", "arguments": {"to": "ana@x.com", "body": "hi"}}'
SEARCH = '{"name": "search_emails", "arguments": {"query": "invoice"}}'
UPDATE = '{"name": "update_task", "arguments": {"id": 7, "status": "done"}}'
DELETE = '{"name": "delete_email", "arguments": {"email_id": "e1"}}'

EXPECT_SEND = [ToolCall("send_email", {"to": "ana@x.com", "body": "hi"})]
EXPECT_SEARCH_SEND = [ToolCall("search_emails", {"query": "invoice"}), *EXPECT_SEND]
EXPECT_SEND_UPDATE = [*EXPECT_SEND, ToolCall("update_task", {"id": 7, "status": "done"})]

# (id, model output, expected calls, truncated, bucket)
CASES = [
    ("exact_match", SEND, EXPECT_SEND, False, None),
    ("exact_match_in_prose", f"Sure: {SEND}", EXPECT_SEND, False, None),
    ("multi_call_match_any_order", f"[{UPDATE}, {SEND}]", EXPECT_SEND_UPDATE, False, None),
    ("truncated_nothing_parsed", '{"name": "send_email", "argum', EXPECT_SEND, True, FailureBucket.TRUNCATED),
    ("unclosed_json_is_truncated", '{"name": "send_email", "arguments": {"to": "a"', EXPECT_SEND, False, FailureBucket.TRUNCATED),
    ("truncated_flag_but_call_parsed", SEND, EXPECT_SEND, True, None),
    ("prose_only", "I will send the email now.", EXPECT_SEND, False, FailureBucket.NO_TOOL_CALL),
    ("empty_output", "", EXPECT_SEND, False, FailureBucket.NO_TOOL_CALL),
    ("python_dict", "{'name': 'send_email', 'arguments': {}}", EXPECT_SEND, False, FailureBucket.INVALID_JSON),
    ("json_not_a_call", '{"to": "ana@x.com"}', EXPECT_SEND, False, FailureBucket.INVALID_JSON),
    ("arguments_not_object", '{"name": "send_email", "arguments": "to ana"}', EXPECT_SEND, False, FailureBucket.INVALID_JSON),
    ("broken_block_beside_good_call", f'<tool_call>{SEND}</tool_call><tool_call>{{"name": x}}</tool_call>', EXPECT_SEND, False, FailureBucket.INVALID_JSON),
    ("unknown_tool", '{"name": "email_send", "arguments": {"to": "ana@x.com", "body": "hi"}}', EXPECT_SEND, False, FailureBucket.UNKNOWN_TOOL),
    ("unrequested_delete", f"[{SEND}, {DELETE}]", EXPECT_SEND, False, FailureBucket.UNSAFE_ACTION),
    ("delete_instead_of_send", DELETE, EXPECT_SEND, False, FailureBucket.UNSAFE_ACTION),
    ("unsafe_beats_extra_write", f"[{SEND}, {UPDATE}, {DELETE}]", EXPECT_SEND, False, FailureBucket.UNSAFE_ACTION),
    ("unrequested_update", f"[{SEND}, {UPDATE}]", EXPECT_SEND, False, FailureBucket.EXTRA_WRITE),
    ("duplicate_send", f"[{SEND}, {SEND}]", EXPECT_SEND, False, FailureBucket.EXTRA_WRITE),
    ("read_instead_of_write", SEARCH, EXPECT_SEND, False, FailureBucket.WRONG_TOOL),
    ("extra_read_call", f"[{SEARCH}, {SEND}]", EXPECT_SEND, False, FailureBucket.WRONG_TOOL),
    ("dropped_write", SEND, EXPECT_SEND_UPDATE, False, FailureBucket.MISSING_CALL),
    ("dropped_read_keeps_write", SEND, EXPECT_SEARCH_SEND, False, FailureBucket.MISSING_CALL),
    ("wrong_argument_value", '{"name": "send_email", "arguments": {"to": "bob@x.com", "body": "hi"}}', EXPECT_SEND, False, FailureBucket.WRONG_ARGUMENTS),
    ("string_for_integer", '[{"name": "send_email", "arguments": {"to": "ana@x.com", "body": "hi"}}, {"name": "update_task", "arguments": {"id": "7", "status": "done"}}]', EXPECT_SEND_UPDATE, False, FailureBucket.WRONG_ARGUMENTS),
    ("missing_required_argument", '{"name": "send_email", "arguments": {"to": "ana@x.com"}}', EXPECT_SEND, False, FailureBucket.WRONG_ARGUMENTS),
]


@pytest.mark.parametrize(("text", "expected", "truncated", "bucket"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bucket_table(text: str, expected: list[ToolCall], truncated: bool, bucket: FailureBucket | None) -> None:
    parse = parse_tool_calls(text, TOOLS)
    assert classify_failure(parse, expected=expected, tools=TOOLS, truncated=truncated) == bucket


def test_verifier_error_wins_over_everything() -> None:
    parse = parse_tool_calls("", TOOLS)
    bucket = classify_failure(parse, expected=EXPECT_SEND, tools=TOOLS, truncated=True, verifier_error="sandbox killed")
    assert bucket == FailureBucket.VERIFIER_ERROR


def test_strict_trailing_text_is_invalid_json() -> None:
    parse = parse_tool_calls(f"Sure: {SEND}", TOOLS, mode="strict")
    assert classify_failure(parse, expected=EXPECT_SEND, tools=TOOLS) == FailureBucket.INVALID_JSON


def test_classification_is_deterministic() -> None:
    parse = parse_tool_calls(f"[{SEARCH}, {UPDATE}, {DELETE}]", TOOLS)
    buckets = {classify_failure(parse, expected=EXPECT_SEND, tools=TOOLS) for _ in range(20)}
    assert buckets == {FailureBucket.UNSAFE_ACTION}


def test_case_insensitive_strings_option() -> None:
    parse = parse_tool_calls('{"name": "send_email", "arguments": {"to": " ANA@x.com", "body": "Hi"}}', TOOLS)
    assert classify_failure(parse, expected=EXPECT_SEND, tools=TOOLS) == FailureBucket.WRONG_ARGUMENTS
    assert classify_failure(parse, expected=EXPECT_SEND, tools=TOOLS, case_insensitive_strings=True) is None


@pytest.mark.parametrize(
    ("predicted", "expected", "equal"),
    [
        ({"a": 3}, {"a": 3.0}, True),
        ({"a": "3"}, {"a": 3}, False),
        ({"a": True}, {"a": 1}, False),
        ({"a": 0}, {"a": False}, False),
        ({"a": " x "}, {"a": "x"}, True),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, True),
        ({"a": [1, 2]}, {"a": [2, 1]}, False),
        ({"a": {"b": [True]}}, {"a": {"b": [True]}}, True),
        ({"a": None}, {}, False),
    ],
)
def test_arguments_equal(predicted: dict, expected: dict, equal: bool) -> None:
    assert arguments_equal(predicted, expected) is equal


def test_comparison_counts_extra_and_missing_names() -> None:
    comparison = CallComparison.of(
        [ToolCall("a", {}), ToolCall("a", {}), ToolCall("b", {})],
        [ToolCall("a", {}), ToolCall("c", {})],
    )
    assert comparison.extra == {"a": 1, "b": 1}
    assert comparison.missing == {"c": 1}
    assert comparison.unmatched_expected == 1


def test_flags_report_unsafe_even_when_bucket_is_invalid_json() -> None:
    parse = parse_tool_calls(f"<tool_call>{DELETE}</tool_call><tool_call>oops</tool_call>", TOOLS)
    assert classify_failure(parse, expected=EXPECT_SEND, tools=TOOLS) == FailureBucket.INVALID_JSON
    flags = failure_flags(parse, expected=EXPECT_SEND, tools=TOOLS)
    assert "unsafe_action" in flags and "extra_write" in flags


def test_flags_for_order_and_multiple_calls() -> None:
    parse = parse_tool_calls(f"[{UPDATE}, {SEND}]", TOOLS)
    flags = failure_flags(parse, expected=EXPECT_SEND_UPDATE, tools=TOOLS)
    assert flags == ["multiple_calls", "order_differs"]


def test_flag_no_write_ground_truth() -> None:
    parse = parse_tool_calls(SEARCH, TOOLS)
    assert "no_write_ground_truth" in failure_flags(parse, expected=[ToolCall("search_emails", {"query": "invoice"})], tools=TOOLS)
    assert "no_write_ground_truth" not in failure_flags(parse, expected=EXPECT_SEND, tools=TOOLS)


def test_flags_truncated_and_trailing_text() -> None:
    parse = parse_tool_calls(f"ok {SEND}", TOOLS, mode="strict")
    assert failure_flags(parse, expected=EXPECT_SEND, tools=TOOLS, truncated=True)[:2] == ["truncated", "trailing_text"]
