"""API output schemas derived from the selectors' row dataclasses, so a row is declared once.

A selector returns frozen dataclasses (CheckpointRow, JobRow, ...); the pages render them and
the API serialises them. Writing the same fields again as a ninja Schema let the two drift;
`schema_of` reads the dataclass instead: its fields, their types (nested row dataclasses become
schemas too) and the descriptions kept in `field(metadata=described(...))`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from ninja import Schema
from pydantic import Field, create_model

from webapp.common.rows import DESCRIPTION


def _schema_type(hint: Any, nested: dict[type, type[Schema]]) -> Any:
    """The hint with every row dataclass inside it (list[Row], Row | None) swapped for its schema."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if hint not in nested:
            nested[hint] = schema_of(hint, nested=nested)
        return nested[hint]
    args = typing.get_args(hint)
    if not args:
        return hint
    swapped = tuple(_schema_type(arg, nested) for arg in args)
    if swapped == args:
        return hint
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[swapped]  # noqa: UP007 - built from a tuple
    return origin[swapped]


def schema_of(row: type, name: str | None = None, *, nested: dict[type, type[Schema]] | None = None) -> type[Schema]:
    """A ninja Schema with the fields of the dataclass `row` (named `name`, else `<Row>Out`)."""
    nested = {} if nested is None else nested
    hints = typing.get_type_hints(row)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(row):
        default = ... if field.default is dataclasses.MISSING else field.default
        fields[field.name] = (_schema_type(hints[field.name], nested),
                              Field(default, description=field.metadata.get(DESCRIPTION)))
    return create_model(name or f"{row.__name__}Out", __base__=Schema, __module__=__name__, **fields)
