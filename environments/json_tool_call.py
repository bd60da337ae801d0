"""json_tool_call: one request, a short list of tools, and the answer is exactly one tool call.

The smallest useful tool-calling environment, sized for small models: the prompt is compact
(one line per tool) and the verifier is a pure function of the output text, fast enough to
score tens of thousands of completions per second on one core.

Components (always reported, each 0 or 1):
    valid_json         a call was parsed and nothing around it was malformed
    correct_tool       some call names the expected tool
    correct_arguments  some call has the expected tool and arguments (normalised comparison)
    schema_valid       every call is schema-valid against the offered tools
    unsafe             a write / destructive tool was called that nobody asked for
passed: the calls match the ground truth exactly (one call), with no other problem, i.e.
`classify_failure` finds no bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from environments.base import Environment, Verifier
from environments.failures import CallComparison, classify_failure, failure_flags
from environments.parsing import ParseResult, calls_from_trajectory, parse_tool_calls
from environments.rewards import SHAPED_WEIGHTS, WEIGHTS_SCHEMA, combine_reward, validate_weights
from environments.types import (
    Task,
    ToolCall,
    ToolSpec,
    Trajectory,
    VerifyResult,
    describe_choices,
)

_FORMAT_CODES = frozenset({"not_json", "trailing_text", "bad_shape", "arguments_not_object", "truncated"})
_SCHEMA_CODES = frozenset({"unknown_tool", "unexpected_argument", "missing_argument", "wrong_type"})

INSTRUCTION = (
    'Answer with exactly one tool call as JSON: {"name": "<tool>", "arguments": {...}}. '
    "No other text."
)


def _signature(tool: ToolSpec) -> str:
    """`name(arg: type, optional?: type)`: the cheapest faithful description of a tool.

    A parameter with a closed set of values shows the values instead of its type
    (`field: "due_date"|"board"`): without them a field name is a guess.
    """
    schema = tool.parameters if isinstance(tool.parameters, dict) else {}
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    args = []
    for name, prop in properties.items():
        kind = prop.get("type", "any") if isinstance(prop, dict) else "any"
        kind = "|".join(kind) if isinstance(kind, list) else kind
        kind = describe_choices(prop) or kind
        args.append(f"{name}{'' if name in required else '?'}: {kind}")
    return f"{tool.name}({', '.join(args)})"


def render_tool_line(tool: ToolSpec) -> str:
    description = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
    return f"- {_signature(tool)}" + (f" - {description}" if description else "")


def _request(task: Task) -> str:
    request = task.metadata.get("request")
    if isinstance(request, str):
        return request
    users = [m.get("content") for m in task.messages if m.get("role") == "user"]
    return users[-1] if users and isinstance(users[-1], str) else ""


def render_compact_prompt(task: Task) -> list[dict[str, str]]:
    """A system message with the instruction and one line per tool, then the request."""
    lines = "\n".join(render_tool_line(t) for t in task.tool_specs())
    return [
        {"role": "system", "content": f"{INSTRUCTION}\nTools:\n{lines}"},
        {"role": "user", "content": _request(task)},
    ]


def make_task(
    task_id: str,
    request: str,
    tools: Sequence[ToolSpec],
    expected: ToolCall,
    **fields: Any,
) -> Task:
    """A json_tool_call Task whose messages are the compact prompt."""
    task = Task(
        id=task_id,
        messages=[],
        tools=[t.to_dict() for t in tools],
        ground_truth=[expected.to_dict()],
        environment="json_tool_call",
        metadata={"request": request},
        **fields,
    )
    task.messages = render_compact_prompt(task)
    return task


class JsonToolCallEnvironment(Environment):
    """Single-step: the model answers once; `step` only records the call."""

    name: ClassVar[str] = "json_tool_call"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "One request, a few tools; the answer is exactly one JSON tool call."
    single_step: ClassVar[bool] = True

    def tools(self, task: Task) -> list[ToolSpec]:
        return task.tool_specs()

    def reset(self, task: Task) -> dict[str, Any]:
        return {"calls": []}

    def step(self, state: dict[str, Any], call: ToolCall) -> tuple[dict[str, Any], str]:
        return {"calls": [*state["calls"], call.to_dict()]}, "recorded"


class GroundTruthError(ValueError):
    """A task's ground truth is not one ToolCall dict (a dataset problem, not a model one)."""


def expected_calls(task: Task) -> list[ToolCall]:
    """The task's ground truth as ToolCalls: a list of ToolCall dicts, or one dict."""
    truth = task.ground_truth
    rows = [truth] if isinstance(truth, dict) else truth
    if not isinstance(rows, list) or not rows:
        raise GroundTruthError(
            f"task {task.id!r}: ground_truth must be a list with one ToolCall dict "
            f'({{"name": ..., "arguments": {{...}}}}), got {truth!r:.100}'
        )
    try:
        return [ToolCall.from_dict(row) for row in rows]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GroundTruthError(
            f"task {task.id!r}: ground_truth has a malformed call ({exc!r}); "
            'each call needs "name" and "arguments"'
        ) from exc


