"""The new-run form: built from the schema, presets that validate, errors beside fields, launch, clone."""

from __future__ import annotations

import json

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


def test_a_bad_value_and_an_unknown_name_are_shown_beside_their_fields_and_nothing_is_created(client, form):
    response = _post(client, form, **{"cfg.learning_rate": "-1", "cfg.max_steps": "2.5", "cfg.num_prompts_per_step": "4",
                                      "model_spec": str(form["model"].pk)})
    assert response.status_code == 422
    body = response.content.decode()
    assert "must be a whole number" in body, "the integer field says what is wrong"
    assert 'value="4"' in body, "what was typed is kept"
    assert not Run.objects.exists()
    second = _post(client, form, **{"cfg.learning_rate": "-1", "model_spec": str(form["model"].pk)})
    assert "&#x27;learning_rate&#x27; must be &gt; 0, got -1" in second.content.decode()
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
