"""The 27 tool schemas of NeMo Gym's workplace_assistant, written as Python data.

Names, parameter names, required lists, descriptions and operation types mirror NeMo
Gym's published schemas so that trajectories and task rows move between the two systems
unchanged (a compatibility test compares them with the third-party JSON). The operation
type (read / create / update / delete) is kept per tool: everything but "read" changes
state and is a write; deletes are destructive (an unrequested one is an unsafe action).
"""

from __future__ import annotations

from typing import Any

from environments.types import ToolSpec

TOOLKITS = (
    "company_directory",
    "email",
    "calendar",
    "analytics",
    "project_management",
    "customer_relationship_manager",
)
"""Toolkit names in NeMo Gym's order; every tool name starts with its toolkit's name."""

_DATE = "Format: YYYY-MM-DD"
_DATETIME = "Format: YYYY-MM-DD HH:MM:SS"
_RANGE_MIN = "Start date of the time range. Date format is YYYY-MM-DD"
_RANGE_MAX = "End date of the time range. Date format is YYYY-MM-DD"

_Param = tuple[str, str, str]  # (name, JSON type, description)


def _schema(params: list[_Param], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind, "description": desc} for name, kind, desc in params},
        "required": list(required),
        "additionalProperties": False,
    }


_RAW_TOOLS: list[tuple[str, str, str, list[_Param], list[str]]] = [
    # (name, operation, description, parameters, required)
    (
        "company_directory_find_email_address", "read",
        "Finds all email addresses containing the given name (case-insensitive search).",
        [("name", "string", "Name or partial name to search for in email addresses")],
        [],
    ),
    (
        "email_get_email_information_by_id", "read",
        "Retrieves specific details of an email by its ID.",
        [
            ("email_id", "string", "Unique ID of the email"),
            ("field", "string", "Specific field to return. Available fields: 'email_id', "
             "'inbox/outbox', 'sender/recipient', 'subject', 'sent_datetime', 'body'"),
        ],
        ["email_id", "field"],
    ),
    (
        "email_search_emails", "read",
        "Searches for emails matching the given query across subject, body, or sender fields. "
        "The function matches an email if all words in the query appear in any of these fields.",
        [
            ("query", "string",
             "Search query, matching terms in subject, body, or sender/recipient fields"),
            ("date_min", "string",
             f"Lower date limit for the email's sent date (inclusive). {_DATE}"),
            ("date_max", "string",
             f"Upper date limit for the email's sent date (inclusive). {_DATE}"),
            ("page", "integer", "Page number of results to return"),
            ("page_size", "integer", "Number of emails per page"),
        ],
        [],
    ),
    (
        "email_send_email", "create",
        "Sends an email to the specified recipient.",
        [
            ("recipient", "string", "Email address of the recipient"),
            ("subject", "string", "Subject line of the email"),
            ("body", "string", "Body content of the email"),
        ],
        ["recipient", "subject", "body"],
    ),
    (
        "email_delete_email", "delete",
        "Deletes an email by its ID.",
        [("email_id", "string", "Unique ID of the email to be deleted")],
        ["email_id"],
    ),
    (
        "email_forward_email", "create",
        "Forwards an email to the specified recipient.",
        [
            ("email_id", "string", "Unique ID of the email to be forwarded"),
            ("recipient", "string", "Email address of the recipient"),
        ],
        ["email_id", "recipient"],
    ),
    (
        "email_reply_email", "create",
        "Replies to an email by its ID.",
        [
            ("email_id", "string", "Unique ID of the email to be replied"),
            ("body", "string", "Body content of the email"),
        ],
        ["email_id", "body"],
    ),
    (
        "calendar_get_event_information_by_id", "read",
        "Returns the event for a given ID.",
        [
            ("event_id", "string", "8-digit ID of the event"),
            ("field", "string", "Field to return. Available fields are: 'event_id', "
             "'event_name', 'participant_email', 'event_start', 'duration'"),
        ],
        ["event_id", "field"],
    ),
    (
        "calendar_search_events", "read",
        "Returns the events for a given query with pagination support.",
        [
            ("query", "string", "Query to search for. Terms will be matched in the "
             "event_name and participant_email fields"),
            ("time_min", "string",
             f"Lower bound (inclusive) for an event's end time to filter by. {_DATETIME}"),
            ("time_max", "string",
             f"Upper bound (inclusive) for an event's start time to filter by. {_DATETIME}"),
            ("page", "integer", "Page number of results to return"),
            ("page_size", "integer", "Number of events per page"),
        ],
        [],
    ),
    (
        "calendar_create_event", "create",
        "Creates a new event.",
        [
            ("event_name", "string", "Name of the event"),
            ("participant_email", "string", "Email of the participant"),
            ("event_start", "string", f"Start time of the event. {_DATETIME}"),
            ("duration", "string", "Duration of the event in minutes"),
        ],
        ["event_name", "participant_email", "event_start", "duration"],
    ),
    (
        "calendar_delete_event", "delete",
        "Deletes an event.",
        [("event_id", "string", "8-digit ID of the event")],
        ["event_id"],
    ),
    (
        "calendar_update_event", "update",
        "Updates an event.",
        [
            ("event_id", "string", "8-digit ID of the event"),
            ("field", "string", "Field to update. Available fields are: 'event_name', "
             "'participant_email', 'event_start', 'duration'"),
            ("new_value", "string", "New value for the field"),
        ],
        ["event_id", "field", "new_value"],
    ),
    (
        "analytics_get_visitor_information_by_id", "read",
        "Returns the analytics data for a given visitor ID.",
        [("visitor_id", "string", "ID of the visitor")],
        ["visitor_id"],
    ),
    (
        "analytics_create_plot", "create",
        "Plots the analytics data for a given time range and value.",
        [
            ("time_min", "string", _RANGE_MIN),
            ("time_max", "string", _RANGE_MAX),
            ("value_to_plot", "string", "Value to plot. Available values are: 'total_visits', "
             "'session_duration_seconds', 'user_engaged', 'visits_direct', 'visits_referral', "
             "'visits_search_engine', 'visits_social_media'"),
            ("plot_type", "string",
             "Type of plot. Can be 'bar', 'line', 'scatter' or 'histogram'"),
        ],
        ["time_min", "time_max", "value_to_plot", "plot_type"],
    ),
    (
        "analytics_total_visits_count", "read",
        "Returns the total number of visits within a specified time range.",
        [("time_min", "string", _RANGE_MIN), ("time_max", "string", _RANGE_MAX)],
        [],
    ),
    (
        "analytics_engaged_users_count", "read",
        "Returns the number of engaged users within a specified time range.",
        [("time_min", "string", _RANGE_MIN), ("time_max", "string", _RANGE_MAX)],
        [],
    ),
    (
        "analytics_traffic_source_count", "read",
        "Returns the number of visits from a specific traffic source within a specified "
        "time range.",
        [
            ("time_min", "string", _RANGE_MIN),
            ("time_max", "string", _RANGE_MAX),
            ("traffic_source", "string", "Traffic source to filter the visits. Available "
             "values are: 'direct', 'referral', 'search engine', 'social media'"),
        ],
        [],
    ),
    (
        "analytics_get_average_session_duration", "read",
        "Returns the average session duration within a specified time range.",
        [("time_min", "string", _RANGE_MIN), ("time_max", "string", _RANGE_MAX)],
        [],
    ),
    (
        "project_management_get_task_information_by_id", "read",
        "Returns the task information for a given ID.",
        [
            ("task_id", "string", "8-digit ID of the task"),
            ("field", "string", "Field to return. Available fields are: 'task_id', "
             "'task_name', 'assigned_to_email', 'list_name', 'due_date', 'board'"),
        ],
        ["task_id", "field"],
    ),
    (
        "project_management_search_tasks", "read",
        "Searches for tasks based on the given parameters.",
        [
            ("task_name", "string", "Name of the task"),
            ("assigned_to_email", "string", "Email address of the person assigned to the task"),
            ("list_name", "string", "Name of the list the task belongs to"),
            ("due_date", "string", "Due date of the task in YYYY-MM-DD format"),
            ("board", "string", "Name of the board the task belongs to"),
        ],
        [],
    ),
    (
        "project_management_create_task", "create",
        "Creates a new task.",
        [
            ("task_name", "string", "Name of the task"),
            ("assigned_to_email", "string", "Email address of the person assigned to the task"),
            ("list_name", "string", "Name of the list the task belongs to. One of: 'Backlog', "
             "'In Progress', 'In Review', 'Completed'"),
            ("due_date", "string", "Due date of the task in YYYY-MM-DD format"),
            ("board", "string", "Name of the board the task belongs to. One of: 'Back end', "
             "'Front end', 'Design'"),
        ],
        ["task_name", "assigned_to_email", "list_name", "due_date", "board"],
    ),
    (
        "project_management_delete_task", "delete",
        "Deletes a task by ID.",
        [("task_id", "string", "8-digit ID of the task")],
        ["task_id"],
    ),
    (
        "project_management_update_task", "update",
        "Updates a task by ID.",
        [
            ("task_id", "string", "8-digit ID of the task"),
            ("field", "string", "Field to update. Available fields are: 'task_name', "
             "'assigned_to_email', 'list_name', 'due_date', 'board'"),
            ("new_value", "string", "New value for the field"),
        ],
        ["task_id", "field", "new_value"],
    ),
    (
        "customer_relationship_manager_search_customers", "read",
        "Searches for customers based on the given parameters with pagination support.",
        [
            ("customer_name", "string", "Name of the customer"),
            ("customer_email", "string", "Email address of the customer"),
            ("product_interest", "string", "Product interest of the customer"),
            ("status", "string", "Current status of the customer"),
            ("assigned_to_email", "string",
             "Email address of the person assigned to the customer"),
            ("last_contact_date_min", "string", f"Minimum last contact date. {_DATE}"),
            ("last_contact_date_max", "string", f"Maximum last contact date. {_DATE}"),
            ("follow_up_by_min", "string", f"Minimum follow up date. {_DATE}"),
            ("follow_up_by_max", "string", f"Maximum follow up date. {_DATE}"),
            ("page", "integer", "Page number of results to return"),
            ("page_size", "integer", "Number of customers per page"),
        ],
        [],
    ),
    (
        "customer_relationship_manager_update_customer", "update",
        "Updates a customer record by ID.",
        [
            ("customer_id", "string", "ID of the customer"),
            ("field", "string", "Field to update. Available fields are: 'customer_name', "
             "'assigned_to_email', 'customer_email', 'customer_phone', 'last_contact_date', "
             "'product_interest', 'status', 'notes', 'follow_up_by'"),
            ("new_value", "string", "New value for the field"),
        ],
        ["customer_id", "field", "new_value"],
    ),
    (
        "customer_relationship_manager_add_customer", "create",
        "Adds a new customer record.",
        [
            ("customer_name", "string", "Name of the customer"),
            ("assigned_to_email", "string",
             "Email address of the person assigned to the customer"),
            ("status", "string", "Current status of the customer. One of: 'Qualified', 'Won', "
             "'Lost', 'Lead', 'Proposal'"),
            ("customer_email", "string", "Email address of the customer"),
            ("customer_phone", "string", "Phone number of the customer"),
            ("last_contact_date", "string",
             f"The last date the customer was contacted. {_DATE}"),
            ("product_interest", "string", "Product interest of the customer. One of: "
             "'Software', 'Hardware', 'Services', 'Consulting', 'Training'"),
            ("notes", "string", "Notes about the customer"),
            ("follow_up_by", "string", f"Date for the next follow up. {_DATE}"),
        ],
        ["customer_name", "assigned_to_email", "status"],
    ),
    (
        "customer_relationship_manager_delete_customer", "delete",
        "Deletes a customer record by ID.",
        [("customer_id", "string", "ID of the customer")],
        ["customer_id"],
    ),
]

