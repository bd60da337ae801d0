"""Reading one line of an imported file as JSON, with the one rule for numbers that imports share.

Python's json module accepts `NaN`, `Infinity` and `-Infinity` (which are not JSON) and turns a
number too large for a double (`1e400`) into infinity. None of them can be stored: PostgreSQL's
jsonb refuses them (a 500 in the middle of a COPY), a float column holds no infinity, and
SQLite's JSON and a browser's JSON.parse read them differently. So the dataset import and the
run import apply the same rule at the boundary: a line that holds a non-finite number anywhere
is refused with the line's path to that number (`metrics.loss`, `task.tools[0].parameters...`),
and its dry run and its real import read it the same way because both read through here. The same
holds for an integer outside [-2**63, 2**63 - 1]: PostgreSQL's jsonb and bigint refuse it and
SQLite's JSON turns it into a float, so it is refused with its path too.

`loads` costs what json.loads costs for ordinary lines: `NaN` and `Infinity` go through
parse_constant, which json calls only for them, and the hook that looks at every number is used
only when the text holds something that could overflow (a 3-digit exponent or 19 digits in a row).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# A float literal overflows a double only with an exponent of 100 or more or a long run of digits;
# an integer leaves 64 bits only with 19 digits or more.
_SUSPECT_TEXT = re.compile(r"[eE]\+?0*[1-9][0-9]{2}|[0-9]{19}")
_SUSPECT_BYTES = re.compile(rb"[eE]\+?0*[1-9][0-9]{2}|[0-9]{19}")
FLOAT_MAX = 1.7976931348623157e308
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class NonFiniteNumber(ValueError):
    """A number that cannot be stored: NaN, infinite, beyond a double's range, or an integer beyond 64 bits.

    `path` says where it is in the line; the callers (both imports) report it with the line number.
    """

    def __init__(self, path: str, literal: str, value: Any = None):
        self.path = path
        self.literal = literal
        self.value = value  # the parsed line, the refused numbers left in as placeholders
        shown = literal if len(literal) <= 24 else f"{literal[:12]}…({len(literal)} characters)"
        if _is_integer_literal(literal) and not _beyond_floats(literal):
            message = (f"{path} is {shown}, an integer beyond 64 bits: integers from {INT64_MIN} to {INT64_MAX} "
                       "can be stored; write a smaller number (or a string, for an identifier)")
        else:
            message = (f"{path} is {shown}, not a finite number: NaN, Infinity and numbers beyond ±1.8e308 "
                       "cannot be stored; write null or a number in range")
        super().__init__(message)


def _is_integer_literal(literal: str) -> bool:
    return literal.lstrip("-").isdigit()


def _beyond_floats(literal: str) -> bool:
    """Whether an integer literal is past ±1.8e308 too (then it is refused as any overflowing number is)."""
    digits = literal.lstrip("-").lstrip("0")
    return len(digits) > 309 or (len(digits) == 309 and abs(int(literal)) > FLOAT_MAX)


def _int_fits(literal: str) -> bool:
    """Whether a JSON integer literal lies within 64 bits; decided on the digits, so 5,000 of them cost nothing."""
    digits = literal.lstrip("-").lstrip("0") or "0"
    return len(digits) < 19 or (len(digits) <= 20 and INT64_MIN <= int(literal) <= INT64_MAX)


class _Bad:
    """Stands in for a non-finite number while the line is parsed, so its path can be found afterwards."""

    __slots__ = ("literal",)

    def __init__(self, literal: str):
        self.literal = literal


def loads(text: str | bytes) -> Any:
    """json.loads for imported lines: NonFiniteNumber (a ValueError) for NaN, ±Infinity, overflowing numbers
    and integers beyond 64 bits."""
    found: list[_Bad] = []

    def constant(name: str) -> _Bad:
        found.append(_Bad(name))
        return found[-1]

    def number(literal: str) -> float | _Bad:
        value = float(literal)
        if math.isfinite(value):
            return value
        found.append(_Bad(literal))
        return found[-1]

    def integer(literal: str) -> int | _Bad:
        if _int_fits(literal):
            return int(literal)
        found.append(_Bad(literal))
        return found[-1]

    hooks: dict[str, Any] = {"parse_constant": constant}
    pattern = _SUSPECT_BYTES if isinstance(text, bytes | bytearray) else _SUSPECT_TEXT
    if pattern.search(text):
        hooks.update(parse_float=number, parse_int=integer)
    value = json.loads(text, **hooks)
    if found:
        try:
            path = _path_to(value, found[0])
        except RecursionError:
            path = None
        raise NonFiniteNumber(path or "a value nested deep in the line", found[0].literal, value)
    return value


def _path_to(value: Any, target: _Bad, path: str = "") -> str | None:
    """Where `target` sits inside `value`, as `a.b[2].c` (None: not there)."""
    if value is target:
        return path
    if isinstance(value, dict):
        for key, item in value.items():
            found = _path_to(item, target, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _path_to(item, target, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def error_text(exc: ValueError | RecursionError) -> str:
    """Why a line is not JSON, keeping where: json's own message loses the column when only `msg` is shown."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, json.JSONDecodeError):
        where = f"line {exc.lineno}, column {exc.colno}" if exc.lineno > 1 else f"column {exc.colno}"
        return f"{exc.msg.removesuffix(' at').removesuffix(':')} at {where} (character {exc.pos + 1})"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text ({exc.reason} at byte {exc.start + 1})"
    return str(exc)
