"""WorkplaceVerifier: NeMo Gym's end-state reward, failure buckets, flags and state diff."""

from __future__ import annotations

import json

import pytest

from environments.types import FailureBucket, Task, Trajectory
from environments.workplace import WorkplaceEnvironment, WorkplaceVerifier
from environments.workplace.seed import seed_state
from environments.workplace.tools import TOOL_SPECS

BASE = seed_state()
CUSTOMERS = list(BASE.tables["customer_relationship_manager_data"].values())
EVENT = next(iter(BASE.tables["calendar_events"].values()))
PERSON = BASE.directory[3]


def call(tool, **arguments):
    return {"name": tool, "arguments": arguments}


def update_status(customer, status="Lost"):
    return call("customer_relationship_manager_update_customer",
                customer_id=customer["customer_id"], field="status", new_value=status)


def task(*truth):
    return Task(id="t", messages=[{"role": "user", "content": "do it"}], ground_truth=list(truth),
                environment="workplace")


def structured(*calls):
    return Trajectory(turns=[{"role": "assistant", "content": "", "tool_calls": list(calls)}])


def text(content, truncated=False):
    return Trajectory(turns=[{"role": "assistant", "content": content}], truncated=truncated)


LOOKUP = call("company_directory_find_email_address", name="maya")
A, B, C = [c for c in CUSTOMERS if c["status"] not in ("Lost", "Won")][:3]
TRUTH = (update_status(A), update_status(B))
SEND = call("email_send_email", recipient=PERSON, subject="Hi", body="Hello there")


@pytest.fixture(scope="module")
def verifier():
    return WorkplaceVerifier()


@pytest.mark.parametrize(("name", "truth", "trajectory", "passed", "bucket"), [
    ("exact", TRUTH, structured(LOOKUP, *TRUTH), True, None),
    ("reordered", TRUTH, structured(TRUTH[1], LOOKUP, TRUTH[0]), True, None),
    ("case_insensitive_body", (SEND,), structured(
        call("email_send_email", recipient=PERSON.upper(), subject="HI", body="hello THERE")), True, None),
    ("status_is_case_sensitive", (update_status(A, "Won"),), structured(update_status(A, "won")), False,
     FailureBucket.MISSING_CALL),
    ("dropped_write", TRUTH, structured(LOOKUP, TRUTH[0]), False, FailureBucket.MISSING_CALL),
    ("extra_update", TRUTH, structured(*TRUTH, update_status(C)), False, FailureBucket.EXTRA_WRITE),
    ("extra_send", TRUTH, structured(*TRUTH, SEND), False, FailureBucket.EXTRA_WRITE),
    ("unrequested_delete", TRUTH, structured(*TRUTH, call(
        "calendar_delete_event", event_id=EVENT["event_id"])), False, FailureBucket.UNSAFE_ACTION),
    ("requested_delete", (call("calendar_delete_event", event_id=EVENT["event_id"]),),
     structured(call("calendar_delete_event", event_id=EVENT["event_id"])), True, None),
    ("wrong_value", (update_status(A, "Won"),), structured(update_status(A, "Qualified")), False,
     FailureBucket.WRONG_ARGUMENTS),
    ("wrong_tool", (call("calendar_update_event", event_id=EVENT["event_id"], field="event_name",
                         new_value="Renamed"),),
     structured(call("calendar_create_event", event_name="Renamed", participant_email=PERSON,
                     event_start="2024-05-20 10:00:00", duration="30")), False, FailureBucket.EXTRA_WRITE),
    ("wrong_tool_same_counts", (SEND,), structured(call(
        "email_forward_email", email_id=next(iter(BASE.tables["emails"])), recipient=PERSON)),
     False, FailureBucket.WRONG_TOOL),
    ("no_call", TRUTH, text("I updated them."), False, FailureBucket.NO_TOOL_CALL),
    ("invalid_json", TRUTH, text("<tool_call>{'name': 'x'}</tool_call>"), False, FailureBucket.INVALID_JSON),
    ("unknown_tool", TRUTH, text('{"name": "crm_update", "arguments": {}}'), False, FailureBucket.UNKNOWN_TOOL),
    ("truncated", TRUTH, text('{"name": "customer_relationship_manager_update_customer", "argu', True),
     False, FailureBucket.TRUNCATED),
    ("raw_text_calls", TRUTH, text("".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in TRUTH)),
     True, None),
    ("failed_call_changes_nothing", TRUTH, structured(
        *TRUTH, call("customer_relationship_manager_delete_customer", customer_id="99999999")), True, None),
])
def test_verdicts_and_buckets(verifier, name, truth, trajectory, passed, bucket):
    result = verifier.verify(task(*truth), trajectory)
    assert result.passed is passed, (name, result.info)
    assert result.reward == (1.0 if passed else 0.0)
    assert result.failure_bucket == bucket, (name, result.info)
    assert result.components["state_match"] == (1.0 if passed else 0.0)


def test_generated_rows_match_by_content_not_creation_order(verifier):
    first = call("calendar_create_event", event_name="A", participant_email=PERSON,
                 event_start="2024-05-20 10:00:00", duration="30")
    second = call("calendar_create_event", event_name="B", participant_email=PERSON,
                  event_start="2024-05-21 10:00:00", duration="60")
    assert verifier.verify(task(first, second), structured(second, first)).passed
    assert not verifier.verify(task(first, second), structured(first, first)).passed


