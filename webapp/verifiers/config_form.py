"""The verifier config form, built from the kind's JSON schema in the registry (not a copy of its fields).

Each schema property becomes one input: enums a select, numbers a number input with the
schema's bounds, booleans a select (default / true / false), nested objects (the shaped
reward's weights) a group of inputs, anything else a JSON input. The description is the
help text, the default the placeholder. An empty input means "the default", so a saved
config holds what the person set. A required property with a default (the python
verifier's example code) starts filled in.

Validation is the schema's own (jsonschema, every error at once, each put beside the input
its path names) and then the registry's constructor (the checks a schema cannot express),
the same `validate_verifier_config` the services and the API call.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from environments.registry import (
    ConfigError,
    RegistryError,
    canonical_verifier_name,
    list_verifiers,
)
from webapp.api.bounds import (
    JsonInputError,
    json_loads_bounded,
    json_problem,
    unstorable_text_reason,
)
from webapp.verifiers.judge import JUDGE_KIND, judge_config_problems
from webapp.verifiers.services import validate_verifier_config

# Display hints only (which strings are long text), not a copy of any schema.
CODE_KEYS = frozenset({"code"})
LONG_TEXT_KEYS = frozenset({"rubric"})
MAX_INPUT_CHARS = 200_000


@dataclass
class ConfigField:
    """One config input: `name` is its dotted path in the config (weights.right_tool)."""

    name: str
    label: str
    widget: str  # select, number, text, textarea, code, json, group
    help: str = ""
    default: Any = None
    required: bool = False
    choices: list[str] = field(default_factory=list)
    minimum: float | None = None
    maximum: float | None = None
    integer: bool = False
    boolean: bool = False
    children: list[ConfigField] = field(default_factory=list)

    @property
    def input_name(self) -> str:
        return f"cfg.{self.name}"

    @property
    def input_id(self) -> str:
        return "cfg-" + self.name.replace(".", "-")

    @property
    def placeholder(self) -> str:
        if self.default is None or self.widget in ("code", "textarea"):
            return ""
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return json.dumps(self.default) if self.widget == "json" else str(self.default)

    @property
    def constraints(self) -> str:
        """The bounds in words, for the help text."""
        parts = []
        if self.minimum is not None:
            parts.append(f"at least {_number_text(self.minimum)}")
        if self.maximum is not None:
            parts.append(f"at most {_number_text(self.maximum)}")
        if self.integer:
            parts.append("a whole number")
        return ", ".join(parts)


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class UnknownKind(ValueError):
    pass


def kind_entries() -> list[dict[str, Any]]:
    """The registry's verifier kinds (name, version, description, schema, available, error)."""
    return list_verifiers()


def kind_schema(kind: str) -> dict[str, Any]:
    kind = canonical_verifier_name(kind)
    for entry in list_verifiers():
        if entry["name"] == kind:
            if not entry["available"]:
                raise UnknownKind(f"The {kind} verifier cannot be loaded here: {entry['error']}")
            return entry["config_schema"] or {"type": "object", "properties": {}}
    raise UnknownKind(f"Unknown verifier kind {kind!r}.")


def _field(name: str, label: str, schema: dict[str, Any], required: bool) -> ConfigField:
    types = schema.get("type")
    types = set(types) if isinstance(types, list) else {types} if types else set()
    spec = ConfigField(name=name, label=label, widget="text", help=str(schema.get("description") or ""),
                       default=schema.get("default"), required=required)
    if types == {"object"} and isinstance(schema.get("properties"), dict):
        spec.widget = "group"
        inner_required = set(schema.get("required") or [])
        spec.children = [_field(f"{name}.{key}", key, sub, key in inner_required)
                         for key, sub in schema["properties"].items()]
    elif "enum" in schema:
        spec.widget, spec.choices = "select", [str(v) for v in schema["enum"]]
    elif types == {"boolean"}:
        spec.widget, spec.boolean, spec.choices = "select", True, ["true", "false"]
    elif types and types <= {"integer", "number"}:
        spec.widget, spec.integer = "number", types == {"integer"}
        spec.minimum = schema.get("minimum", schema.get("exclusiveMinimum"))
        spec.maximum = schema.get("maximum", schema.get("exclusiveMaximum"))
    elif types == {"string"}:
        key = name.rsplit(".", 1)[-1]
        if key in CODE_KEYS:
            spec.widget = "code"
        elif key in LONG_TEXT_KEYS or "\n" in str(schema.get("default") or ""):
            spec.widget = "textarea"
    else:
        spec.widget = "json"
    return spec


def config_fields(kind: str) -> list[ConfigField]:
    """The inputs of a kind's config form, in the schema's order."""
    schema = kind_schema(kind)
    required = set(schema.get("required") or [])
    return [_field(key, key, sub, key in required) for key, sub in (schema.get("properties") or {}).items()]


def _flat(fields: list[ConfigField]) -> list[ConfigField]:
    out = []
    for spec in fields:
        out.extend(_flat(spec.children) if spec.widget == "group" else [spec])
    return out


