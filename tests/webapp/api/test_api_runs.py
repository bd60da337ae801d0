"""REST API for runs and metric series: roles, validation naming the field, pages, charts."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from webapp.runs.models import Checkpoint, Job, JobState, ModelSpec, Run, RunStatus
from webapp.runs.services.ingest import EventIngestor

ROLES = ["viewer", "reviewer", "editor", "owner"]
T0 = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture
def world(project_team):
    """A project with a dataset (two versions), a verifier, a model and one run with a checkpoint."""
    from environments.workplace.generator import generate_tasks
    from webapp.datasets.services.datasets import dataset_create
    from webapp.verifiers.services.verifiers import verifier_create

    owner, project = project_team["owner"], project_team["project"]
    tasks = generate_tasks(4, 0)
    dataset_create(project=project, name="wp", tasks=tasks[:2], actor=owner)
    dataset_create(project=project, name="wp", tasks=tasks, actor=owner)
    verifier_create(project=project, name="exact", kind="json_tool_call", config={}, actor=owner)
    ModelSpec.objects.create(project=project, name="tiny", hf_id="HuggingFaceTB/SmolLM2-135M-Instruct")
    run = Run.objects.create(project=project, name="first", kind="grpo", created_by=owner)
    checkpoint = Checkpoint.objects.create(run=run, step=10, storage_uri="/ckpt/10")
    return {"project": project, "slug": project.slug, "run": run, "checkpoint": checkpoint}


def _post(client, path: str, headers: dict, body: dict | None = None):
    return client.post(path, json.dumps(body or {}), content_type="application/json", **headers)


def _add_points(run: Run, name: str, values, *, split: str = "train", first_step: int = 0):
    """Store `values` at consecutive steps as the ingest service stores a training process's metrics."""
    EventIngestor(run, attempt=1).ingest([
        {"type": "metric", "step": first_step + i, "split": split, "metrics": {name: v},
         "time": (T0 + timedelta(seconds=first_step + i)).timestamp()} for i, v in enumerate(values)])


RUN_BODY = {"name": "quick grpo", "kind": "grpo", "config": {"device": "cpu", "max_steps": 2},
            "dataset": "wp", "verifier": "exact", "model": "tiny"}


# --- roles -------------------------------------------------------------------------------

READS = ["/api/projects/{slug}/runs", "/api/runs/{run}", "/api/runs/{run}/metrics/names",
         "/api/runs/{run}/metrics?names=reward"]


@pytest.mark.parametrize("path", READS)
@pytest.mark.parametrize(("who", "status"), [*((role, 200) for role in ROLES), ("outsider", 404)])
def test_every_member_reads_and_outsiders_get_404(client, world, bearer, path, who, status):
    url = path.format(slug=world["slug"], run=world["run"].pk)
    response = client.get(url, **bearer(who))
    assert response.status_code == status, response.content


EDITOR_ONLY = [("viewer", 403), ("reviewer", 403), ("editor", None), ("owner", None), ("outsider", 404)]


