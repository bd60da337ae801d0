"""The Failures page: roles, bucket counts and shares equal to the rollups, the evaluations side by
side, transitions on fixed examples, human re-bucketing, links to the trajectory list, hostile text."""

from __future__ import annotations

import html
from urllib.parse import parse_qs, urlsplit

import pytest
from failure_data import eval_run_with_first_samples
from pipeline_data import XSS, make_pipeline_project, make_pipeline_run

from webapp.runs.selectors import failures as fs
from webapp.trajectories.models import BucketRollup, Review, StepRollup, Trajectory

MEMBERS = ["viewer", "reviewer", "editor", "owner"]


@pytest.fixture
def world(project_team):
    """A GRPO run (3 steps), a baseline evaluation and an improving candidate, all of 4 tasks."""
    project, owner = project_team["project"], project_team["owner"]
    setup = make_pipeline_project(project, owner)
    train = make_pipeline_run(project, owner, name="grpo quick", setup=setup)
    baseline = make_pipeline_run(project, owner, name="baseline", kind="eval", split="held_out", steps=1,
                                 setup=setup)
    candidate = make_pipeline_run(project, owner, name="candidate", kind="eval", split="held_out", steps=1,
                                  improving=True, setup=setup)
    return {"project": project, "slug": project.slug, "owner": owner, "setup": setup, "train": train,
            "baseline": baseline, "candidate": candidate}


def _page(client, world, user, query: str = ""):
    client.force_login(user)
    return client.get(f"/p/{world['slug']}/failures/{query}")


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


# ---------------------------------------------------------------------------------------
# Roles
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("who", "status"), [*((role, 200) for role in MEMBERS), ("outsider", 404)])
def test_members_read_the_page_and_outsiders_get_404(client, project_team, world, who, status):
    assert _page(client, world, project_team[who]).status_code == status


