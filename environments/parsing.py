"""Tool-call parsing: turn untrusted model output into ToolCalls, or say precisely why not.

Tool-call format is the most common failure of small models, so the parser accepts every
syntax models actually emit and reports each problem with a stable code:

    not_json              the text meant to be a call is not valid JSON (single quotes, Python
                          dict repr, unquoted keys, ...)
    trailing_text         strict mode: text before or after the call(s)
    no_tool_call          no call-like text at all (prose only, empty output)
    unknown_tool          a call names a tool that is not offered
    unexpected_argument   an argument the tool's schema does not list
    missing_argument      a required argument is absent
    wrong_type            an argument has the wrong JSON type
    bad_shape             valid JSON, but not a tool call (no name, arguments flattened, ...)
    arguments_not_object  "arguments" is not an object nor a JSON string holding one
    truncated             the output ends inside the JSON (unclosed brace, string or tag)

Accepted syntaxes (`ParseResult.format`):

    json                     {"name": ..., "arguments": {...}}; also {"tool": ...},
                             {"function": {"name", "arguments"}}, {"name", "parameters"},
                             wrappers {"tool_call": {...}}; arguments as object or JSON string
    json_list                a JSON list of such calls
    fenced                   one or more ```json fenced blocks
    tool_call_tags           one or more <tool_call>...</tool_call> tags (Hermes / Qwen)
    openai_tool_calls        an OpenAI chat message (or any object) with "tool_calls"
    responses_function_call  Responses API output items of type "function_call"

Strict mode: the output must be exactly the call(s), whitespace allowed. Lenient mode: the
call(s) may sit inside surrounding prose. The parser never evaluates anything: json only,
with a bounded scanner (json.JSONDecoder.raw_decode) for objects embedded in prose, and it
never raises on any input.

`call_index` in an error is the 0-based position of the offending call among the call-like
items of the output, in order of appearance (it equals the index into `calls` unless an
earlier item was too malformed to become a call).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from environments.types import ToolCall, ToolSpec, Trajectory

MAX_INPUT_CHARS = 200_000
"""Longer outputs are rejected: no tool call is that long, and it bounds the scanner's work."""

MAX_SCAN_ATTEMPTS = 64
"""How many embedded '{' / '[' positions the lenient scanner tries to decode."""

ERROR_CODES = (
    "not_json",
    "trailing_text",
    "no_tool_call",
    "unknown_tool",
    "unexpected_argument",
    "missing_argument",
    "wrong_type",
    "bad_shape",
    "arguments_not_object",
    "truncated",
)

_NAME_KEYS = ("name", "tool", "tool_name")
_ARGUMENT_KEYS = ("arguments", "parameters", "args")
_ID_KEYS = ("id", "call_id")
_BOOKKEEPING_KEYS = frozenset({"id", "call_id", "type", "status", "index"})
_WRAPPER_KEYS = ("tool_call", "function_call")
_OPEN_TAG = "<tool_call>"
_CLOSE_TAG = "</tool_call>"
_FENCE = "```"
_JSON_FENCE_LANGUAGES = frozenset({"", "json", "jsonc", "json5", "tool_call", "tool_code"})

_decoder = json.JSONDecoder()


@dataclass
class ParseError:
    """One thing wrong with the output; `code` is one of ERROR_CODES."""

    code: str
    message: str
    call_index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "call_index": self.call_index}


@dataclass
class ParseResult:
    """The calls found, every problem found, and which syntax matched (None: none did)."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[ParseError] = field(default_factory=list)
    format: str | None = None
    text: str | None = None

    @property
    def ok(self) -> bool:
        return not self.errors and bool(self.calls)

    @property
    def first_error_code(self) -> str | None:
        return self.errors[0].code if self.errors else None

    def error_codes(self) -> list[str]:
        return [e.code for e in self.errors]

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": [c.to_dict() for c in self.calls],
            "errors": [e.to_dict() for e in self.errors],
            "format": self.format,
        }


# --------------------------------------------------------------------------- shapes


_Item = ToolCall | ParseError
"""One call-like item of the output: a call, or why it could not become one."""


def _decode_arguments(raw: Any, where: str) -> dict[str, Any] | ParseError:
    """Arguments come as an object or as a JSON string holding one (OpenAI style)."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            return ParseError(
                "arguments_not_object",
                f"{where}: arguments is a string that is not valid JSON ({exc}); "
                "give arguments as a JSON object",
            )
    if not isinstance(raw, dict):
        return ParseError(
            "arguments_not_object",
            f"{where}: arguments must be a JSON object, got {_json_type(raw)}",
        )
    return raw


