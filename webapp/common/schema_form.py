"""A form built from a JSON schema: one input per property, a config value per input, problems beside inputs.

The new-run form (training's RUN_CONFIG_SCHEMA) and the verifier form (each kind's config_schema)
are both this; what differs between them (which properties, in which order, display hints) stays
in webapp/dashboard/run_form.py and webapp/verifiers/services/config_form.py.

- Each property becomes a `SchemaField`: enums a select, booleans a select (true / false and any
  other allowed constants), numbers a number input with the schema's bounds, an object with
  properties a group of inputs (its children, named by dotted path: `weights.right_tool`), a
  string a text input (a textarea when its default has several lines, or as the caller's hints
  say), anything else (arrays, objects, a string-or-something-else) a JSON input. The
  description is the help text, the default the placeholder (and `data-default` for scripts).
  A schema may carry layout hints: x-group, x-kinds (the kinds a field applies to), x-advanced,
  and x-kind-defaults (a null default's value by kind).
- `SchemaForm.parse` turns a POST into the config: an empty input means "the default", so the
  config holds only what the person set, as a hand-written one would.
- Names follow the API: an input is `cfg.<path>`; its problems are filed under `config.<path>`,
  the key the API's 422 `errors` use, and problems of the whole config under `config`. A problem
  found deeper than any input (`verifier.name` where `verifier` is one JSON input) is shown
  beside the input that holds it (`SchemaForm.place`); one no input holds (an unknown key) is
  shown above the form (`SchemaForm.general_errors`).

Nothing here knows a domain app: validation is the caller's (training.config for runs, the
registry for verifiers); `schema_problems` is plain jsonschema for a caller that has no better.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from webapp.common.bounds import JsonInputError, json_loads_bounded, unstorable_text_reason

INPUT_PREFIX = "cfg."
CONFIG_KEY = "config"
MAX_INPUT_CHARS = 200_000
MULTILINE_WIDGETS = frozenset({"code", "textarea"})


class FieldProblem(ValueError):
    """An input's text is not a value of its property; the message says why."""


@dataclass
class SchemaField:
    """One input of a schema form: `name` is its dotted path in the config (weights.right_tool)."""

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
    boolean: bool = False  # a select whose "true" / "false" are booleans
    accepts_string: bool = False  # a JSON input whose text, when it is not JSON, is a string
    children: list[SchemaField] = field(default_factory=list)
    group: str = ""  # the schema's layout hints: x-group, x-kinds, x-advanced, x-kind-defaults
    kinds: list[str] | None = None
    advanced: bool = False
    kind_defaults: dict[str, Any] | None = None

    @property
    def input_name(self) -> str:
        return f"{INPUT_PREFIX}{self.name}"

    @property
    def input_id(self) -> str:
        return "cfg-" + self.name.replace(".", "-")

    @property
    def error_key(self) -> str:
        return f"{CONFIG_KEY}.{self.name}"

    @property
    def placeholder(self) -> str:
        if self.default is None or self.widget in MULTILINE_WIDGETS:
            return ""
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return json.dumps(self.default) if self.widget == "json" else str(self.default)

    @property
    def default_json(self) -> str:
        """The schema's default as JSON, for scripts that compute with it ("" when there is none)."""
        return "" if self.default is None else json.dumps(self.default)

    @property
    def kind_defaults_json(self) -> str:
        """The defaults by kind where the schema's own is null (x-kind-defaults), as JSON ("" when none)."""
        return json.dumps(self.kind_defaults) if self.kind_defaults else ""

    @property
    def kinds_attr(self) -> str:
        return " ".join(self.kinds or [])

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


def _types(options: list[dict[str, Any]]) -> set[str]:
    types: set[str] = set()
    for option in options:
        kind = option.get("type")
        types.update(kind if isinstance(kind, list) else [kind] if kind else [])
    return types


