"""The error answers every operation can give, written into the OpenAPI document in one place.

django-ninja documents only the statuses a view declares in `response=`, and most views
declare only their success. The API answers errors from shared code (authentication, the
body parser, validation, access checks), so they are declared here from what each operation
has (parameters, a body, a path) instead of by hand on every operation, where a new endpoint
would forget them. Declared: 400 unreadable request, 401 no valid credentials, 403 role or
token scope, 404 unknown object, 413 body over the limit, 422 invalid input, 429 too many bad
tokens. A 409 stays where a view declares it (only the view knows it can conflict).
"""

from __future__ import annotations

from typing import Any

from webapp.api.schemas import ErrorOut, ValidationErrorOut
from webapp.common.bounds import (
    BIGINT_MAX,
    BIGINT_MIN,
    CURSOR_PATTERN,
    MAX_JSON_DEPTH,
    STORABLE_TEXT_PATTERN,
)

WRITE_METHODS = frozenset({"post", "put", "patch", "delete"})


ERROR_DESCRIPTIONS = {
    400: "The request could not be read: a malformed URL, query, cursor or body (not JSON, a broken "
         "multipart upload).",
    401: "No valid credentials: send `Authorization: Bearer <token>` (or sign in); an expired token "
         "is refused with when it expired.",
    403: "Your role in the project, or the token's scope (read-only, another project), does not allow this.",
    404: "No such object in a project you belong to.",
    413: "The request body is larger than the server accepts (DATA_UPLOAD_MAX_MEMORY_SIZE); `detail` says the limit.",
    422: "Invalid input: a value out of range, a non-finite number (NaN, Infinity, 1e400), an integer beyond "
         "64 bits, JSON nested too deep, text that cannot be stored. `errors` names each field (its JSON path).",
    429: "Too many bad API tokens from your address; retry after the `Retry-After` seconds.",
}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _statuses(method: str, operation: dict) -> set[int]:
    """The error statuses shared code can answer for this operation."""
    parameters = operation.get("parameters", [])
    has_body = "requestBody" in operation
    has_path = any(p.get("in") == "path" for p in parameters)
    statuses = {400, 401, 429} if operation.get("security") else {400}
    if has_path or method in WRITE_METHODS:
        statuses.add(403)
    if has_path:
        statuses.add(404)
    if has_body:
        statuses.add(413)
    if parameters or has_body:
        statuses.add(422)
    return statuses


def _json_response(description: str, schema: dict) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _document_errors(method: str, operation: dict) -> None:
    responses = operation.setdefault("responses", {})
    for status in sorted(_statuses(method, operation)):
        if status in responses or str(status) in responses:
            continue
        schema = _ref("ValidationErrorOut" if status == 422 else "ErrorOut")
        responses[status] = _json_response(ERROR_DESCRIPTIONS[status], schema)
    for status, declared in responses.items():
        if _vague_error(status, declared):
            name = "ValidationErrorOut" if int(status) == 422 else "ErrorOut"
            responses[status] = _json_response(declared.get("description") or ERROR_DESCRIPTIONS.get(int(status), ""),
                                               _ref(name))


def _vague_error(status: int | str, declared: dict) -> bool:
    """A view's error declared as any object (`dict`), or a 422 as ErrorOut: its body is one of ours.

    Every error goes through the handlers in webapp.api.api, so a 4xx body is ErrorOut; a 422
    may come from the validator too, which adds `errors`. Schemathesis checks the bodies.
    """
    if not 400 <= int(status) < 500:
        return False
    schema = declared.get("content", {}).get("application/json", {}).get("schema", {})
    bare_object = schema.get("type") == "object" and not schema.get("properties")
    return bare_object or (int(status) == 422 and schema == _ref("ErrorOut"))


def add_error_responses(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with every operation's error answers declared, and their bodies in components."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for model in (ErrorOut, ValidationErrorOut):
        schemas[model.__name__] = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for path_item in document.get("paths", {}).values():
        for method, operation in path_item.items():
            if isinstance(operation, dict) and "responses" in operation:
                _document_errors(method, operation)
    return document


# -- What any JSON value in a body may hold (webapp.common.bounds' rules, stated once) ---------------

JSON_VALUE = "JsonValue"
JSON_VALUE_SCHEMA = {
    "description": "Any JSON value the server can store: text without NUL characters or lone UTF-16 "
                   "surrogates (keys too), numbers within 64-bit integers' range and finite, at most "
                   f"{MAX_JSON_DEPTH} levels of arrays/objects.",
    "anyOf": [
        {"type": "string", "pattern": STORABLE_TEXT_PATTERN},
        {"type": "number", "minimum": BIGINT_MIN, "maximum": BIGINT_MAX},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": _ref(JSON_VALUE)},
        {"type": "object", "propertyNames": {"pattern": STORABLE_TEXT_PATTERN},
         "additionalProperties": _ref(JSON_VALUE)},
    ],
}


def _state_json_rules(schema: Any) -> None:
    """Free-form objects (`dict` fields) hold JsonValues; a body's undeclared keys too (the parser checks them);
    no text holds a NUL.

    The parser (webapp.common.bounds.json_loads_bounded) refuses a non-finite number, an integer beyond
    64 bits or nesting past the limit anywhere in a body, and clean_json a NUL in a free-form object:
    saying so here makes a valid document mean an accepted request.
    """
    if isinstance(schema, list):
        for item in schema:
            _state_json_rules(item)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "string" and not {"pattern", "enum", "const", "format"} & schema.keys():
        schema["pattern"] = STORABLE_TEXT_PATTERN  # clean_text and clean_json refuse a NUL in any text
    if schema.get("type") == "object" and schema.get("additionalProperties") is True:
        schema["additionalProperties"] = _ref(JSON_VALUE)
        schema.setdefault("propertyNames", {"pattern": STORABLE_TEXT_PATTERN})
    elif schema.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema:
        schema["additionalProperties"] = _ref(JSON_VALUE)
    for value in schema.values():
        if isinstance(value, dict | list):
            _state_json_rules(value)


def _state_cursor_form(document: dict[str, Any]) -> None:
    """Every `after` query parameter is a cursor of URL-safe base64 (its content only the server can make)."""
    for path_item in document.get("paths", {}).values():
        for operation in path_item.values():
            for parameter in operation.get("parameters", []) if isinstance(operation, dict) else []:
                if parameter.get("in") == "query" and parameter.get("name") == "after":
                    schema = parameter.get("schema", {})
                    for branch in schema.get("anyOf", [schema]):
                        if branch.get("type") == "string":
                            branch["pattern"] = CURSOR_PATTERN


def state_input_rules(document: dict[str, Any]) -> dict[str, Any]:
    """`document` stating the rules shared code applies to every input (JSON values, cursors)."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    _state_json_rules(schemas)
    for path_item in document.get("paths", {}).values():
        _state_json_rules(path_item)
    schemas[JSON_VALUE] = JSON_VALUE_SCHEMA
    _state_cursor_form(document)
    return document