@pytest.mark.parametrize(("who", "status"), EDITOR_ONLY)
def test_creating_a_run_needs_editor(client, world, bearer, who, status, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response = _post(client, f"/api/projects/{world['slug']}/runs", bearer(who), RUN_BODY)
    assert response.status_code == (status or 201), response.content
    assert Run.objects.filter(name="quick grpo").exists() is (status is None)


@pytest.mark.parametrize(("who", "status"), EDITOR_ONLY)
def test_cancelling_a_run_needs_editor(client, world, bearer, who, status):
    run = world["run"]
    Job.objects.create(project=world["project"], run=run, kind="grpo", state=JobState.QUEUED)
    response = _post(client, f"/api/runs/{run.pk}/cancel", bearer(who))
    assert response.status_code == (status or 200), response.content
    if status is None:
        assert response.json()["status"] == RunStatus.CANCELLED
        assert response.json()["job"]["state"] == JobState.CANCELLED


@pytest.mark.parametrize(("who", "status"), EDITOR_ONLY)
def test_retrying_a_run_needs_editor(client, world, bearer, who, status, django_capture_on_commit_callbacks):
    run = world["run"]
    Job.objects.create(project=world["project"], run=run, kind="grpo", state=JobState.FAILED, attempt=3,
                       max_attempts=3)
    with django_capture_on_commit_callbacks(execute=False):
        response = _post(client, f"/api/runs/{run.pk}/retry", bearer(who))
    assert response.status_code == (status or 200), response.content
    if status is None:
        assert response.json()["status"] == RunStatus.QUEUED
        assert response.json()["job"]["state"] == JobState.QUEUED


def test_a_run_of_another_project_is_404_even_for_its_series(client, world, bearer, project_team):
    theirs = Run.objects.create(project=project_team["other"], name="secret", kind="grpo")
    _add_points(theirs, "reward", [1.0])
    for path in (f"/api/runs/{theirs.pk}", f"/api/runs/{theirs.pk}/metrics?names=reward",
                 f"/api/runs/{theirs.pk}/metrics/names"):
        assert client.get(path, **bearer("owner")).status_code == 404
    for action in ("cancel", "retry"):
        assert _post(client, f"/api/runs/{theirs.pk}/{action}", bearer("owner")).status_code == 404


# --- create ----------------------------------------------------------------------------


def test_create_saves_the_run_and_its_job_together(client, world, bearer, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = _post(client, f"/api/projects/{world['slug']}/runs", bearer("editor"),
                         {**RUN_BODY, "dataset": {"name": "wp", "version": 1},
                          "parent_checkpoint_id": world["checkpoint"].pk})
    assert response.status_code == 201, response.content
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    job = Job.objects.get(run=run)
    assert (run.status, job.state, job.kind) == (RunStatus.QUEUED, JobState.QUEUED, "grpo")
    assert body["status"] == "queued" and body["job"]["id"] == job.pk
    assert body["dataset"]["version"] == 1 and body["verifier"]["name"] == "exact" and body["model"] == "tiny"
    assert run.parent_checkpoint_id == world["checkpoint"].pk and run.created_by.username == "editor"
    assert len(callbacks) == 1  # the worker is woken only after the commit
    # as submitted, and as launched: every field, the defaults and the linked rows' values filled in
    assert body["config"] == RUN_BODY["config"] and body["resolved_config"] == run.resolved_config
    assert body["resolved_config"]["init_checkpoint"] == world["checkpoint"].storage_uri
    assert "learning_rate" not in body["config"] and body["resolved_config"]["learning_rate"] > 0


def test_create_takes_the_latest_dataset_version_by_default(client, world, bearer, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response = _post(client, f"/api/projects/{world['slug']}/runs", bearer("editor"), RUN_BODY)
    assert response.json()["dataset"]["version"] == 2


def test_a_failure_after_the_run_is_saved_leaves_nothing(client, world, bearer, monkeypatch):
    from webapp.runs.services import run_config

    def broken_job_create(**kwargs):
        raise RuntimeError("broker exploded")

    monkeypatch.setattr(run_config, "job_create", broken_job_create)
    response = _post(client, f"/api/projects/{world['slug']}/runs", bearer("editor"), RUN_BODY)
    assert response.status_code == 500
    assert not Run.objects.filter(name="quick grpo").exists()


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"config": {"learnin_rate": 1e-5}}, "config.learnin_rate", "did you mean 'learning_rate'"),
    ({"config": {"learning_rate": -1}}, "config.learning_rate", "must be > 0"),
    ({"config": {"max_steps": "many"}}, "config.max_steps", "type integer"),
    ({"dataset": "nope"}, "dataset", "available: wp"),
    ({"dataset": {"name": "wp", "version": 7}}, "dataset", "no version 7"),
    ({"verifier": {"name": "exact", "version": 9}}, "verifier", "no version 9"),
    ({"verifier": "fuzzy"}, "verifier", "available: exact"),
    ({"model": "huge"}, "model", "available: tiny"),
    ({"parent_checkpoint_id": 10**9}, "parent_checkpoint_id", "No checkpoint"),
])
def test_a_bad_create_names_the_field_and_creates_nothing(client, world, bearer, change, field, words):
    before = (Run.objects.count(), Job.objects.count())
    response = _post(client, f"/api/projects/{world['slug']}/runs", bearer("editor"), {**RUN_BODY, **change})
    assert response.status_code == 422, response.content
    body = response.json()
    assert list(body["errors"]) == [field], body
    assert words in body["errors"][field] and body["detail"] == body["errors"][field]
    assert (Run.objects.count(), Job.objects.count()) == before


