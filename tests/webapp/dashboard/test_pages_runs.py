"""The runs table, run detail and compare pages: roles, escaping, panels, config diff."""

from __future__ import annotations

import json

import pytest

from webapp.dashboard.views.runs import config_rows, run_panels
from webapp.runs.models import Job, ModelSpec, Run
from webapp.runs.services import jobs as js
from webapp.runs.services.ingest import EventIngestor
from webapp.runs.services.run_config import run_config_check, run_create

HOSTILE = '<script>alert("x")</script>'


@pytest.fixture
def runs(project_team):
    project, owner = project_team["project"], project_team["owner"]
    model = ModelSpec.objects.create(project=project, name="tiny", hf_id="x/tiny")
    made = []
    for i, lr in enumerate((1e-4, 5e-5)):
        checked = run_config_check({"learning_rate": lr}, project=project, kind="grpo", model=model)
        run, job = run_create(name=f"run {i} {HOSTILE}", checked=checked, actor=owner)
        claimed = js.job_claim(job_id=job.pk, worker="w")
        js.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
        EventIngestor(run, attempt=claimed.attempt).ingest([
            {"type": "metric", "step": s, "split": "train", "metrics": {"reward": s / 10, "odd/metric": 1.0}}
            for s in range(1, 6)])
        made.append(run)
    js.job_fail(job_id=made[1].jobs.get().pk, attempt=1, error=HOSTILE, log_tail=HOSTILE)
    return made


def test_the_table_lists_runs_with_headline_metrics_and_escapes_names(client, project_team, runs):
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project_team['project'].slug}/runs/").content.decode()
    assert HOSTILE not in body and "&lt;script&gt;" in body
    assert body.count('class="compare-box"') == 2
    assert 'data-sparkline="[0.1, 0.2, 0.3, 0.4, 0.5]"' in body
    filtered = client.get(f"/p/{project_team['project'].slug}/runs/?status=failed").content.decode()
    assert filtered.count('class="compare-box"') == 1
    bad = client.get(f"/p/{project_team['project'].slug}/runs/?sort=nope").content.decode()
    assert "unknown sort" in bad


def test_the_runs_table_says_words_in_its_sort_menu_and_names_each_column_once(client, project_team, runs):
    from webapp.runs.selectors.runs import RUN_SORT_LABELS, RUN_SORTS

    assert RUN_SORT_LABELS.keys() == RUN_SORTS.keys()
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project_team['project'].slug}/runs/?sort=-name").content.decode()
    assert '<option value="-name" selected>name, Z to A</option>' in body
    assert ">-created<" not in body and '<option value="-created">newest first</option>' in body
    assert body.count(">Reward</a></th>") == 1
    assert "Reward curve</th>" in body


def test_a_headline_column_header_sorts_by_it_and_a_second_click_reverses(client, project_team, runs):
    """The reward column's header link sorts best first, keeping the filters; on the sorted page it
    offers lowest first and marks the column's order for screen readers."""
    client.force_login(project_team["viewer"])
    url = f"/p/{project_team['project'].slug}/runs/"
    body = client.get(f"{url}?kind=grpo&after=x").content.decode()
    assert 'href="?kind=grpo&amp;sort=-reward" class="sort-link"' in body
    sorted_body = client.get(f"{url}?kind=grpo&sort=-reward").content.decode()
    assert 'aria-sort="descending"' in sorted_body and 'href="?kind=grpo&amp;sort=reward"' in sorted_body
    assert '<option value="-reward" selected>reward, highest first</option>' in sorted_body
    hostile = client.get(f"{url}?text={HOSTILE}").content.decode()
    assert 'href="?text=%3Cscript%3Ealert%28%22x%22%29%3C%2Fscript%3E&amp;sort=-reward"' in hostile
    # Both runs recorded reward 0.5 last: a tie in a descending sort lists the newer run first.
    assert sorted_body.index(f'id="compare-{runs[1].pk}"') < sorted_body.index(f'id="compare-{runs[0].pk}"')


