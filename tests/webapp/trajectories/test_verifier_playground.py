"""The verifier playground: json_tool_call and workplace on a right and a wrong output, python code that
loops forever (a verifier error after the sandbox's limit, the page still answers), stored trajectories,
task search, bad input beside its field, hostile text escaped."""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest
from pipeline_data import XSS, make_pipeline_run, make_tasks

from environments.sandbox import BWRAP, available_isolation
from environments.workplace.generator import generate_tasks
from webapp.datasets.services.datasets import dataset_create
from webapp.trajectories.models import Trajectory
from webapp.verifiers.services.verifiers import verifier_create

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or available_isolation() != BWRAP,
    reason="bubblewrap (bwrap) is not installed or not usable here: python verifiers run only in its sandbox "
           "in these tests (apt-get install bubblewrap)")


@pytest.fixture
def setup(project_team):
    project, editor = project_team["project"], project_team["editor"]
    dataset = dataset_create(project=project, name="calls", tasks=make_tasks(4), actor=editor,
                             environment="json_tool_call")
    tool = verifier_create(project=project, name="calls", kind="json_tool_call", config={}, actor=editor)
    workplace = verifier_create(project=project, name="workplace", kind="workplace", config={}, actor=editor)
    return {"dataset": dataset, "tool": tool.latest_version, "workplace": workplace.latest_version}


def _url(project_team) -> str:
    return f"/p/{project_team['project'].slug}/verifiers/playground/"


def _verdict(body: str) -> dict[str, str]:
    def text(element_id: str) -> str:
        found = re.search(rf'id="{element_id}">(.*?)</dd>', body, re.S)
        return re.sub(r"<[^>]+>", "", found.group(1)).strip() if found else ""
    return {"reward": text("verdict-reward"), "passed": text("verdict-passed"), "bucket": text("verdict-bucket")}


def test_json_tool_call_on_a_right_and_a_wrong_output(client, project_team, setup):
    client.force_login(project_team["viewer"])
    task = setup["dataset"].tasks.get(external_id="task-0")
    expected = task.ground_truth[0]
    right = client.post(_url(project_team), {"version": setup["tool"].pk, "dataset": setup["dataset"].pk,
                                             "task": task.pk, "output": json.dumps(expected), "action": "score"})
    assert right.status_code == 200
    body = right.content.decode()
    assert _verdict(body) == {"reward": "1.000", "passed": "yes", "bucket": "—"}
    assert '<tr class="match">' in body and 'id="parse-format"' in body
    wrong_call = {"name": "create_event", "arguments": {"title": "x", "hours": 1}}
    wrong = client.post(_url(project_team), {"version": setup["tool"].pk, "task": task.pk, "action": "score",
                                             "output": "Sure! " + json.dumps(wrong_call)})
    body = wrong.content.decode()
    assert _verdict(body) == {"reward": "0.000", "passed": "no", "bucket": "wrong_tool"}
    calls = body[body.index('id="calls-vs"'):]
    assert "<code>send_email</code>" in calls and "<code>create_event</code>" in calls and "other tool" in calls
    args = client.post(_url(project_team), {"version": setup["tool"].pk, "task": task.pk, "action": "score",
                                            "output": json.dumps({**expected, "arguments": {"to": "x"}})})
    body = args.content.decode()
    assert _verdict(body)["bucket"] == "wrong_arguments" and "arguments differ" in body and ">missing<" in body


def test_workplace_on_a_right_and_a_wrong_output_shows_the_end_state_diff(client, project_team, setup):
    task = next(t for t in generate_tasks(6, 3) if len(t.ground_truth) == 1
                and "new_value" in t.ground_truth[0]["arguments"])
    client.force_login(project_team["viewer"])
    task_json = json.dumps(task.to_dict())
    right = client.post(_url(project_team), {"version": setup["workplace"].pk, "task_json": task_json,
                                             "output": json.dumps(task.ground_truth), "action": "score"})
    body = right.content.decode()
    assert _verdict(body)["reward"] == "1.000" and 'id="state-match"' in body
    wrong_calls = json.loads(json.dumps(task.ground_truth))
    wrong_calls[0]["arguments"]["new_value"] = "Something else entirely"
    turns = [{"role": "assistant", "content": json.dumps(wrong_calls)}]
    wrong = client.post(_url(project_team), {"version": setup["workplace"].pk, "task_json": task_json,
                                             "output": json.dumps(turns), "output_format": "turns",
                                             "action": "score"})
    body = wrong.content.decode()
    assert _verdict(body)["reward"] == "0.000" and _verdict(body)["passed"] == "no"
    diff = body[body.index('id="state-diff"'):]
    assert "Something else entirely" in diff and "changed" in diff
    assert "arguments differ" in body


