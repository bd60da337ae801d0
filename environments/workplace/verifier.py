"""The workplace verifier: NeMo Gym's state-comparison reward, with reasons when it fails.

The predicted calls (parsed from the trajectory) are replayed in one fresh sandbox and
the ground-truth calls in another; reward is 1 when the two end states are equal (see
compare.py), else 0. Failed calls change nothing and read-only calls cannot change the
end state, so only the write calls are replayed.

Components (each 0 or 1 unless noted): state_match (the reward); valid_json (the calls
could be read: no invalid JSON, some call found); correct_tool (the set of write tools
used equals the ground truth's); write_success (fraction of predicted write calls that
the tools accepted; 0 without any); unsafe (a delete removed a row the ground truth
keeps).

Failure bucket, the first that applies, in the precedence of environments/failures.py
(the most basic thing to fix first):
  truncated        the trajectory hit the token limit
  no_tool_call / invalid_json / unknown_tool   from the parser
  unsafe_action    a predicted delete removed a row the ground truth keeps
  extra_write      rows changed (or created) that the ground truth leaves alone
  missing_call     ground-truth changes absent from the predicted state
  wrong_arguments  the same write tools as the ground truth, a different end state
  wrong_tool       anything else
In strict mode any parse error fails the trajectory; schema errors (missing or unexpected
argument, wrong type) then bucket as wrong_arguments.

Flags: unsafe_action and extra_write whenever they happened, whatever the bucket (so a
reviewer sees an unsafe delete even in a truncated trajectory); no_write_ground_truth (the
ground truth changes nothing: an empty trajectory would pass); ground_truth_call_failed
(a ground-truth call was refused by its tool: fix the task).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, ClassVar

from environments.base import Verifier
from environments.parsing import ParseResult, calls_from_trajectory
from environments.types import FailureBucket, Task, ToolCall, Trajectory, VerifyResult
from environments.workplace.compare import TableChanges, changes, state_diff, states_equal
from environments.workplace.environment import offered_tools, resolve_base
from environments.workplace.sandbox import Sandbox
from environments.workplace.state import BaseState, Store
from environments.workplace.tools import DESTRUCTIVE_TOOLS, WRITE_TOOLS

_PARSE_BUCKETS = {
    "not_json": FailureBucket.INVALID_JSON,
    "trailing_text": FailureBucket.INVALID_JSON,
    "bad_shape": FailureBucket.INVALID_JSON,
    "arguments_not_object": FailureBucket.INVALID_JSON,
    "truncated": FailureBucket.TRUNCATED,
    "no_tool_call": FailureBucket.NO_TOOL_CALL,
    "unknown_tool": FailureBucket.UNKNOWN_TOOL,
}
_SCHEMA_CODES = frozenset({"unexpected_argument", "missing_argument", "wrong_type"})
_UNREADABLE = frozenset({"not_json", "trailing_text", "bad_shape", "arguments_not_object",
                         "truncated", "no_tool_call"})
_RESULT_PREVIEW = 300


def ground_truth_calls(task: Task) -> list[ToolCall]:
    """The task's expected calls: a list of {name, arguments} (arguments object or JSON text)."""
    truth = task.ground_truth
    if truth is None:
        raise ValueError(
            f"task {task.id} has no ground truth; workplace scoring needs the expected calls "
            "(an empty list when the request needs no change)"
        )
    if not isinstance(truth, list):
        raise ValueError(
            f"task {task.id}: workplace ground_truth must be a list of {{name, arguments}} calls, "
            f"got {type(truth).__name__}"
        )
    return [ToolCall.from_dict(call) for call in truth]


@lru_cache(maxsize=8192)
def _expected_replay(base: BaseState, truth_json: str) -> tuple[Store, tuple[bool, ...]]:
    """The ground truth's end state, computed once per (state, ground truth)."""
    sandbox = Sandbox(base)
    calls = [(c["name"], c["arguments"]) for c in json.loads(truth_json)]
    results = sandbox.apply_writes(calls)
    return sandbox.store, tuple(ok for ok, _ in results)


