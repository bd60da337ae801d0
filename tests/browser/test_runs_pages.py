"""Run pages in a real browser: curves drawn from the run's points, smoothing and x axis, live
points while the worker ingests, and the comparison's config diff."""

from __future__ import annotations

import math

import pytest
from browser_session import login
from pipeline_data import make_pipeline_run

from webapp.runs.models import Job, ModelSpec
from webapp.runs.selectors.runs import metric_series
from webapp.runs.selectors.series import smooth_ema
from webapp.runs.services import jobs as js
from webapp.runs.services.ingest import EventIngestor
from webapp.runs.services.run_config import run_config_check, run_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _metrics(step: int) -> dict:
    return {"type": "metric", "step": step, "split": "train",
            "metrics": {"reward": 1 - math.exp(-step / 20), "reward_std": 0.1, "cost/trained_tokens": 100}}


def _running_run(project, owner, *, name: str, steps: int, config: dict):
    model = ModelSpec.objects.get_or_create(project=project, name="tiny", defaults={"hf_id": "x/tiny"})[0]
    run, job = run_create(name=name, checked=run_config_check(config, project=project, kind="grpo", model=model),
                          actor=owner)
    claimed = js.job_claim(job_id=job.pk, worker="cpu@test")
    js.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
    ingestor = EventIngestor(run, attempt=claimed.attempt)
    ingestor.ingest([_metrics(s) for s in range(1, steps + 1)])
    return run, ingestor


def _figure_points(page, selector: str) -> list:
    """The smoothed trace's y values as Plotly holds them in the rendered figure."""
    return page.evaluate("""(selector) => {
        const el = document.querySelector(selector);
        const line = el.data.filter(t => t.meta && !t.meta.raw)[0];
        return {x: Array.from(line.x), y: Array.from(line.y), traces: el.data.length};
    }""", selector)


def test_reward_chart_draws_the_runs_points_smooths_and_goes_live(page, live_server, project_team):
    project, owner = project_team["project"], project_team["owner"]
    run, ingestor = _running_run(project, owner, name="live run", steps=40, config={"learning_rate": 1e-4})
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/{run.pk}/?smoothing=0")
    chart = "[data-chart][data-names='reward']"
    page.wait_for_function(f"() => document.querySelector(\"{chart}\").dataset.points === '40'")
    drawn = _figure_points(page, chart)
    stored = metric_series(run, ["reward"], "train").series["reward"]
    assert drawn["x"] == stored.x and drawn["y"] == pytest.approx(stored.y)

    # Smoothing: the JS EMA equals the server's (TensorBoard's debiased EMA) on the same points.
    page.fill("#chart-smoothing", "0.9")
    page.dispatch_event("#chart-smoothing", "input")
    page.wait_for_function(f"() => document.querySelector(\"{chart}\").data.length >= 4")
    smoothed = _figure_points(page, chart)["y"]
    assert smoothed == pytest.approx(smooth_ema(stored.y, 0.9))
    assert "smoothing=0.9" in page.url

    # X axis: tokens trained (100 per step in this run).
    page.select_option("#chart-x", "tokens")
    page.wait_for_function(f"() => document.querySelector(\"{chart}\").data[2].x[0] === 100")
    assert _figure_points(page, chart)["x"][-1] == 4000

    # Live: the worker ingests five more steps, the chart gains them without a reload.
    page.select_option("#chart-x", "step")
    page.wait_for_function(f"() => document.querySelector(\"{chart}\").data[2].x[0] === 1")
    ingestor.ingest([_metrics(s) for s in range(41, 46)])
    page.wait_for_function(f"() => document.querySelector(\"{chart}\").dataset.points === '45'", timeout=20_000)
    assert _figure_points(page, chart)["x"][-1] == 45


def test_compare_two_runs_shows_only_differing_config_keys(page, live_server, project_team):
    project, owner = project_team["project"], project_team["owner"]
    a, _ = _running_run(project, owner, name="lr high", steps=5, config={"learning_rate": 1e-4, "seed": 1})
    b, _ = _running_run(project, owner, name="lr low", steps=5, config={"learning_rate": 5e-5, "seed": 1})
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/")
    page.check(f"#compare-{a.pk}")
    page.check(f"#compare-{b.pk}")
    page.click("#compare-button")
    page.wait_for_url("**/runs/compare/?ids=*")
    visible = page.locator("#config-diff tbody tr:visible")
    assert [row.get_attribute("data-key") for row in visible.all()] == ["learning_rate"]
    page.uncheck("#differences-only")
    assert page.locator("#config-diff tbody tr[data-key='seed']").is_visible()
    page.wait_for_function("() => document.querySelector(\"[data-chart][data-names='reward']\").dataset.points === '10'")