OPERATIONS: dict[str, str] = {name: op for name, op, *_ in _RAW_TOOLS}
"""NeMo Gym's operation_type per tool: read, create, update or delete."""

TOOL_SPECS: tuple[ToolSpec, ...] = tuple(
    ToolSpec(
        name=name,
        description=description,
        parameters=_schema(params, required),
        writes=op != "read",
        destructive=op == "delete",
    )
    for name, op, description, params, required in _RAW_TOOLS
)
TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOL_SPECS}
WRITE_TOOLS: frozenset[str] = frozenset(s.name for s in TOOL_SPECS if s.writes)
DESTRUCTIVE_TOOLS: frozenset[str] = frozenset(s.name for s in TOOL_SPECS if s.destructive)


def toolkit_of(tool_name: str) -> str:
    """The toolkit a tool belongs to (its name prefix)."""
    for toolkit in TOOLKITS:
        if tool_name.startswith(toolkit + "_"):
            return toolkit
    raise KeyError(f"{tool_name!r} is not a workplace tool; known tools: {sorted(TOOLS_BY_NAME)}")


def tools_for(toolkits: list[str] | None = None) -> list[ToolSpec]:
    """The tools of the given toolkits (all 27 when None); the directory is always included."""
    if toolkits is None:
        return list(TOOL_SPECS)
    unknown = set(toolkits) - set(TOOLKITS)
    if unknown:
        raise ValueError(f"unknown workplace toolkit(s) {sorted(unknown)}; choose from {TOOLKITS}")
    wanted = {"company_directory", *toolkits}
    return [spec for spec in TOOL_SPECS if toolkit_of(spec.name) in wanted]
