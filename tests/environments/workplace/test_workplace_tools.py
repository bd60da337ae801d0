"""The 27 workplace tools: schemas match NeMo Gym's; each tool's happy path and a failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from environments.workplace.sandbox import Sandbox
from environments.workplace.seed import SEED_NOW, seed_state
from environments.workplace.tools import (
    DESTRUCTIVE_TOOLS,
    OPERATIONS,
    TOOL_SPECS,
    WRITE_TOOLS,
    tools_for,
)

THIRD_PARTY = (Path(__file__).resolve().parents[3] / ".." / "shared" / "third_party"
               / "nemo_gym_workplace_assistant")

BASE = seed_state()
EMAIL = next(iter(BASE.tables["emails"].values()))
EVENT = next(iter(BASE.tables["calendar_events"].values()))
TASK = next(iter(BASE.tables["project_tasks"].values()))
CUSTOMER = next(iter(BASE.tables["customer_relationship_manager_data"].values()))
VISIT = BASE.analytics[0]
PERSON = BASE.directory[0]
ASSIGNEE = TASK["assigned_to_email"]


def _third_party_tools() -> dict[str, dict]:
    if not (THIRD_PARTY / "tools").is_dir():
        pytest.skip("NeMo Gym third-party fixtures are not present beside the checkout")
    tools = {}
    for path in sorted((THIRD_PARTY / "tools").glob("*.json")):
        for tool in json.loads(path.read_text()).get("tools", []):
            tools[tool["name"]] = tool
    return tools


def test_schemas_match_nemo_gym_names_parameters_required_and_operations():
    theirs = _third_party_tools()
    assert sorted(theirs) == sorted(spec.name for spec in TOOL_SPECS)
    for spec in TOOL_SPECS:
        tool = theirs[spec.name]
        assert list(spec.parameters["properties"]) == list(tool["parameters"]["properties"]), spec.name
        assert spec.parameters["required"] == tool["parameters"]["required"], spec.name
        assert spec.description == tool["description"], spec.name
        assert OPERATIONS[spec.name] == tool["operation_type"], spec.name
        assert spec.writes == (tool["operation_type"] != "read"), spec.name
        assert spec.destructive == (tool["operation_type"] == "delete"), spec.name


def test_write_and_destructive_sets():
    assert len(TOOL_SPECS) == 27
    assert {"email_send_email", "email_forward_email", "email_reply_email",
            "analytics_create_plot"} <= WRITE_TOOLS
    assert {
        "email_delete_email", "calendar_delete_event", "project_management_delete_task",
        "customer_relationship_manager_delete_customer",
    } == DESTRUCTIVE_TOOLS
    assert {t.name for t in tools_for(["email"])} == {
        "company_directory_find_email_address", *(n for n in OPERATIONS if n.startswith("email_"))
    }


# (tool, good arguments, check of the good result, bad arguments, expected error fragment)
CASES = [
    ("company_directory_find_email_address", {"name": PERSON.split(".")[0].upper()},
     lambda r, s: r == [PERSON], {"name": ""}, "Name not provided"),
    ("email_get_email_information_by_id", {"email_id": EMAIL["email_id"], "field": "subject"},
     lambda r, s: r == {"subject": EMAIL["subject"]}, {"email_id": "99999999", "field": "subject"},
     "Email not found"),
    ("email_search_emails", {"query": EMAIL["sender/recipient"], "page_size": 2},
     lambda r, s: len(r["emails"]) <= 2 and r["pagination"]["page_size"] == 2
     and all(e["sender/recipient"] == EMAIL["sender/recipient"] for e in r["emails"]),
     {"query": "x", "page_size": 0}, "at least 1"),
    ("email_send_email", {"recipient": "Someone@Example.com", "subject": "Hi", "body": "Hello"},
     lambda r, s: s.rows("emails")["00000500"]["sender/recipient"] == "someone@example.com"
     and s.rows("emails")["00000500"]["sent_datetime"] == SEED_NOW,
     {"recipient": "not-an-address", "subject": "Hi", "body": "Hello"}, "Invalid recipient"),
    ("email_delete_email", {"email_id": EMAIL["email_id"]},
     lambda r, s: EMAIL["email_id"] not in s.rows("emails"), {"email_id": "99999999"}, "Email not found"),
    ("email_forward_email", {"email_id": EMAIL["email_id"], "recipient": PERSON},
     lambda r, s: s.rows("emails")["00000500"]["subject"] == "FW: " + EMAIL["subject"],
     {"email_id": EMAIL["email_id"]}, "not provided"),
    ("email_reply_email", {"email_id": EMAIL["email_id"], "body": "Thanks"},
     lambda r, s: s.rows("emails")["00000500"]["sender/recipient"] == EMAIL["sender/recipient"]
     and s.rows("emails")["00000500"]["subject"] == "RE: " + EMAIL["subject"],
     {"email_id": "99999999", "body": "Thanks"}, "Email not found"),
    ("calendar_get_event_information_by_id", {"event_id": EVENT["event_id"], "field": "duration"},
     lambda r, s: r == {"duration": EVENT["duration"]}, {"event_id": "12", "field": "duration"},
     "8-digit"),
    ("calendar_search_events", {"query": EVENT["participant_email"].upper()},
     lambda r, s: all(e["participant_email"] == EVENT["participant_email"] for e in r["events"])
     and [e["event_start"] for e in r["events"]] == sorted((e["event_start"] for e in r["events"]), reverse=True),
     {"time_min": "next tuesday"}, "Invalid time_min"),
    ("calendar_create_event", {"event_name": "Sync", "participant_email": PERSON.upper(),
                               "event_start": "2024-05-20 10:00:00", "duration": "30"},
     lambda r, s: r == "00000300" and s.rows("calendar_events")[r]["participant_email"] == PERSON,
     {"event_name": "Sync", "participant_email": PERSON, "event_start": "2024-05-20 10:00:00",
      "duration": "-5"}, "positive"),
    ("calendar_delete_event", {"event_id": EVENT["event_id"]},
     lambda r, s: EVENT["event_id"] not in s.rows("calendar_events"), {"event_id": "99999999"},
     "Event not found"),
    ("calendar_update_event", {"event_id": EVENT["event_id"], "field": "event_name", "new_value": "X"},
     lambda r, s: s.rows("calendar_events")[EVENT["event_id"]]["event_name"] == "X",
     {"event_id": EVENT["event_id"], "field": "event_id", "new_value": "00000001"}, "Invalid field"),
    ("analytics_get_visitor_information_by_id", {"visitor_id": VISIT["visitor_id"]},
     lambda r, s: r[0]["visitor_id"] == VISIT["visitor_id"] and isinstance(r[0]["user_engaged"], bool),
     {"visitor_id": "nobody"}, "Visitor not found"),
    ("analytics_create_plot", {"time_min": "2024-04-01", "time_max": "2024-04-30",
                               "value_to_plot": "total_visits", "plot_type": "bar"},
     lambda r, s: s.store.plots == ["plots/2024-04-01_2024-04-30_total_visits_bar.png"],
     {"time_min": "2024-04-01", "time_max": "2024-04-30", "value_to_plot": "total_visits",
      "plot_type": "pie"}, "Plot type"),
    ("analytics_total_visits_count", {"time_min": "2024-04-01", "time_max": "2024-04-30"},
     lambda r, s: sum(r.values()) == sum("2024-04-01" <= v["date_of_visit"] <= "2024-04-30"
                                         for v in BASE.analytics),
     {"time_min": ["2024-04-01"]}, "must be a string"),
    ("analytics_engaged_users_count", {"time_min": "2024-04-01"},
     lambda r, s: sum(r.values()) == sum(v["date_of_visit"] >= "2024-04-01" and v["user_engaged"] == "True"
                                         for v in BASE.analytics),
     {"time_max": ["2024"]}, "must be a string"),
    ("analytics_traffic_source_count", {"traffic_source": "referral"},
     lambda r, s: sum(r.values()) == sum(v["traffic_source"] == "referral" for v in BASE.analytics),
     {"traffic_source": "referral", "source": "x"}, "unexpected argument"),
    ("analytics_get_average_session_duration", {"time_max": "2024-03-01"},
     lambda r, s: all(0 < d <= 30 for d in r.values()) and all(k <= "2024-03-01" for k in r),
     {"time_min": {"a": 1}}, "must be a string"),
    ("project_management_get_task_information_by_id", {"task_id": TASK["task_id"], "field": "board"},
     lambda r, s: r == {"board": TASK["board"]}, {"task_id": TASK["task_id"], "field": "owner"},
     "Field not found"),
    ("project_management_search_tasks", {"assigned_to_email": ASSIGNEE.upper()},
     lambda r, s: r and all(t["assigned_to_email"] == ASSIGNEE for t in r), {}, "No search parameters"),
    ("project_management_create_task", {"task_name": "New", "assigned_to_email": ASSIGNEE,
                                        "list_name": "Backlog", "due_date": "2024-06-01", "board": "Design"},
     lambda r, s: r == "00000200" and s.rows("project_tasks")[r]["task_name"] == "New",
     {"task_name": "New", "assigned_to_email": ASSIGNEE, "list_name": "backlog",
      "due_date": "2024-06-01", "board": "Design"}, "List not valid"),
    ("project_management_delete_task", {"task_id": TASK["task_id"]},
     lambda r, s: TASK["task_id"] not in s.rows("project_tasks"), {"task_id": "99999999"},
     "Task not found"),
    ("project_management_update_task", {"task_id": TASK["task_id"], "field": "list_name",
                                        "new_value": "Completed"},
     lambda r, s: s.rows("project_tasks")[TASK["task_id"]]["list_name"] == "Completed",
     {"task_id": TASK["task_id"], "field": "assigned_to_email", "new_value": "stranger@nowhere.com"},
     "Assignee email not valid"),
    ("customer_relationship_manager_search_customers",
     {"customer_name": CUSTOMER["customer_name"].lower(), "page": 9},
     lambda r, s: r["customers"][0]["customer_id"] == CUSTOMER["customer_id"] and r["pagination"]["page"] == 1,
     {"page": 1}, "No search parameters"),
    ("customer_relationship_manager_update_customer",
     {"customer_id": CUSTOMER["customer_id"], "field": "assigned_to_email", "new_value": "A@B.COM"},
     lambda r, s: s.rows("customer_relationship_manager_data")[CUSTOMER["customer_id"]]["assigned_to_email"] == "a@b.com",
     {"customer_id": CUSTOMER["customer_id"], "field": "status", "new_value": "won"}, "Status not valid"),
    ("customer_relationship_manager_add_customer",
     {"customer_name": "Pat Doe", "assigned_to_email": PERSON, "status": "Lead"},
     lambda r, s: r == "00000200" and s.rows("customer_relationship_manager_data")[r]["notes"] == "",
     {"customer_name": "Pat Doe", "status": "Lead"}, "required fields"),
    ("customer_relationship_manager_delete_customer", {"customer_id": CUSTOMER["customer_id"]},
     lambda r, s: CUSTOMER["customer_id"] not in s.rows("customer_relationship_manager_data"),
     {"customer_id": "99999999"}, "Customer not found"),
]


def test_every_tool_has_a_case():
    assert sorted(c[0] for c in CASES) == sorted(spec.name for spec in TOOL_SPECS)


@pytest.mark.parametrize(("tool", "good", "check", "bad", "error"), CASES, ids=[c[0] for c in CASES])
def test_tool_happy_path_and_failure(tool, good, check, bad, error):
    sandbox = Sandbox(BASE)
    ok, result = sandbox.call(tool, good)
    assert ok, result
    assert check(result, sandbox), result

    fresh = Sandbox(BASE)
    ok, message = fresh.call(tool, bad)
    assert not ok
    assert error in message
    assert all(fresh.store.is_pristine(t) for t in BASE.tables) and fresh.store.plots == []


def test_writes_never_touch_the_shared_base():
    before = dict(BASE.tables["emails"][EMAIL["email_id"]])
    sandbox = Sandbox(BASE)
    sandbox.call("email_delete_email", {"email_id": EMAIL["email_id"]})
    sandbox.call("calendar_update_event", {"event_id": EVENT["event_id"], "field": "duration", "new_value": "45"})
    assert BASE.tables["emails"][EMAIL["email_id"]] == before
    assert BASE.tables["calendar_events"][EVENT["event_id"]]["duration"] == EVENT["duration"]
    assert Sandbox(BASE).rows("emails") is BASE.tables["emails"]


def test_new_ids_are_max_plus_one_and_reuse_a_deleted_maximum():
    sandbox = Sandbox(BASE)
    assert sandbox.call("project_management_delete_task", {"task_id": "00000199"})[0]
    args = {"task_name": "T", "assigned_to_email": ASSIGNEE, "list_name": "Backlog",
            "due_date": "2024-06-01", "board": "Design"}
    assert sandbox.call("project_management_create_task", args) == (True, "00000199")


def test_observation_is_nemo_gym_output_json():
    ok, text = Sandbox(BASE).observe("email_delete_email", {"email_id": EMAIL["email_id"]})
    assert ok and json.loads(text) == {"output": "Email deleted successfully."}
    ok, text = Sandbox(BASE).observe("no_such_tool", {})
    assert not ok and "Unknown tool" in json.loads(text)["output"]


def test_none_arguments_are_dropped_like_nemo_gym():
    sandbox = Sandbox(BASE)
    ok, new_id = sandbox.call("customer_relationship_manager_add_customer", {
        "customer_name": "Pat", "assigned_to_email": PERSON, "status": "Lead", "notes": None})
    assert ok and sandbox.rows("customer_relationship_manager_data")[new_id]["notes"] == ""
