"""REST API for failure buckets: roles, counts equal to the rollups, the comparison with its
transitions, 422 errors that name the field, and the OpenAPI documentation."""

from __future__ import annotations

import pytest
from failure_data import eval_run_with_first_samples
from pipeline_data import make_pipeline_project, make_pipeline_run

from webapp.trajectories.models import BucketRollup, Review, StepRollup, Trajectory

ROLES = ["viewer", "reviewer", "editor", "owner"]


@pytest.fixture
def world(project_team):
    project, owner = project_team["project"], project_team["owner"]
    setup = make_pipeline_project(project, owner)
    train = make_pipeline_run(project, owner, name="grpo quick", setup=setup)
    baseline = eval_run_with_first_samples(project, owner, setup, "baseline", [1, 1, 1, 3])
    candidate = eval_run_with_first_samples(project, owner, setup, "candidate", [0, 0, 2, 3])
    return {"project": project, "slug": project.slug, "owner": owner, "setup": setup, "train": train,
            "baseline": baseline, "candidate": candidate}


def _paths(world) -> list[str]:
    return [f"/api/runs/{world['train'].pk}/failures", f"/api/projects/{world['slug']}/failures/compare"]


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize(("who", "status"), [*((role, 200) for role in ROLES), ("outsider", 404)])
def test_members_read_and_outsiders_get_404(client, world, bearer, which, who, status):
    response = client.get(_paths(world)[which], **bearer(who))
    assert response.status_code == status
    if status == 404:
        assert "detail" in response.json()


def test_without_credentials_the_api_answers_401(client, world):
    assert client.get(_paths(world)[0]).status_code == 401


def test_run_failures_per_step_equal_the_rollups(client, world, bearer):
    train = world["train"]
    body = client.get(f"/api/runs/{train.pk}/failures", **bearer("viewer")).json()
    assert body["split"] == "train" and body["splits"] == ["train"] and body["step_width"] == 1
    assert body["buckets"] == ["passed", "invalid_json", "wrong_tool", "wrong_arguments"]
    for step in body["steps"]:
        rollup = StepRollup.objects.get(run=train, split="train", step=step["step"])
        buckets = dict(BucketRollup.objects.filter(run=train, split="train", step=step["step"])
                       .values_list("bucket", "count"))
        assert step["total"] == rollup.count and step["counts"] == {"passed": rollup.passed, **buckets}
        assert step["shares"]["passed"] == pytest.approx(rollup.passed / rollup.count)
        assert step["step_max"] == step["step"]
    assert body["totals"] == {"total": 48, "counts": {"passed": 12, "invalid_json": 12, "wrong_tool": 12,
                                                      "wrong_arguments": 12},
                              "shares": {"passed": 0.25, "invalid_json": 0.25, "wrong_tool": 0.25,
                                         "wrong_arguments": 0.25}}


def test_run_failures_list_top_buckets_with_examples_and_reviews(client, world, bearer, project_team):
    train = world["train"]
    wrong_tool = list(Trajectory.objects.filter(run=train, failure_bucket="wrong_tool").order_by("-id"))
    Review.objects.create(trajectory=wrong_tool[0], reviewer=project_team["reviewer"], verdict="disagree",
                          failure_bucket="unsafe_action")
    body = client.get(f"/api/runs/{train.pk}/failures", **bearer("viewer")).json()
    top = {entry["bucket"]: entry for entry in body["top"]}
    assert set(top) == {"invalid_json", "wrong_tool", "wrong_arguments"}
    assert [e["id"] for e in top["wrong_tool"]["examples"]] == [t.pk for t in wrong_tool[:3]]
    assert top["wrong_tool"]["examples"][0]["task_key"] == wrong_tool[0].task_key
    assert body["reviews"] == [{"verifier_bucket": "wrong_tool", "reviewer_bucket": "unsafe_action", "count": 1}]


def test_the_comparison_defaults_to_the_two_newest_evaluations(client, world, bearer):
    body = client.get(f"/api/projects/{world['slug']}/failures/compare", **bearer("viewer")).json()
    assert body["a"]["run_id"] == world["baseline"].pk and body["b"]["run_id"] == world["candidate"].pk
    assert body["a"]["split"] == "held_out" and body["a"]["step"] == 0
    assert body["a"]["totals"]["counts"] == {"wrong_tool": 3, "invalid_json": 1}
    assert body["b"]["totals"]["counts"] == {"passed": 2, "invalid_json": 1, "wrong_arguments": 1}
    assert body["b"]["totals"]["shares"]["passed"] == 0.5
    categories = {row["category"]: row for row in body["categories"]}
    assert categories["email"]["a"]["counts"] == {"wrong_tool": 2}
    assert categories["calendar"]["b"]["counts"] == {"passed": 1, "invalid_json": 1}