def test_a_short_run_has_whole_step_ticks_and_a_constant_is_a_flat_line_in_a_sane_range(
    page, live_server, project_team
):
    """Three steps drew ticks at 1.5 and a learning rate of 1e-4 as a zoom into float noise."""
    project, owner = project_team["project"], project_team["owner"]
    run, ingestor = _running_run(project, owner, name="short", steps=3, config={})
    ingestor.ingest([{"type": "metric", "step": s, "split": "train", "metrics": {"lr": 1e-4}} for s in (1, 2, 3)])
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/{run.pk}/?smoothing=0")
    lr = "[data-chart][data-names='lr']"
    page.locator(lr).scroll_into_view_if_needed()
    page.wait_for_function(f"() => document.querySelector(\"{lr}\").dataset.points === '3'")
    ticks = page.evaluate(f"() => Array.from(document.querySelectorAll(\"{lr} .xtick text\"), t => t.textContent)")
    assert ticks and all(t.replace(",", "").isdigit() for t in ticks), ticks
    low, high = page.evaluate(f"() => document.querySelector(\"{lr}\")._fullLayout.yaxis.range")
    assert low < 1e-4 < high and high - low == pytest.approx(1e-4)
    labels = page.evaluate(f"() => Array.from(document.querySelectorAll(\"{lr} .ytick text\"), t => t.textContent)")
    assert labels and not any("…" in label for label in labels), labels
    reward = "[data-chart][data-names='reward']"
    ticks = page.evaluate(f"() => Array.from(document.querySelectorAll(\"{reward} .xtick text\"), t => t.textContent)")
    assert ticks == ["0", "1", "2", "3"] or ticks == ["1", "2", "3"], ticks


def test_a_live_run_page_adds_panels_for_new_metrics_and_drops_cancel_when_the_run_ends(
    page, live_server, project_team
):
    project, owner = project_team["project"], project_team["owner"]
    run, ingestor = _running_run(project, owner, name="growing", steps=2, config={})
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/{run.pk}/")
    assert page.locator("#run-actions button", has_text="Cancel").count() == 1
    validation = "[data-chart][data-split='validation'][data-names='success_rate']"
    assert page.locator(validation).count() == 0
    ingestor.ingest([{"type": "metric", "step": 2, "split": "validation", "metrics": {"success_rate": 0.25}},
                     {"type": "metric", "step": 2, "split": "train", "metrics": {"timing/step": 1.5}}])
    page.locator(validation).wait_for(timeout=20_000)
    page.locator(validation).scroll_into_view_if_needed()
    page.wait_for_function(f"() => document.querySelector(\"{validation}\").dataset.points === '1'")
    assert page.locator("[data-chart][data-names='timing/step']").count() == 1
    assert page.locator("[data-chart][data-names='reward']").count() == 1  # not added twice

    job = run.jobs.get()
    js.job_succeed(job_id=job.pk, attempt=job.attempt)
    page.wait_for_function("() => !document.querySelector('[data-run-active]')", timeout=20_000)
    page.wait_for_function("() => !document.querySelector('#run-actions button')", timeout=5_000)
    assert page.locator("#run-actions a", has_text="All runs").count() == 1