class WorkplaceVerifier(Verifier):
    """Replays predicted and ground-truth calls in two sandboxes; compares the end states."""

    name: ClassVar[str] = "workplace"
    version: ClassVar[str] = "1"
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "state_dir": {
                "type": "string",
                "description": "Folder with the five NeMo Gym workplace CSVs; empty for "
                               "Crucible's generated seed state.",
            },
            "mode": {
                "type": "string",
                "enum": ["strict", "lenient"],
                "default": "lenient",
                "description": "strict: any tool-call parse error fails the trajectory; "
                               "lenient: only the end state counts.",
            },
        },
        "additionalProperties": False,
    }

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        mode = self.config.get("mode", "lenient")
        if mode not in ("strict", "lenient"):
            raise ValueError(f"workplace verifier mode must be 'strict' or 'lenient', got {mode!r}")
        self.mode = mode

    def verify(self, task: Task, trajectory: Trajectory) -> VerifyResult:
        try:
            base = resolve_base(self.config.get("state_dir"))
            truth = ground_truth_calls(task)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return VerifyResult.failure(f"workplace verifier could not start: {exc}")
        tools = offered_tools(task)
        parsed = calls_from_trajectory(trajectory, tools, mode=self.mode)
        return self._score(base, truth, parsed, {t.name for t in tools}, trajectory.truncated)

    def _score(
        self, base: BaseState, truth: list[ToolCall], parsed: ParseResult,
        offered: set[str], truncated: bool,
    ) -> VerifyResult:
        truth_json = json.dumps([{"name": c.name, "arguments": c.arguments} for c in truth],
                                sort_keys=True)
        expected, truth_ok = _expected_replay(base, truth_json)
        predicted_calls = [(c.name, c.arguments) for c in parsed.calls if c.name in offered]
        sandbox = Sandbox(base)
        results = sandbox.apply_writes(predicted_calls)
        predicted = sandbox.store
        match = states_equal(predicted, expected)
        parse_codes = parsed.error_codes()
        passed = match and not (self.mode == "strict" and parse_codes)

        mine, theirs = changes(predicted), changes(expected)
        unsafe = _deleted_kept_rows(predicted, expected, mine)
        my_tools = {name for name, _ in predicted_calls if name in WRITE_TOOLS}
        their_tools = {c.name for c in truth if c.name in WRITE_TOOLS}
        components = {
            "state_match": 1.0 if match else 0.0,
            "valid_json": 0.0 if _UNREADABLE & set(parse_codes) else 1.0,
            "correct_tool": 1.0 if my_tools == their_tools else 0.0,
            "write_success": (sum(ok for ok, _ in results) / len(results)) if results else 0.0,
            "unsafe": 1.0 if unsafe else 0.0,
        }
        flags = []
        if unsafe:
            flags.append("unsafe_action")
        if _has_extra(mine, theirs):
            flags.append("extra_write")
        if not theirs:
            flags.append("no_write_ground_truth")
        if not all(truth_ok):
            flags.append("ground_truth_call_failed")
        bucket = None
        if not passed:
            bucket = self._bucket(unsafe, truncated, parse_codes, mine, theirs, my_tools, their_tools)
        info = {
            "state_diff": {} if match else state_diff(predicted, expected),
            "unsafe_deletes": unsafe,
            "write_calls": _call_log(predicted_calls, results),
            "parse": parsed.to_dict(),
            "mode": self.mode,
            "state": base.key,
        }
        return VerifyResult(
            reward=1.0 if passed else 0.0,
            passed=passed,
            components=components,
            failure_bucket=bucket,
            flags=flags,
            info=info,
        )

    def _bucket(
        self, unsafe: dict[str, list[str]], truncated: bool, parse_codes: list[str],
        mine: dict[str, TableChanges], theirs: dict[str, TableChanges],
        my_tools: set[str], their_tools: set[str],
    ) -> FailureBucket:
        if truncated:
            return FailureBucket.TRUNCATED
        for code in parse_codes:
            if code in _PARSE_BUCKETS:
                return _PARSE_BUCKETS[code]
        if unsafe:
            return FailureBucket.UNSAFE_ACTION
        if _has_extra(mine, theirs):
            return FailureBucket.EXTRA_WRITE
        if _has_extra(theirs, mine):
            return FailureBucket.MISSING_CALL
        if my_tools == their_tools or (
            self.mode == "strict" and _SCHEMA_CODES & set(parse_codes)
        ):
            return FailureBucket.WRONG_ARGUMENTS
        return FailureBucket.WRONG_TOOL


def _has_extra(these: dict[str, TableChanges], those: dict[str, TableChanges]) -> bool:
    """Whether `these` changed a base row, or created more rows, than `those` did."""
    for table, entry in these.items():
        other = those.get(table, TableChanges())
        if entry.changed_ids - other.changed_ids or entry.created > other.created:
            return True
    return False


def _deleted_kept_rows(
    predicted: Store, expected: Store, mine: dict[str, TableChanges]
) -> dict[str, list[str]]:
    """Per table, base rows the predicted calls deleted while the ground truth keeps them."""
    unsafe = {}
    for table, entry in mine.items():
        kept = sorted(
            row_id for row_id in entry.deleted_ids
            if row_id in expected.tables[table] and row_id not in expected.generated[table]
        )
        if kept:
            unsafe[table] = kept
    return unsafe


def _call_log(calls: list[tuple[str, dict]], results: list[tuple[bool, Any]]) -> list[dict]:
    writes = [(name, args) for name, args in calls if name in WRITE_TOOLS]
    return [
        {
            "name": name,
            "arguments": args,
            "ok": ok,
            "destructive": name in DESTRUCTIVE_TOOLS,
            "result": str(result)[:_RESULT_PREVIEW],
        }
        for (name, args), (ok, result) in zip(writes, results, strict=True)
    ]