def test_transitions_name_each_from_to_pair_and_single_tasks(client, world, bearer):
    query = f"?a={world['baseline'].pk}&b={world['candidate'].pk}"
    transitions = client.get(f"/api/projects/{world['slug']}/failures/compare{query}", **bearer("viewer")).json()[
        "transitions"]
    assert (transitions["matched"], transitions["changed"], transitions["only_a"], transitions["only_b"]) == (4, 3, 0, 0)
    assert transitions["cells"] == [
        {"from_bucket": "invalid_json", "to_bucket": "invalid_json", "count": 1, "task_key": "task-3"},
        {"from_bucket": "wrong_tool", "to_bucket": "passed", "count": 2, "task_key": None},
        {"from_bucket": "wrong_tool", "to_bucket": "wrong_arguments", "count": 1, "task_key": "task-2"},
    ]


def test_baseline_against_an_improving_candidate(client, world, bearer):
    project, owner, setup = world["project"], world["owner"], world["setup"]
    before = make_pipeline_run(project, owner, name="before", kind="eval", split="held_out", steps=1, setup=setup)
    after = make_pipeline_run(project, owner, name="after", kind="eval", split="held_out", steps=1, improving=True,
                              setup=setup)
    body = client.get(f"/api/projects/{world['slug']}/failures/compare?a={before.pk}&b={after.pk}",
                      **bearer("viewer")).json()
    assert body["a"]["totals"]["counts"] == {"passed": 4, "invalid_json": 4, "wrong_tool": 4, "wrong_arguments": 4}
    assert body["b"]["totals"] == {"total": 16, "counts": {"passed": 16}, "shares": {"passed": 1.0}}
    assert body["transitions"]["cells"] == [
        {"from_bucket": "passed", "to_bucket": "passed", "count": 4, "task_key": None}]


@pytest.mark.parametrize(("query", "field", "says"), [
    ("?a=1", "b", "Give both a and b"),
    ("?a=abc&b=1", "a", ""),
    ("?a=0&b=1", "a", ""),
    ("?a={baseline}&b={baseline}", "b", "same run"),
    ("?a={baseline}&b={foreign}", "b", "No run"),
])
def test_bad_comparisons_answer_422_naming_the_field(client, world, bearer, project_team, query, field, says):
    foreign = make_pipeline_run(project_team["other"], project_team["outsider"], name="theirs", steps=1)
    query = query.format(baseline=world["baseline"].pk, foreign=foreign.pk)
    response = client.get(f"/api/projects/{world['slug']}/failures/compare{query}", **bearer("viewer"))
    assert response.status_code == 422
    body = response.json()
    assert field in body["errors"] and says in body["errors"][field] and body["detail"]


def test_a_project_with_fewer_than_two_evaluations_answers_422(client, project_team, bearer):
    make_pipeline_run(project_team["project"], project_team["owner"], name="training only", steps=1)
    response = client.get(f"/api/projects/{project_team['project'].slug}/failures/compare", **bearer("viewer"))
    assert response.status_code == 422 and set(response.json()["errors"]) == {"a", "b"}


def test_an_unknown_split_answers_422_with_the_splits_the_run_has(client, world, bearer):
    response = client.get(f"/api/runs/{world['train'].pk}/failures?split=held_out", **bearer("viewer"))
    assert response.status_code == 422
    assert response.json()["errors"]["split"].endswith("it has train.")
    response = client.get(f"/api/runs/{world['train'].pk}/failures?split={'x' * 40}", **bearer("viewer"))
    assert response.status_code == 422 and "split" in response.json()["errors"]


def test_a_run_without_trajectories_has_no_steps(client, world, bearer):
    from webapp.runs.models import Run

    empty = Run.objects.create(project=world["project"], name="draft", kind="grpo")
    body = client.get(f"/api/runs/{empty.pk}/failures", **bearer("viewer")).json()
    assert body["steps"] == [] and body["totals"] == {"total": 0, "counts": {}, "shares": {}} and body["top"] == []


def test_the_endpoints_are_documented_in_openapi(client, project_team):
    client.force_login(project_team["viewer"])
    paths = client.get("/api/openapi.json").json()["paths"]
    run = paths["/api/runs/{run_id}/failures"]["get"]
    compare = paths["/api/projects/{slug}/failures/compare"]["get"]
    assert run["summary"] == "Failure buckets of a run, per step" and "rollups" in run["description"]
    assert compare["summary"] == "Two evaluations compared by failure bucket" and "transitions" not in compare[
        "summary"]
    assert "422" in run["responses"] and "422" in compare["responses"]
    assert {p["name"] for p in compare["parameters"]} >= {"slug", "a", "b"}