def test_anonymous_visitors_are_sent_to_login(client, world):
    response = client.get(f"/p/{world['slug']}/failures/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_another_projects_run_is_not_shown(client, project_team, world):
    other_run = make_pipeline_run(project_team["other"], project_team["outsider"], name="secret run", steps=1)
    response = _page(client, world, project_team["viewer"], f"?run={other_run.pk}")
    assert response.status_code == 200
    assert response.context["run"] != other_run and "secret run" not in response.content.decode()
    assert f"No run {other_run.pk} in this project" in response.content.decode()


def test_the_nav_links_the_page(client, project_team, world):
    body = _page(client, world, project_team["viewer"]).content.decode()
    assert f'href="/p/{world["slug"]}/failures/"' in body and 'data-nav-key="f"' in body


# ---------------------------------------------------------------------------------------
# Per step: counts equal the rollups
# ---------------------------------------------------------------------------------------


def test_step_bars_hold_the_rollups_counts_and_shares(client, project_team, world):
    train = world["train"]
    response = _page(client, world, project_team["viewer"], f"?run={train.pk}")
    steps = response.context["steps"]
    assert response.context["split"] == "train" and steps.width == 1
    rollups = {r.step: r for r in StepRollup.objects.filter(run=train, split="train")}
    assert [bar.step for bar in steps.bars] == sorted(rollups) == [1, 2, 3]
    for bar in steps.bars:
        buckets = dict(BucketRollup.objects.filter(run=train, split="train", step=bar.step)
                       .values_list("bucket", "count"))
        assert bar.counts.total == rollups[bar.step].count == 16
        assert bar.counts.counts == {"passed": rollups[bar.step].passed, **buckets}
        assert sum(bar.counts.counts.values()) == bar.counts.total
        assert sum(bar.counts.shares.values()) == pytest.approx(1.0)
        assert bar.counts.shares["passed"] == pytest.approx(rollups[bar.step].passed / 16)
    # the pipeline's four completions: right call, wrong tool, wrong arguments, invalid JSON
    assert steps.buckets == ["passed", "invalid_json", "wrong_tool", "wrong_arguments"]
    assert steps.totals.counts == {"passed": 12, "wrong_tool": 12, "wrong_arguments": 12, "invalid_json": 12}


def test_the_chart_data_and_the_table_link_each_segment_to_the_trajectory_list(client, project_team, world):
    train = world["train"]
    response = _page(client, world, project_team["viewer"], f"?run={train.pk}")
    chart = response.context["steps_chart"]
    assert [bar["step"] for bar in chart["bars"]] == [1, 2, 3]
    assert chart["queries"]["passed"] == {"passed": "yes"} and chart["queries"]["wrong_tool"] == {"bucket": "wrong_tool"}
    body = response.content.decode()
    assert 'id="failures-steps"' in body and 'data-failures-chart="failures-steps"' in body
    links = response.context["links"]
    if not links.trajectories:
        pytest.skip("the trajectory list page does not exist yet: no links to check")
    row = next(r for r in response.context["step_rows"] if r["step"] == "2")
    urls = {bucket: url for bucket, _n, url in row["cells"]}
    assert _query(urls["wrong_tool"]) == {"run": [str(train.pk)], "split": ["train"], "step": ["2"],
                                          "bucket": ["wrong_tool"]}
    assert _query(urls["passed"])["passed"] == ["yes"]
    assert html.escape(urls["wrong_tool"]) in body


def test_a_run_wider_than_the_bar_limit_is_drawn_in_step_ranges(client, project_team, world, monkeypatch):
    monkeypatch.setattr(fs, "MAX_BARS", 2)
    steps = fs.step_buckets(world["train"], "train")
    assert steps.width == 2 and [(b.step, b.step_max) for b in steps.bars] == [(1, 2), (3, 3)]
    assert steps.bars[0].counts.total == 32 and steps.totals.total == 48


def test_an_unknown_split_is_named_and_the_default_shown(client, project_team, world):
    response = _page(client, world, project_team["viewer"], f"?run={world['train'].pk}&split=nope")
    assert response.context["split"] == "train" and "split" in response.context["errors"]
    assert "has no trajectories in split" in response.content.decode()


def test_bad_numbers_in_the_query_are_named_not_a_500(client, project_team, world):
    response = _page(client, world, project_team["viewer"], "?run=abc&a=-1&b=x")
    assert response.status_code == 200
    assert set(response.context["errors"]) >= {"run", "a", "b"}


def test_the_page_opens_on_the_newest_training_run(client, project_team, world):
    response = _page(client, world, project_team["viewer"])
    assert response.context["run"] == world["train"]


# ---------------------------------------------------------------------------------------
# Top buckets
# ---------------------------------------------------------------------------------------


def test_top_buckets_have_three_newest_examples_of_their_bucket(client, project_team, world):
    train = world["train"]
    response = _page(client, world, project_team["viewer"], f"?run={train.pk}")
    top = response.context["top"]
    assert [entry["top"].bucket for entry in top] == ["invalid_json", "wrong_arguments", "wrong_tool"]
    for entry in top:
        expected = list(Trajectory.objects.filter(run=train, failure_bucket=entry["top"].bucket)
                        .order_by("-id").values_list("pk", flat=True)[:3])
        assert [t.pk for t, _url in entry["examples"]] == expected
        assert entry["top"].count == 12 and entry["top"].share == pytest.approx(0.25)


# ---------------------------------------------------------------------------------------
# Evaluations side by side, categories, transitions
# ---------------------------------------------------------------------------------------


def test_the_two_newest_evaluations_are_compared_by_default(client, project_team, world):
    comparison = _page(client, world, project_team["viewer"]).context["comparison"]
    assert comparison["a"].run == world["baseline"] and comparison["b"].run == world["candidate"]
    assert comparison["a"].split == "held_out" and comparison["a"].step == 1
    rows = {row["bucket"]: row for row in comparison["bucket_rows"]}
    assert (rows["passed"]["a"], rows["passed"]["b"]) == (4, 16)
    assert (rows["wrong_tool"]["a"], rows["wrong_tool"]["b"]) == (4, 0)
    assert rows["passed"]["share_a"] == pytest.approx(0.25) and rows["passed"]["delta"] == pytest.approx(0.75)
    body = _page(client, world, project_team["viewer"]).content.decode()
    assert "+75.0 pp" in body and "25.0%" in body


def test_categories_split_each_evaluation_by_task_category(client, project_team, world):
    comparison = _page(client, world, project_team["viewer"]).context["comparison"]
    rows = {row.category: row for row in comparison["categories"].rows}
    assert set(rows) == {"email", "calendar"}
    assert rows["email"].a.total == 8 and rows["email"].a.counts["passed"] == 2
    assert rows["email"].b.counts == {"passed": 8}
    groups = comparison["chart"]["groups"]
    assert groups[0]["label"] == "all tasks" and {g["category"] for g in groups[1:]} == {"email", "calendar"}
    assert all(g["link"] for g in groups)


def test_tasks_without_a_category_are_drawn_but_not_linked(client, project_team, world):
    from webapp.datasets.models import Task

    Task.objects.filter(dataset=world["setup"][0], category="calendar").update(category="")
    comparison = _page(client, world, project_team["viewer"]).context["comparison"]
    group = next(g for g in comparison["chart"]["groups"] if g["label"] == "(no category)")
    assert group["link"] is False and group["a"]["passed"] == 2


def test_baseline_against_an_improving_candidate_keeps_first_samples_passed(client, project_team, world):
    transitions = _page(client, world, project_team["viewer"]).context["comparison"]["transitions"]
    assert [(c.source, c.target, c.count) for c in transitions.cells] == [("passed", "passed", 4)]
    assert (transitions.matched, transitions.changed, transitions.only_a, transitions.only_b) == (4, 0, 0, 0)


def test_transitions_count_tasks_by_their_first_samples_bucket(client, project_team, world):
    """Fixed example: the pipeline's completions 0 right, 1 wrong tool, 2 wrong arguments, 3 invalid JSON."""
    project, owner, setup = world["project"], world["owner"], world["setup"]
    before = eval_run_with_first_samples(project, owner, setup, "before", [1, 1, 1, 3])
    after = eval_run_with_first_samples(project, owner, setup, "after", [0, 0, 2, 3])
    response = _page(client, world, project_team["viewer"], f"?a={before.pk}&b={after.pk}")
    transitions = response.context["comparison"]["transitions"]
    assert {(c.source, c.target): c.count for c in transitions.cells} == {
        ("wrong_tool", "passed"): 2, ("wrong_tool", "wrong_arguments"): 1, ("invalid_json", "invalid_json"): 1}
    assert (transitions.matched, transitions.changed) == (4, 3)
    one = next(c for c in transitions.cells if c.source == "wrong_tool" and c.target == "wrong_arguments")
    assert one.task_key == "task-2"
    matrix = {source: cells for source, cells, _total in response.context["comparison"]["matrix"]}
    if response.context["links"].trajectories:
        urls = {cell.target: url for cell, url in matrix["wrong_tool"] if cell}
        assert _query(urls["wrong_arguments"]) == {"run": [str(after.pk)], "split": ["held_out"], "step": ["0"],
                                                   "task": ["task-2"]}
        assert _query(urls["passed"]) == {"run": [str(after.pk)], "split": ["held_out"], "step": ["0"],
                                          "passed": ["yes"]}
    body = response.content.decode()
    assert 'data-from="wrong_tool" data-to="wrong_arguments" data-count="1"' in body
    assert "3</strong> changed bucket" in body


def test_comparing_a_run_with_itself_or_a_missing_run_is_named(client, project_team, world):
    run = world["baseline"]
    response = _page(client, world, project_team["viewer"], f"?a={run.pk}&b={run.pk}")
    assert "b" in response.context["errors"] and response.context["comparison"]["b"].run == world["candidate"]
    response = _page(client, world, project_team["viewer"], f"?a={run.pk}&b=999999")
    assert response.context["errors"]["b"] == "No run 999999 in this project."


def test_fewer_than_two_evaluations_say_what_to_do(client, project_team):
    project, owner = project_team["project"], project_team["owner"]
    make_pipeline_run(project, owner, name="only training", steps=1)
    client.force_login(project_team["editor"])
    response = client.get(f"/p/{project.slug}/failures/")
    assert response.context["comparison"] is None
    body = response.content.decode()
    assert "Comparing needs two evaluation runs" in body and "?kind=eval" in body


def test_a_project_without_runs_says_what_to_do(client, project_team):
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project_team['project'].slug}/failures/").content.decode()
    assert "No runs yet: launch a baseline evaluation" in body


