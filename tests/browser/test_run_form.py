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