def schema_field(name: str, schema: dict[str, Any], *, label: str | None = None, required: bool = False,
                 text_widgets: Mapping[str, str] | None = None) -> SchemaField:
    """The input for one property. `text_widgets`: a widget (code, textarea) for string properties by key."""
    options = schema.get("anyOf") or schema.get("oneOf") or [schema]
    types = _types(options)
    types.discard("null")
    enums = [v for o in options for v in o.get("enum", [])] + [o["const"] for o in options if "const" in o]
    spec = SchemaField(name=name, label=label or name, widget="text", help=str(schema.get("description") or ""),
                       default=schema.get("default"), required=required, group=str(schema.get("x-group") or ""),
                       kinds=schema.get("x-kinds"), advanced=bool(schema.get("x-advanced")),
                       kind_defaults=schema.get("x-kind-defaults"))
    if types == {"object"} and len(options) == 1 and isinstance(schema.get("properties"), dict):
        spec.widget = "group"
        inner = set(schema.get("required") or [])
        spec.children = [schema_field(f"{name}.{key}", sub, label=key, required=key in inner,
                                      text_widgets=text_widgets) for key, sub in schema["properties"].items()]
    elif "boolean" in types:
        spec.widget, spec.boolean = "select", True
        spec.choices = ["true", "false", *(str(v) for v in enums if not isinstance(v, bool))]
    elif enums and not types - {"string"}:
        spec.widget, spec.choices = "select", [str(v) for v in enums]
    elif types and types <= {"integer", "number"}:
        spec.widget, spec.integer = "number", types == {"integer"}
        for option in options:
            spec.minimum = option.get("minimum", option.get("exclusiveMinimum", spec.minimum))
            spec.maximum = option.get("maximum", option.get("exclusiveMaximum", spec.maximum))
    elif types == {"string"}:
        hinted = (text_widgets or {}).get(name.rsplit(".", 1)[-1])
        spec.widget = hinted or ("textarea" if "\n" in str(schema.get("default") or "") else "text")
    else:
        spec.widget, spec.accepts_string = "json", "string" in types  # arrays, objects, a string or something else
    return spec