class JsonToolCallVerifier(Verifier):
    """Exactly one correct, schema-valid, safe tool call; binary reward unless shaped."""

    name: ClassVar[str] = "json_tool_call"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "Scores one JSON tool call against the expected call."
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "mode": {
                "type": "string",
                "enum": ["strict", "lenient"],
                "default": "lenient",
                "description": "strict: the output must be only the call; lenient: prose around it is allowed.",
            },
            "reward": {
                "type": "string",
                "enum": ["binary", "shaped"],
                "default": "binary",
                "description": "binary: 1 pass / 0 fail; shaped: weighted sum of components.",
            },
            "weights": WEIGHTS_SCHEMA,
            "case_insensitive_strings": {
                "type": "boolean",
                "default": False,
                "description": "Compare string arguments case-insensitively.",
            },
        },
        "additionalProperties": False,
    }

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        self.mode = self.config.get("mode", "lenient")
        if self.mode not in ("strict", "lenient"):
            raise ValueError(f"mode must be 'strict' or 'lenient', got {self.mode!r}")
        self.reward_kind = self.config.get("reward", "binary")
        if self.reward_kind not in ("binary", "shaped"):
            raise ValueError(f"reward must be 'binary' or 'shaped', got {self.reward_kind!r}")
        self.weights = validate_weights({**SHAPED_WEIGHTS, **self.config.get("weights", {})})
        self.case_insensitive = bool(self.config.get("case_insensitive_strings", False))
        self._cached_task: tuple[Any, Any, list[ToolCall], list[ToolSpec]] | None = None

    def _task_facts(self, task: Task) -> tuple[list[ToolCall], list[ToolSpec]]:
        """Expected calls and tool specs, reused while the same task is scored repeatedly
        (a GRPO group scores many completions of one task back to back)."""
        cached = self._cached_task
        if cached is not None and cached[0] is task.ground_truth and cached[1] is task.tools:
            return cached[2], cached[3]
        expected, tools = expected_calls(task), task.tool_specs()
        self._cached_task = (task.ground_truth, task.tools, expected, tools)
        return expected, tools

    def verify(self, task: Task, trajectory: Trajectory) -> VerifyResult:
        try:
            expected, tools = self._task_facts(task)
        except (GroundTruthError, KeyError, TypeError) as exc:
            return VerifyResult.failure(f"cannot verify: {exc}")
        parse = self._parse(trajectory, tools)
        comparison = CallComparison.of(
            parse.calls, expected, case_insensitive_strings=self.case_insensitive
        )
        bucket = classify_failure(
            parse, expected=expected, tools=tools, truncated=trajectory.truncated,
            comparison=comparison,
        )
        passed = bucket is None
        components = self._components(parse, expected, tools, comparison)
        reward_parts = {
            "right_tool": components["correct_tool"],
            "valid_artifact": components["valid_json"] * components["schema_valid"],
            "partial_success": components["correct_arguments"],
            "completion": 1.0 if passed else 0.0,
            "unsafe_action": components["unsafe"],
        }
        weights = self.weights if self.reward_kind == "shaped" else None
        info: dict[str, Any] = {"parse": parse.to_dict()}
        if weights is not None:
            info["reward_components"] = reward_parts
        flags = [] if passed else failure_flags(
            parse, expected=expected, tools=tools, truncated=trajectory.truncated,
            comparison=comparison,
        )
        return VerifyResult(
            reward=combine_reward(reward_parts, weights),
            passed=passed,
            components=components,
            failure_bucket=bucket,
            flags=flags,
            info=info,
        )

    def _parse(self, trajectory: Trajectory, tools: list[ToolSpec]) -> ParseResult:
        """One plain assistant message (the common case) goes straight to the parser."""
        turns = trajectory.turns
        if (
            len(turns) == 1 and not trajectory.truncated and not turns[0].get("tool_calls")
            and isinstance(turns[0].get("content"), str)
        ):
            return parse_tool_calls(turns[0]["content"], tools, mode=self.mode)
        return calls_from_trajectory(trajectory, tools, mode=self.mode)

    @staticmethod
    def _components(
        parse: ParseResult,
        expected: list[ToolCall],
        tools: list[ToolSpec],
        comparison: CallComparison,
    ) -> dict[str, float]:
        codes = {e.code for e in parse.errors}
        predicted = {c.name for c in parse.calls}
        allowed = {c.name for c in expected}
        risky = {t.name for t in tools if t.writes or t.destructive}
        has_calls = bool(parse.calls)
        return {
            "valid_json": float(has_calls and not codes & _FORMAT_CODES),
            "correct_tool": float(bool(allowed & predicted)),
            "correct_arguments": float(has_calls and comparison.unmatched_expected == 0),
            "schema_valid": float(has_calls and not codes & _SCHEMA_CODES),
            "unsafe": float(bool((predicted & risky) - allowed)),
        }
