"""webapp.common.bounds' JSON checks, which the API's parser and the page forms share."""

from __future__ import annotations

import json

import pytest

from webapp.common.bounds import (
    JsonInputError,
    json_depth_problem,
    json_loads_bounded,
    json_number_problem,
)


@pytest.mark.parametrize(("text", "path", "fragment"), [
    ('{"a": 1e400}', "a", "1e400"),
    ('{"a": [0, -1e400]}', "a.1", "-1e400"),
    ('{"a": {"b": NaN}}', "a.b", "NaN"),
    ("[Infinity]", "0", "Infinity"),
    ('{"x": -Infinity}', "x", "-Infinity"),
    ("[" * 10_000 + "]" * 10_000, "", "nests deeper than 64"),
    ("[" * 65 + "]" * 65, "0.0.0.0.0.0.0.0.…", "nests deeper than 64"),
    ('{"n": ' + "1" * 5000 + "}", "", "too long to read"),
    ('{"big": 123456789012345678901234567890}', "big", "beyond 64 bits"),
    ('{"a": [{"b": -9223372036854775809}]}', "a.0.b", "beyond 64 bits"),
])
def test_what_the_parser_refuses_is_named_with_its_path(text, path, fragment):
    with pytest.raises(JsonInputError) as refused:
        json_loads_bounded(text)
    assert refused.value.path == path
    assert fragment in refused.value.reason


@pytest.mark.parametrize("text", ['{"a": 1e308, "b": -0.0, "c": 1e-400}', "[" * 64 + "]" * 64,
                                  '{"edges": [9223372036854775807, -9223372036854775808]}', '"text"', "null"])
def test_what_it_accepts_is_plain_json(text):
    assert json_loads_bounded(text) == json.loads(text)


def test_invalid_json_keeps_its_line_and_column():
    with pytest.raises(json.JSONDecodeError) as broken:
        json_loads_bounded('{\n "a": }')
    assert (broken.value.lineno, broken.value.colno) == (2, 7)


def test_the_value_checks_work_on_any_value_without_recursion():
    deep: list = []
    for _ in range(50_000):  # far past Python's recursion limit
        deep = [deep]
    assert "nests deeper than 64" in json_depth_problem(deep)
    assert json_depth_problem([[1]], 2) is None and json_depth_problem([[[1]]], 2).startswith("0.0 ")
    assert json_number_problem({"a": [float("nan")]}).startswith("a.0 ")
    assert "64 bits" in json_number_problem({"n": 2**64})
    assert json_number_problem({"n": 2**63 - 1, "ok": True, "f": 1.5}) is None