def test_the_run_page_has_panels_for_what_was_recorded_and_escapes_the_log(client, project_team, runs):
    client.force_login(project_team["viewer"])
    slug = project_team["project"].slug
    body = client.get(f"/p/{slug}/runs/{runs[1].pk}/").content.decode()
    assert 'data-names="reward"' in body and 'data-names="odd/metric"' in body
    assert HOSTILE not in body and body.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") >= 3
    assert "/retry/" not in body, "viewers get no retry button"
    live = client.get(f"/p/{slug}/runs/{runs[0].pk}/live/").content.decode()
    assert 'data-run-active="1"' in live and 'hx-trigger="every 3s"' in live
    finished = client.get(f"/p/{slug}/runs/{runs[1].pk}/live/").content.decode()
    assert "data-run-active" not in finished


def test_run_header_list_and_overview_show_held_out_success_from_its_checkpoints_evaluation_and_say_so(
        client, project_team, runs):
    """A GRPO run's held-out success is measured by evaluation runs of its checkpoints; its
    header showed a bare "—" for it, as if nothing had been measured."""
    from webapp.runs.models import Checkpoint, MetricPoint

    client.force_login(project_team["viewer"])
    slug, run = project_team["project"].slug, runs[0]
    url = f"/p/{slug}/runs/{run.pk}/"
    assert "data-headline-source" not in client.get(url).content.decode()
    checkpoint = Checkpoint.objects.create(run=run, step=5, storage_uri="/c/5")
    evaluation = Run.objects.create(project=run.project, name="held-out", kind="eval", status="succeeded",
                                    parent_checkpoint=checkpoint, config={"eval_split": "held_out"})
    MetricPoint.objects.create(run=evaluation, step=0, split="held_out", name="success_rate", value=0.59)
    body = client.get(url).content.decode()
    assert "0.590 <span class=\"muted\" data-headline-source" in body
    assert "(the evaluation of its step-5 checkpoint)" in body
    borrowed = ('<span class="borrowed-headline" data-headline-source title="Not recorded by this run: '
                'the evaluation of its step-5 checkpoint">0.590<sup aria-hidden="true">e</sup></span>')
    listed = client.get(f"/p/{slug}/runs/").content.decode()
    assert listed.count(borrowed) == 1 and "data-borrowed-note" in listed
    assert client.get(f"/p/{slug}/").content.decode().count(borrowed) == 1
    assert "data-borrowed-note" not in client.get(f"/p/{slug}/runs/?status=failed").content.decode()


@pytest.mark.parametrize(("role", "allowed"), [("viewer", False), ("reviewer", False), ("editor", True),
                                               ("owner", True)])
def test_cancel_and_retry_need_an_editor(client, project_team, runs, role, allowed):
    slug = project_team["project"].slug
    client.force_login(project_team[role])
    running, failed = runs
    assert client.post(f"/p/{slug}/runs/{running.pk}/cancel/").status_code == (302 if allowed else 403)
    assert client.post(f"/p/{slug}/runs/{failed.pk}/retry/").status_code == (302 if allowed else 403)
    assert Job.objects.get(run=running).cancel_requested is allowed
    assert (Job.objects.get(run=failed).state == "queued") is allowed


def test_retrying_a_running_run_says_why_not(client, project_team, runs):
    client.force_login(project_team["editor"])
    slug = project_team["project"].slug
    response = client.post(f"/p/{slug}/runs/{runs[0].pk}/retry/", follow=True)
    assert "only a failed or cancelled run can be retried" in response.content.decode()


def test_outsiders_get_404_everywhere(client, project_team, runs):
    client.force_login(project_team["outsider"])
    slug = project_team["project"].slug
    for path in ("runs/", f"runs/{runs[0].pk}/", f"runs/{runs[0].pk}/live/",
                 f"runs/compare/?ids={runs[0].pk},{runs[1].pk}"):
        assert client.get(f"/p/{slug}/{path}").status_code == 404, path
    assert client.post(f"/p/{slug}/runs/{runs[0].pk}/cancel/").status_code == 404


