"""Experiments in a real browser: create one from the form after fixing a validation error, and
watch an experiment's page follow its stages to the gate table without a reload.

Set CRUCIBLE_SCREENSHOT_DIR to keep screenshots of the pages in the light and dark themes
(exp-empty-*, exp-form-errors-*, exp-detail-*, exp-list-*.png).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from browser_session import login
from pipeline_data import make_finished_experiment

from tests.webapp.runs.test_experiment_pipeline import BASELINE, _create, _finish_stage
from webapp.datasets.services.datasets import dataset_create
from webapp.projects.models import UserPreference
from webapp.runs.models import Experiment, Job, ModelSpec, Run
from webapp.runs.services import jobs as js
from webapp.runs.services.experiments import DEFAULT_CONFIG
from webapp.verifiers.services.verifiers import verifier_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(project_team, settings, tmp_path):
    """What the pipeline tests' `setup` builds: a workplace dataset (plus one for regressions), a verifier, a model."""
    from environments.workplace.generator import generate_tasks

    settings.DATA_DIR = tmp_path
    settings.CRUCIBLE_RUNS_DIR = tmp_path / "runs"
    project, owner = project_team["project"], project_team["owner"]
    dataset = dataset_create(project=project, name="wp", tasks=generate_tasks(40, 0), actor=owner)
    dataset_create(project=project, name="wp-regress", tasks=generate_tasks(8, 1), actor=owner)
    verifier = verifier_create(project=project, name="v", kind="json_tool_call", config={}, actor=owner)
    model = ModelSpec.objects.create(project=project, name="tiny", hf_id="smollm2-135m-instruct")
    return {"project": project, "slug": project.slug, "dataset": dataset, "verifier": verifier.latest_version,
            "model": model, "owner": owner}


def _csp_watch(page) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def _shoot(page, user, name: str) -> None:
    shots = os.environ.get("CRUCIBLE_SCREENSHOT_DIR")
    if not shots:
        return
    for theme in ("light", "dark"):
        UserPreference.objects.update_or_create(user=user, defaults={"theme": theme})
        page.reload()
        page.screenshot(path=str(Path(shots) / f"{name}-{theme}.png"), full_page=True)


def test_create_an_experiment_after_fixing_a_validation_error(page, live_server, project_team, world):
    errors = _csp_watch(page)
    slug = world["slug"]
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{slug}/experiments/")
    assert "No experiments yet" in page.locator(".empty-state").inner_text()
    _shoot(page, project_team["editor"], "exp-empty")
    page.keyboard.press("n")  # the page's key for "New experiment"
    page.wait_for_url(f"**/p/{slug}/experiments/new/")

    # The regression list never offers the main dataset; it follows the dataset select.
    assert page.locator("select[data-regression] option[value=wp]").is_hidden()
    # Quick: the untouched stage textareas take QUICK_CONFIG's tiny sizes.
    page.check("#exp-preset-quick")
    assert json.loads(page.input_value("#cfg-grpo"))["max_steps"] == 3
    page.fill("#exp-name", "tool calls <quick>")
    page.fill("#cfg-grpo", '{"kind": "grpo", "algorithm": "dapo", "max_steps": 3, "learning_rate": -1}')
    page.fill("#num-success_margin", "0.02")
    page.select_option("select[data-regression]", "wp-regress")
    page.click("form.exp-form button[type=submit]")

    page.wait_for_selector("#grpo-error")
    assert "'learning_rate' must be > 0" in page.locator("#grpo-error").inner_text()
    assert "Nothing was created" in page.locator(".exp-error-summary").inner_text()
    assert page.locator(".field-error").count() == 1
    assert page.input_value("#exp-name") == "tool calls <quick>"  # what was typed is kept
    assert page.input_value("#num-success_margin") == "0.02"
    assert "learning_rate\": -1" in page.input_value("#cfg-grpo")
    assert page.is_checked("#exp-preset-quick")
    assert not Experiment.objects.exists() and not Run.objects.exists()
    _shoot(page, project_team["editor"], "exp-form-errors")

    page.fill("#cfg-grpo", '{"kind": "grpo", "algorithm": "dapo", "max_steps": 3, "learning_rate": 2e-5}')
    page.click("form.exp-form button[type=submit]")
    page.wait_for_url(f"**/p/{slug}/experiments/*/")
    experiment = Experiment.objects.get()
    assert page.url.endswith(f"/p/{slug}/experiments/{experiment.pk}/")
    assert "tool calls <quick>" in page.locator("h1").inner_text()
    assert "baseline evaluation is queued as run" in page.locator(".messages").inner_text()
    baseline = page.locator('li[data-stage="baseline"]')
    assert "queued" in baseline.locator(".state").inner_text()
    run = Run.objects.get(pk=experiment.stages["baseline"]["run"])
    link = baseline.locator(f'a[href="/p/{slug}/runs/{run.pk}/"]')
    assert link.inner_text() == f"run {run.pk}"
    assert experiment.config["success_margin"] == 0.02 and experiment.config["regression_datasets"] == ["wp-regress"]
    assert experiment.config["grpo"]["learning_rate"] == 2e-5 and experiment.config["common"]["device"] == "cpu"
    assert experiment.config["baseline"] == DEFAULT_CONFIG["baseline"]
    assert errors == []


