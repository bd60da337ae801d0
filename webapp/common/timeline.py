"""What the inspector shows of one trajectory, computed from its stored JSON (no database).

A trajectory is hostile text: these functions only restructure it (which turn, which call,
which argument is missing or mistyped, which output answers which call); templates escape it.
Nothing here cuts content: long text is folded by the page, with a "show all".
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from environments.parsing import calls_from_message, value_has_type
from environments.types import ToolCall, ToolSpec

FOLD_CHARS = 1500


def as_text(content: Any) -> str:
    """A message's content as text: strings as they are, content parts joined, anything else as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        texts = [p.get("text") for p in content]
        if all(isinstance(t, str) for t in texts):
            return "".join(texts)
    return json.dumps(content, indent=2, ensure_ascii=False)


def request_text(messages: Any) -> str:
    """The last user message's text: what a task asks (its request), as the datasets, the playground and the
    sanity check's judging screen show it. Text parts of a list content are joined; anything else is ""."""
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and
                                isinstance(p.get("text"), str))
            return content if isinstance(content, str) else ""
    return ""


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@dataclass
class ArgumentCheck:
    """One argument of a call against the tool's schema: ok, extra (not in the schema), mistyped."""

    name: str
    value: str
    status: str = "ok"
    expected_type: str = ""


@dataclass
class CallView:
    index: int
    name: str
    arguments_json: str
    call_id: str | None
    known_tool: bool
    arguments: list[ArgumentCheck] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    @property
    def problems(self) -> int:
        return len(self.missing) + sum(a.status != "ok" for a in self.arguments) + (not self.known_tool)


@dataclass
class TurnView:
    index: int
    role: str
    text: str
    name: str = ""
    calls: list[CallView] = field(default_factory=list)
    parse_errors: list[dict] = field(default_factory=list)
    paired: bool = False
    from_task: bool = False

    @property
    def long(self) -> bool:
        return len(self.text) > FOLD_CHARS


def _types_of(schema: Any) -> list[str]:
    expected = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(expected, str):
        return [expected]
    return [t for t in expected if isinstance(t, str)] if isinstance(expected, list) else []


def check_call(call: ToolCall, tools: dict[str, ToolSpec], index: int) -> CallView:
    """The call with each argument marked against its tool's JSON schema."""
    spec = tools.get(call.name)
    view = CallView(index=index, name=call.name, arguments_json=pretty_json(call.arguments), call_id=call.call_id,
                    known_tool=spec is not None or not tools)
    schema = spec.parameters if spec is not None and isinstance(spec.parameters, dict) else {}
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    extras_allowed = schema.get("additionalProperties", not properties) not in (False, None)
    for name, value in call.arguments.items():
        check = ArgumentCheck(name=name, value=json.dumps(value, ensure_ascii=False))
        if spec is not None and name not in properties and not extras_allowed:
            check.status = "extra"
        elif name in properties:
            types = _types_of(properties[name])
            if types and not any(value_has_type(value, t) for t in types):
                check.status, check.expected_type = "mistyped", " or ".join(types)
        view.arguments.append(check)
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    view.missing = [name for name in required if name not in call.arguments]
    return view


def _tool_specs(tools: list[dict] | None) -> dict[str, ToolSpec]:
    specs: dict[str, ToolSpec] = {}
    for raw in tools or []:
        try:
            spec = ToolSpec.from_dict(raw)
        except (KeyError, TypeError, ValueError):
            continue
        specs[spec.name] = spec
    return specs


SCHEMA_CODES = frozenset({"unknown_tool", "unexpected_argument", "wrong_type", "missing_argument"})


def _shown_apart(code: str, call_index: int | None, calls: list[CallView]) -> bool:
    """Whether a parse error needs its own line: schema problems of a call are marked on its arguments."""
    if code == "no_tool_call":
        return not calls
    return not (code in SCHEMA_CODES and call_index is not None and calls)


def prompt_turns(turns: list[Any], task_messages: list[Any] | None) -> list[Any]:
    """The task's messages when the stored turns start after them (training stores only what the
    model and the tools said; production logs usually include the prompt)."""
    first = next((t for t in turns if isinstance(t, dict)), None)
    if not task_messages or (first is not None and first.get("role") in ("system", "user")):
        return []
    return [m for m in task_messages if isinstance(m, dict)]


def turn_timeline(turns: list[Any], tools: list[dict] | None, prompt: list[Any] | None = None) -> list[TurnView]:
    """Turns in order; each assistant call checked, and each tool output paired with its call.

    A tool turn answers the call with its `tool_call_id`, else the first unanswered call of
    the latest assistant turn (the order tools run in). Unpaired outputs stay in the timeline.
    `prompt` (see prompt_turns) is shown first, marked as coming from the task.
    """
    specs = _tool_specs(tools)
    views: list[TurnView] = [
        TurnView(index=-1 - i, role=str(m.get("role") or "?"), text=as_text(m.get("content")), from_task=True)
        for i, m in enumerate(prompt or [])
    ]
    pending: list[CallView] = []
    by_id: dict[str, CallView] = {}
    counter = 0
    for index, turn in enumerate(turns):
        if not isinstance(turn, dict):
            views.append(TurnView(index=index, role="?", text=as_text(turn)))
            continue
        role = str(turn.get("role") or "?")
        view = TurnView(index=index, role=role, text=as_text(turn.get("content")), name=str(turn.get("name") or ""))
        if role == "assistant":
            parsed = calls_from_message(turn, list(specs.values()) or None)
            view.calls = [check_call(call, specs, counter + i) for i, call in enumerate(parsed.calls)]
            counter += len(view.calls)
            view.parse_errors = [e.to_dict() for e in parsed.errors if _shown_apart(e.code, e.call_index, view.calls)]
            pending = list(view.calls)
            by_id.update({c.call_id: c for c in view.calls if c.call_id})
        elif role == "tool":
            target = by_id.get(str(turn.get("tool_call_id") or "")) or (pending[0] if pending else None)
            if target is not None:
                target.outputs.append(view.text)
                if target in pending:
                    pending.remove(target)
                view.paired = True
        views.append(view)
    return views


