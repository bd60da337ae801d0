"""Checkpoints, aliases and experiments over the API: roles, keyset pages, the table's columns, query counts."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.webapp.runs.test_experiment_pipeline import BASELINE, _create, _finish_stage, setup  # noqa: F401
from training.checkpoints import kept_steps
from webapp.runs.models import Checkpoint, Experiment, ExperimentState, MetricPoint, Run
from webapp.runs.selectors.checkpoints import checkpoint_rows, checkpoint_table
from webapp.runs.services.promotion import alias_move, checkpoint_gate_status, checkpoint_promote

ROLES = ["viewer", "reviewer", "editor", "owner"]


@pytest.fixture
def world(project_team):
    """One run with checkpoints, an alias moved twice; the URLs of every endpoint of this router."""
    project, owner = project_team["project"], project_team["owner"]
    run = Run.objects.create(project=project, name="grpo-1", kind="grpo")
    checkpoints = [Checkpoint.objects.create(run=run, step=s, storage_uri=f"/c/{s}") for s in (10, 20, 30)]
    alias_move(checkpoint=checkpoints[0], name="production", actor=owner, reason="first")
    alias_move(checkpoint=checkpoints[1], name="production", actor=owner, reason="better")
    slug = project.slug
    return {
        "project": project, "run": run, "checkpoints": checkpoints,
        "urls": [f"/api/projects/{slug}/checkpoints", f"/api/projects/{slug}/checkpoints?run_id={run.pk}",
                 f"/api/checkpoints/{checkpoints[0].pk}", f"/api/projects/{slug}/aliases",
                 f"/api/projects/{slug}/aliases/production/history", f"/api/projects/{slug}/experiments"],
    }


def _walk(client, url: str, headers: dict) -> tuple[list[dict], int]:
    """Every item of a paged list, following `next`; also how many pages it took."""
    items, cursor, pages = [], None, 0
    while True:
        sep = "&" if "?" in url else "?"
        response = client.get(url + (f"{sep}after={cursor}" if cursor else ""), **headers)
        assert response.status_code == 200, response.content
        body = response.json()
        items += body["items"]
        pages += 1
        cursor = body["next"]
        if cursor is None:
            return items, pages


# ---------------------------------------------------------------------------------------
# Roles
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_member_reads_every_endpoint(client, world, bearer, role):
    headers = bearer(role)
    for url in world["urls"]:
        response = client.get(url, **headers)
        assert response.status_code == 200, (url, response.content)


def test_non_members_get_404_everywhere(client, world, bearer):
    headers = bearer("outsider")
    for url in world["urls"]:
        response = client.get(url, **headers)
        assert response.status_code == 404, (url, response.status_code)
        assert response["Content-Type"].startswith("application/json")


def test_unknown_alias_run_and_cursor_are_json_errors_with_a_message(client, world, bearer, project_team):
    slug, headers = world["project"].slug, bearer("viewer")
    missing = client.get(f"/api/projects/{slug}/aliases/nope/history", **headers)
    assert missing.status_code == 404 and "No alias 'nope'" in missing.json()["detail"]
    other_run = Run.objects.create(project=project_team["other"], name="theirs", kind="grpo")
    foreign = client.get(f"/api/projects/{slug}/checkpoints?run_id={other_run.pk}", **headers)
    assert foreign.status_code == 404 and f"No run {other_run.pk}" in foreign.json()["detail"]
    for url in world["urls"]:
        if "?" in url or "/checkpoints/" in url:
            continue
        bad = client.get(f"{url}?after=not-a-cursor", **headers)
        assert bad.status_code == 400 and "cursor" in bad.json()["detail"], url


def test_the_experiments_path_still_takes_posts(client, world, bearer):
    """GET and POST share /projects/{slug}/experiments; adding the GET must not turn POST into 405."""
    response = client.post(f"/api/projects/{world['project'].slug}/experiments", {"name": "x", "dataset": "nope",
                           "verifier": "v", "model": "m"}, content_type="application/json", **bearer("editor"))
    assert response.status_code == 400 and "No dataset named 'nope'" in response.json()["detail"]


# ---------------------------------------------------------------------------------------
# Pagination
# ---------------------------------------------------------------------------------------


def test_checkpoint_pages_walk_every_row_once(client, project_team, bearer):
    project = project_team["project"]
    runs = [Run.objects.create(project=project, name=f"r{i}", kind="sft") for i in range(2)]
    made = [Checkpoint.objects.create(run=runs[i % 2], step=i, storage_uri=f"/c/{i}") for i in range(23)]
    Checkpoint.objects.create(run=Run.objects.create(project=project_team["other"], name="x", kind="sft"), step=1)
    items, pages = _walk(client, f"/api/projects/{project.slug}/checkpoints?limit=5", bearer("viewer"))
    assert [i["id"] for i in items] == sorted((c.pk for c in made), reverse=True)
    assert pages == 5
    one_run, _ = _walk(client, f"/api/projects/{project.slug}/checkpoints?limit=4&run_id={runs[0].pk}",
                       bearer("viewer"))
    assert [i["step"] for i in one_run] == list(range(22, -1, -2))


def test_alias_and_history_pages_walk_every_row_once(client, world, bearer, project_team):
    owner, checkpoints = project_team["owner"], world["checkpoints"]
    for i in range(7):
        alias_move(checkpoint=checkpoints[i % 3], name=f"a{i}", actor=owner)
    for i in range(5):  # production: 2 moves from the fixture + 5
        alias_move(checkpoint=checkpoints[i % 2 * 2], name="production", actor=owner, reason=f"move {i}")
    slug, headers = world["project"].slug, bearer("viewer")
    aliases, _ = _walk(client, f"/api/projects/{slug}/aliases?limit=3", headers)
    assert [a["name"] for a in aliases] == sorted(["production", *(f"a{i}" for i in range(7))])
    production = next(a for a in aliases if a["name"] == "production")
    assert production["moved_by"] == "owner" and production["checkpoint_id"] == checkpoints[0].pk
    history, pages = _walk(client, f"/api/projects/{slug}/aliases/production/history?limit=3", headers)
    assert [m["reason"] for m in history] == [f"move {i}" for i in range(4, -1, -1)] + ["better", "first"]
    assert pages == 3
    first = history[-1]
    assert first["from_checkpoint_id"] is None and first["to_step"] == 10 and first["moved_by"] == "owner"
    assert history[-2]["from_step"] == 10 and history[-2]["to_step"] == 20


def test_experiment_pages_walk_every_row_once(client, setup, bearer):  # noqa: F811
    fields = {k: setup[k] for k in ("project", "dataset", "model")}
    made = [Experiment.objects.create(name=f"e{i}", verifier_version=setup["verifier"], **fields) for i in range(7)]
    items, _ = _walk(client, f"/api/projects/{setup['project'].slug}/experiments?limit=3", bearer("viewer"))
    assert [e["id"] for e in items] == [e.pk for e in reversed(made)]


# ---------------------------------------------------------------------------------------
# The table's columns for an experiment's candidate
# ---------------------------------------------------------------------------------------


def _through_held_out(setup, *, candidate_success: float | None):  # noqa: F811
    """An experiment whose GRPO stage saved steps 5 (best) and 10; held-out finished unless None."""
    exp = _create(setup)
    exp = _finish_stage(exp, "baseline", metrics={**BASELINE, "valid_json_rate": 0.9})
    exp = _finish_stage(exp, "grpo", checkpoints=[(5, {"validation/success_rate": 0.7, "train/loss": 1.5}),
                                                  (10, {"validation/success_rate": 0.5})])
    if candidate_success is None:
        return exp
    return _finish_stage(exp, "held_out", metrics={"success_rate": candidate_success, "unsafe_action_rate": 0.0,
                                                   "latency_p95": 110.0})


def _rows_by_step(client, headers, exp) -> dict[int, dict]:
    run_id = exp.stages["grpo"]["run"]
    body = client.get(f"/api/projects/{exp.project.slug}/checkpoints?run_id={run_id}", **headers).json()
    return {row["step"]: row for row in body["items"]}


def test_a_passed_candidate_shows_gates_deltas_and_aliases(client, setup, bearer):  # noqa: F811
    exp = _through_held_out(setup, candidate_success=0.6)
    candidate = exp.candidate_checkpoint
    checkpoint_promote(checkpoint=candidate, alias="production", actor=setup["owner"])
    alias_move(checkpoint=candidate, name="candidate", actor=setup["owner"])
    rows = _rows_by_step(client, bearer("viewer"), exp)
    row = rows[5]
    assert row["id"] == candidate.pk
    assert row["gates"]["state"] == "passed" and row["gates"]["experiment_id"] == exp.pk
    assert row["gates"]["rows"] == exp.gates
    assert row["gates"]["detail"] == checkpoint_gate_status(candidate).detail
    assert row["validation"] == {"success_rate": 0.7}
    assert row["held_out"] == {"success_rate": 0.6, "unsafe_action_rate": 0.0, "latency_p95": 110.0}
    assert row["baseline"] == {"valid_json_rate": 0.9, "success_rate": 0.05, "unsafe_action_rate": 0.1,
                               "latency_p95": 100.0}
    assert row["deltas"] == pytest.approx({"success_rate": 0.55, "unsafe_action_rate": -0.1, "latency_p95": 10.0})
    assert row["aliases"] == ["candidate", "production"]
    assert row["kept"] is True
    other = rows[10]
    assert other["gates"]["state"] == "none" == checkpoint_gate_status(Checkpoint.objects.get(pk=other["id"])).state
    assert other["baseline"] == other["deltas"] == other["held_out"] == {} and other["aliases"] == []
    detail = client.get(f"/api/checkpoints/{candidate.pk}", **bearer("viewer")).json()
    assert detail == row


def test_a_failed_candidate_says_which_gate_failed(client, setup, bearer):  # noqa: F811
    exp = _through_held_out(setup, candidate_success=0.01)
    row = _rows_by_step(client, bearer("viewer"), exp)[5]
    status = checkpoint_gate_status(exp.candidate_checkpoint)
    assert (row["gates"]["state"], row["gates"]["detail"]) == ("failed", status.detail)
    assert "held-out success" in row["gates"]["detail"]
    assert row["deltas"]["success_rate"] == pytest.approx(-0.04)


def test_a_candidate_still_being_evaluated_is_pending_with_its_baseline(client, setup, bearer):  # noqa: F811
    exp = _through_held_out(setup, candidate_success=None)
    assert exp.state == ExperimentState.RUNNING and exp.candidate_checkpoint is not None
    row = _rows_by_step(client, bearer("viewer"), exp)[5]
    assert row["gates"]["state"] == "pending" and row["gates"]["experiment_id"] == exp.pk
    assert checkpoint_gate_status(exp.candidate_checkpoint).state == "none"  # promotion still needs force
    assert row["baseline"]["success_rate"] == 0.05 and row["held_out"] == {} and row["deltas"] == {}


def test_a_passed_experiment_outweighs_a_later_failed_one(setup):  # noqa: F811
    """The table picks the deciding experiment exactly as checkpoint_gate_status does."""
    exp = _through_held_out(setup, candidate_success=0.6)
    fields = {k: setup[k] for k in ("project", "dataset", "model")}
    later = Experiment.objects.create(name="later", verifier_version=setup["verifier"], state="succeeded",
                                      candidate_checkpoint=exp.candidate_checkpoint, gates_passed=False,
                                      gates=[{"gate": "held-out success", "passed": False}],
                                      finished_at=exp.finished_at, **fields)
    row = checkpoint_rows([Checkpoint.objects.select_related("run").get(pk=exp.candidate_checkpoint_id)])[0]
    status = checkpoint_gate_status(exp.candidate_checkpoint)
    assert (status.state, status.experiment_id) == ("passed", exp.pk)
    assert (row.gates.state, row.gates.experiment_id, row.gates.detail) == (status.state, exp.pk, status.detail)
    Experiment.objects.filter(pk=exp.pk).update(gates_passed=False, gates=[{"gate": "unsafe actions",
                                                                            "passed": False}])
    row = checkpoint_rows([Checkpoint.objects.select_related("run").get(pk=exp.candidate_checkpoint_id)])[0]
    status = checkpoint_gate_status(exp.candidate_checkpoint)
    assert (row.gates.state, row.gates.experiment_id, row.gates.detail) == ("failed", later.pk, status.detail)
    assert status.experiment_id == later.pk


# ---------------------------------------------------------------------------------------
# Retention
# ---------------------------------------------------------------------------------------


def test_kept_follows_the_runs_keep_top_k_rule(project_team):
    run = Run.objects.create(project=project_team["project"], name="r", kind="grpo",
                             config={"keep_top_k": 1, "checkpoint_metric": "validation/reward"})
    for step, value in ((10, 0.5), (20, 0.7), (30, 0.6), (40, None)):
        Checkpoint.objects.create(run=run, step=step, metrics={"validation/reward": value} if value else {})
    page = checkpoint_table(project_team["project"], run=run, after=None, limit=10)
    assert {row.step: row.kept for row in page.items} == {40: True, 30: False, 20: True, 10: False}


def test_kept_steps_matches_training_retention_rule():
    scores = {1: 0.2, 2: 0.9, 3: 0.9, 4: float("nan"), 5: None, 6: 0.1}
    assert kept_steps(scores, keep_top_k=2, mode="max") == {3, 2, 6}  # ties: the later step first
    assert kept_steps(scores, keep_top_k=1, mode="min") == {6}
    assert kept_steps({}, keep_top_k=3, mode="max") == set()


# ---------------------------------------------------------------------------------------
# Query counts
# ---------------------------------------------------------------------------------------


def _busy_project(setup, runs: int, per_run: int) -> None:  # noqa: F811
    """Runs with checkpoints; each run's last checkpoint an experiment's candidate, with an alias."""
    project = setup["project"]
    fields = {k: setup[k] for k in ("project", "dataset", "model")}
    for r in range(runs):
        run = Run.objects.create(project=project, name=f"r{r}", kind="grpo")
        base = Run.objects.create(project=project, name=f"b{r}", kind="eval")
        MetricPoint.objects.create(run=base, step=0, split="held_out", name="success_rate", value=0.1)
        last = None
        for s in range(per_run):
            last = Checkpoint.objects.create(run=run, step=s, storage_uri="/c",
                                             metrics={"validation/success_rate": s / 10})
        Experiment.objects.create(name=f"e{r}", verifier_version=setup["verifier"], candidate_checkpoint=last,
                                  stages={"baseline": {"run": base.pk}, "held_out": {"run": base.pk}},
                                  state="succeeded", gates_passed=True, gates=[], **fields)
        alias_move(checkpoint=last, name=f"alias-{r}", actor=setup["owner"])


def _queries(fn) -> int:
    with CaptureQueriesContext(connection) as ctx:
        fn()
    return len(ctx.captured_queries)


def test_a_page_of_checkpoints_costs_the_same_queries_whatever_its_length(client, setup, bearer,  # noqa: F811
                                                                           django_assert_max_num_queries):
    _busy_project(setup, runs=6, per_run=5)
    project = setup["project"]
    with django_assert_max_num_queries(6):  # the page, its runs' aliases, experiments, held-out, evaluations
        page = checkpoint_table(project, after=None, limit=30)
    assert len(page.items) == 30 and sum(1 for row in page.items if row.gates.state == "passed") == 6
    headers = bearer("viewer")
    url = f"/api/projects/{project.slug}/checkpoints?limit="
    small = _queries(lambda: client.get(url + "2", **headers))
    large = _queries(lambda: client.get(url + "30", **headers))
    assert small == large, (small, large)
    with django_assert_max_num_queries(large):
        assert len(client.get(url + "30", **headers).json()["items"]) == 30


def test_alias_experiment_and_history_pages_cost_a_fixed_number_of_queries(client, setup, bearer):  # noqa: F811
    _busy_project(setup, runs=5, per_run=2)
    for checkpoint in Checkpoint.objects.filter(run__name__in=["r1", "r2", "r3"], step=1):
        alias_move(checkpoint=checkpoint, name="alias-0", actor=setup["owner"])
    slug, headers = setup["project"].slug, bearer("viewer")
    for path in ("aliases", "experiments", "aliases/alias-0/history"):
        url = f"/api/projects/{slug}/{path}?limit="
        small = _queries(lambda u=url: client.get(u + "1", **headers))
        large = _queries(lambda u=url: client.get(u + "50", **headers))
        assert small == large, (path, small, large)
        assert len(client.get(url + "50", **headers).json()["items"]) >= 4, path