def test_panel_log_scale_y_range_and_picker_are_kept_in_the_url(page, live_server, project_team):
    """Each panel has its own log scale and y range, and the picker hides panels; a reload keeps all three."""
    project, owner = project_team["project"], project_team["owner"]
    run, _ = _running_run(project, owner, name="views", steps=12, config={})
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/{run.pk}/?smoothing=0")
    reward = "[data-chart][data-names='reward']"
    card = page.locator(".chart-card", has=page.locator(reward))
    page.wait_for_function(f"() => document.querySelector(\"{reward}\").dataset.points === '12'")
    assert page.evaluate(f"() => document.querySelector(\"{reward}\")._fullLayout.yaxis.type") == "linear"

    card.locator("[data-panel-log]").check()
    assert page.evaluate(f"() => document.querySelector(\"{reward}\")._fullLayout.yaxis.type") == "log"
    card.locator("[data-panel-y='min']").fill("0.1")
    card.locator("[data-panel-y='max']").fill("2")
    card.locator("[data-panel-y='max']").press("Enter")
    low, high = page.evaluate(f"() => document.querySelector(\"{reward}\")._fullLayout.yaxis.range")
    assert (low, high) == pytest.approx((-1.0, math.log10(2)))
    card.locator("[data-panel-y='min']").fill("not a number")
    card.locator("[data-panel-y='min']").press("Enter")
    assert "invalid" in card.locator("[data-panel-y='min']").get_attribute("class")

    page.locator("[data-chart-picker] summary").click()
    page.locator("[data-picker-key='train:cost/trained_tokens']").uncheck()
    assert page.locator(".chart-card", has=page.locator("[data-names='cost/trained_tokens']")).is_hidden()
    assert "log=train%3Areward" in page.url and "hide=train%3Acost%2Ftrained_tokens" in page.url

    page.reload()
    page.wait_for_function(f"() => document.querySelector(\"{reward}\").dataset.points === '12'")
    assert page.evaluate(f"() => document.querySelector(\"{reward}\")._fullLayout.yaxis.type") == "log"
    low, high = page.evaluate(f"() => document.querySelector(\"{reward}\")._fullLayout.yaxis.range")
    assert (low, high) == pytest.approx((-1.0, math.log10(2)))
    assert card.locator("[data-panel-y='min']").input_value() == "0.1"
    assert page.locator(".chart-card", has=page.locator("[data-names='cost/trained_tokens']")).is_hidden()
    # Hidden from the picker, shown again from it; the reward panel's other settings stay.
    page.locator("[data-chart-picker] summary").click()
    page.locator("[data-picker-key='train:cost/trained_tokens']").check()
    assert page.locator(".chart-card", has=page.locator("[data-names='cost/trained_tokens']")).is_visible()
    assert "hide=" not in page.url and "log=train%3Areward" in page.url


def test_an_editor_deletes_a_run_from_its_page_after_typing_its_name(page, live_server, project_team, monkeypatch):
    monkeypatch.setattr(js, "enqueue_job_message", lambda job_id, queue: None)  # no worker here: the job is queued
    project = project_team["project"]
    run = make_pipeline_run(project, project_team["owner"], name='old <i>run</i>', steps=2)
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/{run.pk}/")
    page.click("[data-delete-run]")
    page.wait_for_selector("[data-run-delete]")
    assert "trajectories" in page.inner_text("[data-plan]")
    page.fill("#confirm-name", "old run")
    page.click("button.danger")
    assert "Type the run's name" in page.inner_text("[data-error]") and not Job.objects.filter(kind="run_delete")
    page.fill("#confirm-name", "old <i>run</i>")
    page.click("button.danger")
    page.wait_for_url(f"{live_server.url}/p/{project.slug}/runs/")
    job = Job.objects.get(kind="run_delete")
    assert f"old <i>run</i> is being deleted (job {job.pk})" in page.inner_text(".messages")


def test_an_editor_deletes_two_ticked_runs_from_the_runs_table(page, live_server, project_team, monkeypatch):
    monkeypatch.setattr(js, "enqueue_job_message", lambda job_id, queue: None)  # no worker here: the jobs are queued
    project = project_team["project"]
    first = make_pipeline_run(project, project_team["owner"], name="sweep a", steps=1)
    second = make_pipeline_run(project, project_team["owner"], name="sweep b", steps=1,
                               setup=(first.dataset, first.verifier_version.verifier, first.model))
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/")
    page.check(f"#compare-{first.pk}")
    page.check(f"#compare-{second.pk}")
    page.click("#delete-selected-button")
    page.wait_for_selector("[data-run-delete-many]")
    assert page.locator("[data-goes]").count() == 2
    page.fill("#confirm-count", "2")
    page.click("button.danger")
    page.wait_for_url(f"{live_server.url}/p/{project.slug}/runs/")
    assert "2 runs are being deleted" in page.inner_text(".messages")
    assert sorted(j.payload["run_id"] for j in Job.objects.filter(kind="run_delete")) == [first.pk, second.pk]