def test_compare_refuses_runs_of_another_project(client, project_team, runs):
    other = Run.objects.create(project=project_team["other"], name="theirs", kind="grpo")
    client.force_login(project_team["owner"])
    slug = project_team["project"].slug
    assert client.get(f"/p/{slug}/runs/compare/?ids={runs[0].pk},{other.pk}").status_code == 404
    page = client.get(f"/p/{slug}/runs/compare/?ids={runs[0].pk},{runs[1].pk}").content.decode()
    assert 'data-key="learning_rate"' in page and 'class="differs"' in page
    assert "Pick at least two runs" in client.get(f"/p/{slug}/runs/compare/?ids={runs[0].pk}").content.decode()


def test_panels_follow_the_recorded_metrics():
    recorded = [("train", "reward"), ("train", "reward_std"), ("train", "clip_ratio/low_mean"),
                ("train", "clip_ratio/high_mean"), ("validation", "success_rate"), ("train", "custom")]
    panels = {p.title: p for p in run_panels(recorded)}
    assert panels["Reward (mean ± std over the batch)"].band == "reward_std"
    assert panels["Clip ratios"].names == ["clip_ratio/high_mean", "clip_ratio/low_mean"]
    assert panels["custom (train)"].names == ["custom"], "a metric no panel claims still gets a chart"
    assert "KL to the reference" not in panels


def test_system_metrics_get_their_own_panels_per_split():
    recorded = [("train", "system/cpu_percent"), ("train", "system/memory_rss_mb"),
                ("train", "system/gpu_memory_peak_mb"), ("train", "system/gpu_utilization_percent"),
                ("validation", "system/memory_rss_mb"), ("train", "timing/scoring"),
                ("train", "generation/tokens_per_second"), ("validation", "timing/generation")]
    panels = {p.title: p for p in run_panels(recorded)}
    assert panels["System: memory, MiB (train)"].names == ["system/memory_rss_mb", "system/gpu_memory_peak_mb"]
    assert panels["System: utilisation, % (train)"].names == ["system/cpu_percent", "system/gpu_utilization_percent"]
    assert panels["System: memory, MiB (validation)"].names == ["system/memory_rss_mb"]
    assert panels["Time per step (s)"].names == ["timing/scoring"]
    assert panels["Throughput (tokens/s)"].names == ["generation/tokens_per_second"]
    assert panels["Evaluation time (s)"].names == ["timing/generation"]
    assert not any(title.endswith("(held_out)") for title in panels)


def test_config_rows_flag_differences_and_missing_keys():
    rows = {r["key"]: r for r in config_rows([{"lr": 1, "seed": 2}, {"lr": 2, "seed": 2, "beta": 0.1}],
                                             [{"seed"}, set()])}
    assert rows["lr"]["differs"] and not rows["seed"]["differs"]
    assert rows["beta"]["values"] == [("—", False), ("0.1", False)] and rows["beta"]["differs"]
    assert rows["seed"]["values"] == [("2", True), ("2", False)]


