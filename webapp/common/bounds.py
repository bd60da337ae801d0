"""Input bounds, declared once: every API schema (and every page form) builds on these types.

The database is the last place a bad value should be found. PostgreSQL refuses a NUL
character in text and JSON, a lone UTF-16 surrogate is not UTF-8 at all, integer
columns hold 32 or 64 bits, and a varchar has its length: each of those used to come
back as a 500. Here they are refused at the boundary with a 422 that names the field.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints

INT32_MAX = 2**31 - 1
BIGINT_MAX = 2**63 - 1
BIGINT_MIN = -(2**63)
# How deep a JSON value sent by a client may nest (Django limits the body's size already).
MAX_JSON_DEPTH = 64


def unstorable_text_reason(text: str) -> str | None:
    """Why the database cannot store `text` (a NUL, a lone surrogate), or None when it can."""
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which cannot be stored; remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate (e.g. \\ud800), which is not valid Unicode; send valid UTF-8"
    return None


def clean_text(text: str) -> str:
    """A pydantic validator: the text unchanged, or a ValueError that says what to fix."""
    reason = unstorable_text_reason(text)
    if reason:
        raise ValueError(f"text {reason}")
    return text


def _json_problem(value: Any, path: str, depth: int) -> str | None:
    if depth > MAX_JSON_DEPTH:
        return f"{path or 'value'} nests deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, str):
        reason = unstorable_text_reason(value)
        return f"{path or 'value'} {reason}" if reason else None
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return None
    if isinstance(value, int):
        return None if BIGINT_MIN <= value <= BIGINT_MAX else f"{path or 'value'} is an integer beyond 64 bits"
    if isinstance(value, dict):
        for key, item in value.items():
            reason = _json_problem(key, f"{path}[key {key!r}]", depth + 1) if isinstance(key, str) else None
            reason = reason or _json_problem(item, f"{path}.{key}" if path else str(key), depth + 1)
            if reason:
                return reason
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            reason = _json_problem(item, f"{path}[{index}]", depth + 1)
            if reason:
                return reason
    return None


def json_problem(value: Any) -> str | None:
    """What in a JSON value the database cannot store, with its path inside the value, or None."""
    return _json_problem(value, "", 0)


def clean_json(value: Any) -> Any:
    """A pydantic validator for free-form JSON (turns, metadata, payloads, configs)."""
    reason = json_problem(value)
    if reason:
        raise ValueError(reason)
    return value


# What clean_text enforces, as the OpenAPI document states it: no NUL. Documented only; clean_text
# is what refuses, with its own message. Lone surrogates are refused too but cannot be written in
# a pattern JSON Schema validators compile (they match code points, and a surrogate is not one).
STORABLE_TEXT_PATTERN = r"^[^\u0000]*$"
STORABLE_TEXT_SCHEMA = Field(json_schema_extra={"pattern": STORABLE_TEXT_PATTERN})


def Text(max_length: int, *, min_length: int = 0) -> Any:  # noqa: N802 - reads like a type
    """A string that fits a varchar(max_length) column and can be stored."""
    return Annotated[
        str, StringConstraints(min_length=min_length, max_length=max_length), AfterValidator(clean_text),
        STORABLE_TEXT_SCHEMA,
    ]


def Choice(*values: str) -> Any:  # noqa: N802 - reads like a type
    """A string that must be one of `values` ("" among them where it means "none"), stated as an enum.

    The document states the rule; the view or service still refuses other values, with its own
    message naming the allowed ones (so a page and the API say the same thing).
    """
    return Annotated[str, StringConstraints(max_length=max(len(v) for v in values)), AfterValidator(clean_text),
                     Field(json_schema_extra={"enum": list(values)})]


def Documented(max_length: int, pattern: str, *, min_length: int = 0) -> Any:  # noqa: N802 - reads like a type
    """Text(max_length) whose form is checked by the code that reads it; `pattern` states that form."""
    return Annotated[str, StringConstraints(min_length=min_length, max_length=max_length),
                     AfterValidator(clean_text), Field(json_schema_extra={"pattern": pattern})]


# Query values read as text and parsed later (the trajectory filters): what those parsers accept.
YES_NO = ("", "yes", "no", "true", "false", "1", "0", "any")
WHOLE_NUMBER_TEXT = r"^(\s*\+?0*[0-9]{1,9}\s*)?$"  # 0 .. 999,999,999 (the parsers take up to 2**31 - 1)
NUMBER_TEXT = r"^(\s*[+-]?([0-9]{1,20}(\.[0-9]{0,15})?|\.[0-9]{1,15})([eE][+-]?[0-9]{1,2})?\s*)?$"  # finite
# A name that is not only spaces (services strip it), storable.
NAME_PATTERN = r"^[^\u0000]*[^\u0000\s][^\u0000]*$"
CURSOR_PATTERN = r"^[A-Za-z0-9_=-]*$"  # URL-safe base64, as webapp.common.pagination makes it


def CursorText(max_length: int = 2000) -> Any:  # noqa: N802 - reads like a type
    """An `after` cursor: opaque, made by the list it continues (only its alphabet can be stated)."""
    return Documented(max_length, CURSOR_PATTERN)


Cursor = CursorText()


# Free text without a column length (notes, reasons): bounded so one request cannot be huge.
LongText = Annotated[str, StringConstraints(max_length=100_000), AfterValidator(clean_text), STORABLE_TEXT_SCHEMA]
JsonObject = Annotated[dict[str, Any], AfterValidator(clean_json)]
JsonList = Annotated[list[Any], AfterValidator(clean_json)]
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]  # PositiveIntegerField
RowId = Annotated[int, Field(ge=1, le=BIGINT_MAX)]  # BigAutoField primary keys
Offset = Annotated[int, Field(ge=0, le=BIGINT_MAX)]
Step = Annotated[int, Field(ge=-(2**31), le=INT32_MAX)]  # IntegerField
Milliseconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Ratio = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def text_field_problem(label: str, text: str, max_length: int) -> str | None:
    """What is wrong with `text` for a form field called `label` (unstorable, or too long), or None."""
    reason = unstorable_text_reason(text)
    if reason:
        return f"The {label} {reason}."
    if len(text) > max_length:
        return f"The {label} is {len(text)} characters long; at most {max_length} are allowed."
    return None


# -- JSON as text from a client: numbers JSON can carry, nesting a stack can walk ----------------


class JsonInputError(ValueError):
    """JSON text that parses (or nearly) but cannot be accepted: `path` says where, `reason` what.

    `path` is dotted like pydantic's error locations (`trajectories.0.latency_ms`), "" for the
    whole value, so API answers name the field the same way whichever check refused it.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class _Unrepresentable:
    """Stands in, while parsing, for a number JSON cannot carry (NaN, Infinity, 1e400)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_float(text: str) -> float | _Unrepresentable:
    value = float(text)
    return value if math.isfinite(value) else _Unrepresentable(text)


def _child_path(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _short(path: str, parts: int = 8) -> str:
    """A path cut to its first `parts` steps: enough to find the field, not 64 levels of `0.0.0`."""
    steps = path.split(".")
    return path if len(steps) <= parts else ".".join(steps[:parts]) + ".…"


def _walk(value: Any):
    """(path, depth, value) for `value` and everything inside it; iterative, so any depth is safe."""
    stack: list[tuple[str, int, Any]] = [("", 0, value)]
    while stack:
        path, depth, item = stack.pop()
        yield path, depth, item
        if isinstance(item, dict):
            stack.extend((_child_path(path, key), depth + 1, child) for key, child in reversed(item.items()))
        elif isinstance(item, list | tuple):
            stack.extend((_child_path(path, index), depth + 1, child)
                         for index, child in reversed(list(enumerate(item))))


def json_depth_problem(value: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Where `value` nests deeper than `limit` levels of arrays/objects, or None.

    Iterative (no recursion), so a value parsed by any means can be checked before code that
    recurses over it (pydantic, the database adapter, a verifier) is given it.
    """
    for path, depth, item in _walk(value):
        if depth >= limit and isinstance(item, dict | list | tuple):
            return f"{_short(path) or 'the value'} nests deeper than {limit} levels of arrays/objects; flatten it"
    return None


