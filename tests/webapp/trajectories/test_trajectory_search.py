"""Trajectory search: prompts, outputs and tool-call arguments, with every other filter, on both databases."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.urls import reverse
from pipeline_data import make_pipeline_project

from webapp.runs.models import Run
from webapp.runs.services.ingest import EventIngestor
from webapp.trajectories.models import SEARCH_TEXT_LIMIT, Trajectory, search_text_of_turns
from webapp.trajectories.selectors.trajectories import (
    FilterError,
    TrajectoryFilter,
    filtered_trajectories,
    matches_search,
    search_match,
)
from webapp.trajectories.services.review import queue_create
from webapp.trajectories.services.search_text import search_text_refresh


def _event(task: str, turns: list[dict], *, passed: bool, step: int = 1) -> dict:
    return {"type": "trajectory", "seq": 0, "time": time.time(), "task_id": task, "sample_index": 0, "step": step,
            "split": "train", "turns": turns, "reward": 1.0 if passed else 0.0, "passed": passed,
            "failure_bucket": None if passed else "wrong_arguments"}


def _call(name: str, arguments) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


@pytest.fixture
def stored(project_team):
    """Two runs of trajectories ingested the way a worker stores them (COPY on PostgreSQL)."""
    project = project_team["project"]
    first = Run.objects.create(project=project, name="first", kind="grpo")
    second = Run.objects.create(project=project, name="second", kind="grpo")
    EventIngestor(first, attempt=1).ingest([
        _event("mail", [{"role": "user", "content": "Email Alice about the <launch>"},
                        _call("email_send", {"to": "Alice@Example.com", "subject": "Launch"})], passed=True),
        _event("crm", [{"role": "user", "content": "Move Acme to won"},
                       _call("crm_update", '{"customer": "acme", "status": "lost"}')], passed=False),
        _event("cal", [{"role": "user", "content": [{"type": "text", "text": "Book a room for the review"}]},
                       {"role": "assistant", "content": "I booked room 4."}], passed=True),
    ])
    EventIngestor(second, attempt=1).ingest([
        _event("mail", [{"role": "user", "content": "Email alice again"},
                        _call("email_send", {"to": "alice@example.com"})], passed=False),
    ])
    return {"project": project, "first": first, "second": second}


def _keys(project, **query) -> list[tuple[str, str]]:
    rows = filtered_trajectories(project, TrajectoryFilter.from_query(query)).select_related("run")
    return sorted((t.run.name, t.task_key) for t in rows)


def test_the_search_text_is_the_words_not_the_json():
    text = search_text_of_turns([{"role": "user", "content": [{"type": "text", "text": "Hello"}]},
                                 _call("email_send", {"to": "bob@x.org"}), "not a turn",
                                 {"role": "tool", "content": "sent\x00"}])
    assert text == 'Hello\nemail_send {"to": "bob@x.org"}\nsent'
    assert "role" not in text and "content" not in text
    assert len(search_text_of_turns([{"role": "user", "content": "y" * 50_000}])) == SEARCH_TEXT_LIMIT
    assert search_text_of_turns([{"role": "user", "content": "bad \ud800 surrogate"}]) == "bad ? surrogate"
    assert search_text_of_turns(None) == ""


def test_search_matches_prompts_outputs_and_arguments_case_blind_with_other_filters(stored):
    project = stored["project"]
    assert _keys(project, q="ALICE@example") == [("first", "mail"), ("second", "mail")]
    assert _keys(project, q="alice@example", run=stored["first"].pk) == [("first", "mail")]
    assert _keys(project, q="alice", passed="no") == [("second", "mail")]
    assert _keys(project, q='"status": "lost"') == [("first", "crm")]  # inside a tool call's arguments
    assert _keys(project, q="room 4") == [("first", "cal")]  # an output
    assert _keys(project, q="book a room") == [("first", "cal")]  # a prompt in content parts
    assert _keys(project, q="100%_") == []  # LIKE's wildcards are text here
    assert _keys(project, q="role") == []  # the JSON around the words is not searched
    for bad, message in (("ab", "at least 3 characters"), ("x\x00yz", "NUL"), ("z" * 201, "longer than")):
        with pytest.raises(FilterError) as refused:
            TrajectoryFilter.from_query({"q": bad})
        assert message in refused.value.errors["q"]


def test_the_match_is_shown_marked_and_escaped(client, project_team, stored):
    client.force_login(project_team["viewer"])
    url = reverse("dashboard:trajectory_list", args=[stored["project"].slug])
    page = client.get(url, {"q": "about the <launch"}).content.decode()
    assert "Email Alice <mark>about the &lt;launch</mark>&gt;" in page
    assert "<launch>" not in page
    assert page.count('class="search-match"') == 1
    short = client.get(url, {"q": "ab"})
    assert short.status_code == 200 and "at least 3 characters" in short.content.decode()
    assert search_match("x" * 100 + "Needle" + "y" * 100, "needle", context=5).before == "…xxxxx"


def test_the_api_and_a_review_queue_take_the_search(client, project_team, stored, bearer):
    project = stored["project"]
    url = f"/api/projects/{project.slug}/trajectories"
    found = client.get(url, {"q": "alice@EXAMPLE.com", "passed": "yes"}, **bearer("viewer")).json()
    assert [t["task_key"] for t in found["items"]] == ["mail"] and found["items"][0]["run_id"] == stored["first"].pk
    refused = client.get(url, {"q": " a "}, **bearer("viewer"))
    assert refused.status_code == 422 and "q" in refused.json()["errors"]
    queue = queue_create(project=project, name="alice mail", filter={"q": "alice"}, order="newest", limit=10,
                         actor=project_team["owner"])
    ids = set(queue.items.values_list("trajectory_id", flat=True))
    assert ids == set(Trajectory.objects.filter(task_key="mail").values_list("id", flat=True)) and len(ids) == 2


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the trigram index is PostgreSQL's")
def test_postgres_answers_the_search_from_the_trigram_index(stored):
    rows = Trajectory.objects.filter(matches_search("alice@example")).order_by()  # what filtered_trajectories applies
    assert rows.count() == 2
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off")
        sql, params = rows.query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "trajectory_search_trgm" in plan, plan


def test_a_training_runs_trajectory_is_found_by_its_tasks_request(project_team):
    """A training run stores only what the model wrote: the search text takes the task's request."""
    project = project_team["project"]
    dataset, verifier, model = make_pipeline_project(project, project_team["owner"], tasks=3)
    run = Run.objects.create(project=project, name="grpo", kind="grpo", dataset=dataset)
    EventIngestor(run, attempt=1).ingest([
        _event("task-1", [{"role": "assistant", "content": "I will call the tool"}], passed=False),
        _event("task-2", [{"role": "user", "content": "a request of its own"},
                          {"role": "assistant", "content": "done"}], passed=True),
    ])
    assert _keys(project, q="please do task 1") == [("grpo", "task-1")]
    assert _keys(project, q="call the tool") == [("grpo", "task-1")]
    assert _keys(project, q="please do task 2") == []  # its own user turn is its request
    assert _keys(project, q="request of its own") == [("grpo", "task-2")]


