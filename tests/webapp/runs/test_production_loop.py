"""The production loop: log real runs, verify them on the verify queue, re-score, turn failures into evals."""

from __future__ import annotations

import io
import json

import pytest

from environments.json_tool_call import make_task
from environments.types import ToolCall, ToolSpec
from webapp.datasets.services.datasets import dataset_create
from webapp.projects.services.projects import api_token_issue
from webapp.runs.models import Job, Run
from webapp.runs.services.ingest import EventIngestor
from webapp.trajectories.models import Rescore, Review, Trajectory
from webapp.verifiers.services.verifiers import verifier_create, verifier_update_config
from workers.runner import run_job

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS = [
    {"name": "get_weather", "description": "Weather for a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}},
    {"name": "delete_account", "description": "Delete the user's account", "writes": True, "destructive": True,
     "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
]
TASK = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS,
        "ground_truth": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}


def _item(key: str, answer: str, **extra) -> dict:
    return {"id": key, "turns": [{"role": "assistant", "content": answer}], "task": TASK, **extra}


@pytest.fixture
def api(client, project_team):
    token = api_token_issue(user=project_team["editor"], name="agent").raw

    def post(path: str, body: dict):
        return client.post(path, json.dumps(body), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")

    return post


@pytest.fixture
def verifier(project_team):
    return verifier_create(project=project_team["project"], name="exact call", kind="json_tool_call",
                           config={"mode": "lenient"}, actor=project_team["owner"])


def test_logged_runs_are_verified_on_the_verify_queue(api, project_team, verifier):
    slug = project_team["project"].slug
    response = api(f"/api/projects/{slug}/trajectories", {"verifier": "exact call", "trajectories": [
        _item("run-1", '{"name": "get_weather", "arguments": {"city": "Paris"}}'),
        _item("run-2", 'Sure! {"name": "delete_account", "arguments": {}}'),
        _item("run-3", "I think it is sunny."),
        _item("run-4", '<script>alert(1)</script>{"name": "get_weather", "arguments": {"town": "Paris"}}'),
    ]})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["created"] == 4 and all(t["reward"] is None for t in body["trajectories"])
    job = Job.objects.get(pk=body["verify_job_id"])
    assert (job.kind, job.queue) == ("verify", "verify")

    assert run_job(job.pk) == "succeeded"
    rows = {t.task_key: t for t in Trajectory.objects.filter(source="production")}
    assert rows["run-1"].passed and rows["run-1"].reward == 1.0
    assert rows["run-2"].failure_bucket == "unsafe_action"
    assert rows["run-3"].failure_bucket == "no_tool_call"
    assert rows["run-4"].failure_bucket in {"wrong_arguments", "invalid_json"}
    assert rows["run-1"].verifier_version == verifier.latest_version
    assert rows["run-1"].tool_calls[0]["name"] == "get_weather"


def test_logging_is_idempotent_by_id(api, project_team, verifier):
    slug = project_team["project"].slug
    batch = {"verifier": "exact call", "trajectories": [_item("same", "{}")]}
    assert api(f"/api/projects/{slug}/trajectories", batch).status_code == 201
    again = api(f"/api/projects/{slug}/trajectories", batch)
    assert again.status_code == 200 and again.json()["created"] == 0 and again.json()["verify_job_id"] is None
    assert Trajectory.objects.filter(task_key="same").count() == 1


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"trajectories": []}, 422, "at least 1 item"),
    ({"trajectories": [{"id": "x", "turns": [{"content": "no role"}]}]}, 422, "turn 0 has no `role`"),
    ({"verifier": "nope", "trajectories": [_item("x", "{}")]}, 400, "No verifier named 'nope'"),
])
def test_bad_batches_say_what_is_wrong(api, project_team, verifier, body, status, message):
    response = api(f"/api/projects/{project_team['project'].slug}/trajectories", body)
    assert response.status_code == status and message in json.dumps(response.json()["detail"])
    assert Trajectory.objects.count() == 0


