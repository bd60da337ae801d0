"""The 27 workplace tools, implemented over a copy-on-write Store.

Behaviour follows NeMo Gym's workplace_assistant implementation: the same validation
rules, the same messages, the same id scheme, the same search ordering and paging, and
the same lower-casing of addresses on write. A call that fails raises ToolError inside
and returns its message as the observation; it changes nothing (every handler validates
before it writes). Arguments that are None are dropped first, as NeMo Gym's server does.

Deliberate differences, where NeMo Gym's behaviour comes from pandas rather than intent:
substring searches are literal (pandas treats the query as a regular expression), missing
cells never match a search (pandas raises), numbers given for string fields are stored as
their text, and `update` tools accept only the fields their schema lists (pandas also
allowed the id column, which could create duplicate ids).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from environments.workplace.state import BaseState, Row, Store
from environments.workplace.tools import TOOLS_BY_NAME, WRITE_TOOLS

EMAILS = "emails"
EVENTS = "calendar_events"
TASKS = "project_tasks"
CRM = "customer_relationship_manager_data"

EMAIL_FIELDS = ("email_id", "inbox/outbox", "sender/recipient", "subject", "sent_datetime", "body")
EVENT_FIELDS = ("event_id", "event_name", "participant_email", "event_start", "duration")
EVENT_UPDATE_FIELDS = ("event_name", "participant_email", "event_start", "duration")
TASK_FIELDS = ("task_id", "task_name", "assigned_to_email", "list_name", "due_date", "board")
TASK_UPDATE_FIELDS = ("task_name", "assigned_to_email", "list_name", "due_date", "board")
CUSTOMER_UPDATE_FIELDS = (
    "customer_name", "assigned_to_email", "customer_email", "customer_phone",
    "last_contact_date", "product_interest", "status", "notes", "follow_up_by",
)
LISTS = ("Backlog", "In Progress", "In Review", "Completed")
BOARDS = ("Back end", "Front end", "Design")
STATUSES = ("Qualified", "Won", "Lost", "Lead", "Proposal")
PRODUCTS = ("Software", "Hardware", "Services", "Consulting", "Training")
TRAFFIC_SOURCES = ("direct", "referral", "search engine", "social media")
PLOT_VALUES = (
    "total_visits", "session_duration_seconds", "user_engaged", "visits_direct",
    "visits_referral", "visits_search_engine", "visits_social_media",
)
PLOT_TYPES = ("bar", "line", "scatter", "histogram")
_EMAIL_PATTERN = re.compile(r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$")


class ToolError(Exception):
    """A tool call the tool itself refused: the message goes back to the model."""


def _text(value: Any, name: str) -> str:
    """A string argument; numbers are accepted as their text, anything else is refused."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError(f"Argument '{name}' must be a string.")
    return str(value)