def test_runs_table_and_compare_show_the_config_as_launched_with_defaults_marked(client, project_team):
    """A run launched with {} trained with training's default learning rate: the table showed "–"
    and the compare page "—", as if it had none. Both now show the launched value, greyed as a
    default; a run that set the same value itself is not greyed, and the two do not differ."""
    project, owner = project_team["project"], project_team["owner"]
    model = ModelSpec.objects.create(project=project, name="tiny", hf_id="x/tiny")

    def launch(name: str, config: dict, kind: str = "grpo") -> Run:
        checked = run_config_check(config, project=project, kind=kind, model=model)
        return run_create(name=name, checked=checked, actor=owner, start=False)[0]

    silent = launch("silent", {})
    default_lr = silent.resolved_config["learning_rate"]
    assert silent.config == {} and isinstance(default_lr, float)
    explicit = launch("explicit", {"learning_rate": default_lr})
    faster = launch("faster", {"learning_rate": default_lr * 4})
    launch("an evaluation", {}, kind="eval")  # a learning rate means nothing to it
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project.slug}/runs/?cols=learning_rate,model").content.decode()
    assert body.count('data-col="learning_rate"><span class="muted" data-config-na title="Does not apply to '
                      'eval runs">n/a</span>') == 1
    shown = json.dumps(default_lr)
    assert body.count('data-col="learning_rate"><span class="muted" data-config-default') == 1
    assert f'data-col="learning_rate">{shown}</td>' in body  # explicit
    assert f'data-col="learning_rate">{json.dumps(default_lr * 4)}</td>' in body
    assert 'data-col="model">x/tiny</td>' in body  # set by the model link, not a default

    compare = client.get(f"/p/{project.slug}/runs/compare/?ids={silent.pk},{explicit.pk},{faster.pk}")
    page = compare.content.decode()
    row = page.split('data-key="learning_rate"', 1)[1].split("</tr>", 1)[0]
    assert row.count("data-config-default") == 1 and row.count(f">{shown}</td>") == 2
    pair = client.get(f"/p/{project.slug}/runs/compare/?ids={silent.pk},{explicit.pk}").content.decode()
    assert '<tr class="same" data-key="learning_rate">' in pair
    assert '<tr class="differs" data-key="learning_rate">' in page

    detail = client.get(f"/p/{project.slug}/runs/{silent.pk}/").content.decode()
    assert "data-launched-config" in detail and f"&quot;learning_rate&quot;: {shown}" in detail

    # A hostile text value is escaped in the table, the compare page and the launched config.
    hostile = launch("hostile", {"checkpoint_metric": f"validation/{HOSTILE}"})
    pages = [client.get(f"/p/{project.slug}/runs/compare/?ids={silent.pk},{hostile.pk}").content.decode(),
             client.get(f"/p/{project.slug}/runs/{hostile.pk}/").content.decode()]
    for page in pages:
        assert "<script>alert(" not in page and "&lt;script&gt;alert(" in page


def test_best_follows_each_metrics_direction(project_team):
    """The best loss is the lowest, the best success the highest; the learning rate has none."""
    from webapp.runs.selectors.metric_direction import metric_direction
    from webapp.runs.selectors.runs import metric_best

    project, owner = project_team["project"], project_team["owner"]
    model = ModelSpec.objects.create(project=project, name="tiny2", hf_id="x/tiny")
    run, job = run_create(name="directions", checked=run_config_check({}, project=project, kind="grpo", model=model),
                          actor=owner)
    claimed = js.job_claim(job_id=job.pk, worker="w")
    EventIngestor(run, attempt=claimed.attempt).ingest([
        {"type": "metric", "step": s, "split": "train",
         "metrics": {"loss": [0.9, 0.2, 0.5][s - 1], "reward": [0.1, 0.6, 0.3][s - 1], "lr": 1e-4,
                     "timing/step": [3.0, 1.0, 2.0][s - 1]}} for s in (1, 2, 3)])
    best = metric_best(run)
    assert best[("train", "loss")] == pytest.approx(0.2) and best[("train", "timing/step")] == 1.0
    assert best[("train", "reward")] == pytest.approx(0.6)
    assert best[("train", "lr")] is None
    assert [metric_direction(n) for n in ("kl", "latency_p95", "unsafe_action_rate", "grad_norm",
                                          "success_rate", "pass@4", "entropy")] == [
        "min", "min", "min", "min", "max", "max", None]


def test_compare_says_which_way_is_better(client, project_team, runs):
    client.force_login(project_team["viewer"])
    ids = ",".join(str(r.pk) for r in runs)
    body = client.get(f"/p/{project_team['project'].slug}/runs/compare/?ids={ids}").content.decode()
    assert "↑ higher is better" in body  # reward
    assert body.count("lower is better") == 0  # nothing loss-like recorded in these runs