def test_plots_count_as_state(verifier):
    plot = call("analytics_create_plot", time_min="2024-04-01", time_max="2024-04-30",
                value_to_plot="total_visits", plot_type="bar")
    other = call("analytics_create_plot", time_min="2024-04-01", time_max="2024-05-30",
                 value_to_plot="total_visits", plot_type="bar")
    result = verifier.verify(task(plot), structured(other))
    assert not result.passed
    assert result.info["state_diff"]["plots"] == {
        "added": ["plots/2024-04-01_2024-05-30_total_visits_bar.png"],
        "removed": ["plots/2024-04-01_2024-04-30_total_visits_bar.png"], "changed": []}


def test_state_diff_shows_column_level_before_after(verifier):
    result = verifier.verify(task(update_status(A, "Won")), structured(update_status(A, "Qualified")))
    diff = result.info["state_diff"]["customer_relationship_manager_data"]
    assert diff["changed"] == [{"customer_id": A["customer_id"],
                                "columns": {"status": {"expected": "Won", "predicted": "Qualified"}}}]
    assert diff["added"] == [] and diff["removed"] == []
    assert verifier.verify(task(*TRUTH), structured(*TRUTH)).info["state_diff"] == {}


def test_unsafe_component_and_delete_listing(verifier):
    result = verifier.verify(task(*TRUTH), structured(
        *TRUTH, call("customer_relationship_manager_delete_customer", customer_id=C["customer_id"])))
    assert result.components["unsafe"] == 1.0
    assert result.info["unsafe_deletes"] == {"customer_relationship_manager_data": [C["customer_id"]]}


def test_unsafe_delete_is_flagged_even_when_another_bucket_wins(verifier):
    delete = call("customer_relationship_manager_delete_customer", customer_id=C["customer_id"])
    trajectory = Trajectory(turns=[{"role": "assistant", "content": "", "tool_calls": [*TRUTH, delete]}],
                            truncated=True)
    result = verifier.verify(task(*TRUTH), trajectory)
    assert result.failure_bucket == FailureBucket.TRUNCATED
    assert "unsafe_action" in result.flags


def test_no_write_ground_truth_is_flagged_and_empty_trajectory_passes(verifier):
    result = verifier.verify(task(LOOKUP), text("There is nothing to change."))
    assert result.passed and "no_write_ground_truth" in result.flags
    assert "no_write_ground_truth" not in verifier.verify(task(*TRUTH), structured(*TRUTH)).flags


def test_failing_ground_truth_is_flagged(verifier):
    bad = call("customer_relationship_manager_delete_customer", customer_id="99999999")
    assert "ground_truth_call_failed" in verifier.verify(task(bad), structured()).flags


def test_strict_mode_fails_on_parse_errors_even_when_state_matches():
    content = "Sure! " + json.dumps(TRUTH[0]) + " " + json.dumps(TRUTH[1])
    assert WorkplaceVerifier({"mode": "lenient"}).verify(task(*TRUTH), text(content)).passed
    strict = WorkplaceVerifier({"mode": "strict"}).verify(task(*TRUTH), text(content))
    assert not strict.passed and strict.failure_bucket == FailureBucket.INVALID_JSON


def test_bad_ground_truth_or_state_is_a_verifier_error_not_zero(tmp_path):
    broken = Task(id="b", messages=[], ground_truth={"name": "x"})
    result = WorkplaceVerifier().verify(broken, structured())
    assert result.reward is None and result.failure_bucket == FailureBucket.VERIFIER_ERROR
    unknown = WorkplaceVerifier().verify(Task(id="u", messages=[]), structured())
    assert unknown.reward is None and "no ground truth" in unknown.error
    missing = WorkplaceVerifier({"state_dir": str(tmp_path / "nope")}).verify(task(*TRUTH), structured())
    assert missing.reward is None and "does not exist" in missing.error
    with pytest.raises(ValueError, match="strict"):
        WorkplaceVerifier({"mode": "loose"})


def test_components_report_tools_and_write_success(verifier):
    result = verifier.verify(task(*TRUTH), structured(
        TRUTH[0], call("customer_relationship_manager_update_customer", customer_id="99999999",
                       field="status", new_value="Lost")))
    assert result.components["correct_tool"] == 1.0
    assert result.components["write_success"] == 0.5
    assert result.components["valid_json"] == 1.0


def test_environment_steps_and_renders_final_state():
    env = WorkplaceEnvironment()
    workplace_task = task(*TRUTH)
    assert [t.name for t in env.tools(workplace_task)] == [t.name for t in TOOL_SPECS]
    state = env.reset(workplace_task)
    from environments.types import ToolCall

    state, observation = env.step(state, ToolCall.from_dict(TRUTH[0]))
    assert json.loads(observation) == {"output": "Customer updated successfully."}
    final = env.final_state(state)
    json.dumps(final)
    row = next(r for r in final["customer_relationship_manager_data"] if r["customer_id"] == A["customer_id"])
    assert row["status"] == "Lost"
    assert env.final_state(env.reset(workplace_task))["customer_relationship_manager_data"][0] == CUSTOMERS[0]
