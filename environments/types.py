"""Value types shared by every environment, verifier and caller.

These are the boundary of the package: the web app stores them as JSON, the
training process emits them as events, the CLI reads and writes them as JSONL.
Each type therefore round-trips through `to_dict` / `from_dict` with plain JSON
values only.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class FailureBucket(StrEnum):
    """Why a trajectory failed: exactly one per failed trajectory (see failures.py)."""

    INVALID_JSON = "invalid_json"
    UNKNOWN_TOOL = "unknown_tool"
    WRONG_TOOL = "wrong_tool"
    WRONG_ARGUMENTS = "wrong_arguments"
    MISSING_CALL = "missing_call"
    EXTRA_WRITE = "extra_write"
    UNSAFE_ACTION = "unsafe_action"
    TRUNCATED = "truncated"
    NO_TOOL_CALL = "no_tool_call"
    VERIFIER_ERROR = "verifier_error"


_QUOTED = re.compile(r"'([^'\n]+)'")
_CLOSED_SET = re.compile(r"\b(available|one of|can be|must be|allowed|valid values)\b", re.IGNORECASE)


def allowed_values(schema: Any) -> list[Any] | None:
    """The values a tool parameter accepts, when its schema says so: `enum`, or a description
    that lists them in quotes ("Available fields are: 'task_name', 'due_date'").

    NeMo Gym's workplace tools give the choices for `field`, `status` or `plot_type` only in
    prose; a prompt that drops the prose leaves the model guessing field names it was never
    shown, so compact tool renderings keep these values.
    """
    if not isinstance(schema, dict):
        return None
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return list(schema["enum"])
    description = schema.get("description")
    if not isinstance(description, str) or not _CLOSED_SET.search(description):
        return None  # "e.g. 'Paris' or 'London'" are examples, not the only values
    quoted = _QUOTED.findall(description)
    return quoted if len(quoted) >= 2 else None


def describe_choices(schema: Any) -> str | None:
    """`"a"|"b"|"c"` for a parameter with allowed values, else None (compact tool lines)."""
    choices = allowed_values(schema)
    return "|".join(json.dumps(v, ensure_ascii=False) for v in choices) if choices else None


@dataclass(frozen=True)
class ToolSpec:
    """One tool an environment offers: an OpenAI-style function schema plus safety facts.

    `writes` is NeMo Gym's operation_type == "write"; `destructive` marks tools whose
    unrequested use counts as an unsafe action (deletes, sends).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    writes: bool = False
    destructive: bool = False

    def to_openai(self) -> dict[str, Any]:
        """The chat-completions `tools` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def to_responses(self) -> dict[str, Any]:
        """The Responses-API function entry, the way NeMo Gym task rows list tools."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "strict": False,
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolSpec:
        """Accept our own dicts, chat-completions tools and Responses-API tools."""
        if "function" in data:  # chat-completions {"type": "function", "function": {...}}
            fn = data["function"]
            data = {**fn, **{k: v for k, v in data.items() if k in ("writes", "destructive", "operation_type")}}
        writes = data.get("writes", data.get("operation_type") == "write")
        return cls(
            name=data["name"],
            description=data.get("description", ""),
            parameters=data.get("parameters") or {"type": "object", "properties": {}},
            writes=bool(writes),
            destructive=bool(data.get("destructive", False)),
        )


@dataclass(frozen=True)
class ToolCall:
    """A parsed call: a tool name and its arguments as a JSON object."""

    name: str
    arguments: dict[str, Any]
    call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "call_id": self.call_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        """Accept {"name", "arguments"} with arguments as an object or a JSON string."""
        import json

        args = data.get("arguments", {})
        if isinstance(args, str):
            args = json.loads(args) if args.strip() else {}
        return cls(name=data["name"], arguments=args, call_id=data.get("call_id"))


@dataclass
class Task:
    """One prompt with its tools and ground truth.

    messages: chat messages ({"role", "content"}) shown to the model.
    tools: ToolSpec dicts offered for this task.
    ground_truth: the expected calls, as ToolCall dicts (environment-specific for others).
    split: "train" | "validation" | "held_out".
    """

    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    ground_truth: Any = None
    category: str = ""
    split: str = "train"
    environment: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def tool_specs(self) -> list[ToolSpec]:
        return [ToolSpec.from_dict(t) for t in self.tools]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Trajectory:
    """What the model did on one task: the conversation after the prompt.

    turns: chat messages after the prompt. Assistant turns carry the raw model text
    in "content" (untrusted) and, when the producer already parsed them (OpenAI
    tool_calls, Responses function_call items), "tool_calls" as ToolCall dicts.
    Tool turns carry {"role": "tool", "tool_call_id", "content"}.
    truncated: generation hit max tokens before finishing.
    """

    turns: list[dict[str, Any]]
    truncated: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_completion(cls, text: str, *, truncated: bool = False) -> Trajectory:
        """A single-step trajectory: one assistant message with raw text."""
        return cls(turns=[{"role": "assistant", "content": text}], truncated=truncated)

    def assistant_turns(self) -> list[dict[str, Any]]:
        return [t for t in self.turns if t.get("role") == "assistant"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        return cls(
            turns=list(data.get("turns", [])),
            truncated=bool(data.get("truncated", False)),
            metadata=dict(data.get("metadata", {})),
        )


@dataclass
class VerifyResult:
    """A verifier's verdict.

    reward is None exactly when error is set: an infrastructure failure (sandbox
    killed, judge unreachable) must never be mistaken for a reward of 0.
    components: named shaped parts of the reward, each reported separately.
    info: details for the trajectory inspector (e.g. state diffs, parse errors).
    """

    reward: float | None
    passed: bool
    components: dict[str, float] = field(default_factory=dict)
    failure_bucket: FailureBucket | None = None
    flags: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def failure(cls, error: str, **info: Any) -> VerifyResult:
        """An infrastructure error: no reward, bucket verifier_error."""
        return cls(
            reward=None,
            passed=False,
            failure_bucket=FailureBucket.VERIFIER_ERROR,
            info=dict(info),
            error=error,
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["failure_bucket"] = str(self.failure_bucket) if self.failure_bucket else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VerifyResult:
        bucket = data.get("failure_bucket")
        return cls(
            reward=data.get("reward"),
            passed=bool(data.get("passed")),
            components=dict(data.get("components", {})),
            failure_bucket=FailureBucket(bucket) if bucket else None,
            flags=list(data.get("flags", [])),
            info=dict(data.get("info", {})),
            error=data.get("error"),
        )