NO_VERIFIER = {key: value for key, value in RUN_BODY.items() if key != "verifier"}


@pytest.mark.parametrize(("config", "field", "words"), [
    ({"verifier": {"name": ""}}, "config.verifier.name", "'verifier.name' must not be empty"),
    ({"lora_target_modules": ["q_proj", ""]}, "config.lora_target_modules.1", "must not be empty"),
    ({"warmup_steps": 5}, "config.warmup_steps", "must be <= max_steps (2), got 5"),
    ({"rollout_backend": "vllm"}, "config.rollout_backend", "use hf with device cpu"),
])
def test_a_config_problem_is_named_by_its_path_or_the_field_to_change(client, world, bearer, config, field, words):
    body = {**NO_VERIFIER, "config": {**RUN_BODY["config"], **config}}
    response = _post(client, f"/api/projects/{world['slug']}/runs", bearer("editor"), body)
    assert response.status_code == 422, response.content
    errors = response.json()["errors"]
    assert list(errors) == [field] and words in errors[field], errors
    assert not Run.objects.filter(name=RUN_BODY["name"]).exists()


def test_every_config_problem_comes_back_at_once(client, world, bearer):
    body = {**RUN_BODY, "config": {"learning_rate": -1, "max_steps": "many", "lr": 1}}
    response = _post(client, f"/api/projects/{world['slug']}/runs", bearer("editor"), body)
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert set(errors) == {"config.learning_rate", "config.max_steps", "config.lr"}
    assert all(message.startswith("Invalid run config: ") for message in errors.values())
    assert all(message in response.json()["detail"] for message in errors.values())


def test_a_problem_of_a_key_the_dataset_supplies_is_filed_under_dataset(client, world, bearer):
    from webapp.datasets.models import TaskDataset

    TaskDataset.objects.filter(project=world["project"], name="wp").update(environment="Not A Name")
    response = _post(client, f"/api/projects/{world['slug']}/runs", bearer("editor"), RUN_BODY)
    assert response.status_code == 422 and list(response.json()["errors"]) == ["dataset"]
    assert "'environment' must match" in response.json()["errors"]["dataset"]
    own = {**RUN_BODY, "config": {**RUN_BODY["config"], "environment": "Also Bad"}}
    response = _post(client, f"/api/projects/{world['slug']}/runs", bearer("editor"), own)
    assert response.status_code == 422 and list(response.json()["errors"]) == ["config.environment"]


def test_one_create_validates_the_config_once(client, world, bearer, monkeypatch,
                                              django_capture_on_commit_callbacks):
    from webapp.runs.services import run_config

    calls = []
    validate = run_config.validate_run_config
    monkeypatch.setattr(run_config, "validate_run_config", lambda data: calls.append(data) or validate(data))
    with django_capture_on_commit_callbacks(execute=False):
        response = _post(client, f"/api/projects/{world['slug']}/runs", bearer("editor"), RUN_BODY)
    assert response.status_code == 201, response.content
    assert len(calls) == 1


@pytest.mark.parametrize(("change", "field"), [({"kind": "ppo"}, "kind"), ({"name": ""}, "name"),
                                               ({"name": "a\u0000"}, "name"), ({"config": {"x": "\u0000"}}, "config"),
                                               ({"parent_checkpoint_id": 10**20}, "parent_checkpoint_id")])
def test_schema_bounds_answer_422_naming_the_field(client, world, bearer, change, field):
    response = _post(client, f"/api/projects/{world['slug']}/runs", bearer("editor"), {**RUN_BODY, **change})
    assert response.status_code == 422 and field in json.dumps(response.json()), response.content
    assert not Run.objects.filter(name=RUN_BODY["name"]).exists()


def test_a_parent_checkpoint_of_another_project_is_refused(client, world, bearer, project_team):
    theirs = Checkpoint.objects.create(run=Run.objects.create(project=project_team["other"], name="x", kind="sft"),
                                       step=1, storage_uri="/elsewhere")
    response = _post(client, f"/api/projects/{world['slug']}/runs", bearer("owner"),
                     {**RUN_BODY, "parent_checkpoint_id": theirs.pk})
    assert response.status_code == 422 and "parent_checkpoint_id" in response.json()["errors"]


# --- cancel and retry ------------------------------------------------------------------