def test_search_text_of_turns_adds_only_the_requests_user_turns_and_only_without_one():
    request = [{"role": "system", "content": "You are an agent"}, {"role": "user", "content": "Move Acme"}]
    assert search_text_of_turns([{"role": "assistant", "content": "ok"}], request) == "Move Acme\nok"
    assert search_text_of_turns([{"role": "user", "content": "Mine"}], request) == "Mine"
    assert search_text_of_turns(None, request) == "Move Acme"
    assert search_text_of_turns([{"role": "assistant", "content": "ok"}], "not messages") == "ok"


def test_trajectories_linked_to_their_tasks_later_get_the_request_too(project_team):
    """An imported run's trajectories stored before its dataset was found, and rows the migration
    finds: search_text_refresh adds their task's request."""

    project = project_team["project"]
    dataset, _, _ = make_pipeline_project(project, project_team["owner"], tasks=2)
    run = Run.objects.create(project=project, name="imported", kind="grpo")
    EventIngestor(run, attempt=1).ingest([_event("task-0", [{"role": "assistant", "content": "x"}], passed=False)])
    assert _keys(project, q="please do task 0") == []
    Trajectory.objects.filter(run=run).update(task=dataset.tasks.get(external_id="task-0"))
    assert search_text_refresh(Trajectory.objects.filter(run=run)) == 1
    assert _keys(project, q="please do task 0") == [("imported", "task-0")]