class FieldProblem(ValueError):
    pass


def _parse(spec: ConfigField, raw: str) -> Any:
    if spec.widget == "select":
        if spec.boolean:
            if raw not in ("true", "false"):
                raise FieldProblem("choose true or false")
            return raw == "true"
        if raw not in spec.choices:
            raise FieldProblem(f"choose one of {', '.join(spec.choices)}")
        return raw
    if spec.widget == "number":
        try:
            value = float(raw)
        except ValueError:
            raise FieldProblem(f"{raw[:40]!r} is not a number") from None
        if not math.isfinite(value):
            raise FieldProblem("must be a finite number")
        if spec.integer:
            if value != int(value):
                raise FieldProblem("must be a whole number")
            return int(value)
        return int(value) if value.is_integer() and "." not in raw and "e" not in raw.lower() else value
    if spec.widget == "json":
        try:
            return json_loads_bounded(raw)
        except json.JSONDecodeError as exc:
            raise FieldProblem(f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
        except JsonInputError as exc:  # nested too deep for the server to walk, or NaN / Infinity
            raise FieldProblem(f"this JSON cannot be used: {exc}") from None
    return raw


def _set_path(config: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    target = config
    for part in parents:
        target = target.setdefault(part, {})
    target[last] = value


def config_from_post(kind: str, data, project=None) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """(config, errors by config path, raw values typed) from a submitted form (schema checked too)."""
    fields = config_fields(kind)
    config: dict[str, Any] = {}
    errors: dict[str, str] = {}
    raw_values: dict[str, str] = {}
    for spec in _flat(fields):
        raw = data.get(spec.input_name, "")
        raw = raw if spec.widget in ("code", "textarea") else raw.strip()
        raw_values[spec.name] = raw
        if raw.strip() == "":
            if spec.required:
                errors[spec.name] = "Required."
            continue
        if len(raw) > MAX_INPUT_CHARS:
            errors[spec.name] = f"At most {MAX_INPUT_CHARS:,} characters."
            continue
        reason = unstorable_text_reason(raw)
        if reason:
            errors[spec.name] = f"This {reason}."
            continue
        try:
            _set_path(config, spec.name, _parse(spec, raw.replace("\r\n", "\n")))
        except FieldProblem as exc:
            errors[spec.name] = f"{str(exc)[:1].upper()}{str(exc)[1:]}."
    if not errors:
        errors = config_problems(kind, config, project)
    return config, errors, raw_values


def config_problems(kind: str, config: Any, project=None) -> dict[str, str]:
    """Every schema error by config path ('' for the config as a whole), then the verifier's own checks.

    `project`: the verifier's project, whose secrets a judge's api_key_secret may name.
    """
    if not isinstance(config, dict):
        return {"": "The config must be a JSON object."}
    reason = json_problem(config)
    if reason:
        return {"": f"The config cannot be stored: {reason}."}
    try:
        schema = kind_schema(kind)
    except UnknownKind as exc:
        return {"": str(exc)}
    errors: dict[str, str] = {}
    for error in sorted(jsonschema.Draft202012Validator(schema).iter_errors(config), key=lambda e: [str(p) for p in e.path]):
        path = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, dict):
            missing = [k for k in error.validator_value if k not in error.instance]
            for key in missing:
                errors.setdefault(f"{path}.{key}" if path else key, "Required.")
            continue
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = set((error.schema or {}).get("properties", {}))
            for key in sorted(set(error.instance) - allowed):
                errors.setdefault(f"{path}.{key}" if path else key,
                                  f"Unknown key; allowed: {', '.join(sorted(allowed)) or 'none'}.")
            continue
        errors.setdefault(path, f"{error.message[:300]}.")
    if errors:
        return errors
    if canonical_verifier_name(kind) == JUDGE_KIND:
        errors = judge_config_problems(config, project)
        if errors:
            return errors
    try:
        validate_verifier_config(kind, config, project)
    except (ConfigError, RegistryError) as exc:
        return {"": str(exc)}
    return {}


def raw_values_from_config(kind: str, config: dict[str, Any]) -> dict[str, str]:
    """The inputs' text for a stored config (a new version starts from the latest one)."""
    values: dict[str, str] = {}
    for spec in _flat(config_fields(kind)):
        value: Any = config
        for part in spec.name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            continue
        if isinstance(value, bool):
            values[spec.name] = "true" if value else "false"
        elif spec.widget == "json":
            values[spec.name] = json.dumps(value)
        else:
            values[spec.name] = str(value)
    return values


def initial_values(kind: str) -> dict[str, str]:
    """A new verifier's inputs: required properties with a default start filled in."""
    return {spec.name: str(spec.default) for spec in _flat(config_fields(kind))
            if spec.required and spec.default is not None}


def unknown_error_keys(kind: str, errors: dict[str, str]) -> dict[str, str]:
    """Errors whose path no input shows (the whole config, unknown keys): shown above the form."""
    names = {spec.name for spec in _flat(config_fields(kind))}
    return {key: message for key, message in errors.items() if key not in names}