@needs_bwrap
def test_python_code_that_loops_forever_is_a_verifier_error_and_the_page_answers(client, project_team, setup):
    looping = verifier_create(project=project_team["project"], name="loops", kind="python", actor=project_team["editor"],
                              config={"code": "def verify(task, trajectory):\n    while True:\n        pass\n",
                                      "timeout_seconds": 1})
    client.force_login(project_team["viewer"])
    task = setup["dataset"].tasks.first()
    started = time.monotonic()
    response = client.post(_url(project_team), {"version": looping.latest_version.pk, "task": task.pk,
                                                "output": "anything", "action": "score"})
    took = time.monotonic() - started
    assert response.status_code == 200 and took < 30
    body = response.content.decode()
    assert _verdict(body) == {"reward": "no reward (verifier error)", "passed": "no", "bucket": "verifier_error"}
    error = body[body.index('id="verifier-error"'):]
    assert "verify() failed (timeout)" in error[:400] or "verify() failed (cpu)" in error[:400]
    assert "0.000" not in body[body.index('id="verdict"'):body.index('id="verifier-error"')], "never a reward of 0"


@needs_bwrap
def test_python_code_scores_in_the_sandbox_and_shows_what_it_printed(client, project_team, setup):
    code = ("def verify(task, trajectory):\n    print('looked at', len(trajectory['turns']), 'turns')\n"
            "    text = trajectory['turns'][-1]['content']\n"
            "    return {'reward': 0.5 if 'send_email' in text else 0.0, 'components': {'mentions_tool': 1.0}}\n")
    mine = verifier_create(project=project_team["project"], name="mine", kind="python", actor=project_team["editor"],
                           config={"code": code, "pass_threshold": 0.5})
    client.force_login(project_team["viewer"])
    task = setup["dataset"].tasks.get(external_id="task-0")
    body = client.post(_url(project_team), {"version": mine.latest_version.pk, "task": task.pk, "action": "score",
                                            "output": json.dumps(task.ground_truth[0])}).content.decode()
    assert _verdict(body)["reward"] == "0.500" and _verdict(body)["passed"] == "yes"
    assert "mentions_tool" in body and "looked at 1 turns" in body and "<dd>bwrap</dd>" in body
    crash = verifier_create(project=project_team["project"], name="crash", kind="python", actor=project_team["editor"],
                            config={"code": "def verify(task, trajectory):\n    raise ValueError('nope')\n"})
    body = client.post(_url(project_team), {"version": crash.latest_version.pk, "task": task.pk, "action": "score",
                                            "output": "x"}).content.decode()
    assert _verdict(body)["bucket"] == "verifier_error" and "ValueError" in body


def test_an_unreachable_judge_is_a_verifier_error_not_a_zero(client, project_team, setup, settings):
    settings.CRUCIBLE_JUDGE_ALLOW_LOOPBACK = True  # the operator allows a judge on this machine
    judge = verifier_create(project=project_team["project"], name="judge", kind="llm_judge", actor=project_team["editor"],
                            config={"base_url": "http://127.0.0.1:9/v1", "model": "m", "rubric": "Be right.",
                                    "timeout_seconds": 2})
    client.force_login(project_team["viewer"])
    body = client.post(_url(project_team), {"version": judge.latest_version.pk, "action": "score", "output": "hi",
                                            "task": setup["dataset"].tasks.first().pk}).content.decode()
    assert _verdict(body) == {"reward": "no reward (verifier error)", "passed": "no", "bucket": "verifier_error"}
    assert 'id="verifier-error"' in body