def json_number_problem(value: Any) -> str | None:
    """Where `value` holds a number no column can store (NaN, ±Infinity, an integer beyond 64 bits), or None."""
    for path, _depth, item in _walk(value):
        reason = _number_reason(item)
        if reason:
            return f"{path or 'the value'} {reason}"
    return None


def _number_reason(item: Any) -> str | None:
    if isinstance(item, _Unrepresentable):
        return (f"is {item.text}, which is not a finite number (JSON numbers must lie within about 1.8e308 in size, "
                "and NaN or Infinity are not JSON); send a finite number or null")
    if isinstance(item, float) and not math.isfinite(item):
        return "is not a finite number (NaN or Infinity); send a finite number or null"
    if isinstance(item, int) and not isinstance(item, bool) and not BIGINT_MIN <= item <= BIGINT_MAX:
        return (f"is {_short_number(item)}, an integer beyond 64 bits (from {BIGINT_MIN} to {BIGINT_MAX}); "
                "send a smaller number, or a string if it is an identifier")
    return None


def _short_number(number: int) -> str:
    """An integer as a client wrote it, cut if it is long: enough to recognise, not 4,000 digits."""
    text = str(number)
    return text if len(text) <= 24 else f"{text[:12]}…({len(text)} digits)"


def _first_problem(value: Any, limit: int) -> JsonInputError | None:
    """Nesting, numbers no JSON reader accepts, and integers no column holds (beyond 64 bits).

    Integers are checked here, anywhere in the body (a free-form config or payload too), because
    PostgreSQL's jsonb and bigint refuse them and SQLite's JSON reads them as floats; a field with
    tighter bounds (a 32-bit count) still names its own limit through its schema.
    """
    for path, depth, item in _walk(value):
        if depth >= limit and isinstance(item, dict | list | tuple):
            return JsonInputError(_short(path), f"nests deeper than {limit} levels of arrays/objects; flatten it")
        if isinstance(item, _Unrepresentable | float | int):
            reason = _number_reason(item)
            if reason:
                return JsonInputError(path, reason)
    return None


