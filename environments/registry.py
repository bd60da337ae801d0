"""Registry of environments and verifiers: names, versions, config schemas, constructors.

Entries are dotted paths imported lazily, so listing works even when an optional piece
(or one still being written) fails to import: that entry is listed as unavailable with the
import error, and only asking for it by name raises. The web app builds its forms from the
listed `config_schema`s; `get_verifier` validates a config against the same schema.
"""

from __future__ import annotations

import importlib
from typing import Any

import jsonschema

from environments.base import Environment, Verifier

ENVIRONMENTS: dict[str, str] = {
    "workplace": "environments.workplace:WorkplaceEnvironment",
    "json_tool_call": "environments.json_tool_call:JsonToolCallEnvironment",
}

VERIFIERS: dict[str, str] = {
    "workplace": "environments.workplace:WorkplaceVerifier",
    "json_tool_call": "environments.json_tool_call:JsonToolCallVerifier",
    "python": "environments.python_verifier:PythonVerifier",
    "llm_judge": "environments.llm_judge:LLMJudgeVerifier",
}

# Names that other tools and the seeds use for our verifiers (the seeds' example run
# config says `reward: tool_call_verifier`, `held_out_eval: tool_call_eval`).
VERIFIER_ALIASES: dict[str, str] = {
    "tool_call_verifier": "json_tool_call",
    "tool_call_eval": "json_tool_call",
}


def canonical_verifier_name(name: str) -> str:
    """The registry name behind an alias (or the name itself)."""
    return VERIFIER_ALIASES.get(name, name)


class RegistryError(LookupError):
    """An unknown or unavailable name; the message lists what is available."""


class ConfigError(ValueError):
    """A verifier config that does not match its schema; the message names the key."""


def _load(path: str) -> type:
    module_name, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def _describe(name: str, path: str) -> dict[str, Any]:
    """One listing entry; an import failure becomes `available: False` plus the error."""
    try:
        cls = _load(path)
    except Exception as exc:  # any import-time failure must not break the listing
        return {
            "name": name,
            "version": None,
            "description": "",
            "config_schema": None,
            "available": False,
            "error": f"{type(exc).__name__}: {exc}",
            "path": path,
        }
    doc = (cls.__doc__ or "").strip().splitlines()
    return {
        "name": name,
        "version": getattr(cls, "version", None),
        "description": getattr(cls, "description", None) or (doc[0] if doc else ""),
        "config_schema": getattr(cls, "config_schema", None),
        "available": True,
        "error": None,
        "path": path,
    }


def list_environments() -> list[dict[str, Any]]:
    """Every registered environment: name, version, description, config_schema, available."""
    return [_describe(name, path) for name, path in ENVIRONMENTS.items()]


def list_verifiers() -> list[dict[str, Any]]:
    """Every registered verifier: name, version, description, config_schema, available."""
    return [_describe(name, path) for name, path in VERIFIERS.items()]


def _resolve(kind: str, table: dict[str, str], name: str) -> type:
    if name not in table:
        raise RegistryError(f"unknown {kind} {name!r}; available: {', '.join(sorted(table))}")
    try:
        return _load(table[name])
    except Exception as exc:
        raise RegistryError(
            f"{kind} {name!r} cannot be loaded ({type(exc).__name__}: {exc}); "
            "check that its optional dependencies are installed"
        ) from exc


def _config_problem(error: jsonschema.ValidationError) -> str:
    """Name the offending key: the error's path, or the key an `additionalProperties` rejects."""
    where = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - allowed)
        prefix = f"{where}." if where else ""
        return (
            f"unknown config key(s) {', '.join(prefix + k for k in extra)}; "
            f"allowed: {', '.join(sorted(allowed)) or 'none'}"
        )
    if error.validator == "required":
        return f"config {where or 'object'}: {error.message}"
    return f"config key {where!r}: {error.message}" if where else f"config: {error.message}"


def validate_config(schema: dict[str, Any] | None, config: dict[str, Any]) -> None:
    """Raise ConfigError naming the first offending key when config breaks schema."""
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a JSON object, got {type(config).__name__}")
    if not schema:
        return
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is not None:
        raise ConfigError(_config_problem(error))


def get_verifier(name: str, config: dict[str, Any] | None = None, **options: Any) -> Verifier:
    """A configured verifier; ConfigError if the config does not fit its schema.

    `options` go to the verifier's constructor (llm_judge's `secrets`: how its project's secrets are read).
    """
    name = canonical_verifier_name(name)
    cls = _resolve("verifier", VERIFIERS, name)
    config = {} if config is None else config
    validate_config(getattr(cls, "config_schema", None), config)
    try:
        return cls(config, **options)
    except ValueError as exc:  # semantic checks the schema cannot express
        raise ConfigError(f"verifier {name!r}: {exc}") from exc


def get_environment(name: str, **kwargs: Any) -> Environment:
    """An environment instance; kwargs go to its constructor."""
    return _resolve("environment", ENVIRONMENTS, name)(**kwargs)