def test_a_stored_trajectory_is_scored_with_its_task(client, project_team):
    run = make_pipeline_run(project_team["project"], project_team["owner"], steps=1)
    wrong = Trajectory.objects.filter(run=run, failure_bucket="wrong_tool").first()
    client.force_login(project_team["viewer"])
    body = client.post(_url(project_team), {"version": run.verifier_version.pk, "trajectory": wrong.pk,
                                            "action": "score"}).content.decode()
    assert _verdict(body)["bucket"] == "wrong_tool"
    assert f"Output: the turns of trajectory #{wrong.pk}." in body and "Task: the one trajectory" in body
    other = client.post(_url(project_team), {"version": run.verifier_version.pk, "trajectory": "999999",
                                             "action": "score"})
    assert other.status_code == 422 and "No trajectory with this id in this project." in other.content.decode()


def test_finding_tasks_and_prefilling_from_the_url(client, project_team, setup):
    client.force_login(project_team["viewer"])
    found = client.post(_url(project_team), {"version": setup["tool"].pk, "dataset": setup["dataset"].pk,
                                             "q": "task-3", "action": "find", "output": "kept"}).content.decode()
    options = found[found.index('id="pg-task"'):found.index("</select>", found.index('id="pg-task"'))]
    assert "task-3" in options and "task-1" not in options and ">kept</textarea>" in found
    assert 'id="verdict"' not in found, "finding tasks does not score"
    by_text = client.post(_url(project_team), {"dataset": setup["dataset"].pk, "q": "Please do task 2",
                                               "action": "find"}).content.decode()
    assert "task-2" in by_text[by_text.index('id="pg-task"'):]
    prefilled = client.get(f"{_url(project_team)}?version={setup['workplace'].pk}").content.decode()
    assert f'<option value="{setup["workplace"].pk}" selected>' in prefilled


def test_bad_input_is_reported_beside_its_field_keeping_what_was_typed(client, project_team, setup):
    client.force_login(project_team["viewer"])
    response = client.post(_url(project_team), {"version": setup["tool"].pk, "task_json": '{"messages": ',
                                                "output": "", "action": "score"})
    assert response.status_code == 422
    body = response.content.decode()
    assert "Not valid JSON" in body and "Paste a model output" in body and '{&quot;messages&quot;: </textarea>' in body
    turns = client.post(_url(project_team), {"version": setup["tool"].pk, "task": setup["dataset"].tasks.first().pk,
                                             "output": "not json", "output_format": "turns", "action": "score"})
    assert turns.status_code == 422 and "Not valid JSON turns" in turns.content.decode()
    nothing = client.post(_url(project_team), {"version": "", "action": "score"})
    assert nothing.status_code == 422 and "Choose a verifier version of this project." in nothing.content.decode()


def test_hostile_task_and_output_are_escaped(client, project_team, setup):
    client.force_login(project_team["viewer"])
    task = {"id": XSS[0], "messages": [{"role": "user", "content": XSS[1]}],
            "tools": [{"name": XSS[2], "description": XSS[0], "parameters": {"type": "object"}}],
            "ground_truth": [{"name": XSS[2], "arguments": {"a": XSS[0]}}]}
    output = json.dumps({"name": XSS[2], "arguments": {"a": XSS[1]}}) + XSS[0]
    body = client.post(_url(project_team), {"version": setup["tool"].pk, "task_json": json.dumps(task),
                                            "output": output, "action": "score"}).content.decode()
    assert 'id="verdict"' in body
    for probe in XSS:
        assert probe not in body


def test_outsiders_get_404(client, project_team, setup):
    client.force_login(project_team["outsider"])
    assert client.get(_url(project_team)).status_code == 404
    assert client.post(_url(project_team), {"version": setup["tool"].pk, "output": "x"}).status_code == 404
    client.force_login(project_team["outsider"])
    theirs = f"/p/{project_team['other'].slug}/verifiers/playground/"
    response = client.post(theirs, {"version": setup["tool"].pk, "task": setup["dataset"].tasks.first().pk,
                                    "output": "x", "action": "score"})
    assert response.status_code == 422, "another project's version and task are not found from mine"
    assert "No verifier in this project yet" in response.content.decode()
    assert 'id="verdict"' not in response.content.decode()