def json_loads_bounded(text: str | bytes, *, limit: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads` for text from a client: JsonInputError (path and reason) for what must be refused.

    Refused: nesting deeper than `limit`; NaN, Infinity and numbers that overflow a float (1e400),
    which Python reads but PostgreSQL's JSON and every JSON client refuse; integers of thousands
    of digits, which Python will not read, and integers outside [-2**63, 2**63 - 1].
    Invalid JSON stays a json.JSONDecodeError (with its line and column).
    """
    try:
        value = json.loads(text, parse_constant=_Unrepresentable, parse_float=_parse_float)
    except RecursionError:
        raise JsonInputError("", f"the JSON nests deeper than {limit} levels of arrays/objects; "
                                 "flatten it") from None
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise
        # Python refuses integers of more than 4,300 digits before any check of ours can.
        raise JsonInputError("", "holds an integer too long to read (thousands of digits); "
                                 "send numbers of at most 64 bits") from None
    problem = _first_problem(value, limit)
    if problem:
        raise problem
    return value


def body_too_big_message(request: Any) -> str:
    """Why a request body over DATA_UPLOAD_MAX_MEMORY_SIZE was refused (413), for the API and the pages alike."""
    from django.conf import settings

    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    sent = str(request.META.get("CONTENT_LENGTH") or "")
    size = f"{int(sent):,} bytes" if sent.isdigit() else "larger than that"
    return (f"The request body is {size}; this server accepts at most {limit:,} bytes in a form or JSON body "
            "(uploaded files are counted apart). Send less at once (split a batch into several requests, or "
            "upload long text as a file), or ask the operator to raise DATA_UPLOAD_MAX_MEMORY_SIZE.")