def _call_id(obj: dict[str, Any]) -> str | None:
    for key in _ID_KEYS:
        value = obj.get(key)
        if isinstance(value, str):
            return value
    return None


def _call_from_function_wrapper(obj: dict[str, Any], fn: dict[str, Any]) -> _Item:
    """OpenAI chat style: {"id", "type": "function", "function": {"name", "arguments"}}."""
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        return ParseError("bad_shape", 'tool call "function" has no "name" string')
    args = _decode_arguments(_first_present(fn, _ARGUMENT_KEYS), f"call to {name!r}")
    if isinstance(args, ParseError):
        return args
    return ToolCall(name=name, arguments=args, call_id=_call_id(obj))


def _first_present(obj: dict[str, Any], keys: Iterable[str]) -> Any:
    for key in keys:
        if key in obj:
            return obj[key]
    return None


def _call_from_dict(obj: dict[str, Any]) -> _Item | None:
    """One call from a dict, a ParseError if it is call-like but broken, None if not call-like."""
    fn = obj.get("function")
    if isinstance(fn, dict):
        return _call_from_function_wrapper(obj, fn)
    name_key = next((k for k in _NAME_KEYS if k in obj), None)
    if name_key is None and isinstance(fn, str):
        name_key = "function"
    if name_key is None:
        return None
    name = obj[name_key]
    if not isinstance(name, str) or not name.strip():
        return ParseError("bad_shape", f'"{name_key}" must be a non-empty string naming the tool')
    arg_key = next((k for k in _ARGUMENT_KEYS if k in obj), None)
    if arg_key is None:
        stray = sorted(k for k in obj if k != name_key and k not in _BOOKKEEPING_KEYS)
        if stray:
            return ParseError(
                "bad_shape",
                f"call to {name!r} has keys {stray} beside the name; put the arguments "
                'in an "arguments" object',
            )
        return ToolCall(name=name, arguments={}, call_id=_call_id(obj))
    args = _decode_arguments(obj[arg_key], f"call to {name!r}")
    if isinstance(args, ParseError):
        return args
    return ToolCall(name=name, arguments=args, call_id=_call_id(obj))


def _items_from_sequence(values: list[Any]) -> list[_Item]:
    items: list[_Item] = []
    for value in values:
        item = _call_from_dict(value) if isinstance(value, dict) else None
        if item is None:
            item = ParseError("bad_shape", f"list element is not a tool call: {_preview(value)}")
        items.append(item)
    return items


def _is_responses_item(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("type"), str) and (
        value["type"] in ("function_call", "function_call_output", "message", "reasoning")
    )


def _items_from_responses(values: list[Any]) -> list[_Item]:
    """Responses API output: only function_call items are calls; messages etc. are skipped."""
    items: list[_Item] = []
    for value in values:
        if isinstance(value, dict) and value.get("type") == "function_call":
            items.append(_call_from_dict(value) or ParseError("bad_shape", "function_call without name"))
    return items


def interpret_json(value: Any) -> tuple[list[_Item], str | None]:
    """The call-like items in one decoded JSON value, and the syntax they used.

    Returns ([], None) when the value holds nothing call-like.
    """
    if isinstance(value, list):
        if value and all(_is_responses_item(v) for v in value):
            return _items_from_responses(value), "responses_function_call"
        if not any(isinstance(v, dict) and _call_from_dict(v) is not None for v in value):
            return [], None
        return _items_from_sequence(value), "json_list"
    if not isinstance(value, dict):
        return [], None
    if isinstance(value.get("tool_calls"), list):
        return _items_from_sequence(value["tool_calls"]), "openai_tool_calls"
    if value.get("object") == "response" or (
        isinstance(value.get("output"), list) and all(_is_responses_item(v) for v in value["output"])
    ):
        return _items_from_responses(value.get("output") or []), "responses_function_call"
    if value.get("type") == "function_call":
        return _items_from_responses([value]), "responses_function_call"
    for key in _WRAPPER_KEYS:
        if isinstance(value.get(key), dict):
            inner = _call_from_dict(value[key])
            if inner is not None:
                return [inner], "json"
    item = _call_from_dict(value)
    return ([item], "json") if item is not None else ([], None)


# --------------------------------------------------------------------------- syntaxes