# --------------------------------------------------------------------------- the verifier's trace


@dataclass
class CallPair:
    """Expected (ground truth) and actual call at one position, and how they differ."""

    expected: dict | None
    actual: dict | None
    same_name: bool
    argument_diffs: list[dict]

    @property
    def matches(self) -> bool:
        return self.expected is not None and self.actual is not None and self.same_name and not self.argument_diffs


def argument_diffs(expected: dict, actual: dict) -> list[dict]:
    """Arguments that differ: only expected, only actual, or different values."""
    diffs = []
    for key in sorted(set(expected) | set(actual)):
        if key not in actual:
            diffs.append({"name": key, "kind": "missing", "expected": pretty_json(expected[key]), "actual": ""})
        elif key not in expected:
            diffs.append({"name": key, "kind": "extra", "expected": "", "actual": pretty_json(actual[key])})
        elif expected[key] != actual[key]:
            diffs.append({"name": key, "kind": "different", "expected": pretty_json(expected[key]),
                          "actual": pretty_json(actual[key])})
    return diffs


def expected_against_actual(expected: list[dict] | None, actual: list[dict]) -> list[CallPair]:
    """Ground-truth calls beside the model's, position by position."""
    pairs = []
    expected = [c for c in (expected or []) if isinstance(c, dict)]
    for i in range(max(len(expected), len(actual))):
        want = expected[i] if i < len(expected) else None
        got = actual[i] if i < len(actual) else None
        same = want is not None and got is not None and want.get("name") == got.get("name")
        diffs = argument_diffs(want.get("arguments") or {}, got.get("arguments") or {}) if want and got else []
        pairs.append(CallPair(expected=want, actual=got, same_name=same, argument_diffs=diffs))
    return pairs


def state_diff_rows(state_diff: dict | None) -> list[dict]:
    """The workplace end-state diff flattened to rows: table, row, field, expected, actual."""
    rows = []
    for table, entry in (state_diff or {}).items():
        if not isinstance(entry, dict):
            continue
        for change in entry.get("changed") or []:
            row_id = next((str(v) for k, v in change.items() if k != "columns"), "")
            for column, values in (change.get("columns") or {}).items():
                rows.append({"table": table, "row": row_id, "field": column, "kind": "changed",
                             "expected": pretty_json(values.get("expected")),
                             "actual": pretty_json(values.get("predicted"))})
        for kind, side in (("added", "actual"), ("removed", "expected")):
            for row in entry.get(kind) or []:
                text = pretty_json(row)
                rows.append({"table": table, "row": "", "field": "(whole row)", "kind": kind,
                             "expected": text if side == "expected" else "",
                             "actual": text if side == "actual" else ""})
    return rows


# --------------------------------------------------------------------------- two trajectories


@dataclass
class Segment:
    kind: str  # equal, removed (only in a), added (only in b)
    text: str


@dataclass
class TurnDiff:
    index: int
    role_a: str
    role_b: str
    segments: list[Segment]
    calls: list[CallPair]
    same: bool


def text_segments(a: str, b: str) -> list[Segment]:
    """A line-level diff of two texts as segments (escaped by the template, never built as HTML)."""
    lines_a, lines_b = a.splitlines(keepends=True), b.splitlines(keepends=True)
    segments = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=lines_a, b=lines_b, autojunk=False).get_opcodes():
        if tag == "equal":
            segments.append(Segment("equal", "".join(lines_a[i1:i2])))
            continue
        if i2 > i1:
            segments.append(Segment("removed", "".join(lines_a[i1:i2])))
        if j2 > j1:
            segments.append(Segment("added", "".join(lines_b[j1:j2])))
    return segments


def _call_dicts(view: TurnView | None) -> list[dict]:
    return [{"name": c.name, "arguments": json.loads(c.arguments_json)} for c in (view.calls if view else [])]


def trajectory_diff(turns_a: list[Any], turns_b: list[Any], tools: list[dict] | None) -> list[TurnDiff]:
    """Two trajectories turn by turn: text differences and calls whose name or arguments differ."""
    a, b = turn_timeline(turns_a, tools), turn_timeline(turns_b, tools)
    diffs = []
    for i in range(max(len(a), len(b))):
        left = a[i] if i < len(a) else None
        right = b[i] if i < len(b) else None
        text_a, text_b = (left.text if left else ""), (right.text if right else "")
        calls = expected_against_actual(_call_dicts(left), _call_dicts(right))
        same = left is not None and right is not None and left.role == right.role and text_a == text_b
        diffs.append(TurnDiff(index=i, role_a=left.role if left else "", role_b=right.role if right else "",
                              segments=text_segments(text_a, text_b), calls=calls,
                              same=same and all(c.matches for c in calls)))
    return diffs
