"""Run reads shared by the pages and the API: lists, headline metrics, names and chart series."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.models import Max
from django.test.utils import CaptureQueriesContext

from webapp.common.pagination import CursorError
from webapp.runs.models import Checkpoint, Experiment, Job, JobState, MetricPoint, ModelSpec, Run
from webapp.runs.selectors.runs import (
    HEADLINE_METRICS,
    SeriesError,
    config_cell,
    job_eta_seconds,
    metric_latest,
    metric_names,
    metric_series,
    run_detail,
    run_headline_cells,
    run_headline_metrics,
    run_list,
)
from webapp.runs.services.ingest import EventIngestor

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def add_points(run: Run, name: str, values, *, split: str = "train", first_step: int = 0, seconds: float = 1.0):
    """Store `values` at consecutive steps, `seconds` apart in recorded time, as a training process's
    metric events are stored (the ingest service, which also keeps the run's stored headlines)."""
    EventIngestor(run, attempt=1).ingest([
        {"type": "metric", "step": first_step + i, "split": split, "metrics": {name: v},
         "time": (T0 + timedelta(seconds=seconds * (first_step + i))).timestamp()} for i, v in enumerate(values)])


@pytest.fixture
def project(project_team):
    return project_team["project"]


@pytest.fixture
def run(project):
    return Run.objects.create(project=project, name="grpo a", kind="grpo")


# --- lists ------------------------------------------------------------------------------


@pytest.fixture
def varied_runs(project_team):
    """Runs differing in each filterable field, plus one in another project that no filter may show."""
    from webapp.datasets.models import TaskDataset

    project, editor, owner = project_team["project"], project_team["editor"], project_team["owner"]
    wp1 = TaskDataset.objects.create(project=project, name="wp", version=1)
    wp2 = TaskDataset.objects.create(project=project, name="wp", version=2)
    other_ds = TaskDataset.objects.create(project=project, name="json", version=1)
    tiny = ModelSpec.objects.create(project=project, name="tiny", hf_id="x/tiny")
    experiment = Experiment.objects.create(project=project, name="e", dataset=wp1, model=tiny,
                                           verifier_version=_verifier_version(project, owner))
    runs = {
        "a": Run.objects.create(project=project, name="Alpha GRPO", kind="grpo", status="running", dataset=wp1,
                                model=tiny, created_by=editor),
        "b": Run.objects.create(project=project, name="beta sft", kind="sft", status="failed", dataset=wp2,
                                created_by=owner, experiment=experiment),
        "c": Run.objects.create(project=project, name="gamma eval", kind="eval", status="succeeded",
                                dataset=other_ds, created_by=editor),
    }
    Run.objects.create(project=project_team["other"], name="Alpha elsewhere", kind="grpo", status="running")
    return runs


def _verifier_version(project, actor):
    from webapp.verifiers.services.verifiers import verifier_create

    return verifier_create(project=project, name="v", kind="json_tool_call", config={}, actor=actor).latest_version


def _names(page) -> list[str]:
    return [run.name for run in page.items]


@pytest.mark.parametrize(("filters", "expected"), [
    ({}, {"a", "b", "c"}),
    ({"kind": "grpo"}, {"a"}),
    ({"status": "failed"}, {"b"}),
    ({"dataset": "wp"}, {"a", "b"}),  # every version of the dataset
    ({"model": "tiny"}, {"a"}),
    ({"creator": "editor"}, {"a", "c"}),
    ({"text": "ALPHA"}, {"a"}),
    ({"kind": "grpo", "creator": "owner"}, set()),
    ({"text": ""}, {"a", "b", "c"}),  # an empty filter field filters nothing
])
def test_run_list_filters(project, varied_runs, filters, expected):
    page = run_list(project, **filters)
    assert {run.pk for run in page.items} == {varied_runs[key].pk for key in expected}


def test_run_list_filters_by_experiment(project, varied_runs):
    experiment_id = varied_runs["b"].experiment_id
    assert [r.pk for r in run_list(project, experiment=experiment_id).items] == [varied_runs["b"].pk]


@pytest.mark.parametrize(("sort", "key"), [("name", lambda r: r.name), ("-name", lambda r: r.name),
                                           ("kind", lambda r: r.kind), ("-status", lambda r: r.status),
                                           ("created", lambda r: r.created_at)])
def test_run_list_sorts_and_walks_every_page(project, sort, key):
    for i in range(11):
        Run.objects.create(project=project, name=f"run {i:02d}", kind=["grpo", "sft", "eval"][i % 3],
                           status=["queued", "failed"][i % 2])
    seen, cursor = [], None
    while True:
        page = run_list(project, sort=sort, after=cursor, limit=4)
        seen.extend(page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(seen) == 11 == len({r.pk for r in seen})
    assert [key(r) for r in seen] == sorted((key(r) for r in seen), reverse=sort.startswith("-"))


def test_run_list_default_is_newest_first(project):
    runs = [Run.objects.create(project=project, name=f"r{i}", kind="grpo") for i in range(3)]
    assert [r.pk for r in run_list(project).items] == [r.pk for r in reversed(runs)]


def test_run_list_refuses_unknown_sort_and_foreign_cursor(project, varied_runs):
    with pytest.raises(ValueError, match="unknown sort"):
        run_list(project, sort="loss")
    cursor = run_list(project, sort="name", limit=1).next_cursor
    with pytest.raises(CursorError):
        run_list(project, sort="-created", after=cursor)


def _walk(project, **kwargs) -> list[Run]:
    seen, cursor = [], None
    while True:
        page = run_list(project, after=cursor, **kwargs)
        seen.extend(page.items)
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


@pytest.fixture
def held_out_world(project):
    """Runs whose held-out success the table shows from each place it can come from, and runs without one."""
    def evaluated(run: Run, step: int, value: float, *, eval_split: str = "held_out", status: str = "succeeded"):
        checkpoint = Checkpoint.objects.create(run=run, step=step, storage_uri=f"/c/{run.pk}/{step}")
        evaluation = Run.objects.create(project=project, name=f"{run.name} eval {step}", kind="eval",
                                        status=status, parent_checkpoint=checkpoint,
                                        config={"eval_split": eval_split})
        add_points(evaluation, "success_rate", [value], split="held_out")
        return evaluation

    own_high, own_low, tied = (Run.objects.create(project=project, name=n, kind="sft") for n in ("own .8", "own .3", "tied .3"))
    add_points(own_high, "success_rate", [0.1, 0.8], split="held_out")  # the latest step counts
    add_points(own_low, "success_rate", [0.3], split="held_out")
    add_points(tied, "success_rate", [0.3], split="held_out")
    borrowed = Run.objects.create(project=project, name="borrows .6", kind="grpo")
    evaluated(borrowed, 10, 0.95)
    evaluated(borrowed, 20, 0.6)  # the latest evaluated checkpoint wins over a better earlier one
    Checkpoint.objects.create(run=borrowed, step=30, storage_uri="/c/unevaluated")
    own_wins = Run.objects.create(project=project, name="own .2 over evaluated .9", kind="grpo")
    add_points(own_wins, "success_rate", [0.2], split="held_out")
    evaluated(own_wins, 10, 0.9)
    not_yet = Run.objects.create(project=project, name="evaluation still running", kind="grpo")
    evaluated(not_yet, 10, 0.99, status="running")
    other_split = Run.objects.create(project=project, name="evaluated on validation only", kind="grpo")
    evaluated(other_split, 10, 0.97, eval_split="validation")
    bare = Run.objects.create(project=project, name="bare", kind="grpo")
    runs = [own_high, own_low, tied, borrowed, own_wins, not_yet, other_split, bare]
    # The evaluation runs are runs of the project too, each measuring itself.
    return runs + [r for r in Run.objects.filter(project=project, kind="eval")]


@pytest.mark.parametrize("sort", ["-held_out", "held_out"])
def test_run_list_sorts_by_a_headline_as_the_table_shows_it_and_runs_without_one_come_last(
        project, held_out_world, sort):
    seen = _walk(project, sort=sort, limit=3)
    assert sorted(r.pk for r in seen) == sorted(r.pk for r in held_out_world)
    column = [h.key for h in HEADLINE_METRICS].index("held_out/success_rate")
    cells = run_headline_cells(seen)
    shown = [cells[r.pk][column][0] for r in seen]
    present = [v for v in shown if v is not None]
    assert shown == [*sorted(present, reverse=sort.startswith("-")), *[None] * (len(shown) - len(present))]
    by_name = {r.name: cells[r.pk][column][0] for r in seen}
    assert by_name["borrows .6"] == pytest.approx(0.6) and by_name["own .2 over evaluated .9"] == 0.2
    assert by_name["evaluation still running"] is None and by_name["evaluated on validation only"] is None
    assert shown.count(None) == 3  # bare, still running, validation-only (every evaluation run has its own)


def test_run_list_sorts_by_reward_and_a_cursor_of_one_metric_sort_is_refused_by_another(project):
    runs = [Run.objects.create(project=project, name=f"r{i}", kind="grpo") for i in range(5)]
    for run, rewards in zip(runs, ([0.5], [0.1, 0.9], [], [0.5], [-0.2]), strict=True):
        add_points(run, "reward", rewards)
    # The latest value counts (r1: 0.9); a tie goes newest first in descending order and oldest first in
    # ascending, as the other sorts do; r2 has none and comes last both ways.
    assert [r.name for r in _walk(project, sort="-reward", limit=2)] == ["r1", "r3", "r0", "r4", "r2"]
    assert [r.name for r in _walk(project, sort="reward", limit=2)] == ["r4", "r0", "r3", "r1", "r2"]
    cursor = run_list(project, sort="-reward", limit=1).next_cursor
    with pytest.raises(CursorError):
        run_list(project, sort="-validation", after=cursor)
    assert [r.name for r in run_list(project, sort="-reward", kind="sft").items] == []


@pytest.fixture
def config_world(project):
    """Runs whose learning rate and algorithm the table shows from each place they can come from, and runs without."""
    def run(name: str, kind: str = "grpo", config: dict | None = None, resolved: dict | None = None) -> Run:
        return Run.objects.create(project=project, name=name, kind=kind, config=config or {}, resolved_config=resolved)

    return [
        run("set 3e-4", config={"learning_rate": 3e-4, "algorithm": "grpo"},
            resolved={"learning_rate": 3e-4, "algorithm": "grpo"}),
        run("default 1e-5", config={}, resolved={"learning_rate": 1e-5, "algorithm": "grpo"}),  # training's default
        run("old run, submitted 2e-3", config={"learning_rate": 2e-3, "algorithm": "dpo"}),  # no resolved_config
        run("tied 3e-4", kind="sft", config={"learning_rate": 3e-4}, resolved={"learning_rate": 3e-4,
                                                                               "algorithm": "sft"}),
        run("integer 1", config={"learning_rate": 1, "algorithm": "grpo"}),  # a JSON integer is a number too
        run("eval, default n/a", kind="eval", config={}, resolved={"learning_rate": 1e-5}),  # shown as n/a
        run("eval, set 5e-1", kind="eval", config={"learning_rate": 0.5}),  # set by hand: shown, so sorted
        run("imported text", config={"learning_rate": "3e-4", "algorithm": None}),  # not a number: no value
        run("bare", config={}),
        run("not a dict", config=["learning_rate", 9]),
    ]


@pytest.mark.parametrize("sort", ["config.learning_rate", "-config.learning_rate"])
def test_run_list_sorts_by_a_config_column_as_the_table_shows_it_and_runs_without_one_come_last(
        project, config_world, sort):
    seen = _walk(project, sort=sort, limit=3)
    assert sorted(r.pk for r in seen) == sorted(r.pk for r in config_world)
    shown = [config_cell(r, "learning_rate")[0] for r in seen]
    numbers = [float(v) for v in shown[:6]]
    assert numbers == sorted([3e-4, 1e-5, 2e-3, 3e-4, 1, 0.5], reverse=sort.startswith("-"))
    # Last in both directions: no number to order by. The imported "3e-4" is shown, as text.
    assert {r.name: v for r, v in zip(seen[6:], shown[6:], strict=True)} == {
        "eval, default n/a": None, "imported text": "3e-4", "bare": None, "not a dict": None}
    ties = [r.name for r in seen if config_cell(r, "learning_rate")[0] == "0.0003"]
    assert ties == (["tied 3e-4", "set 3e-4"] if sort.startswith("-") else ["set 3e-4", "tied 3e-4"])


@pytest.mark.parametrize("sort", ["config.algorithm", "-config.algorithm"])
def test_run_list_sorts_by_a_text_config_column(project, config_world, sort):
    shown = [config_cell(r, "algorithm")[0] for r in _walk(project, sort=sort, limit=4)]
    present = [v for v in shown if v is not None]
    assert present == sorted(["grpo", "grpo", "dpo", "sft", "grpo"], reverse=sort.startswith("-"))
    assert shown == [*present, *[None] * (len(config_world) - len(present))]


def test_a_cursor_of_one_config_sort_is_refused_by_another_and_unknown_columns_are_unknown_sorts(
        project, config_world):
    cursor = run_list(project, sort="config.learning_rate", limit=1).next_cursor
    with pytest.raises(CursorError):
        run_list(project, sort="config.seed", after=cursor)
    with pytest.raises(CursorError):
        run_list(project, sort="-config.learning_rate", after=cursor)
    with pytest.raises(ValueError, match="unknown sort"):
        run_list(project, sort="config.no_such_field")
    assert [r.name for r in run_list(project, sort="-config.learning_rate", kind="sft").items] == ["tied 3e-4"]


# --- headline metrics ------------------------------------------------------------------


def test_headline_metrics_are_the_latest_value_per_run(project, run):
    other = Run.objects.create(project=project, name="eval", kind="eval")
    add_points(run, "reward", [0.1, 0.5, 0.3])
    add_points(run, "success_rate", [0.2, 0.6], split="validation")
    add_points(run, "success_rate", [0.9], split="train")  # another split: not the validation headline
    add_points(other, "success_rate", [0.45], split="held_out")
    headline = run_headline_metrics([run, other])
    assert headline[run.pk] == {"train/reward": 0.3, "validation/success_rate": 0.6, "held_out/success_rate": None}
    assert headline[other.pk] == {"train/reward": None, "validation/success_rate": None,
                                  "held_out/success_rate": 0.45}
    assert set(headline[run.pk]) == {m.key for m in HEADLINE_METRICS}
    assert run_headline_metrics([]) == {}


def test_headline_metrics_of_a_page_take_one_query(project, django_assert_num_queries):
    runs = [Run.objects.create(project=project, name=f"r{i}", kind="grpo") for i in range(25)]
    for i, r in enumerate(runs):
        add_points(r, "reward", [i / 100] * 30)
    with django_assert_num_queries(1):
        headline = run_headline_metrics(runs)
    assert [headline[r.pk]["train/reward"] for r in runs] == [i / 100 for i in range(25)]


# --- one run ---------------------------------------------------------------------------


def test_run_detail_borrows_missing_evaluation_headlines_from_its_checkpoints_evaluations(project, run):
    """A GRPO run records no held-out success: its checkpoints' evaluation runs do. The header
    shows the latest evaluated checkpoint's number and says where it came from; a headline the
    run recorded itself, and train metrics, are never borrowed."""
    add_points(run, "success_rate", [0.7], split="validation")
    early, late = (Checkpoint.objects.create(run=run, step=step, storage_uri=f"/c/{step}") for step in (10, 20))
    for checkpoint, value in ((early, 0.4), (late, 0.59)):
        evaluation = Run.objects.create(project=project, name=f"held-out {checkpoint.step}", kind="eval",
                                        status="succeeded", parent_checkpoint=checkpoint,
                                        config={"eval_split": "held_out"})
        add_points(evaluation, "success_rate", [value], split="held_out")
        add_points(evaluation, "success_rate", [0.99], split="validation", first_step=1)  # not its eval_split
    detail = run_detail(run)
    assert detail.headline["held_out/success_rate"] is None  # the run's own metrics stay its own
    assert detail.checkpoint_headline == {
        "held_out/success_rate": (0.59, "the evaluation of its step-20 checkpoint")}
    assert run_detail(Run.objects.create(project=project, name="bare", kind="grpo")).checkpoint_headline == {}


def test_a_page_of_runs_borrows_its_checkpoints_evaluations_in_a_fixed_number_of_queries(
        project, django_assert_max_num_queries):
    """The runs list and the overview show the same borrowed numbers as the header, for a whole
    page at once: the count of queries does not grow with runs or checkpoints."""
    def grpo_run_evaluated_at(name: str, values_by_step: dict[int, float]) -> Run:
        run = Run.objects.create(project=project, name=name, kind="grpo")
        for step, value in values_by_step.items():
            checkpoint = Checkpoint.objects.create(run=run, step=step, storage_uri=f"/c/{name}/{step}")
            evaluation = Run.objects.create(project=project, name=f"{name} held-out {step}", kind="eval",
                                            status="succeeded", parent_checkpoint=checkpoint,
                                            config={"eval_split": "held_out"})
            add_points(evaluation, "success_rate", [value], split="held_out")
        return run

    runs = [grpo_run_evaluated_at(f"grpo {i}", {10: 0.1 * i, 20: 0.1 * i + 0.05}) for i in range(1, 6)]
    for run in runs:  # a later checkpoint nobody evaluated yet: the latest evaluated one (20) is shown
        Checkpoint.objects.create(run=run, step=30, storage_uri=f"/c/{run.name}/30")
    own = Run.objects.create(project=project, name="measured itself", kind="grpo")
    add_points(own, "success_rate", [0.8], split="held_out")
    page = [*runs, own]
    with django_assert_max_num_queries(5):
        cells = run_headline_cells(page)
    held_out = [h.key for h in HEADLINE_METRICS].index("held_out/success_rate")
    for i, run in enumerate(runs, start=1):
        value, source = cells[run.pk][held_out]
        assert (value, source) == (pytest.approx(0.1 * i + 0.05), "the evaluation of its step-20 checkpoint")
    assert cells[own.pk][held_out] == (0.8, "")
    assert all(source == "" for value, source in cells[own.pk])


def test_run_detail_has_latest_job_checkpoints_and_eta(project, run):
    Job.objects.create(project=project, run=run, kind="grpo", state=JobState.FAILED)
    started = datetime.now(UTC) - timedelta(seconds=100)
    latest = Job.objects.create(project=project, run=run, kind="grpo", state=JobState.RUNNING, progress=0.25,
                                started_at=started)
    Checkpoint.objects.create(run=run, step=20, storage_uri="/c/20")
    Checkpoint.objects.create(run=run, step=10, storage_uri="/c/10")
    detail = run_detail(run)
    assert detail.job.pk == latest.pk
    assert [c.step for c in detail.checkpoints] == [10, 20]
    assert detail.eta_seconds == pytest.approx(300, abs=5)  # 100 s for a quarter: 300 s to go
    assert set(detail.headline) == {m.key for m in HEADLINE_METRICS}


def test_eta_only_for_a_running_job_with_progress(project, run):
    job = Job(project=project, run=run, kind="grpo", state=JobState.QUEUED, progress=0.5, started_at=T0)
    assert job_eta_seconds(job) is None
    job.state, job.progress = JobState.RUNNING, 0.0
    assert job_eta_seconds(job) is None
    job.progress = 0.5
    assert job_eta_seconds(job, now=T0 + timedelta(seconds=60)) == 60
    assert job_eta_seconds(None) is None


def test_metric_names_are_distinct_sorted_pairs(run):
    add_points(run, "reward", [1, 2, 3])
    add_points(run, "kl", [1, 2])
    add_points(run, "success_rate", [0.5], split="validation")
    assert metric_names(run) == [("train", "kl"), ("train", "reward"), ("validation", "success_rate")]


@pytest.fixture
def many_series(project, run):
    """Series whose names and splits interleave in the index's (name, split) order and in the
    pages' (split, name) order, of different lengths and last steps, beside another run's points."""
    add_points(run, "reward", [0.1, 0.2, 0.3])
    add_points(run, "reward", [0.9], split="validation", first_step=40)
    add_points(run, "rew", [7.0, 8.0], first_step=5)
    add_points(run, "reward/std", [0.5] * 4)
    add_points(run, "Reward", [3.0])
    add_points(run, "kl", [1.0, 2.0, 4.0], first_step=100)
    add_points(run, "réussite", [0.25], split="held_out", first_step=7)
    add_points(run, "a" * 128, [1.5], split="validation")
    other = Run.objects.create(project=project, name="other", kind="grpo")
    add_points(other, "reward", [5.0] * 3, first_step=1000)
    add_points(other, "zz", [1.0])
    return run


def test_metric_names_and_latest_find_every_series_and_its_last_point_in_the_pages_order(many_series):
    """The same answer as reading every point (the query before the index skip scan), on either database."""
    run = many_series
    every = MetricPoint.objects.filter(run=run)
    expected_names = list(every.order_by("split", "name").values_list("split", "name").distinct())
    assert metric_names(run) == expected_names and len(expected_names) == 8
    last_steps = dict(((r["split"], r["name"]), r["last"]) for r in every.values("split", "name").annotate(last=Max("step")))
    latest = metric_latest(run)
    assert [(m.split, m.name) for m in latest] == expected_names
    assert {(m.split, m.name): m.step for m in latest} == last_steps
    by_pair = {(m.split, m.name): m.value for m in latest}
    assert by_pair[("train", "reward")] == 0.3 and by_pair[("validation", "reward")] == 0.9
    assert by_pair[("train", "kl")] == 4.0 and by_pair[("held_out", "réussite")] == 0.25
    assert metric_names(Run.objects.create(project=run.project, name="empty", kind="grpo")) == []


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the index skip scan is PostgreSQL's")
def test_metric_names_and_latest_read_a_few_index_entries_a_series_not_the_runs_points(many_series):
    """The live panel asks for the run's series every few seconds while it trains: on PostgreSQL the
    answer costs a few index entries a series, so a run of a million points costs what a short one does.
    Counted in EXPLAIN ANALYZE: the rows every scan of runs_metricpoint returned, in all its loops."""
    run = many_series
    add_points(run, "reward", [0.5] * 3000, first_step=3)  # one long series: 3,003 points
    with CaptureQueriesContext(connection) as queries:
        assert metric_latest(run)[-1].name == "reward"
    (sql,) = [q["sql"] for q in queries.captured_queries]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        plan = cursor.fetchone()[0]
        plan = json.loads(plan) if isinstance(plan, str) else plan

    def scanned(node: dict) -> int:
        own = node["Actual Rows"] * node["Actual Loops"] if node.get("Relation Name") == "runs_metricpoint" else 0
        return own + sum(scanned(child) for child in node.get("Plans", []))

    read = scanned(plan[0]["Plan"])
    assert 0 < read <= 3 * len(metric_names(run)), read  # 8 series; reading the points would be 3,018 rows


# --- series ----------------------------------------------------------------------------


def test_series_by_step_returns_each_name_and_the_last_step(run):
    add_points(run, "reward", [0.1, 0.2, 0.3])
    add_points(run, "kl", [5.0, 6.0], first_step=1)
    add_points(run, "reward", [9.9], split="validation")
    result = metric_series(run, ["reward", "kl", "never_recorded"], "train")
    assert result.x == "step" and result.split == "train" and result.last_step == 2
    assert (result.series["reward"].x, result.series["reward"].y) == ([0, 1, 2], [0.1, 0.2, 0.3])
    assert (result.series["kl"].x, result.series["kl"].y) == ([1, 2], [5.0, 6.0])
    assert result.series["never_recorded"].x == [] and result.series["never_recorded"].points == 0


def test_series_since_returns_only_new_points(run):
    add_points(run, "reward", [float(i) for i in range(200)])
    result = metric_series(run, ["reward"], "train", since_step=120)
    assert result.series["reward"].x == list(range(121, 200))
    assert result.last_step == 199
    nothing_new = metric_series(run, ["reward"], "train", since_step=199)
    assert nothing_new.series["reward"].x == [] and nothing_new.last_step == 199


def test_series_of_50000_points_is_downsampled_keeping_a_spike(run):
    values = [0.5 + (i % 7) / 100 for i in range(50_000)]
    values[27_182] = 40.0
    add_points(run, "reward", values)
    series = metric_series(run, ["reward"], "train").series["reward"]
    assert len(series.x) <= 2_000 and series.points == 50_000 and series.downsampled
    assert (27_182, 40.0) in zip(series.x, series.y, strict=True)


def test_series_against_wall_time_counts_from_the_runs_first_point(run):
    add_points(run, "success_rate", [0.5], split="validation", seconds=2.125)  # the run's first point, t=0
    add_points(run, "reward", [1.0, 2.0, 3.0], first_step=1, seconds=2.125)
    MetricPoint.objects.create(run=run, step=4, split="train", name="reward", value=4.0, recorded_at=None)
    result = metric_series(run, ["reward"], "train", x="wall")
    assert result.series["reward"].x == [2.125, 4.25, 6.375]  # the point without a time is left out
    assert result.series["reward"].points == 4
    later = metric_series(run, ["reward"], "train", x="wall", since_step=2)
    assert later.series["reward"].x == [6.375]  # same origin when appending


def test_series_against_tokens_uses_the_running_total_of_trained_tokens(run):
    add_points(run, "cost/trained_tokens", [100.0, 50.0, 25.0], first_step=1)
    add_points(run, "reward", [0.1, 0.2, 0.3], first_step=1)
    add_points(run, "success_rate", [0.0, 0.5], split="validation", first_step=0)  # step 0: before training
    assert metric_series(run, ["reward"], "train", x="tokens").series["reward"].x == [100.0, 150.0, 175.0]
    assert metric_series(run, ["success_rate"], "validation", x="tokens").series["success_rate"].x == [0.0, 100.0]
    assert metric_series(run, ["reward"], "train", x="tokens", since_step=2).series["reward"].x == [175.0]


def test_series_against_tokens_without_a_token_metric_says_which_is_missing(run):
    add_points(run, "success_rate", [0.5], split="held_out")
    with pytest.raises(SeriesError, match="cost/trained_tokens"):
        metric_series(run, ["success_rate"], "held_out", x="tokens")
    with pytest.raises(SeriesError, match="unknown x axis"):
        metric_series(run, ["success_rate"], "held_out", x="epoch")


def test_series_query_reads_the_run_name_split_step_index(run):
    """The full-history series query is answered from (run, name, split, step), not a table scan."""
    index = next(i.name for i in MetricPoint._meta.indexes if i.fields == ["run", "name", "split", "step"])
    for n in range(20):  # a realistic spread: many names per step, so a name is selective
        add_points(run, f"metric_{n}", [0.1] * 300)
    rows = MetricPoint.objects.filter(run=run, split="train", name__in=["metric_3", "metric_7"])
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE runs_metricpoint")
            # One small run is the whole table here; in production a run is a sliver of it.
            cursor.execute("SET LOCAL enable_seqscan = off")
    plan = rows.order_by("name", "step").values_list("name", "step", "value").explain()
    assert index in plan, plan