def test_cancel_and_retry_answer_409_when_there_is_nothing_to_do(client, world, bearer):
    run, headers = world["run"], bearer("editor")
    response = _post(client, f"/api/runs/{run.pk}/cancel", headers)
    assert response.status_code == 409 and "has no job" in response.json()["detail"]
    Job.objects.create(project=world["project"], run=run, kind="grpo", state=JobState.SUCCEEDED)
    response = _post(client, f"/api/runs/{run.pk}/cancel", headers)
    assert response.status_code == 409 and "already succeeded" in response.json()["detail"]
    response = _post(client, f"/api/runs/{run.pk}/retry", headers)
    assert response.status_code == 409 and "only a failed or cancelled run" in response.json()["detail"]


def test_retry_acts_on_the_latest_job_only(client, world, bearer):
    run = world["run"]
    Job.objects.create(project=world["project"], run=run, kind="grpo", state=JobState.FAILED)
    Job.objects.create(project=world["project"], run=run, kind="grpo", state=JobState.RUNNING)
    response = _post(client, f"/api/runs/{run.pk}/retry", bearer("editor"))
    assert response.status_code == 409 and "is running" in response.json()["detail"]


def test_cancelling_a_running_run_asks_its_worker(client, world, bearer):
    run = world["run"]
    job = Job.objects.create(project=world["project"], run=run, kind="grpo", state=JobState.RUNNING, attempt=1)
    response = _post(client, f"/api/runs/{run.pk}/cancel", bearer("editor"))
    assert response.status_code == 200
    job.refresh_from_db()
    assert job.cancel_requested and job.state == JobState.RUNNING  # the worker stops at its next heartbeat


# --- lists -----------------------------------------------------------------------------


def test_list_filters_and_walks_keyset_pages(client, world, bearer):
    project = world["project"]
    for i in range(7):
        Run.objects.create(project=project, name=f"sweep {i}", kind="sft" if i % 2 else "grpo")
    headers, names, cursor = bearer("viewer"), [], None
    while True:
        url = f"/api/projects/{world['slug']}/runs?kind=grpo&sort=name&limit=2" + (f"&after={cursor}" if cursor else "")
        body = client.get(url, **headers).json()
        assert len(body["items"]) <= 2
        names += [item["name"] for item in body["items"]]
        cursor = body["next"]
        if cursor is None:
            break
    assert names == ["first", "sweep 0", "sweep 2", "sweep 4", "sweep 6"]
    body = client.get(f"/api/projects/{world['slug']}/runs?text=SWEEP&creator=owner", **headers).json()
    assert body == {"items": [], "next": None}


def test_list_items_carry_headline_metrics(client, world, bearer):
    _add_points(world["run"], "reward", [0.2, 0.7])
    item = client.get(f"/api/projects/{world['slug']}/runs", **bearer("viewer")).json()["items"][0]
    assert item["headline"]["train/reward"] == 0.7 and item["headline"]["validation/success_rate"] is None
    assert item["created_by"] == "owner" and "config" not in item


@pytest.mark.parametrize(("query", "status", "field"), [
    ("after=garbage", 400, "after"), ("sort=loss", 422, "sort"), ("kind=ppo", 422, "kind"),
    ("limit=0", 422, "limit"), ("limit=100000", 422, "limit"), ("text=%00", 400, "text"),
    ("experiment=" + str(10**20), 422, "experiment"),
])
def test_list_refuses_bad_parameters_naming_them(client, world, bearer, query, status, field):
    response = client.get(f"/api/projects/{world['slug']}/runs?{query}", **bearer("viewer"))
    assert response.status_code == status, response.content
    assert field in json.dumps(response.json())


def test_list_sorts_by_a_headline_metric_with_runs_lacking_it_last(client, world, bearer):
    rewards = {"low": [0.9, 0.1], "high": [0.6], "none": []}
    for name, values in rewards.items():
        _add_points(Run.objects.create(project=world["project"], name=name, kind="grpo"), "reward", values)
    url = f"/api/projects/{world['slug']}/runs?kind=grpo&sort=-reward&limit=2"
    first = client.get(url, **bearer("viewer")).json()
    second = client.get(f"{url}&after={first['next']}", **bearer("viewer")).json()
    names = [item["name"] for item in first["items"] + second["items"]]
    assert names[:2] == ["high", "low"] and "none" in names[2:] and names[-1] != "high"
    assert [item["headline"]["train/reward"] for item in first["items"]] == [0.6, 0.1]