@dataclass
class _Extraction:
    """What one syntax found: items in order, decoding errors, and the text spans it consumed."""

    items: list[_Item] = field(default_factory=list)
    errors: list[ParseError] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    format: str | None = None
    non_call_json: list[Any] = field(default_factory=list)


def _decode_error(exc: Exception, snippet: str, what: str) -> ParseError:
    """not_json, or truncated when the JSON was still open at the end of the text."""
    pos = getattr(exc, "pos", None)
    at_end = pos is not None and pos >= len(snippet.rstrip())
    if isinstance(exc, json.JSONDecodeError) and (at_end or exc.msg.startswith("Unterminated string")):
        return ParseError("truncated", f"{what} ends before the JSON is closed ({exc.msg})")
    if isinstance(exc, RecursionError):
        return ParseError("not_json", f"{what} is nested too deeply to be a tool call")
    detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
    hint = ""
    if pos is not None and snippet[pos : pos + 1] == "'":
        hint = "; JSON needs double quotes (this looks like a Python dict)"
    return ParseError("not_json", f"{what} is not valid JSON: {detail} at char {pos}{hint}")


def _decode_block(block: str, start: int, end: int, what: str, ex: _Extraction) -> None:
    """Decode one delimited block (tag or fence body) into `ex`."""
    body = block.strip()
    if body.startswith(_FENCE):  # a fence inside a tag
        body = _strip_fence(body)
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:
        ex.errors.append(_decode_error(exc, body, what))
        ex.spans.append((start, end))
        return
    items, _ = interpret_json(value)
    if not items:
        ex.non_call_json.append(value)
    ex.items.extend(items)
    ex.spans.append((start, end))


def _strip_fence(body: str) -> str:
    first_newline = body.find("\n")
    inner = body[first_newline + 1 :] if first_newline >= 0 else body[3:]
    return inner[: inner.rfind(_FENCE)] if inner.rstrip().endswith(_FENCE) else inner


def _extract_tags(text: str) -> _Extraction:
    """<tool_call>...</tool_call> blocks; an unclosed last tag runs to the end of the text."""
    ex = _Extraction(format="tool_call_tags")
    pos = 0
    while True:
        start = text.find(_OPEN_TAG, pos)
        if start < 0:
            return ex
        body_start = start + len(_OPEN_TAG)
        close = text.find(_CLOSE_TAG, body_start)
        end = len(text) if close < 0 else close + len(_CLOSE_TAG)
        body = text[body_start : len(text) if close < 0 else close]
        what = f"<tool_call> block {len(ex.spans) + 1}"
        before = len(ex.errors)
        _decode_block(body, start, end, what, ex)
        if close < 0 and len(ex.errors) > before and ex.errors[-1].code == "not_json":
            ex.errors[-1] = ParseError("truncated", f"{what} is never closed and its JSON is incomplete")
        pos = end


def _fence_language(text: str, after_ticks: int) -> tuple[str, int]:
    """The info string after ``` and the index where the block body starts."""
    newline = text.find("\n", after_ticks)
    line_end = len(text) if newline < 0 else newline
    return text[after_ticks:line_end].strip().lower(), min(line_end + 1, len(text))


def _extract_fences(text: str) -> _Extraction:
    """```json blocks (and bare ``` blocks whose body looks like JSON)."""
    ex = _Extraction(format="fenced")
    pos = 0
    while True:
        start = text.find(_FENCE, pos)
        if start < 0:
            return ex
        language, body_start = _fence_language(text, start + 3)
        close = text.find(_FENCE, body_start)
        end = len(text) if close < 0 else close + 3
        body = text[body_start : len(text) if close < 0 else close]
        looks_json = body.lstrip()[:1] in ("{", "[")
        if language in _JSON_FENCE_LANGUAGES and (looks_json or language):
            what = f"fenced block {len(ex.spans) + 1}"
            before = len(ex.errors)
            _decode_block(body, start, end, what, ex)
            if close < 0 and len(ex.errors) > before:
                ex.errors[-1] = ParseError("truncated", f"{what} is never closed and its JSON is incomplete")
        pos = end


def _next_candidate(text: str, pos: int) -> int:
    brace, bracket = text.find("{", pos), text.find("[", pos)
    if brace < 0:
        return bracket
    if bracket < 0:
        return brace
    return min(brace, bracket)