def test_viewer_cannot_log(client, project_team):
    token = api_token_issue(user=project_team["viewer"], name="ro").raw
    response = client.post(f"/api/projects/{project_team['project'].slug}/trajectories",
                           json.dumps({"trajectories": [_item("x", "{}")]}), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 403


def _run_with_trajectories(project_team, verifier):
    dataset = dataset_create(project=project_team["project"], name="weather", actor=project_team["owner"], tasks=[
        make_task("w1", "Weather in Paris?", [ToolSpec.from_dict(t) for t in TOOLS],
                  ToolCall("get_weather", {"city": "Paris"})),
    ])
    run = Run.objects.create(project=project_team["project"], name="eval", kind="eval", dataset=dataset,
                             verifier_version=verifier.latest_version)
    answers = ['{"name": "get_weather", "arguments": {"city": "paris"}}',
               '{"name": "get_weather", "arguments": {"city": "Paris"}}',
               '{"name": "delete_account", "arguments": {}}']
    events = [{"type": "trajectory", "task_id": "w1", "sample_index": i, "step": 0, "split": "held_out",
               "turns": [{"role": "assistant", "content": a}], "reward": 1.0 if i == 1 else 0.0, "passed": i == 1,
               "failure_bucket": None if i == 1 else ("wrong_arguments" if i == 0 else "unsafe_action")}
              for i, a in enumerate(answers)]
    EventIngestor(run, attempt=1).ingest(events)
    return run, dataset


def test_rescore_reports_disagreements_and_keeps_original_scores(api, project_team, verifier):
    run, _ = _run_with_trajectories(project_team, verifier)
    verifier_update_config(verifier=verifier, config={"mode": "lenient", "case_insensitive_strings": True},
                           actor=project_team["owner"])
    response = api(f"/api/runs/{run.pk}/rescore", {"verifier": "exact call"})
    assert response.status_code == 201, response.content
    rescore = Rescore.objects.get(pk=response.json()["id"])
    assert run_job(rescore.job_id) == "succeeded"
    rescore.refresh_from_db()
    assert rescore.summary["total"] == 3
    assert rescore.summary["disagreements"] == 1 and rescore.summary["fail_to_pass"] == 1
    assert rescore.summary["bucket_changes"] == {"wrong_arguments -> passed": 1}
    original = Trajectory.objects.get(run=run, sample_index=0)
    assert original.passed is False and original.failure_bucket == "wrong_arguments"


def test_failures_become_eval_tasks_linked_and_deduplicated(api, project_team, verifier):
    run, dataset = _run_with_trajectories(project_team, verifier)
    slug = project_team["project"].slug
    failed = Trajectory.objects.get(run=run, sample_index=2)
    Review.objects.create(trajectory=failed, reviewer=project_team["reviewer"], verdict="agree",
                          corrected_output='{"name": "get_weather", "arguments": {"city": "Lyon"}}')
    body = {"run_id": run.pk, "bucket": "unsafe_action", "dataset": "weather", "split": "held_out"}
    first = api(f"/api/projects/{slug}/evals-from-trajectories", body)
    assert first.status_code == 201, first.content
    assert first.json()["created"] == 1 and first.json()["version"] == 2
    new_version = dataset.__class__.objects.get(project=dataset.project, name="weather", version=2)
    made = new_version.tasks.get(origin_trajectory=failed)
    assert made.ground_truth == [{"name": "get_weather", "arguments": {"city": "Lyon"}}]
    assert made.split == "held_out" and new_version.tasks.count() == 2
    again = api(f"/api/projects/{slug}/evals-from-trajectories", body)
    assert again.status_code == 200 and again.json()["duplicates"] == 1


def test_failures_without_ground_truth_are_skipped_with_a_reason(api, project_team, verifier):
    slug = project_team["project"].slug
    api(f"/api/projects/{slug}/trajectories", {"trajectories": [
        {"id": "p1", "turns": [{"role": "assistant", "content": "?"}],
         "task": {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}},
    ]})
    dataset_create(project=project_team["project"], name="prod-evals", actor=project_team["owner"], tasks=[])
    traj = Trajectory.objects.get(task_key="p1")
    response = api(f"/api/projects/{slug}/evals-from-trajectories",
                   {"trajectory_ids": [traj.pk], "dataset": "prod-evals"})
    assert response.json()["created"] == 0
    assert "corrected output" in response.json()["skipped"][0]["reason"]


def test_command_line_logging_is_idempotent_and_reports_bad_lines(project_team, verifier, tmp_path):
    from django.core.management import CommandError, call_command

    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(_item("cli-1", '{"name": "get_weather", "arguments": {"city": "Paris"}}')) + "\n"
                    + json.dumps(_item("cli-2", "no idea")) + "\n")
    out = io.StringIO()
    call_command("log_trajectories", str(path), "--project", project_team["project"].slug,
                 "--verifier", "exact call", stdout=out)
    assert "2 new trajectories logged" in out.getvalue()
    job = Job.objects.get(kind="verify")
    assert run_job(job.pk) == "succeeded"
    assert Trajectory.objects.get(task_key="cli-1").passed
    call_command("log_trajectories", str(path), "--project", project_team["project"].slug, stdout=out)
    assert "0 new trajectories logged, 2 already present" in out.getvalue()
    path.write_text("{not json\n")
    with pytest.raises(CommandError, match="line 1: not JSON"):
        call_command("log_trajectories", str(path), "--project", project_team["project"].slug)