def test_list_sorts_by_a_config_field_with_runs_lacking_it_last(client, world, bearer):
    for name, config in {"small": {"learning_rate": 1e-5}, "text": {"learning_rate": "big"},
                         "large": {"learning_rate": 3e-4}, "none": {}}.items():
        Run.objects.create(project=world["project"], name=name, kind="grpo", config=config)
    url = f"/api/projects/{world['slug']}/runs?kind=grpo&sort=-config.learning_rate&limit=2"
    first = client.get(url, **bearer("viewer")).json()
    second = client.get(f"{url}&after={first['next']}", **bearer("viewer")).json()
    assert [item["name"] for item in first["items"]] == ["large", "small"]
    assert {item["name"] for item in second["items"]} >= {"text", "none"}
    unknown = client.get(f"/api/projects/{world['slug']}/runs?sort=config.password", **bearer("viewer"))
    assert unknown.status_code == 422 and "sort" in json.dumps(unknown.json())


def test_a_cursor_of_another_sort_is_a_400(client, world, bearer):
    for i in range(3):
        Run.objects.create(project=world["project"], name=f"r{i}", kind="grpo")
    cursor = client.get(f"/api/projects/{world['slug']}/runs?limit=1", **bearer("viewer")).json()["next"]
    response = client.get(f"/api/projects/{world['slug']}/runs?sort=name&after={cursor}", **bearer("viewer"))
    assert response.status_code == 400 and "another sort order" in response.json()["errors"]["after"]


@pytest.mark.parametrize("sort, values", [
    ("-config.learning_rate", [0, "high", 1]), ("-reward", ["high", 1]), ("-created", ["yesterday", 1]),
    ("name", ["a", 10**30]),
])
def test_a_hand_made_cursor_of_the_right_sort_with_wrong_values_is_a_400_and_the_page_says_so(
        client, world, bearer, sort, values):
    """The cursor names this sort's ordering (taken from a real one), but its values are not of its fields' kinds."""
    for name in ("second", "third"):
        Run.objects.create(project=world["project"], name=name, kind="grpo")
    real = client.get(f"/api/projects/{world['slug']}/runs?sort={sort}&limit=1", **bearer("viewer")).json()["next"]
    data = json.loads(base64.urlsafe_b64decode(real + "=" * (-len(real) % 4)))
    assert len(data["v"]) == len(values)
    cursor = base64.urlsafe_b64encode(json.dumps({**data, "v": values}).encode()).decode().rstrip("=")
    response = client.get(f"/api/projects/{world['slug']}/runs?sort={sort}&after={cursor}", **bearer("viewer"))
    assert response.status_code == 400 and "not one this list gave out" in response.json()["errors"]["after"]
    client.force_login(world["project"].memberships.first().user)
    page = client.get(f"/p/{world['slug']}/runs/?sort={sort}&after={cursor}")
    assert page.status_code == 200 and "not one this list gave out" in page.content.decode()


def _list_queries(client, slug: str, headers: dict) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(f"/api/projects/{slug}/runs?limit=50", **headers).status_code == 200
    return len(queries)


def test_list_queries_do_not_grow_with_the_page(client, world, bearer, django_assert_max_num_queries):
    headers = bearer("viewer")
    _list_queries(client, world["slug"], headers)  # warm the token's last-used write
    few = _list_queries(client, world["slug"], headers)
    for i in range(30):
        run = Run.objects.create(project=world["project"], name=f"r{i}", kind="grpo", created_by=world["run"].created_by)
        _add_points(run, "reward", [0.1 * (i % 10)] * 5)
    assert _list_queries(client, world["slug"], headers) == few
    with django_assert_max_num_queries(8):
        client.get(f"/api/projects/{world['slug']}/runs?limit=50", **headers)


# --- detail and series -----------------------------------------------------------------


def test_detail_has_config_job_and_checkpoints(client, world, bearer):
    run = world["run"]
    run.config = {"max_steps": 5}
    run.save(update_fields=["config"])
    Job.objects.create(project=world["project"], run=run, kind="grpo", state=JobState.RUNNING)
    body = client.get(f"/api/runs/{run.pk}", **bearer("viewer")).json()
    assert body["config"] == {"max_steps": 5} and body["job"]["state"] == "running"
    assert [c["step"] for c in body["checkpoints"]] == [10]