def _integer(value: Any, name: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ToolError(f"Argument '{name}' must be an integer.") from None
    if number < 1:
        raise ToolError(f"Argument '{name}' must be at least 1.")
    return number


def _when(value: str, message: str) -> datetime:
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        raise ToolError(message) from None


def _is_eight_digits(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 8 and value.isdigit()


def _valid_address(address: str) -> bool:
    return "@" in address and "." in address


def _page(items: list[Any], page: Any, page_size: Any, noun: str) -> dict[str, Any]:
    """NeMo Gym's paging: out-of-range pages are clamped to the first or last page."""
    size = _integer(page_size, "page_size")
    total = len(items)
    pages = (total + size - 1) // size
    number = max(1, min(_integer(page, "page"), pages)) if pages else 1
    start = (number - 1) * size
    return {
        noun: items[start:start + size],
        "pagination": {
            f"total_{noun}": total, "page": number, "page_size": size, "total_pages": pages,
        },
    }


def _contains(cell: str | None, needle: str) -> bool:
    return cell is not None and needle in cell.lower()


class Sandbox:
    """One workplace: call tools by name; inspect the Store for what changed."""

    __slots__ = ("store",)

    def __init__(self, base: BaseState) -> None:
        self.store = Store(base)

    @property
    def base(self) -> BaseState:
        return self.store.base

    def call(self, name: str, arguments: dict[str, Any] | None) -> tuple[bool, Any]:
        """Run one tool call; (ok, result). A failed call returns its message, changes nothing."""
        handler = _HANDLERS.get(name)
        if handler is None:
            return False, f"Unknown tool '{name}'. Available tools: {', '.join(TOOLS_BY_NAME)}"
        if not isinstance(arguments, dict):
            return False, f"Arguments of '{name}' must be a JSON object."
        args = {k: v for k, v in arguments.items() if v is not None}
        allowed = TOOLS_BY_NAME[name].parameters["properties"]
        unexpected = sorted(set(args) - set(allowed))
        if unexpected:
            return False, (
                f"Error executing tool '{name}': unexpected argument(s) {unexpected}; "
                f"allowed: {sorted(allowed)}"
            )
        try:
            return True, handler(self, **args)
        except ToolError as exc:
            return False, str(exc)
        except (TypeError, ValueError, AttributeError) as exc:
            return False, f"Error executing tool '{name}': {exc}"

    def observe(self, name: str, arguments: dict[str, Any] | None) -> tuple[bool, str]:
        """Run a call and render its result as NeMo Gym's tool output: {"output": ...}."""
        ok, result = self.call(name, arguments)
        return ok, json.dumps({"output": result}, ensure_ascii=False, default=str)

    def apply_writes(self, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, Any]]:
        """Replay only the state-changing calls (reads cannot change the end state)."""
        return [self.call(name, args) for name, args in calls if name in WRITE_TOOLS]

    def rows(self, table: str) -> dict[str, Row]:
        return self.store.tables[table]

    # ------------------------------------------------------------------ directory

    def company_directory_find_email_address(self, name: Any = "") -> list[str]:
        needle = _text(name, "name").lower()
        if needle == "":
            raise ToolError("Name not provided.")
        return [address for address in self.base.directory if needle in address]

    # ------------------------------------------------------------------ email

    def email_get_email_information_by_id(self, email_id: Any = None, field: Any = None) -> dict:
        if not email_id:
            raise ToolError("Email ID not provided.")
        if not field:
            raise ToolError("Field not provided.")
        email = self.rows(EMAILS).get(email_id)
        if email is None:
            raise ToolError("Email not found.")
        if field not in EMAIL_FIELDS:
            raise ToolError(f"Field '{field}' not found. Available fields: {', '.join(EMAIL_FIELDS)}")
        return {field: email[field]}

    def email_search_emails(
        self, query: Any = "", date_min: Any = None, date_max: Any = None,
        page: Any = 1, page_size: Any = 5,
    ) -> dict | str:
        words = _text(query, "query").lower().split()
        low = _when(_text(date_min, "date_min"), "Invalid date_min.").date() if date_min else None
        high = _when(_text(date_max, "date_max"), "Invalid date_max.").date() if date_max else None
        found = []
        for email in self.rows(EMAILS).values():
            combined = f"{email['subject']} {email['body']} {email['sender/recipient']}".lower()
            if not all(word in combined for word in words):
                continue
            sent = datetime.fromisoformat(email["sent_datetime"])
            if (low and sent.date() < low) or (high and sent.date() > high):
                continue
            found.append((sent, email))
        found.sort(key=lambda pair: pair[0], reverse=True)
        if not found:
            return "No emails found."
        return _page([dict(email) for _, email in found], page, page_size, "emails")

    def _send(self, recipient: str, subject: str, body: str) -> str:
        return self.store.insert(EMAILS, {
            "inbox/outbox": "outbox",
            "sender/recipient": recipient.lower(),
            "subject": subject,
            "sent_datetime": self.base.now,
            "body": body,
        })

    def email_send_email(self, recipient: Any = None, subject: Any = None, body: Any = None) -> str:
        if not recipient or not subject or not body:
            raise ToolError("Recipient, subject, or body not provided.")
        recipient = _text(recipient, "recipient")
        if not _valid_address(recipient):
            raise ToolError("Invalid recipient email address.")
        self._send(recipient, _text(subject, "subject"), _text(body, "body"))
        return "Email sent successfully."

    def email_delete_email(self, email_id: Any = None) -> str:
        if not email_id:
            raise ToolError("Email ID not provided.")
        if email_id not in self.rows(EMAILS):
            raise ToolError("Email not found.")
        self.store.delete(EMAILS, email_id)
        return "Email deleted successfully."

    def email_forward_email(self, email_id: Any = None, recipient: Any = None) -> str:
        if not email_id or not recipient:
            raise ToolError("Email ID or recipient not provided.")
        recipient = _text(recipient, "recipient")
        if not _valid_address(recipient):
            raise ToolError("Invalid recipient email address.")
        email = self.rows(EMAILS).get(email_id)
        if email is None:
            raise ToolError("Email not found.")
        self._send(recipient, f"FW: {email['subject']}", email["body"])
        return "Email forwarded successfully."

    def email_reply_email(self, email_id: Any = None, body: Any = None) -> str:
        if not email_id or not body:
            raise ToolError("Email ID or body not provided.")
        email = self.rows(EMAILS).get(email_id)
        if email is None:
            raise ToolError("Email not found.")
        self._send(email["sender/recipient"], f"RE: {email['subject']}", _text(body, "body"))
        return "Email replied successfully."

    # ------------------------------------------------------------------ calendar

    def _event_id(self, event_id: Any) -> str:
        if not _is_eight_digits(event_id):
            raise ToolError("Invalid event ID format. Expected 8-digit ID.")
        return event_id

    def calendar_get_event_information_by_id(self, event_id: Any = None, field: Any = None) -> dict:
        if not event_id:
            raise ToolError("Event ID not provided.")
        if not field:
            raise ToolError("Field not provided.")
        self._event_id(event_id)
        if field not in EVENT_FIELDS:
            raise ToolError(f"Invalid field. Available fields are: {', '.join(EVENT_FIELDS)}")
        event = self.rows(EVENTS).get(event_id)
        if event is None:
            raise ToolError("Event not found.")
        return {field: event[field]}

    def calendar_search_events(
        self, query: Any = "", time_min: Any = None, time_max: Any = None,
        page: Any = 1, page_size: Any = 5,
    ) -> dict | str:
        low = (_when(_text(time_min, "time_min"), "Invalid time_min format. Expected "
                     "YYYY-MM-DD HH:MM:SS.") if time_min else None)
        high = (_when(_text(time_max, "time_max"), "Invalid time_max format. Expected "
                      "YYYY-MM-DD HH:MM:SS.") if time_max else None)
        needle = _text(query, "query").lower()
        found = []
        for event in self.rows(EVENTS).values():
            if not (_contains(event["event_name"], needle)
                    or _contains(event["participant_email"], needle)):
                continue
            start = datetime.fromisoformat(event["event_start"])
            if (low and start < low) or (high and start > high):
                continue
            found.append((start, event))
        if not found:
            return "No events found."
        found.sort(key=lambda pair: pair[0], reverse=True)
        return _page([dict(event) for _, event in found], page, page_size, "events")

    @staticmethod
    def _duration(value: Any) -> str:
        text = _text(value, "duration")
        try:
            minutes = int(text)
        except ValueError:
            raise ToolError("Invalid duration format. Expected a number of minutes.") from None
        if minutes <= 0:
            raise ToolError("Duration must be a positive number of minutes.")
        return text

    def calendar_create_event(
        self, event_name: Any = None, participant_email: Any = None,
        event_start: Any = None, duration: Any = None,
    ) -> str:
        for value, label in ((event_name, "Event name"), (participant_email, "Participant email"),
                             (event_start, "Event start"), (duration, "Event duration")):
            if not value:
                raise ToolError(f"{label} not provided.")
        start = _text(event_start, "event_start")
        _when(start, "Invalid event_start format. Expected YYYY-MM-DD HH:MM:SS.")
        return self.store.insert(EVENTS, {
            "event_name": _text(event_name, "event_name"),
            "participant_email": _text(participant_email, "participant_email").lower(),
            "event_start": start,
            "duration": self._duration(duration),
        })

    def calendar_delete_event(self, event_id: Any = None) -> str:
        if not event_id:
            raise ToolError("Event ID not provided.")
        if self._event_id(event_id) not in self.rows(EVENTS):
            raise ToolError("Event not found.")
        self.store.delete(EVENTS, event_id)
        return "Event deleted successfully."

    def calendar_update_event(self, event_id: Any = None, field: Any = None, new_value: Any = None) -> str:
        if not event_id or not field or not new_value:
            raise ToolError("Event ID, field, or new value not provided.")
        self._event_id(event_id)
        if field not in EVENT_UPDATE_FIELDS:
            raise ToolError(f"Invalid field. Available fields are: {', '.join(EVENT_UPDATE_FIELDS)}")
        value = _text(new_value, "new_value")
        if field == "event_start":
            _when(value, "Invalid event_start format. Expected YYYY-MM-DD HH:MM:SS.")
        elif field == "duration":
            value = self._duration(value)
        elif field == "participant_email":
            value = value.lower()
        if event_id not in self.rows(EVENTS):
            raise ToolError("Event not found.")
        self.store.update(EVENTS, event_id, {field: value})
        return "Event updated successfully."

    # ------------------------------------------------------------------ analytics

    def _visits(self, time_min: Any, time_max: Any) -> list[Row]:
        low = _text(time_min, "time_min") if time_min else None
        high = _text(time_max, "time_max") if time_max else None
        return [
            row for row in self.base.analytics
            if (low is None or row["date_of_visit"] >= low)
            and (high is None or row["date_of_visit"] <= high)
        ]

    @staticmethod
    def _per_day(rows: list[Row], value: Callable[[Row], float]) -> dict[str, float]:
        totals: dict[str, float] = {}
        for row in sorted(rows, key=lambda r: r["date_of_visit"]):
            day = row["date_of_visit"]
            totals[day] = totals.get(day, 0) + value(row)
        return totals

    def analytics_get_visitor_information_by_id(self, visitor_id: Any = None) -> list[Row]:
        if not visitor_id:
            raise ToolError("Visitor ID not provided.")
        visits = [
            {**row, "user_engaged": row["user_engaged"] == "True"}
            for row in self.base.analytics if row["visitor_id"] == visitor_id
        ]
        if not visits:
            raise ToolError("Visitor not found.")
        return visits

    def analytics_create_plot(
        self, time_min: Any = None, time_max: Any = None,
        value_to_plot: Any = None, plot_type: Any = None,
    ) -> str:
        if not time_min:
            raise ToolError("Start date not provided.")
        if not time_max:
            raise ToolError("End date not provided.")
        if value_to_plot not in PLOT_VALUES:
            raise ToolError("Value to plot must be one of " + ", ".join(f"'{v}'" for v in PLOT_VALUES))
        if plot_type not in PLOT_TYPES:
            raise ToolError("Plot type must be one of 'bar', 'line', 'scatter', or 'histogram'")
        path = f"plots/{_text(time_min, 'time_min')}_{_text(time_max, 'time_max')}_{value_to_plot}_{plot_type}.png"
        self.store.plots.append(path)
        return path

    def analytics_total_visits_count(self, time_min: Any = None, time_max: Any = None) -> dict:
        return {d: int(n) for d, n in self._per_day(self._visits(time_min, time_max), lambda r: 1).items()}

    def analytics_engaged_users_count(self, time_min: Any = None, time_max: Any = None) -> dict:
        rows = self._visits(time_min, time_max)
        return {d: int(n) for d, n in self._per_day(rows, lambda r: r["user_engaged"] == "True").items()}

    def analytics_traffic_source_count(
        self, time_min: Any = None, time_max: Any = None, traffic_source: Any = None,
    ) -> dict:
        rows = self._visits(time_min, time_max)
        if traffic_source:
            counts = self._per_day(rows, lambda r: r["traffic_source"] == traffic_source)
        else:
            counts = self._per_day(rows, lambda r: 1)
        return {d: int(n) for d, n in counts.items()}

    def analytics_get_average_session_duration(self, time_min: Any = None, time_max: Any = None) -> dict:
        rows = self._visits(time_min, time_max)
        totals = self._per_day(rows, lambda r: float(r["session_duration_seconds"]))
        counts = self._per_day(rows, lambda r: 1)
        return {d: totals[d] / counts[d] for d in totals}

    # ------------------------------------------------------------------ project management

    def _assignees(self) -> set[str]:
        return {(t["assigned_to_email"] or "").lower() for t in self.rows(TASKS).values()}

    def project_management_get_task_information_by_id(self, task_id: Any = None, field: Any = None) -> dict:
        if not task_id:
            raise ToolError("Task ID not provided.")
        if not field:
            raise ToolError("Field not provided.")
        task = self.rows(TASKS).get(task_id)
        if task is None:
            raise ToolError("Task not found.")
        if field not in TASK_FIELDS:
            raise ToolError("Field not found.")
        return {field: task[field]}

    def project_management_search_tasks(
        self, task_name: Any = None, assigned_to_email: Any = None, list_name: Any = None,
        due_date: Any = None, board: Any = None,
    ) -> list[Row]:
        if not any([task_name, assigned_to_email, list_name, due_date, board]):
            raise ToolError("No search parameters provided.")
        if assigned_to_email and not _EMAIL_PATTERN.match(_text(assigned_to_email, "assigned_to_email")):
            raise ToolError("Invalid email format for assigned_to_email.")
        filters = [
            (column, _text(value, column).lower())
            for column, value in (("task_name", task_name), ("list_name", list_name),
                                  ("due_date", due_date), ("board", board))
            if value
        ]
        assignee = assigned_to_email.lower() if assigned_to_email else None
        return [
            dict(task) for task in self.rows(TASKS).values()
            if (assignee is None or (task["assigned_to_email"] or "").lower() == assignee)
            and all(_contains(task[column], needle) for column, needle in filters)
        ]

    def project_management_create_task(
        self, task_name: Any = None, assigned_to_email: Any = None, list_name: Any = None,
        due_date: Any = None, board: Any = None,
    ) -> str:
        if not all([task_name, assigned_to_email, list_name, due_date, board]):
            raise ToolError("Missing task details.")
        assignee = _text(assigned_to_email, "assigned_to_email").lower()
        if assignee not in self._assignees():
            raise ToolError("Assignee email not valid. Please choose from the list of team members.")
        if list_name not in LISTS:
            raise ToolError("List not valid. Please choose from: 'Backlog', 'In Progress', 'In Review', 'Completed'.")
        if board not in BOARDS:
            raise ToolError("Board not valid. Please choose from: 'Back end', 'Front end', 'Design'.")
        return self.store.insert(TASKS, {
            "task_name": _text(task_name, "task_name"),
            "assigned_to_email": assignee,
            "list_name": list_name,
            "due_date": _text(due_date, "due_date"),
            "board": board,
        })

    def project_management_delete_task(self, task_id: Any = None) -> str:
        if not task_id:
            raise ToolError("Task ID not provided.")
        if task_id not in self.rows(TASKS):
            raise ToolError("Task not found.")
        self.store.delete(TASKS, task_id)
        return "Task deleted successfully."

    def project_management_update_task(self, task_id: Any = None, field: Any = None, new_value: Any = None) -> str:
        if not task_id or not field or not new_value:
            raise ToolError("Task ID, field, or new value not provided.")
        value = _text(new_value, "new_value")
        if field == "assigned_to_email":
            value = value.lower()
        if field == "board" and value not in BOARDS:
            raise ToolError("Board not valid. Please choose from: 'Back end', 'Front end', 'Design'.")
        if field == "list_name" and value not in LISTS:
            raise ToolError("List not valid. Please choose from: 'Backlog', 'In Progress', 'In Review', 'Completed'.")
        if field == "assigned_to_email" and value not in self._assignees():
            raise ToolError("Assignee email not valid. Please choose from the list of team members.")
        if task_id not in self.rows(TASKS):
            raise ToolError("Task not found.")
        if field not in TASK_UPDATE_FIELDS:
            raise ToolError(f"Field not valid. Available fields are: {', '.join(TASK_UPDATE_FIELDS)}")
        self.store.update(TASKS, task_id, {field: value})
        return "Task updated successfully."

    # ------------------------------------------------------------------ CRM

    def customer_relationship_manager_search_customers(
        self, customer_name: Any = None, customer_email: Any = None, product_interest: Any = None,
        status: Any = None, assigned_to_email: Any = None, last_contact_date_min: Any = None,
        last_contact_date_max: Any = None, follow_up_by_min: Any = None,
        follow_up_by_max: Any = None, page: Any = 1, page_size: Any = 5,
    ) -> dict | str:
        contains = [
            (column, _text(value, column).lower())
            for column, value in (
                ("customer_name", customer_name), ("customer_email", customer_email),
                ("product_interest", product_interest), ("status", status),
                ("assigned_to_email", assigned_to_email),
            )
            if value
        ]
        bounds = [
            (column, _text(value, name), is_min)
            for column, value, name, is_min in (
                ("last_contact_date", last_contact_date_min, "last_contact_date_min", True),
                ("last_contact_date", last_contact_date_max, "last_contact_date_max", False),
                ("follow_up_by", follow_up_by_min, "follow_up_by_min", True),
                ("follow_up_by", follow_up_by_max, "follow_up_by_max", False),
            )
            if value
        ]
        if not contains and not bounds:
            raise ToolError("No search parameters provided. Please provide at least one parameter.")
        found = [
            dict(customer) for customer in self.rows(CRM).values()
            if all(_contains(customer[column], needle) for column, needle in contains)
            and all(_within(customer[column], bound, is_min) for column, bound, is_min in bounds)
        ]
        if not found:
            return "No customers found."
        return _page(found, page, page_size, "customers")

    def customer_relationship_manager_update_customer(
        self, customer_id: Any = None, field: Any = None, new_value: Any = None,
    ) -> str:
        if not customer_id or not field or not new_value:
            raise ToolError("Customer ID, field, or new value not provided.")
        value = _text(new_value, "new_value")
        if field == "status" and value not in STATUSES:
            raise ToolError("Status not valid. Please choose from: 'Qualified', 'Won', 'Lost', 'Lead', 'Proposal'")
        if field == "product_interest" and value not in PRODUCTS:
            raise ToolError("Product interest not valid. Please choose from: 'Software', 'Hardware', 'Services', 'Consulting', 'Training'")
        if field in ("customer_email", "assigned_to_email"):
            value = value.lower()
        if customer_id not in self.rows(CRM):
            raise ToolError("Customer not found.")
        if field not in CUSTOMER_UPDATE_FIELDS:
            raise ToolError("Field not valid. Please choose from: " + ", ".join(f"'{f}'" for f in CUSTOMER_UPDATE_FIELDS))
        self.store.update(CRM, customer_id, {field: value})
        return "Customer updated successfully."

    def customer_relationship_manager_add_customer(
        self, customer_name: Any = None, assigned_to_email: Any = None, status: Any = None,
        customer_email: Any = None, customer_phone: Any = None, last_contact_date: Any = None,
        product_interest: Any = None, notes: Any = "", follow_up_by: Any = None,
    ) -> str:
        if not all([customer_name, assigned_to_email, status]):
            raise ToolError("Please provide all required fields: customer_name, assigned_to_email, status.")

        def optional(value: Any, name: str) -> str | None:
            return None if value is None else _text(value, name)

        email = optional(customer_email, "customer_email")
        return self.store.insert(CRM, {
            "assigned_to_email": _text(assigned_to_email, "assigned_to_email").lower(),
            "customer_name": _text(customer_name, "customer_name"),
            "customer_email": email.lower() if email else email,
            "customer_phone": optional(customer_phone, "customer_phone"),
            "last_contact_date": optional(last_contact_date, "last_contact_date"),
            "product_interest": optional(product_interest, "product_interest"),
            "status": _text(status, "status"),
            "follow_up_by": optional(follow_up_by, "follow_up_by"),
            "notes": _text(notes, "notes"),
        })

    def customer_relationship_manager_delete_customer(self, customer_id: Any = None) -> str:
        if not customer_id:
            raise ToolError("Customer ID not provided.")
        if customer_id not in self.rows(CRM):
            raise ToolError("Customer not found.")
        self.store.delete(CRM, customer_id)
        return "Customer deleted successfully."


def _within(cell: str | None, bound: str, is_min: bool) -> bool:
    """NeMo Gym compares these dates as strings; a missing cell matches no bound."""
    if cell is None:
        return False
    return cell >= bound if is_min else cell <= bound


_HANDLERS: dict[str, Callable[..., Any]] = {name: getattr(Sandbox, name) for name in TOOLS_BY_NAME}
