"""The new-run form: built from the schema, presets that validate, errors beside fields, launch, clone."""

from __future__ import annotations

import inspect
import json
import re

import pytest

from training.config import PRESETS, RUN_CONFIG_SCHEMA
from webapp.runs.models import Job, ModelSpec, Run


@pytest.fixture
def form(client, project_team):
    client.force_login(project_team["editor"])
    model = ModelSpec.objects.create(project=project_team["project"], name="offline", hf_id="smollm2-135m-instruct")
    return {"url": f"/p/{project_team['project'].slug}/runs/new/", "model": model, "slug": project_team["project"].slug}


def test_every_schema_field_has_an_input_with_its_documentation(client, form):
    body = client.get(form["url"]).content.decode()
    for name in RUN_CONFIG_SCHEMA["properties"]:
        if name in ("kind", "reward"):
            continue
        assert f'name="cfg.{name}"' in body, name
    assert RUN_CONFIG_SCHEMA["properties"]["num_generations_per_prompt"]["description"][:40] in body


@pytest.mark.parametrize(("role", "status"), [("viewer", 403), ("reviewer", 403), ("editor", 200), ("owner", 200),
                                              ("outsider", 404)])
def test_launching_needs_an_editor(client, project_team, role, status):
    client.force_login(project_team[role])
    assert client.get(f"/p/{project_team['project'].slug}/runs/new/").status_code == status


def _post(client, form, **fields):
    data = {"name": "my run", "kind": "grpo", "action": "launch", **fields}
    return client.post(form["url"], data)


def _field_error(body: str, name: str) -> str | None:
    """The error shown inside the config input's own field (None when it has none)."""
    match = re.search(rf'<label for="cfg-{name}">(?:(?!<div class="field).)*?<p class="field-error" role="alert">'
                      r"(.*?)</p>", body, re.S)
    return match.group(1) if match else None


def _errors_shown(body: str) -> int:
    return len(re.findall(r'<p class="field-error" role="alert">', body))


@pytest.mark.parametrize(("inputs", "name", "words"), [
    ({"cfg.verifier": '{"name": ""}'}, "verifier", "&#x27;verifier.name&#x27; must not be empty"),
    ({"cfg.lora_target_modules": '["q_proj", ""]'}, "lora_target_modules",
     "&#x27;lora_target_modules.1&#x27; must not be empty"),
])
def test_a_problem_inside_a_json_input_is_shown_beside_that_input(client, form, inputs, name, words):
    response = _post(client, form, **inputs, model_spec=str(form["model"].pk))
    assert response.status_code == 422
    body = response.content.decode()
    assert words in (_field_error(body, name) or ""), re.findall(r"field-error.*?</p>", body)
    assert _errors_shown(body) == 1 and not Run.objects.exists()


def test_a_problem_between_two_fields_is_beside_the_field_to_change_and_names_the_other(client, form):
    response = _post(client, form, **{"cfg.warmup_steps": "200", "cfg.learning_rate": "-1"},
                     model_spec=str(form["model"].pk))
    body = response.content.decode()
    assert "learning_rate" in (_field_error(body, "learning_rate") or ""), "a field's own problem comes first"
    fixed = _post(client, form, **{"cfg.warmup_steps": "200"}, model_spec=str(form["model"].pk))
    body = fixed.content.decode()
    assert fixed.status_code == 422 and "must be &lt;= max_steps (100), got 200" in _field_error(body, "warmup_steps")
    assert _field_error(body, "max_steps") is None and _errors_shown(body) == 1


def test_a_problem_of_a_key_a_linked_row_supplies_is_shown_beside_that_row(client, form, project_team):
    from webapp.datasets.models import TaskDataset

    dataset = TaskDataset.objects.create(project=project_team["project"], name="odd", version=1,
                                         environment="Not A Name")
    response = _post(client, form, dataset=str(dataset.pk), model_spec=str(form["model"].pk))
    body = response.content.decode()
    error = re.search(r'<label for="id_dataset">.*?<p class="field-error" role="alert">(.*?)</p>', body, re.S)
    assert response.status_code == 422 and error and "&#x27;environment&#x27; must match" in error.group(1)
    assert _field_error(body, "environment") is None, "the config's environment input was left empty"


def test_one_request_validates_the_config_once_and_run_create_takes_only_a_checked_config(client, form,
                                                                                       monkeypatch):
    from webapp.runs.services import run_config

    signature = inspect.signature(run_config.run_create)
    assert "config" not in signature.parameters and signature.parameters["checked"].annotation == "CheckedRunConfig"
    calls = []

    def counted(data):
        calls.append(data)
        return validate(data)

    validate = run_config.validate_run_config
    monkeypatch.setattr(run_config, "validate_run_config", counted)
    response = _post(client, form, **{"cfg.max_steps": "3"}, model_spec=str(form["model"].pk))
    assert response.status_code == 302 and Run.objects.count() == 1
    assert len(calls) == 1