# ---------------------------------------------------------------------------------------
# Human re-bucketing
# ---------------------------------------------------------------------------------------


def test_reviews_are_shown_beside_the_verifiers_bucket(client, project_team, world):
    train = world["train"]
    rows = list(Trajectory.objects.filter(run=train, step=3).order_by("task_key", "sample_index"))
    wrong_tool = [t for t in rows if t.failure_bucket == "wrong_tool"]
    passed = [t for t in rows if t.passed]
    reviewer = project_team["reviewer"]
    Review.objects.create(trajectory=wrong_tool[0], reviewer=reviewer, verdict="agree", failure_bucket="unsafe_action")
    Review.objects.create(trajectory=wrong_tool[1], reviewer=reviewer, verdict="agree")
    Review.objects.create(trajectory=wrong_tool[2], reviewer=reviewer, verdict="disagree")
    Review.objects.create(trajectory=passed[0], reviewer=reviewer, verdict="disagree")
    Review.objects.create(trajectory=passed[1], reviewer=reviewer, verdict="disagree", failure_bucket="extra_write")
    Review.objects.create(trajectory=passed[2], reviewer=reviewer, preferred_over=passed[3])  # a preference: not counted
    response = _page(client, world, project_team["viewer"], f"?run={train.pk}")
    table = {(r.verifier, r.reviewer): r.count for r in response.context["rebucketing"]}
    assert table == {("passed", fs.FAILED_NO_BUCKET): 1, ("passed", "extra_write"): 1,
                     ("wrong_tool", "passed"): 1, ("wrong_tool", "unsafe_action"): 1, ("wrong_tool", "wrong_tool"): 1}
    assert 'id="failures-rebucket"' in response.content.decode()


