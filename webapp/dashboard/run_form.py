"""The new-run form: webapp.common.schema_form over training's JSON schema (RUN_CONFIG_SCHEMA).

Each schema property but `kind` (the form's own select) becomes one input, in FIELD_GROUPS'
order; its group, the kinds it applies to and whether it is advanced come from the schema's
x-group / x-kinds / x-advanced. Validation is training's own, once per request, in
webapp.runs.services.run_config.run_config_check; its problems come back by field
(`config.<path>`) and `FORM.place` puts each beside the input that holds its path.
"""

from __future__ import annotations

from typing import Any

from training.config import FIELD_GROUPS, RUN_CONFIG_SCHEMA
from webapp.common.schema_form import SchemaField, SchemaForm, schema_fields

# The run config's alias `reward` is the verifier input's value.
FORM = SchemaForm(
    schema_fields(RUN_CONFIG_SCHEMA, names=[name for _kinds, names in FIELD_GROUPS.values() for name in names
                                            if name != "kind"]),
    aliases={"reward": "verifier"},
)


def grouped_fields() -> list[tuple[str, list[SchemaField], list[SchemaField]]]:
    """(group, main fields, advanced fields) in the schema's order."""
    out = []
    for group in FIELD_GROUPS:
        in_group = [s for s in FORM.inputs if s.group == group]
        out.append((group, [s for s in in_group if not s.advanced], [s for s in in_group if s.advanced]))
    return [g for g in out if g[1] or g[2]]


def config_from_post(data) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """(config, errors by `config.<key>`, raw values typed) from the submitted form."""
    return FORM.parse(data)


def raw_values_from_config(config: dict[str, Any]) -> dict[str, str]:
    """The inputs' text for a config (a preset, a cloned run, pasted JSON)."""
    return FORM.raw_values(config)


def unknown_keys(config: dict[str, Any]) -> list[str]:
    """Keys of a pasted config that no input holds (they are reported, never dropped silently)."""
    return [key for key in FORM.unknown_keys(config) if key != "kind"]
