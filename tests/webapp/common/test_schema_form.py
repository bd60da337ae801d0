"""webapp.common.schema_form: the one schema-driven form builder the run form and the verifier form both use."""

from __future__ import annotations

import pytest

from webapp.common.schema_form import (
    FieldProblem,
    SchemaField,
    SchemaForm,
    parse_value,
    schema_fields,
    schema_problems,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "mode": {"type": "string", "enum": ["strict", "lenient"], "default": "lenient"},
        "bf16": {"anyOf": [{"type": "boolean"}, {"const": "auto"}], "default": "auto"},
        "steps": {"type": "integer", "minimum": 1, "maximum": 9, "default": 3},
        "rate": {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "null"}]},
        "name": {"type": "string", "description": "Help text."},
        "code": {"type": "string", "minLength": 1, "default": "def f():\n    pass\n"},
        "targets": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "weights": {"type": "object", "properties": {"right": {"type": "number", "default": 0.5}},
                    "additionalProperties": False},
    },
    "required": ["code"],
    "additionalProperties": False,
}


@pytest.fixture
def form() -> SchemaForm:
    return SchemaForm(schema_fields(SCHEMA, text_widgets={"name": "textarea"}), aliases={"alias": "name"})


def test_each_property_gets_the_input_its_schema_calls_for(form):
    widgets = {spec.name: spec.widget for spec in form.inputs}
    assert widgets == {"mode": "select", "bf16": "select", "steps": "number", "rate": "number", "name": "textarea",
                       "code": "textarea", "targets": "json", "weights.right": "number"}
    by_name = {spec.name: spec for spec in form.inputs}
    assert by_name["bf16"].choices == ["true", "false", "auto"] and by_name["bf16"].boolean
    assert (by_name["steps"].minimum, by_name["steps"].maximum, by_name["steps"].integer) == (1, 9, True)
    assert by_name["rate"].minimum == 0 and not by_name["rate"].integer
    assert by_name["code"].required and by_name["code"].placeholder == ""
    assert by_name["targets"].accepts_string
    assert by_name["weights.right"].input_name == "cfg.weights.right"
    assert by_name["weights.right"].input_id == "cfg-weights-right"
    assert by_name["weights.right"].error_key == "config.weights.right"
    assert by_name["steps"].default_json == "3" and by_name["name"].help == "Help text."


def test_a_post_becomes_the_config_of_what_was_set_and_back(form):
    post = {"cfg.mode": "strict", "cfg.bf16": "false", "cfg.steps": "4", "cfg.rate": "1e-5", "cfg.name": " x ",
            "cfg.code": "def f():\r\n    return 1\r\n", "cfg.targets": "all-linear", "cfg.weights.right": "2"}
    config, errors, raw = form.parse(post)
    assert errors == {}
    assert config == {"mode": "strict", "bf16": False, "steps": 4, "rate": 1e-5, "name": " x ",
                      "code": "def f():\n    return 1\n", "targets": "all-linear", "weights": {"right": 2}}
    assert raw["steps"] == "4" and form.parse({"cfg.code": "x"})[0] == {"code": "x"}, "empty inputs are defaults"
    assert form.parse(dict(post, **{f"cfg.{k}": v for k, v in form.raw_values(config).items()}))[0] == config
    assert form.raw_values({"alias": "from the alias", "rate": None}) == {"name": "from the alias"}


@pytest.mark.parametrize(("name", "raw", "words"), [
    ("mode", "loose", "choose one of strict, lenient"),
    ("steps", "2.5", "must be a whole number"),
    ("steps", "many", "'many' is not a number"),
    ("rate", "inf", "must be a finite number"),
    ("weights.right", "1e400", "must be a finite number"),
])
def test_an_input_that_is_not_a_value_is_a_field_problem(form, name, raw, words):
    spec = next(s for s in form.inputs if s.name == name)
    with pytest.raises(FieldProblem, match=words):
        parse_value(spec, raw)
    _config, errors, _raw = form.parse({"cfg.code": "x", spec.input_name: raw})
    assert errors == {spec.error_key: words[:1].upper() + words[1:] + "."}


def test_json_input_problems_and_required_and_nul():
    spec = SchemaField(name="extra", label="extra", widget="json")
    with pytest.raises(FieldProblem, match=r"not valid JSON \(Expecting value at line 1, column 1\)"):
        parse_value(spec, "nope")
    form = SchemaForm(schema_fields(SCHEMA))
    _config, errors, _raw = form.parse({"cfg.name": "a\x00b"})
    assert errors == {"config.code": "Required.",
                      "config.name": "This contains a NUL character (\\u0000), which cannot be stored; remove it."}


def test_a_problem_lands_beside_the_input_that_holds_its_path(form):
    placed = form.place({"config.targets.1": "'targets.1' must not be empty", "config.weights.right": "too big",
                         "config.alias": "give one", "config.weights.wrong": "Unknown key.", "config": "whole",
                         "name": "the form's own field"})
    assert placed == {"config.targets": "'targets.1' must not be empty", "config.weights.right": "too big",
                      "config.name": "give one", "config.weights.wrong": "Unknown key.", "config": "whole",
                      "name": "the form's own field"}
    assert form.general_errors(placed) == {"weights.wrong": "Unknown key.", "": "whole"}
    assert form.unknown_keys({"mode": 1, "weights": {}, "alias": 2, "other": 3}) == ["other"]


def test_schema_problems_name_each_path():
    problems = schema_problems(SCHEMA, {"steps": 0, "weights": {"right": "x", "left": 1}, "extra": 1})
    assert problems["config.code"] == "Required."
    assert problems["config.extra"].startswith("Unknown key; allowed: ")
    assert problems["config.weights.left"] == "Unknown key; allowed: right."
    assert "less than the minimum of 1" in problems["config.steps"]
    assert "is not of type 'number'" in problems["config.weights.right"]
    assert schema_problems(SCHEMA, []) == {"config": "[] is not of type 'object'."}


def test_the_run_form_and_the_verifier_form_are_both_this_builder():
    from webapp.dashboard.run_form import FORM
    from webapp.verifiers.services import config_form

    assert isinstance(FORM, SchemaForm) and isinstance(config_form.form("json_tool_call"), SchemaForm)
    assert {type(spec) for spec in FORM.inputs} == {SchemaField}
    assert {type(spec) for spec in config_form.form("json_tool_call").inputs} == {SchemaField}
    assert FORM.input_for("verifier.config.mode").name == "verifier" and FORM.input_for("reward").name == "verifier"