def _options(body: str) -> list[str]:
    select = body[body.index('id="pg-task"'):body.index("</select>", body.index('id="pg-task"'))]
    return [re.sub(r"\s+", " ", text).strip() for text in re.findall(r'<option value="\d+"[^>]*>(.*?)</option>', select, re.S)]


def test_picking_a_dataset_loads_its_tasks_by_request_and_the_search_narrows_them(client, project_team, setup):
    """The dataset menu and the search box ask for the task picker alone (htmx); each task is shown by its
    request and its id. Without JavaScript the same list comes with the page, the dataset in the URL."""
    client.force_login(project_team["viewer"])
    hostile = dataset_create(project=project_team["project"], name="hostile", tasks=make_tasks(3, hostile=True),
                             actor=project_team["editor"])
    htmx = {"HTTP_HX_REQUEST": "true"}
    picked = client.get(_url(project_team), {"dataset": setup["dataset"].pk, "partial": "tasks"}, **htmx)
    body = picked.content.decode()
    assert picked.status_code == 200 and body.lstrip().startswith('<div class="field') and "<html" not in body
    assert 'id="task-picker"' in body and "(4 shown)" in body
    assert _options(body) == [f"Please do task {i} · task-{i} · {'email' if i % 2 == 0 else 'calendar'} · "
                              f"{'train' if i < 3 else 'held_out'}" for i in range(4)]
    searched = client.get(_url(project_team), {"dataset": setup["dataset"].pk, "q": "do task 2", "partial": "tasks"},
                          **htmx).content.decode()
    assert [o.split(" · ")[:2] for o in _options(searched)] == [["Please do task 2", "task-2"]]
    by_id = client.get(_url(project_team), {"dataset": setup["dataset"].pk, "q": "task-3", "partial": "tasks"},
                       **htmx).content.decode()
    assert [o.split(" · ")[1] for o in _options(by_id)] == ["task-3"]
    nothing = client.get(_url(project_team), {"dataset": setup["dataset"].pk, "q": "no such words", "partial": "tasks"},
                         **htmx).content.decode()
    assert _options(nothing) == [] and "none matches" in nothing

    page = client.get(_url(project_team), {"dataset": setup["dataset"].pk, "q": "do task 1"}).content.decode()
    assert "<html" in page and 'hx-get="' in page and [o.split(" · ")[1] for o in _options(page)] == ["task-1"]
    escaped = client.get(_url(project_team), {"dataset": hostile.pk, "partial": "tasks"}, **htmx).content.decode()
    assert "Please do task 0 &lt;img src=x onerror=alert(1)&gt;" in escaped
    for probe in XSS:
        assert probe not in escaped


def test_a_big_dataset_lists_its_first_200_tasks_and_reads_no_more(client, project_team, setup):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    big = dataset_create(project=project_team["project"], name="big", tasks=make_tasks(250),
                         actor=project_team["editor"])
    client.force_login(project_team["viewer"])
    with CaptureQueriesContext(connection) as queries:
        body = client.get(_url(project_team), {"dataset": big.pk, "partial": "tasks"},
                          HTTP_HX_REQUEST="true").content.decode()
    assert len(_options(body)) == 200 and "(200 shown, the first 200: search to narrow)" in body
    reads = [q["sql"] for q in queries.captured_queries if '"datasets_task"' in q["sql"]]
    assert reads and all("LIMIT 201" in sql for sql in reads), "one bounded read, whatever the dataset's size"
    narrowed = client.get(_url(project_team), {"dataset": big.pk, "q": "please do task 249", "partial": "tasks"},
                          HTTP_HX_REQUEST="true").content.decode()
    assert [o.split(" · ")[1] for o in _options(narrowed)] == ["task-249"] and "search to narrow" not in narrowed
