"""The one shape of a refused field, for every endpoint: {"detail": ..., "errors": {field: message}}.

A client reads `errors` to put each message beside its field (the pages do the same with a
form's problems), and `detail` to show one line. Every endpoint builds it here.
"""

from __future__ import annotations

from ninja import Schema
from ninja.responses import Status


class FieldErrorsOut(Schema):
    detail: str
    errors: dict[str, str] = {}


def field_errors(errors: dict[str, str], status: int = 422, *, unnamed: str = "config") -> Status:
    """Refuse several fields at once; a message without a field name is filed under `unnamed`."""
    detail = "; ".join(f"{name}: {message}" if name else message for name, message in errors.items())
    return Status(status, FieldErrorsOut(detail=detail, errors={name or unnamed: m for name, m in errors.items()}))


def field_error(field: str, message: str, status: int = 422) -> Status:
    """Refuse one field; the detail is the message alone."""
    return Status(status, FieldErrorsOut(detail=message, errors={field: message}))