def schema_fields(schema: dict[str, Any], *, names: Iterable[str] | None = None,
                  text_widgets: Mapping[str, str] | None = None) -> list[SchemaField]:
    """The inputs of an object schema's properties, in the schema's order (or in `names`' order)."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    return [schema_field(key, properties[key], required=key in required, text_widgets=text_widgets)
            for key in (properties if names is None else names)]


def parse_value(spec: SchemaField, raw: str) -> Any:
    """The config value of one input's text (FieldProblem when it is not one); '' never reaches here."""
    if spec.widget == "select":
        if spec.boolean and raw in ("true", "false"):
            return raw == "true"
        if raw not in spec.choices:
            raise FieldProblem("choose true or false" if spec.choices == ["true", "false"]
                               else f"choose one of {', '.join(spec.choices)}")
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
            if spec.accepts_string:
                return raw
            raise FieldProblem(f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
        except JsonInputError as exc:  # nested too deep for the server to walk, or NaN / Infinity
            raise FieldProblem(f"this JSON cannot be used: {exc}") from None
    return raw


def _sentence(text: str) -> str:
    return f"{text[:1].upper()}{text[1:]}."


def _set_path(config: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    target = config
    for part in parents:
        target = target.setdefault(part, {})
    target[last] = value


def _get_path(config: Any, path: str) -> Any:
    for part in path.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


class SchemaForm:
    """The inputs of a form built from schema fields, and the conversions between a POST, a config and errors.

    `aliases`: config keys that no input has but that one input shows (the run config's `reward` is
    the `verifier` input's value).
    """

    def __init__(self, fields: list[SchemaField], *, aliases: Mapping[str, str] | None = None) -> None:
        self.fields = fields
        self.aliases = dict(aliases or {})
        self.inputs: list[SchemaField] = []
        stack = list(reversed(fields))
        while stack:
            spec = stack.pop()
            if spec.widget == "group":
                stack.extend(reversed(spec.children))
            else:
                self.inputs.append(spec)
        self._by_name = {spec.name: spec for spec in self.inputs}

    def parse(self, data: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
        """(config, errors by `config.<input>`, the text of each input) from a submitted form."""
        config: dict[str, Any] = {}
        errors: dict[str, str] = {}
        raw_values: dict[str, str] = {}
        for spec in self.inputs:
            raw = data.get(spec.input_name, "")
            raw = raw if spec.widget in MULTILINE_WIDGETS else raw.strip()
            raw_values[spec.name] = raw
            if raw.strip() == "":
                if spec.required:
                    errors[spec.error_key] = "Required."
                continue
            if len(raw) > MAX_INPUT_CHARS:
                errors[spec.error_key] = f"At most {MAX_INPUT_CHARS:,} characters."
                continue
            reason = unstorable_text_reason(raw)
            if reason:
                errors[spec.error_key] = f"This {reason}."
                continue
            try:
                _set_path(config, spec.name, parse_value(spec, raw.replace("\r\n", "\n")))
            except FieldProblem as exc:
                errors[spec.error_key] = _sentence(str(exc))
        return config, errors, raw_values

    def raw_values(self, config: dict[str, Any]) -> dict[str, str]:
        """The inputs' text for a config (a preset, a stored version, pasted JSON); null is the default."""
        config = {self.aliases.get(key, key): value for key, value in config.items()}
        values: dict[str, str] = {}
        for spec in self.inputs:
            value = _get_path(config, spec.name)
            if value is None:
                continue
            if isinstance(value, bool):
                values[spec.name] = "true" if value else "false"
            elif spec.widget == "json" and not (isinstance(value, str) and spec.accepts_string):
                values[spec.name] = json.dumps(value)
            else:
                values[spec.name] = str(value)
        return values

    def initial_values(self) -> dict[str, str]:
        """A new config's inputs: required properties with a default start filled in."""
        return {spec.name: str(spec.default) for spec in self.inputs if spec.required and spec.default is not None}

    def unknown_keys(self, config: dict[str, Any]) -> list[str]:
        """Top-level keys of a config that no input holds (reported, never dropped silently)."""
        known = {spec.name.split(".")[0] for spec in self.inputs} | set(self.aliases)
        return sorted(key for key in config if key not in known)

    def input_for(self, path: str) -> SchemaField | None:
        """The input that holds a config path: itself, or the JSON input a deeper path is inside."""
        parts = path.split(".") if path else []
        for end in range(len(parts), 0, -1):
            name = ".".join(parts[:end])
            name = self.aliases.get(name, name)
            if name in self._by_name:
                return self._by_name[name]
        return None

    def place(self, errors: Mapping[str, str]) -> dict[str, str]:
        """Errors keyed by request field, each config problem moved beside the input that holds its path.

        `config.<path>` becomes `config.<input>` (`config.verifier.name` -> `config.verifier`); a path no
        input holds keeps its key; other fields (name, dataset) are left as they are. Two problems that
        land on one input are shown together.
        """
        placed: dict[str, str] = {}
        for key, message in errors.items():
            if key.startswith(f"{CONFIG_KEY}."):
                spec = self.input_for(key[len(CONFIG_KEY) + 1:])
                key = spec.error_key if spec is not None else key
            seen = placed.get(key)
            placed[key] = message if seen is None or message in seen else f"{seen} {message}"
        return placed

    def general_errors(self, errors: Mapping[str, str]) -> dict[str, str]:
        """Config problems beside no input, by config path ("" for the whole config): shown above the form."""
        inputs = {spec.error_key for spec in self.inputs}
        return {key[len(CONFIG_KEY) + 1:]: message for key, message in errors.items()
                if (key == CONFIG_KEY or key.startswith(f"{CONFIG_KEY}.")) and key not in inputs}


def schema_problems(schema: dict[str, Any], config: Any) -> dict[str, str]:
    """Every jsonschema error of `config`, by request field (`config.<path>`, `config` for the whole).

    A missing required key and each unknown key are named by their own path, so they land beside
    their input (or above the form for an unknown one).
    """
    errors: dict[str, str] = {}
    validator = jsonschema.Draft202012Validator(schema)
    for error in sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.path]):
        path = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, dict):
            for key in (k for k in error.validator_value if k not in error.instance):
                errors.setdefault(_config_key(f"{path}.{key}" if path else key), "Required.")
            continue
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = set((error.schema or {}).get("properties", {}))
            for key in sorted(set(error.instance) - allowed):
                errors.setdefault(_config_key(f"{path}.{key}" if path else key),
                                  f"Unknown key; allowed: {', '.join(sorted(allowed)) or 'none'}.")
            continue
        errors.setdefault(_config_key(path), f"{error.message[:300]}.")
    return errors


def _config_key(path: str) -> str:
    return f"{CONFIG_KEY}.{path}" if path else CONFIG_KEY
