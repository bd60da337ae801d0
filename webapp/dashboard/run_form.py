"""The new-run form, built from training's JSON schema (RUN_CONFIG_SCHEMA), not a copy of its fields.

Each schema property becomes one input: its group, the kinds it applies to and whether it
is advanced come from the schema's x-group / x-kinds / x-advanced; its help text is the
field's description; its placeholder the default. An empty input means "the default", so
the config a form produces holds only what the person set, as a hand-written one would,
and the JSON view shows exactly that. Validation is training's own (config_problems), the
same the API and the worker apply; each problem is put beside the field its message names.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from training.config import FIELD_GROUPS, RUN_CONFIG_SCHEMA
from webapp.api.bounds import unstorable_text_reason

# Inputs of the form that are not config keys: the run's name and the rows it links to.
LINK_FIELDS = ("name", "kind", "dataset", "verifier_version", "model_spec", "parent_checkpoint")
# Config keys whose value the linked rows supply when one is chosen (run_config's links).
ALIAS_KEYS = {"reward": "verifier"}


@dataclass
class FieldSpec:
    """One config key as the form shows it."""

    name: str
    group: str
    kinds: list[str] | None
    advanced: bool
    help: str
    default: Any
    widget: str  # select, number, text, json
    choices: list[str] = field(default_factory=list)
    minimum: float | None = None
    maximum: float | None = None
    integer: bool = False
    nullable: bool = False
    accepts_string: bool = False

    @property
    def placeholder(self) -> str:
        return "" if self.default is None else json.dumps(self.default) if self.widget == "json" else str(self.default)

    @property
    def kinds_attr(self) -> str:
        return " ".join(self.kinds or [])


def _alternatives(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return schema.get("anyOf", [schema])


def _bounds(options: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    low = high = None
    for option in options:
        low = option.get("minimum", option.get("exclusiveMinimum", low))
        high = option.get("maximum", option.get("exclusiveMaximum", high))
    return low, high


def field_spec(name: str, schema: dict[str, Any]) -> FieldSpec:
    options = _alternatives(schema)
    types = {o.get("type") for o in options if "type" in o}
    nullable = "null" in types
    types.discard("null")
    enums = [v for o in options for v in o.get("enum", [])] + [o["const"] for o in options if "const" in o]
    spec = FieldSpec(name=name, group=schema["x-group"], kinds=schema.get("x-kinds"),
                     advanced=bool(schema.get("x-advanced")), help=schema.get("description", ""),
                     default=schema.get("default"), widget="text", nullable=nullable,
                     accepts_string="string" in types)
    if "boolean" in types:
        spec.widget, spec.choices = "select", ["true", "false", *map(str, enums)]
    elif enums and not types - {"string"}:
        spec.widget, spec.choices = "select", [str(v) for v in enums]
    elif types and types <= {"integer", "number"}:
        spec.widget, spec.integer = "number", types == {"integer"}
        spec.minimum, spec.maximum = _bounds(options)
    elif types - {"string"}:
        spec.widget = "json"  # arrays, objects, or a string-or-something-else
    return spec


def form_fields() -> list[FieldSpec]:
    properties = RUN_CONFIG_SCHEMA["properties"]
    return [field_spec(name, properties[name]) for names in (g[1] for g in FIELD_GROUPS.values())
            for name in names if name != "kind"]


def grouped_fields() -> list[tuple[str, list[FieldSpec], list[FieldSpec]]]:
    """(group, main fields, advanced fields) in the schema's order."""
    specs = form_fields()
    out = []
    for group in FIELD_GROUPS:
        in_group = [s for s in specs if s.group == group]
        out.append((group, [s for s in in_group if not s.advanced], [s for s in in_group if s.advanced]))
    return [g for g in out if g[1] or g[2]]


class FieldProblem(ValueError):
    pass


def _number(spec: FieldSpec, raw: str) -> float | int:
    try:
        value = float(raw)
    except ValueError:
        raise FieldProblem(f"{raw!r} is not a number") from None
    if not math.isfinite(value):
        raise FieldProblem("must be a finite number")
    if spec.integer:
        if value != int(value):
            raise FieldProblem("must be a whole number")
        return int(value)
    return value


def parse_value(spec: FieldSpec, raw: str) -> Any:
    """The config value of one input (raises FieldProblem); '' never reaches here."""
    if spec.widget == "select":
        if raw in ("true", "false"):
            return raw == "true"
        if raw not in spec.choices:
            raise FieldProblem(f"choose one of {', '.join(spec.choices)}")
        return raw
    if spec.widget == "number":
        return _number(spec, raw)
    if spec.widget == "json":
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            if spec.accepts_string:
                return raw
            raise FieldProblem(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    return raw


def config_from_post(data) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """(config, errors by input name, raw values typed) from the submitted form."""
    config: dict[str, Any] = {}
    errors: dict[str, str] = {}
    raw_values: dict[str, str] = {}
    for spec in form_fields():
        raw = data.get(f"cfg.{spec.name}", "").strip()
        raw_values[spec.name] = raw
        if raw == "":
            continue
        reason = unstorable_text_reason(raw)
        if reason:
            errors[f"config.{spec.name}"] = f"This {reason}."
            continue
        try:
            config[spec.name] = parse_value(spec, raw)
        except FieldProblem as exc:
            errors[f"config.{spec.name}"] = f"{exc}."
    return config, errors, raw_values


def raw_values_from_config(config: dict[str, Any]) -> dict[str, str]:
    """The inputs' text for a config (a preset, a cloned run, pasted JSON)."""
    values: dict[str, str] = {}
    specs = {s.name: s for s in form_fields()}
    for key, value in config.items():
        key = ALIAS_KEYS.get(key, key)
        spec = specs.get(key)
        if spec is None:
            continue
        if spec.widget == "json" and not (isinstance(value, str) and spec.accepts_string):
            values[key] = json.dumps(value)
        elif isinstance(value, bool):
            values[key] = "true" if value else "false"
        else:
            values[key] = str(value)
    return values


def unknown_keys(config: dict[str, Any]) -> list[str]:
    """Keys of a pasted config that no input holds (they are reported, never dropped silently)."""
    names = {s.name for s in form_fields()} | {"kind"} | set(ALIAS_KEYS)
    return sorted(k for k in config if k not in names)