def test_the_experiment_page_follows_the_pipeline_live(page, live_server, project_team, world):
    errors = _csp_watch(page)
    slug = world["slug"]
    exp = _create(world, regression_datasets=["wp-regress"])
    login(page, live_server, "owner")
    page.goto(f"{live_server.url}/p/{slug}/experiments/{exp.pk}/")
    assert "queued" in page.locator('li[data-stage="baseline"] .state').inner_text()
    assert "not started" in page.locator('li[data-stage="grpo"] .state').inner_text()

    exp = _finish_stage(exp, "baseline", metrics={**BASELINE, "valid_json_rate": 0.9})
    page.wait_for_function(
        "() => document.querySelector('li[data-stage=\"sft\"] .state').textContent === 'skipped'", timeout=15_000)
    assert "0.90 >= threshold 0.50" in page.locator('li[data-stage="sft"]').inner_text()
    assert "queued" in page.locator('li[data-stage="grpo"] .state').inner_text()

    exp = _finish_stage(exp, "grpo", checkpoints=[(5, {"validation/success_rate": 0.7})])
    exp = _finish_stage(exp, "held_out", metrics={"success_rate": 0.6, "unsafe_action_rate": 0.0,
                                                  "latency_p95": 120.0})
    exp = _finish_stage(exp, "regression:wp-regress:baseline", metrics={"success_rate": 0.4})
    exp = _finish_stage(exp, "regression:wp-regress:candidate", metrics={"success_rate": 0.3})
    assert exp.state == "succeeded" and exp.gates_passed is False
    page.wait_for_selector("table.gate-table", timeout=15_000)
    rows = page.locator("table.gate-table tbody tr")
    assert rows.count() == 4
    assert "fail" in page.locator('tr[data-gate="regression: wp-regress"]').inner_text()
    assert "pass" in page.locator('tr[data-gate="held-out success"]').inner_text()
    assert page.locator("#experiment-live[hx-trigger]").count() == 0  # finished: polling stopped
    assert page.locator(".exp-candidate >> text=Promote").count() == 1
    assert page.locator(f'.exp-candidate a[href="/p/{slug}/checkpoints/?run={exp.stages["grpo"]["run"]}"]').count()
    _shoot(page, project_team["owner"], "exp-detail")
    page.goto(f"{live_server.url}/p/{slug}/experiments/")
    assert "regression: wp-regress" in page.locator(f'tr[data-experiment="{exp.pk}"]').inner_text()
    _shoot(page, project_team["owner"], "exp-list")
    assert errors == []


def test_an_editor_deletes_a_finished_experiment_after_typing_its_name(page, live_server, project_team, monkeypatch):
    monkeypatch.setattr(js, "enqueue_job_message", lambda job_id, queue: None)  # no worker here: the job is queued
    project, owner = project_team["project"], project_team["owner"]
    experiment, _runs = make_finished_experiment(project, owner, name="old <i>sweep</i>")
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{project.slug}/experiments/{experiment.pk}/")
    page.click("#delete-experiment")
    page.wait_for_selector("[data-experiment-delete]")
    assert "3 runs" in page.inner_text("[data-plan]")
    page.fill("#confirm-name", "old sweep")
    page.click("button.danger")
    assert "Type the experiment's name" in page.inner_text("[data-error]")
    page.fill("#confirm-name", "old <i>sweep</i>")
    page.click("button.danger")
    page.wait_for_url(f"{live_server.url}/p/{project.slug}/experiments/")
    job = Job.objects.get(kind="experiment_delete")
    assert f"old <i>sweep</i> is being deleted with its runs (job {job.pk})" in page.inner_text(".messages")
    assert page.locator(f'tr[data-experiment="{experiment.pk}"] [data-deleting]').count() == 1