def test_metric_names_endpoint(client, world, bearer):
    _add_points(world["run"], "reward", [1.0])
    _add_points(world["run"], "success_rate", [1.0], split="validation")
    body = client.get(f"/api/runs/{world['run'].pk}/metrics/names", **bearer("viewer")).json()
    assert body == {"names": [{"split": "train", "name": "reward"}, {"split": "validation", "name": "success_rate"}]}


def test_series_of_50000_points_comes_back_under_2000_with_its_spike(client, world, bearer):
    run = world["run"]
    values = [0.3 + (i % 11) / 50 for i in range(50_000)]
    values[12_345] = -9.0
    _add_points(run, "reward", values)
    _add_points(run, "kl", [0.01] * 10)
    body = client.get(f"/api/runs/{run.pk}/metrics?names=reward,kl", **bearer("viewer")).json()
    reward = body["series"]["reward"]
    assert body["x"] == "step" and body["split"] == "train" and body["last_step"] == 49_999
    assert len(reward["x"]) == len(reward["y"]) <= 2_000
    assert reward["points"] == 50_000 and reward["downsampled"] is True
    assert [12_345, -9.0] in [[x, y] for x, y in zip(reward["x"], reward["y"], strict=True)]
    assert body["series"]["kl"] == {"x": list(range(10)), "y": [0.01] * 10, "points": 10, "downsampled": False}


def test_series_since_returns_only_new_points(client, world, bearer):
    run = world["run"]
    _add_points(run, "reward", [float(i) for i in range(130)])
    body = client.get(f"/api/runs/{run.pk}/metrics?names=reward&since=120", **bearer("viewer")).json()
    assert body["series"]["reward"]["x"] == list(range(121, 130)) and body["last_step"] == 129
    _add_points(run, "reward", [1.0, 2.0], first_step=130)
    body = client.get(f"/api/runs/{run.pk}/metrics?names=reward&since=129", **bearer("viewer")).json()
    assert body["series"]["reward"]["x"] == [130, 131] and body["last_step"] == 131
    body = client.get(f"/api/runs/{run.pk}/metrics?names=reward&since=131", **bearer("viewer")).json()
    assert body["series"]["reward"]["x"] == [] and body["last_step"] == 131


def test_series_on_wall_and_token_axes(client, world, bearer):
    run = world["run"]
    _add_points(run, "reward", [0.1, 0.2], first_step=1)
    _add_points(run, "cost/trained_tokens", [64.0, 64.0], first_step=1)
    headers = bearer("viewer")
    wall = client.get(f"/api/runs/{run.pk}/metrics?names=reward&x=wall", **headers).json()
    assert wall["x"] == "wall" and wall["series"]["reward"]["x"] == [0.0, 1.0]
    tokens = client.get(f"/api/runs/{run.pk}/metrics?names=reward&x=tokens", **headers).json()
    assert tokens["series"]["reward"]["x"] == [64.0, 128.0]


def test_series_against_tokens_without_the_metric_is_a_400_naming_it(client, world, bearer):
    _add_points(world["run"], "success_rate", [0.5], split="held_out")
    response = client.get(f"/api/runs/{world['run'].pk}/metrics?names=success_rate&split=held_out&x=tokens",
                          **bearer("viewer"))
    assert response.status_code == 400 and "cost/trained_tokens" in response.json()["errors"]["x"]


@pytest.mark.parametrize(("query", "field"), [
    ("names=", "names"), ("names=,,", "names"), ("names=" + ",".join(f"m{i}" for i in range(21)), "names"),
    ("names=" + "n" * 129, "names"), ("names=reward&buckets=5", "buckets"), ("names=reward&buckets=5001", "buckets"),
    ("names=reward&since=" + str(10**12), "since"), ("names=reward&split=%00", "split"),
    ("names=reward&x=epoch", "x"), ("", "names"),
])
def test_series_refuses_bad_parameters_naming_them(client, world, bearer, query, field):
    response = client.get(f"/api/runs/{world['run'].pk}/metrics?{query}", **bearer("viewer"))
    assert 400 <= response.status_code < 500, response.content
    assert field in json.dumps(response.json())


def test_a_huge_run_id_is_a_422_not_a_500(client, world, bearer):
    response = client.get(f"/api/runs/{10**20}", **bearer("viewer"))
    assert response.status_code == 422
