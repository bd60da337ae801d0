"""Launching a run from the form in a real browser: a preset, a validation error fixed, the run page."""

from __future__ import annotations

import json

import pytest

from webapp.runs.models import ModelSpec, Run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_launch_a_grpo_run_from_a_preset_after_fixing_an_error(page, live_server, project_team):
    project = project_team["project"]
    ModelSpec.objects.create(project=project, name="offline SmolLM2", hf_id="smollm2-135m-instruct")
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", "editor")
    page.fill("input[name=password]", "pw-editor")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/new/")
    page.click("text=CPU quick GRPO on SmolLM2-135M")
    assert page.input_value("#id_model_spec") != "", "the preset found the project's offline model"
    assert page.locator("[data-estimate='rollouts']").inner_text() == "32"
    page.fill("#cfg-num_generations_per_prompt", "1")  # below the schema's minimum of 2
    assert json.loads(page.input_value("#config-json"))["num_generations_per_prompt"] == 1
    page.click("#launch")
    error = page.locator(".field.has-error .field-error")
    error.wait_for()
    assert "num_generations_per_prompt" in error.inner_text() and ">= 2" in error.inner_text()
    assert page.input_value("#cfg-num_generations_per_prompt") == "1", "what was typed is kept"
    page.fill("#cfg-num_generations_per_prompt", "4")
    page.fill("#cfg-max_steps", "2")
    page.click("#launch")
    page.wait_for_url("**/runs/*/")
    run = Run.objects.get()
    assert run.config["num_generations_per_prompt"] == 4 and run.config["max_steps"] == 2
    assert page.locator(".run-header .state").inner_text() == "queued"
    assert errors == []


def test_processes_update_the_estimate_and_the_run_page_shows_ranks_and_a_job_that_fits_no_worker(
    page, live_server, project_team
):
    """num_processes in Resources; a cuda job of 4 processes waits on train.gpus4 and says why;
    the ranks a worker reported are listed, their text escaped."""
    from browser_session import login, shot, watch

    from webapp.runs.models import Job

    project = project_team["project"]
    ModelSpec.objects.create(project=project, name="offline SmolLM2", hf_id="smollm2-135m-instruct")
    seen = watch(page)
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/new/")
    page.click("text=CPU quick GRPO on SmolLM2-135M")
    assert page.locator("[data-estimate='processes']").inner_text() == "1"
    page.fill("#cfg-num_processes", "4")
    assert page.locator("[data-estimate='processes']").inner_text() == "4"
    page.select_option("#cfg-device", "cuda")
    shot(page, "run-form-processes.png")
    page.click("#launch")
    page.wait_for_url("**/runs/*/")
    run = Run.objects.get()
    assert run.config["num_processes"] == 4
    job = Job.objects.get(run=run)
    assert job.queue == "train.gpus4"
    notice = page.locator("[data-placement]")
    assert "No running worker offers 4 GPUs" in notice.inner_text()
    # what a worker reports for a running job's ranks (tests/workers runs the real thing)
    Job.objects.filter(pk=job.pk).update(state="running", processes=[
        {"rank": r, "device": f"cuda:{r}", "host": "<img src=x onerror=alert(1)>", "pid": 100 + r, "step": 3,
         "time": __import__("time").time() - 5} for r in range(4)])
    page.reload()
    rows = page.locator("[data-processes] tbody tr")
    assert rows.count() == 4
    assert "<img src=x onerror=alert(1)>" in rows.nth(3).inner_text() and "cuda:3" in rows.nth(3).inner_text()
    assert rows.nth(0).inner_text().rstrip().endswith("s ago")
    shot(page, "run-page-processes.png")
    page.goto(f"{live_server.url}/p/{project.slug}/jobs/")
    page.locator("details summary", has_text="4 processes").first.click()
    assert page.locator("[data-processes] tbody tr").count() == 4
    assert seen == {"dialogs": [], "csp": []}


def test_the_estimate_takes_its_defaults_from_the_schema_and_a_nested_problem_lands_beside_its_input(
    page, live_server, project_team
):
    """No default is written in the script: an empty input counts as the schema's default (x-kind-defaults for
    a null one), and training's problem at `verifier.name` is shown beside the verifier input."""
    from browser_session import login, watch

    from training.config import KIND_DEFAULTS, RUN_CONFIG_SCHEMA

    properties = RUN_CONFIG_SCHEMA["properties"]
    project = project_team["project"]
    ModelSpec.objects.create(project=project, name="offline SmolLM2", hf_id="smollm2-135m-instruct")
    seen = watch(page)
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/new/")
    group = properties["num_prompts_per_step"]["default"] * properties["num_generations_per_prompt"]["default"]
    assert page.locator("[data-estimate='rollouts']").inner_text() == f"{group:,}"
    page.fill("#cfg-num_generations_per_prompt", "3")
    assert page.locator("[data-estimate='rollouts']").inner_text() == str(properties["num_prompts_per_step"]["default"] * 3)
    page.select_option("#id_kind", "sft")
    assert page.locator("[data-estimate='prompts']").inner_text() == str(KIND_DEFAULTS["micro_batch_size"]["sft"])
    page.select_option("#id_kind", "grpo")
    page.fill("#cfg-num_generations_per_prompt", "")
    page.fill("#cfg-verifier", '{"name": ""}')
    page.fill("#id_name", "nested")
    page.click("#launch")
    error = page.locator(".field.has-error:has(#cfg-verifier) .field-error")
    error.wait_for()
    assert "'verifier.name' must not be empty" in error.inner_text()
    assert page.locator(".field.has-error").count() == 1 and not Run.objects.exists()
    assert seen == {"dialogs": [], "csp": []}