# ---------------------------------------------------------------------------------------
# Hostile text
# ---------------------------------------------------------------------------------------


def test_hostile_task_keys_and_run_names_appear_only_escaped(client, project_team):
    project, owner = project_team["project"], project_team["owner"]
    setup = make_pipeline_project(project, owner, hostile=True, tasks=2)
    run = make_pipeline_run(project, owner, name=f"run {XSS[2]}", hostile=True, setup=setup)
    eval_run_with_first_samples(project, owner, setup, f"a {XSS[1]}", [1, 0], hostile=True)
    eval_run_with_first_samples(project, owner, setup, "b", [0, 0], hostile=True)
    client.force_login(project_team["viewer"])
    response = client.get(f"/p/{project.slug}/failures/?run={run.pk}")
    body = response.content.decode()
    examples = [t.task_key for entry in response.context["top"] for t, _url in entry["examples"]]
    assert any(XSS[0] in key for key in examples)
    transitions = response.context["comparison"]["transitions"]
    assert any(c.task_key and XSS[0] in c.task_key for c in transitions.cells)
    for probe in XSS:
        assert probe not in body
    assert html.escape(XSS[0]) in body and html.escape(XSS[2]) in body
    assert "\\u003Csvg onload=alert(1)\\u003E" in body  # the run name inside the chart's json_script


# ---------------------------------------------------------------------------------------
# Unbucketed failures and the examples' window
# ---------------------------------------------------------------------------------------


def test_failures_without_a_bucket_count_as_unbucketed(client, project_team, world):
    from webapp.runs.services.ingest import EventIngestor

    train = world["train"]
    base = {"type": "trajectory", "task_id": "task-0", "step": 4, "split": "train", "turns": [], "components": {}}
    EventIngestor(train, attempt=1).ingest([
        {**base, "sample_index": 0, "reward": 1.0, "passed": True, "failure_bucket": ""},
        {**base, "sample_index": 1, "reward": 0.0, "passed": False, "failure_bucket": "not a bucket"},
    ])
    response = _page(client, world, project_team["viewer"], f"?run={train.pk}")
    last = response.context["steps"].bars[-1]
    assert last.step == 4 and last.counts.counts == {"passed": 1, "unbucketed": 1}
    unbucketed = fs.bucket_examples(train, "train", "unbucketed")
    assert [(t.step, t.sample_index) for t in unbucketed] == [(4, 1)]
    if response.context["links"].trajectories:
        row = next(r for r in response.context["step_rows"] if r["step"] == "4")
        urls = {bucket: url for bucket, _n, url in row["cells"]}
        assert _query(urls["unbucketed"]) == {"run": [str(train.pk)], "split": ["train"], "step": ["4"],
                                              "passed": ["no"], "bucket": ["none"]}


def test_examples_are_looked_for_among_the_buckets_newest_rows(world, monkeypatch):
    monkeypatch.setattr(fs, "EXAMPLE_WINDOW", 2)
    newest = list(Trajectory.objects.filter(run=world["train"], failure_bucket="wrong_tool").order_by("-id")[:2])
    assert fs.bucket_examples(world["train"], "train", "wrong_tool") == newest
    assert fs.bucket_examples(world["train"], "validation", "wrong_tool") == []
