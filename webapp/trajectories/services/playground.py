"""The verifier playground: one version, one task, one output -> the verdict and its trace.

Shared by the playground page and `POST /verifiers/{id}/versions/{v}/score`. The task is a
dataset task, a stored trajectory's task or pasted JSON; the output is pasted text (one
assistant turn), pasted turns, or a stored trajectory's turns. The verifier runs the way
runs and rescores run it (the registry's constructor with the version's config): python
code only inside the sandbox, with the version's time and memory limits, so code that
loops forever comes back as a verifier error after its timeout. Any failure is a verifier
error with no reward, never a reward of 0. Nothing is written to the database.

Everything here is hostile text (task, output, config, the verifier's own info): it is
only restructured, never marked safe; the templates escape it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from environments.parsing import calls_from_trajectory
from environments.types import Task as EnvTask
from environments.types import ToolSpec, VerifyResult
from environments.types import Trajectory as EnvTrajectory
from webapp.common.bounds import (
    JsonInputError,
    json_loads_bounded,
    json_problem,
    unstorable_text_reason,
)
from webapp.common.timeline import (
    CallPair,
    TurnView,
    expected_against_actual,
    pretty_json,
    state_diff_rows,
    turn_timeline,
)
from webapp.trajectories.services.verification import bucket_of
from webapp.verifiers.models import VerifierVersion
from webapp.verifiers.services.judge import build_verifier

MAX_OUTPUT_CHARS = 200_000
MAX_TASK_JSON_CHARS = 500_000
OUTPUT_FORMATS = ("auto", "text", "turns")
BUILT_IN_TRACE = ("json_tool_call", "workplace")


class InputError(ValueError):
    """A task or output that cannot be verified; `field` names the input it came from."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _checked_text(text: str, field: str, limit: int) -> str:
    if len(text) > limit:
        raise InputError(field, f"At most {limit:,} characters (this is {len(text):,}).")
    reason = unstorable_text_reason(text)
    if reason:
        raise InputError(field, f"This text {reason}.")
    return text


def task_from_data(data: Any, field: str = "task_json") -> EnvTask:
    """A task from a Crucible task object ({"messages", "tools", "ground_truth", ...})."""
    if not isinstance(data, dict):
        raise InputError(field, "A task is a JSON object with at least `messages`.")
    problem = json_problem(data)
    if problem:
        raise InputError(field, f"The task cannot be used: {problem}.")
    messages = data.get("messages", [])
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise InputError(field, "`messages` must be a list of chat messages ({\"role\", \"content\"}).")
    tools = data.get("tools") or []
    if not isinstance(tools, list):
        raise InputError(field, "`tools` must be a list of tool schemas.")
    for index, tool in enumerate(tools):
        try:
            ToolSpec.from_dict(tool)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise InputError(field, f"`tools[{index}]` is not a tool schema (it needs at least a `name`).") from None
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InputError(field, "`metadata` must be an object.")
    return EnvTask(id=str(data.get("id") or "playground")[:200], messages=messages, tools=tools,
                   ground_truth=data.get("ground_truth"), category=str(data.get("category") or "")[:64],
                   split=str(data.get("split") or "train")[:16], environment=str(data.get("environment") or "")[:64],
                   metadata=metadata)


def _loads(text: str, field: str, what: str) -> Any:
    """Pasted JSON, refused (never a RecursionError) when it nests too deep or holds NaN or Infinity."""
    try:
        return json_loads_bounded(text)
    except json.JSONDecodeError:
        raise
    except JsonInputError as exc:
        raise InputError(field, f"{what} cannot be used: {exc}.") from None


def task_from_json(text: str) -> EnvTask:
    _checked_text(text, "task_json", MAX_TASK_JSON_CHARS)
    try:
        data = _loads(text, "task_json", "The task")
    except json.JSONDecodeError as exc:
        raise InputError("task_json", f"Not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).") from None
    return task_from_data(data)


def task_of_row(task) -> EnvTask:
    """A dataset task row as the environments package sees it."""
    return EnvTask(id=task.external_id, messages=task.messages, tools=task.tools, ground_truth=task.ground_truth,
                   category=task.category, split=task.split, environment=task.dataset.environment,
                   metadata=task.metadata)


def _turns_from(value: Any) -> tuple[list[dict[str, Any]], bool] | None:
    """Turns from pasted JSON: a list of messages, or {"turns": [...], "truncated": bool}."""
    if isinstance(value, list) and value and all(isinstance(t, dict) and "role" in t for t in value):
        return value, False
    if isinstance(value, dict) and isinstance(value.get("turns"), list) \
            and all(isinstance(t, dict) for t in value["turns"]):
        return value["turns"], bool(value.get("truncated", False))
    return None


def trajectory_from_turns(turns: Any, *, truncated: bool = False, field: str = "turns") -> EnvTrajectory:
    """Turns given as JSON values (the API's `turns`)."""
    parsed = _turns_from(turns)
    if parsed is None:
        raise InputError(field, 'Turns are a list of chat messages ([{"role": "assistant", "content": "..."}]).')
    problem = json_problem(parsed[0])
    if problem:
        raise InputError(field, f"The turns cannot be used: {problem}.")
    return EnvTrajectory(turns=parsed[0], truncated=truncated or parsed[1])