def _scan_embedded(text: str) -> _Extraction:
    """JSON values embedded in prose, found with raw_decode at '{' / '[' positions (bounded)."""
    ex = _Extraction()
    first_error: ParseError | None = None
    pos, attempts = 0, 0
    while attempts < MAX_SCAN_ATTEMPTS:
        start = _next_candidate(text, pos)
        if start < 0:
            break
        attempts += 1
        try:
            value, end = _decoder.raw_decode(text, start)
        except (ValueError, RecursionError) as exc:
            if first_error is None and text[start] == "{":
                first_error = _decode_error(exc, text, "the output")
            pos = start + 1
            continue
        items, fmt = interpret_json(value)
        if items:
            ex.items.extend(items)
            ex.spans.append((start, end))
            ex.format = ex.format or fmt
        elif isinstance(value, dict):
            ex.non_call_json.append(value)
        pos = end
    if not ex.items and first_error is not None:
        ex.errors.append(first_error)
    return ex


# --------------------------------------------------------------------------- validation


_JSON_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def value_has_type(value: Any, json_type: str) -> bool:
    """JSON Schema type check: integer accepts 3 and 3.0 but not 3.5 or true."""
    actual = _json_type(value)
    if json_type == actual:
        return True
    if json_type == "number":
        return actual == "integer"
    if json_type == "integer":
        return actual == "number" and float(value).is_integer()
    return json_type not in _JSON_TYPES  # unknown type names are not ours to enforce


def validate_call(call: ToolCall, tools_by_name: dict[str, ToolSpec], index: int) -> list[ParseError]:
    """Schema problems of one call: unknown tool, or argument names, presence and types."""
    spec = tools_by_name.get(call.name)
    if spec is None:
        offered = ", ".join(sorted(tools_by_name)) or "none"
        return [ParseError("unknown_tool", f"unknown tool {call.name!r}; offered: {offered}", index)]
    schema = spec.parameters if isinstance(spec.parameters, dict) else {}
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    extras_allowed = schema.get("additionalProperties", not properties) not in (False, None)
    errors: list[ParseError] = []
    for name, value in call.arguments.items():
        prop = properties.get(name)
        if prop is None:
            if not extras_allowed:
                errors.append(ParseError(
                    "unexpected_argument",
                    f"{call.name}: argument {name!r} is not in the schema; allowed: {sorted(properties)}",
                    index,
                ))
            continue
        expected = prop.get("type") if isinstance(prop, dict) else None
        types = [expected] if isinstance(expected, str) else expected
        if isinstance(types, list) and types and not any(value_has_type(value, t) for t in types):
            errors.append(ParseError(
                "wrong_type",
                f"{call.name}: argument {name!r} should be {' or '.join(map(str, types))}, "
                f"got {_json_type(value)} {_preview(value)}",
                index,
            ))
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    for name in required:
        if name not in call.arguments:
            errors.append(ParseError(
                "missing_argument", f"{call.name}: required argument {name!r} is missing", index
            ))
    return errors


def _tools_by_name(tools: Sequence[ToolSpec] | None) -> dict[str, ToolSpec] | None:
    if tools is None:
        return None
    return {t.name: t for t in tools}


# --------------------------------------------------------------------------- public API


def _finish(
    ex: _Extraction, text: str | None, tools: dict[str, ToolSpec] | None
) -> ParseResult:
    """Turn an extraction into a result: number the items, validate calls, collect errors."""
    result = ParseResult(format=ex.format if ex.items else None, text=text)
    result.errors.extend(ex.errors)
    for index, item in enumerate(ex.items):
        if isinstance(item, ParseError):
            item.call_index = index
            result.errors.append(item)
            continue
        result.calls.append(item)
        if tools is not None:
            result.errors.extend(validate_call(item, tools, index))
    if not ex.items and not ex.errors:
        if ex.non_call_json:
            result.errors.append(ParseError(
                "bad_shape",
                f"the output is JSON but not a tool call: {_preview(ex.non_call_json[0])}; "
                'expected {"name": ..., "arguments": {...}}',
            ))
        else:
            result.errors.append(ParseError(
                "no_tool_call", "the output contains no tool call (no JSON object, tag or fence)"
            ))
    return result


def _leftover_text(text: str, spans: list[tuple[int, int]]) -> str:
    pieces, pos = [], 0
    for start, end in sorted(spans):
        pieces.append(text[pos:start])
        pos = max(pos, end)
    pieces.append(text[pos:])
    return "".join(pieces).strip()


