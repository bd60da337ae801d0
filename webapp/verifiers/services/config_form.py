"""The verifier config form: webapp.common.schema_form over the kind's JSON schema in the registry.

Each schema property becomes one input (nested objects, such as the shaped reward's weights, a
group of inputs); a required property with a default (the python verifier's example code)
starts filled in. What is the verifier's own: which strings are code or long text, and the
checks after the schema's.

Validation is the schema's own (jsonschema, every error at once, each by its config path,
`config.<path>`) and then the registry's constructor (the checks a schema cannot express),
the same `validate_verifier_config` the services and the API call.
"""

from __future__ import annotations

from typing import Any

from environments.registry import (
    ConfigError,
    RegistryError,
    canonical_verifier_name,
    list_verifiers,
)
from webapp.common.bounds import json_problem
from webapp.common.schema_form import (
    CONFIG_KEY,
    SchemaField,
    SchemaForm,
    schema_fields,
    schema_problems,
)
from webapp.verifiers.services.judge import JUDGE_KIND, judge_config_problems
from webapp.verifiers.services.verifiers import validate_verifier_config

# Display hints only (which strings are code or long text), not a copy of any schema.
TEXT_WIDGETS = {"code": "code", "rubric": "textarea"}


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


def config_fields(kind: str) -> list[SchemaField]:
    """The inputs of a kind's config form, in the schema's order (a group holds its children)."""
    return schema_fields(kind_schema(kind), text_widgets=TEXT_WIDGETS)


def form(kind: str) -> SchemaForm:
    return SchemaForm(config_fields(kind))


def config_from_post(kind: str, data, project=None) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """(config, errors by `config.<input>`, raw values typed) from a submitted form (schema checked too)."""
    kind_form = form(kind)
    config, errors, raw_values = kind_form.parse(data)
    if not errors:
        errors = kind_form.place(config_problems(kind, config, project))
    return config, errors, raw_values


def config_problems(kind: str, config: Any, project=None) -> dict[str, str]:
    """Every schema error by request field (`config.<path>`, `config` for the whole), then the verifier's own checks.

    `project`: the verifier's project, whose secrets a judge's api_key_secret may name.
    """
    if not isinstance(config, dict):
        return {CONFIG_KEY: "The config must be a JSON object."}
    reason = json_problem(config)
    if reason:
        return {CONFIG_KEY: f"The config cannot be stored: {reason}."}
    try:
        schema = kind_schema(kind)
    except UnknownKind as exc:
        return {CONFIG_KEY: str(exc)}
    errors = schema_problems(schema, config)
    if errors:
        return errors
    if canonical_verifier_name(kind) == JUDGE_KIND:
        errors = {f"{CONFIG_KEY}.{key}" if key else CONFIG_KEY: message
                  for key, message in judge_config_problems(config, project).items()}
        if errors:
            return errors
    try:
        validate_verifier_config(kind, config, project)
    except (ConfigError, RegistryError) as exc:
        return {CONFIG_KEY: str(exc)}
    return {}


def raw_values_from_config(kind: str, config: dict[str, Any]) -> dict[str, str]:
    """The inputs' text for a stored config (a new version starts from the latest one)."""
    return form(kind).raw_values(config)


def initial_values(kind: str) -> dict[str, str]:
    """A new verifier's inputs: required properties with a default start filled in."""
    return form(kind).initial_values()


def unknown_error_keys(kind: str, errors: dict[str, str]) -> dict[str, str]:
    """Config errors beside no input (the whole config, unknown keys), by config path: shown above the form."""
    return form(kind).general_errors(errors)