def trajectory_from_output(output: str, fmt: str = "auto", *, truncated: bool = False) -> EnvTrajectory:
    """A pasted model output as a trajectory: raw text is one assistant turn; JSON turns are used as they are."""
    _checked_text(output, "output", MAX_OUTPUT_CHARS)
    if fmt not in OUTPUT_FORMATS:
        raise InputError("output_format", f"Choose one of {', '.join(OUTPUT_FORMATS)}.")
    if fmt in ("auto", "turns"):
        try:
            parsed = _turns_from(_loads(output, "output", "The output (read as JSON turns)"))
        except json.JSONDecodeError as exc:
            if fmt == "turns":
                raise InputError("output", f"Not valid JSON turns: {exc.msg} (line {exc.lineno}, "
                                           f"column {exc.colno}).") from None
            parsed = None
        if parsed is not None:
            turns, was_truncated = parsed
            problem = json_problem(turns)
            if problem:
                raise InputError("output", f"The turns cannot be used: {problem}.")
            return EnvTrajectory(turns=turns, truncated=truncated or was_truncated)
        if fmt == "turns":
            raise InputError("output", 'Turns are a JSON list of messages ([{"role": "assistant", "content": '
                                       '"..."}]) or {"turns": [...]}.')
    return EnvTrajectory.from_completion(output, truncated=truncated)


@dataclass
class PlaygroundResult:
    """The verdict with what the inspector shows of it."""

    result: VerifyResult
    kind: str
    duration_ms: float
    bucket: str = ""
    parse_source: str = ""  # "verifier" (its own parse) or "parser" (what the tool-call parser sees)
    parse_format: str | None = None
    parse_errors: list[dict] = field(default_factory=list)
    calls: list[CallPair] = field(default_factory=list)
    state_diff: list[dict] = field(default_factory=list)
    reward_parts: dict[str, float] = field(default_factory=dict)
    timeline: list[TurnView] = field(default_factory=list)
    sandbox: dict[str, Any] = field(default_factory=dict)
    info_json: str = ""

    @property
    def error(self) -> str:
        return self.result.error or ""

    @property
    def is_error(self) -> bool:
        return self.result.error is not None or self.result.reward is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "reward": self.result.reward, "passed": self.result.passed, "components": self.result.components,
            "failure_bucket": self.bucket or None, "flags": self.result.flags, "error": self.result.error,
            "parse": {"source": self.parse_source, "format": self.parse_format, "errors": self.parse_errors},
            "calls": [{"expected": p.expected, "actual": p.actual, "matches": p.matches,
                       "argument_diffs": p.argument_diffs} for p in self.calls],
            "state_diff": self.state_diff, "reward_parts": self.reward_parts, "sandbox": self.sandbox,
            "info": _plain(self.result.info), "duration_ms": round(self.duration_ms, 1),
        }


def _plain(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=str, allow_nan=False))
    except ValueError:
        return {"note": "the verifier's info held NaN or infinite numbers"}


def run_verifier(kind: str, config: dict[str, Any], task: EnvTask, trajectory: EnvTrajectory, *,
                 project) -> VerifyResult:
    """The verdict; anything that goes wrong is a verifier error with no reward (as verify_one does).

    `project`: whose secrets a judge may send (the verifier's own project, never the caller's choice).
    """
    try:
        return build_verifier(kind, config, project=project).verify(task, trajectory)
    except Exception as exc:  # a verifier bug must answer as an error, not a 500 and never a 0
        return VerifyResult.failure(f"{type(exc).__name__}: {exc}")


def score_output(version: VerifierVersion, task: EnvTask, trajectory: EnvTrajectory) -> PlaygroundResult:
    kind = version.verifier.kind
    started = time.monotonic()
    result = run_verifier(kind, version.config, task, trajectory, project=version.verifier.project)
    duration = (time.monotonic() - started) * 1000
    if result.error is not None:
        result.reward = None  # an error never carries a reward
    info = result.info if isinstance(result.info, dict) else {}
    out = PlaygroundResult(result=result, kind=kind, duration_ms=duration, bucket=bucket_of(result),
                           timeline=turn_timeline(trajectory.turns, task.tools or None),
                           sandbox=info.get("sandbox") if isinstance(info.get("sandbox"), dict) else {},
                           info_json=pretty_json(_plain(info)))
    parse = info.get("parse") if isinstance(info.get("parse"), dict) else None
    if parse is not None:
        out.parse_source = "verifier"
        out.parse_format = parse.get("format")
        out.parse_errors = [e for e in parse.get("errors") or [] if isinstance(e, dict)]
        actual = [c for c in parse.get("calls") or [] if isinstance(c, dict)]
    else:
        try:
            parsed = calls_from_trajectory(trajectory, task.tool_specs() or None)
        except Exception:  # noqa: BLE001 - a trace that cannot be drawn is not an error of the verdict
            parsed = None
        out.parse_source = "parser"
        if parsed is not None:
            out.parse_format = parsed.format
            out.parse_errors = [e.to_dict() for e in parsed.errors]
        actual = [c.to_dict() for c in parsed.calls] if parsed is not None else []
    expected = task.ground_truth if isinstance(task.ground_truth, list) else None
    out.calls = expected_against_actual(expected, actual)
    out.state_diff = state_diff_rows(info.get("state_diff") if isinstance(info.get("state_diff"), dict) else None)
    parts = info.get("reward_components")
    out.reward_parts = parts if isinstance(parts, dict) else {}
    return out
