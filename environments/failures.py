"""Failure buckets: exactly one reason per failed trajectory, plus descriptive flags.

`classify_failure` compares the parsed calls with the expected calls and returns the first
bucket that applies, in this precedence (earlier wins, so the bucket names the most basic
thing to fix first):

    1. verifier_error   the verifier itself failed (sandbox died, judge unreachable)
    2. truncated        no call parsed and the output was cut off (token limit or JSON
                        still open at the end)
    3. no_tool_call     no call and nothing call-like (prose only, empty output)
    4. invalid_json     not JSON, JSON that is not a call, arguments not an object, or
                        (strict mode) text around the call
    5. unknown_tool     a call to a tool that is not offered
    6. unsafe_action    a destructive tool called more often than expected (e.g. a delete
                        nobody asked for)
    7. extra_write      another write tool called more often than expected
    8. wrong_tool       a tool nobody asked for was called (a read, since writes are caught
                        above), whether or not an expected call is also missing
    9. missing_call     fewer calls of an expected tool than expected, nothing extra
   10. wrong_arguments  the right tools, but an expected call's arguments were not matched
                        or a call violates its schema

Calls are compared as multisets (order is reported as the flag `order_differs`, not as a
failure); arguments with `normalise_value` (key order irrelevant, strings stripped,
3 == 3.0, "3" != 3, true != 1). When nothing applies, the calls match and the result is None.

`failure_flags` lists everything noteworthy regardless of the bucket, so a reviewer sees
e.g. an unsafe action even when the bucket is invalid_json for another block. Flags, in
this order: truncated, trailing_text, schema_invalid, multiple_calls, extra_calls,
unsafe_action, extra_write, order_differs, no_write_ground_truth (the expected calls write
nothing, so a stateful verifier would pass an empty trajectory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from environments.parsing import ParseResult
from environments.types import FailureBucket, ToolCall, ToolSpec

_FORMAT_CODES = frozenset({"not_json", "trailing_text", "bad_shape", "arguments_not_object"})
_SCHEMA_CODES = frozenset({"unexpected_argument", "missing_argument", "wrong_type"})


class _Bool:
    """A JSON boolean that compares unequal to 1 / 0 (Python's True == 1 would hide errors)."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Bool) and other.value is self.value

    def __hash__(self) -> int:
        return hash((_Bool, self.value))

    def __repr__(self) -> str:
        return "true" if self.value else "false"


def normalise_value(value: Any, *, case_insensitive_strings: bool = False) -> Any:
    """A comparable form of a JSON value: strings stripped (and case-folded if asked),
    booleans kept apart from numbers, numbers compared by value (3 == 3.0)."""
    if isinstance(value, str):
        value = value.strip()
        return value.casefold() if case_insensitive_strings else value
    if isinstance(value, bool):
        return _Bool(value)
    if isinstance(value, dict):
        return {
            k: normalise_value(v, case_insensitive_strings=case_insensitive_strings)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [normalise_value(v, case_insensitive_strings=case_insensitive_strings) for v in value]
    return value


def arguments_equal(
    predicted: dict[str, Any], expected: dict[str, Any], *, case_insensitive_strings: bool = False
) -> bool:
    """Normalised argument comparison; deeply nested junk compares unequal instead of raising."""
    try:
        return normalise_value(predicted, case_insensitive_strings=case_insensitive_strings) == (
            normalise_value(expected, case_insensitive_strings=case_insensitive_strings)
        )
    except RecursionError:
        return False


def _name_counts(calls: Sequence[ToolCall]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for call in calls:
        counts[call.name] = counts.get(call.name, 0) + 1
    return counts


def _excess(counts: dict[str, int], baseline: dict[str, int]) -> dict[str, int]:
    """Names called more often in `counts` than in `baseline`, with the surplus."""
    return {n: c - baseline.get(n, 0) for n, c in counts.items() if c > baseline.get(n, 0)}


@dataclass(frozen=True)
class CallComparison:
    """Predicted versus expected calls, by name counts and by normalised arguments."""

    extra: dict[str, int]
    missing: dict[str, int]
    unmatched_expected: int
    order_differs: bool

    @classmethod
    def of(
        cls,
        predicted: Sequence[ToolCall],
        expected: Sequence[ToolCall],
        *,
        case_insensitive_strings: bool = False,
    ) -> CallComparison:
        predicted_names = _name_counts(predicted)
        expected_names = _name_counts(expected)
        remaining = list(predicted)
        unmatched = 0
        for want in expected:
            match = next(
                (i for i, got in enumerate(remaining) if got.name == want.name and arguments_equal(
                    got.arguments, want.arguments, case_insensitive_strings=case_insensitive_strings
                )),
                None,
            )
            if match is None:
                unmatched += 1
            else:
                remaining.pop(match)
        return cls(
            extra=_excess(predicted_names, expected_names),
            missing=_excess(expected_names, predicted_names),
            unmatched_expected=unmatched,
            order_differs=predicted_names == expected_names
            and [c.name for c in predicted] != [c.name for c in expected],
        )


def _overused(extra: dict[str, int], tools: Sequence[ToolSpec], attribute: str) -> list[str]:
    flagged = {t.name for t in tools if getattr(t, attribute)}
    return sorted(name for name in extra if name in flagged)


def _unknown_tools(parse: ParseResult, tools: Sequence[ToolSpec]) -> bool:
    if any(e.code == "unknown_tool" for e in parse.errors):
        return True
    names = {t.name for t in tools}
    return bool(names) and any(c.name not in names for c in parse.calls)


def classify_failure(
    parse: ParseResult,
    *,
    expected: Sequence[ToolCall],
    tools: Sequence[ToolSpec],
    truncated: bool = False,
    verifier_error: str | None = None,
    case_insensitive_strings: bool = False,
    comparison: CallComparison | None = None,
) -> FailureBucket | None:
    """The one bucket for this outcome (precedence in the module docstring); None if the
    calls match the expected ones and nothing is wrong.

    `comparison` lets a caller that already compared the calls skip doing it twice.
    """
    if verifier_error:
        return FailureBucket.VERIFIER_ERROR
    codes = {e.code for e in parse.errors}
    if not parse.calls:
        if truncated or "truncated" in codes:
            return FailureBucket.TRUNCATED
        if codes <= {"no_tool_call"}:
            return FailureBucket.NO_TOOL_CALL
        return FailureBucket.INVALID_JSON
    if codes & _FORMAT_CODES:
        return FailureBucket.INVALID_JSON
    if _unknown_tools(parse, tools):
        return FailureBucket.UNKNOWN_TOOL
    comparison = comparison or CallComparison.of(
        parse.calls, expected, case_insensitive_strings=case_insensitive_strings
    )
    if _overused(comparison.extra, tools, "destructive"):
        return FailureBucket.UNSAFE_ACTION
    if _overused(comparison.extra, tools, "writes"):
        return FailureBucket.EXTRA_WRITE
    if comparison.extra:
        return FailureBucket.WRONG_TOOL
    if comparison.missing:
        return FailureBucket.MISSING_CALL
    if comparison.unmatched_expected or codes & _SCHEMA_CODES:
        return FailureBucket.WRONG_ARGUMENTS
    return None


def failure_flags(
    parse: ParseResult,
    *,
    expected: Sequence[ToolCall],
    tools: Sequence[ToolSpec],
    truncated: bool = False,
    case_insensitive_strings: bool = False,
    comparison: CallComparison | None = None,
) -> list[str]:
    """Noteworthy facts about the outcome, independent of the bucket, in a fixed order."""
    codes = {e.code for e in parse.errors}
    comparison = comparison or CallComparison.of(
        parse.calls, expected, case_insensitive_strings=case_insensitive_strings
    )
    writes = {t.name for t in tools if t.writes or t.destructive}
    checks = [
        ("truncated", truncated or "truncated" in codes),
        ("trailing_text", "trailing_text" in codes),
        ("schema_invalid", bool(codes & _SCHEMA_CODES)),
        ("multiple_calls", len(parse.calls) > 1),
        ("extra_calls", bool(comparison.extra)),
        ("unsafe_action", bool(_overused(comparison.extra, tools, "destructive"))),
        ("extra_write", bool(_overused(comparison.extra, tools, "writes"))),
        ("order_differs", comparison.order_differs),
        ("no_write_ground_truth", bool(writes) and not any(c.name in writes for c in expected)),
    ]
    return [name for name, applies in checks if applies]