def test_a_bad_value_and_an_unknown_name_are_shown_beside_their_fields_and_nothing_is_created(client, form):
    response = _post(client, form, **{"cfg.learning_rate": "-1", "cfg.max_steps": "2.5", "cfg.num_prompts_per_step": "4",
                                      "model_spec": str(form["model"].pk)})
    assert response.status_code == 422
    body = response.content.decode()
    assert _field_error(body, "max_steps") == "Must be a whole number.", "the integer field says what is wrong"
    assert 'value="4"' in body, "what was typed is kept"
    assert not Run.objects.exists()
    second = _post(client, form, **{"cfg.learning_rate": "-1", "model_spec": str(form["model"].pk)})
    assert _field_error(second.content.decode(), "learning_rate") == "&#x27;learning_rate&#x27; must be &gt; 0, got -1"
    assert not Run.objects.exists() and not Job.objects.exists()


def test_a_valid_form_launches_the_run_and_its_job_and_lands_on_the_run_page(client, form):
    response = _post(client, form, **{"cfg.max_steps": "3", "cfg.num_prompts_per_step": "2",
                                      "cfg.num_generations_per_prompt": "4", "cfg.dynamic_sampling": "true",
                                      "cfg.lora_target_modules": '["q_proj", "v_proj"]',
                                      "model_spec": str(form["model"].pk)})
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/p/{form['slug']}/runs/{run.pk}/"
    assert run.config == {"max_steps": 3, "num_prompts_per_step": 2, "num_generations_per_prompt": 4,
                          "dynamic_sampling": True, "lora_target_modules": ["q_proj", "v_proj"]}
    assert run.model == form["model"] and run.jobs.get().state == "queued"


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_preset_fills_the_form_and_validates_as_written(client, form, preset):
    page = client.get(f"{form['url']}?preset={preset}").content.decode()
    assert 'name="cfg.num_generations_per_prompt"' in page
    loaded = client.post(form["url"], {"name": preset, "kind": "grpo", "action": "load_json",
                                       "config_json": json.dumps(PRESETS[preset])})
    assert loaded.status_code == 200
    values = loaded.context["values"]
    data = {"name": preset, "kind": PRESETS[preset].get("kind", "grpo"), "action": "launch",
            **{f"cfg.{k}": v for k, v in values.items()}}
    response = client.post(form["url"], data)
    assert response.status_code == 302, response.context and response.context["errors"]


def test_the_quick_preset_says_its_measured_time_and_that_it_only_checks_the_pipeline(client, form):
    """A preset called quick is quick on the demo's machine, and says so before it is launched."""
    page = client.get(form["url"]).content.decode()
    assert "CPU quick GRPO on SmolLM2-135M <small class=\"preset-hint\">· about 9 min on 2 CPU cores</small>" in page
    applied = client.get(f"{form['url']}?preset=smollm2_cpu_grpo")
    assert "checks the pipeline: 10 steps and 3 validations take about 9 minutes" in applied.content.decode()
    values = applied.context["values"]
    assert (str(values["max_steps"]), str(values["eval_interval"])) == ("10", "5")  # what the note's time is for


def test_pasted_json_with_an_unknown_key_or_bad_syntax_says_so(client, form):
    bad = client.post(form["url"], {"name": "x", "kind": "grpo", "action": "load_json", "config_json": "{oops"})
    assert bad.status_code == 422 and "Not valid JSON" in bad.content.decode()
    extra = client.post(form["url"], {"name": "x", "kind": "grpo", "action": "load_json",
                                      "config_json": json.dumps({"lr": 1, "max_steps": 7})})
    body = extra.content.decode()
    assert "Unknown key(s) lr: not loaded." in body and 'value="7"' in body


def test_clone_fills_the_form_from_a_run(client, form, project_team):
    run = Run.objects.create(project=project_team["project"], name="base <i>x</i>", kind="sft",
                             config={"max_steps": 9, "sft_source": "ground_truth"}, model=form["model"])
    body = client.get(f"{form['url']}?clone={run.pk}").content.decode()
    assert 'value="base &lt;i&gt;x&lt;/i&gt; (copy)"' in body and 'value="9"' in body
    assert '<option value="sft" selected>' in body
    other = Run.objects.create(project=project_team["other"], name="theirs", kind="sft")
    assert client.get(f"{form['url']}?clone={other.pk}").status_code == 404


def test_a_nul_in_an_input_is_refused_beside_it(client, form):
    response = _post(client, form, **{"cfg.checkpoint_metric": "a\x00b"})
    assert response.status_code == 422 and "NUL" in response.content.decode()


def test_the_kind_can_be_chosen_by_the_link(client, form):
    body = client.get(f"{form['url']}?kind=eval").content.decode()
    assert '<option value="eval" selected>' in body
    assert '<option value="grpo" selected>' in client.get(f"{form['url']}?kind=nope").content.decode()
