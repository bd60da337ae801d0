"""Input bounds, declared once: every API schema (and every page form) builds on these types.

The database is the last place a bad value should be found. PostgreSQL refuses a NUL
character in text and JSON, a lone UTF-16 surrogate is not UTF-8 at all, integer
columns hold 32 or 64 bits, and a varchar has its length: each of those used to come
back as a 500. Here they are refused at the boundary with a 422 that names the field.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints

INT32_MAX = 2**31 - 1
BIGINT_MAX = 2**63 - 1
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
        return None if abs(value) <= BIGINT_MAX else f"{path or 'value'} is an integer beyond 64 bits"
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


def Text(max_length: int, *, min_length: int = 0) -> Any:  # noqa: N802 - reads like a type
    """A string that fits a varchar(max_length) column and can be stored."""
    return Annotated[
        str, StringConstraints(min_length=min_length, max_length=max_length), AfterValidator(clean_text)
    ]


# Free text without a column length (notes, reasons): bounded so one request cannot be huge.
LongText = Annotated[str, StringConstraints(max_length=100_000), AfterValidator(clean_text)]
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