def _extract(text: str) -> _Extraction:
    """Try each syntax in order of specificity; the first that finds anything wins."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            value = json.loads(stripped)
        except (ValueError, RecursionError):
            value = None
        else:
            items, fmt = interpret_json(value)
            start = text.index(stripped[0])
            return _Extraction(
                items=items, format=fmt, spans=[(start, start + len(stripped))],
                non_call_json=[] if fmt else [value],
            )
    if _OPEN_TAG in text:
        ex = _extract_tags(text)
        if ex.items or ex.errors:
            return ex
    if _FENCE in text:
        ex = _extract_fences(text)
        if ex.items or ex.errors:
            return ex
    return _scan_embedded(text)


def parse_tool_calls(
    text: str,
    tools: Sequence[ToolSpec] | None = None,
    *,
    mode: Literal["strict", "lenient"] = "lenient",
) -> ParseResult:
    """Every tool call in a model's output, validated against `tools` when given.

    Never raises on any text: anything unusable becomes a ParseError (see the module
    docstring). Only a `mode` other than "strict" / "lenient" (a caller bug) raises.
    """
    if mode not in ("strict", "lenient"):
        raise ValueError(f"mode must be 'strict' or 'lenient', got {mode!r}")
    if not isinstance(text, str):
        return ParseResult(errors=[ParseError(
            "no_tool_call", f"expected the model output as text, got {type(text).__name__}"
        )])
    if len(text) > MAX_INPUT_CHARS:
        return ParseResult(text=text[:200], errors=[ParseError(
            "not_json",
            f"the output is {len(text)} characters, over the parser's limit of "
            f"{MAX_INPUT_CHARS}; a tool call is never that long",
        )])
    ex = _extract(text)
    result = _finish(ex, text, _tools_by_name(tools))
    if mode == "strict" and ex.items:
        extra = _leftover_text(text, ex.spans)
        if extra:
            result.errors.insert(0, ParseError(
                "trailing_text",
                f"strict mode: the output must be only the tool call, but it also has "
                f"text {_preview(extra)}",
            ))
    return result


def _message_text(content: Any) -> str | None:
    """Chat content as text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return None


def calls_from_message(
    message: dict[str, Any],
    tools: Sequence[ToolSpec] | None = None,
    *,
    mode: Literal["strict", "lenient"] = "lenient",
) -> ParseResult:
    """The calls of one assistant message: its structured tool_calls, else its parsed content."""
    if not isinstance(message, dict):
        return ParseResult(errors=[ParseError(
            "bad_shape", f"expected an assistant message object, got {type(message).__name__}"
        )])
    structured = message.get("tool_calls")
    if isinstance(structured, list) and structured:
        ex = _Extraction(items=_items_from_sequence(structured), format="openai_tool_calls")
        return _finish(ex, None, _tools_by_name(tools))
    text = _message_text(message.get("content"))
    return parse_tool_calls(text if text is not None else "", tools, mode=mode)


def calls_from_trajectory(
    trajectory: Trajectory,
    tools: Sequence[ToolSpec] | None = None,
    *,
    mode: Literal["strict", "lenient"] = "lenient",
) -> ParseResult:
    """All calls of all assistant turns, in order, with every turn's errors.

    A turn without any call (a final prose answer) is normal in a multi-turn episode, so
    per-turn no_tool_call errors only surface when the whole trajectory has no call.
    """
    combined = ParseResult(text=None)
    offset = 0
    for turn in trajectory.assistant_turns():
        part = calls_from_message(turn, tools, mode=mode)
        for error in part.errors:
            if error.code == "no_tool_call":
                continue
            if error.call_index is not None:
                error.call_index += offset
            combined.errors.append(error)
        combined.calls.extend(part.calls)
        combined.format = combined.format or part.format
        offset += _item_count(part)
    if not combined.calls and not combined.errors:
        combined.errors.append(ParseError("no_tool_call", "no assistant turn contains a tool call"))
    if trajectory.truncated and not combined.calls:
        combined.errors.insert(0, ParseError(
            "truncated", "generation hit the token limit before any tool call was complete"
        ))
    return combined


def _item_count(part: ParseResult) -> int:
    """Call-like items in one turn: its calls plus the items too malformed to be calls."""
    broken = {
        e.call_index for e in part.errors
        if e.code in _SHAPE_CODES and e.call_index is not None
    }
    return len(part.calls) + len(broken)


_SHAPE_CODES = frozenset({"bad_shape", "arguments_not_object"})


def _preview(value: Any, limit: int = 80) -> str:
    """A short quoted rendering of a value for error messages."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, default=str)
        except (ValueError, RecursionError):
            text = f"<{_json_type(value)}>"
    return repr(text if len(text) <= limit else text[:limit] + "...")
