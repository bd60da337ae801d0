"""The experiments pages: the list, the new-experiment form (validated by the experiment service) and
one experiment's pipeline page (stages, gates, candidate), for every role."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.webapp.runs import test_experiment_pipeline as pipeline
from tests.webapp.runs.test_experiment_pipeline import BASELINE, _create, _finish_stage
from webapp.datasets.services.datasets import dataset_create
from webapp.runs.management.commands.crucible_experiment import QUICK_CONFIG
from webapp.runs.models import Experiment, Job, Run
from webapp.runs.services.experiments import DEFAULT_CONFIG

MEMBERS = ["viewer", "reviewer", "editor", "owner"]
EVERYONE = [*MEMBERS, "outsider"]
STAGES = ("common", "baseline", "sft", "grpo", "held_out")
setup = pipeline.setup  # the pipeline tests' fixture: a dataset, a verifier and a model


def _body(response) -> str:
    return response.content.decode()


def _form(setup, **changes) -> dict:
    """A valid POST of the form: the defaults as the page prefills them."""
    data = {"name": "exp from the form", "dataset": str(setup["dataset"].pk),
            "verifier": str(setup["verifier"].verifier_id), "model": str(setup["model"].pk),
            **{key: json.dumps(DEFAULT_CONFIG[key], indent=2) for key in STAGES},
            "sft_valid_format_threshold": "0.5", "success_margin": "0.0", "latency_p95_max_ratio": "1.5",
            "unsafe_action_allowance": "0.0"}
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def _field_error(body: str, key: str) -> str | None:
    """The error shown beside a field (its <p class="field-error" id="KEY-error">), unescaped."""
    match = re.search(rf'<p class="field-error" id="{re.escape(key)}-error">(.*?)</p>', body, re.S)
    return html.unescape(match.group(1)) if match else None


def _url(setup, tail: str = "") -> str:
    return f"/p/{setup['project'].slug}/experiments/{tail}"


@pytest.fixture
def finished(setup):
    """An experiment played to its end: SFT skipped, GRPO's step-5 checkpoint the candidate, one gate failed."""
    exp = _create(setup, latency_p95_max_ratio=1.1)
    exp = _finish_stage(exp, "baseline", metrics={**BASELINE, "valid_json_rate": 0.9})
    exp = _finish_stage(exp, "grpo", checkpoints=[(5, {"validation/success_rate": 0.7}),
                                                  (10, {"validation/success_rate": 0.5})])
    exp = _finish_stage(exp, "held_out", metrics={"success_rate": 0.6, "unsafe_action_rate": 0.0,
                                                  "latency_p95": 150.0, "valid_json_rate": 0.95})
    assert exp.state == "succeeded" and exp.gates_passed is False
    return exp


# ---------------------------------------------------------------------------------------
# Roles: every page and the POST
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", EVERYONE)
def test_read_pages_need_membership(client, project_team, setup, finished, role):
    client.force_login(project_team[role])
    expected = 404 if role == "outsider" else 200
    assert client.get(_url(setup)).status_code == expected
    assert client.get(_url(setup, f"{finished.pk}/")).status_code == expected
    assert client.get(_url(setup, f"{finished.pk}/live/")).status_code == expected


@pytest.mark.parametrize("role", EVERYONE)
def test_new_experiment_needs_editor(client, project_team, setup, role):
    client.force_login(project_team[role])
    expected = {"outsider": 404, "viewer": 403, "reviewer": 403}.get(role, 200)
    assert client.get(_url(setup, "new/")).status_code == expected
    response = client.post(_url(setup, "new/"), _form(setup))
    assert response.status_code == (302 if expected == 200 else expected)
    assert Experiment.objects.exists() is (expected == 200)
    assert Run.objects.exists() is (expected == 200)


def test_experiment_in_another_project_is_not_found(client, project_team, setup, finished):
    client.force_login(project_team["outsider"])
    other = project_team["other"].slug
    assert client.get(f"/p/{other}/experiments/{finished.pk}/").status_code == 404
    assert client.get(f"/p/{other}/experiments/{finished.pk}/live/").status_code == 404


def test_buttons_follow_the_role(client, project_team, setup, finished):
    new = 'href="/p/{}/experiments/new/"'.format(setup["project"].slug)
    promote = f"/checkpoints/{finished.candidate_checkpoint_id}/promote/"
    for role, can_create, can_promote in (("viewer", False, False), ("reviewer", False, False),
                                          ("editor", True, False), ("owner", True, True)):
        client.force_login(project_team[role])
        assert (new in _body(client.get(_url(setup)))) is can_create, role
        assert (promote in _body(client.get(_url(setup, f"{finished.pk}/")))) is can_promote, role


# ---------------------------------------------------------------------------------------
# The form
# ---------------------------------------------------------------------------------------


def test_form_is_prefilled_from_the_defaults(client, project_team, setup):
    dataset_create(project=setup["project"], name="zz-other", tasks=[], actor=project_team["owner"])
    client.force_login(project_team["editor"])
    response = client.get(_url(setup, "new/"))
    body = _body(response)
    assert response.status_code == 200
    for key in STAGES:
        area = re.search(rf'<textarea id="cfg-{key}"[^>]*>(.*?)</textarea>', body, re.S).group(1)
        assert json.loads(html.unescape(area)) == DEFAULT_CONFIG[key]
    assert 'name="sft_valid_format_threshold" type="number" value="0.5"' in body
    assert 'name="latency_p95_max_ratio" type="number" value="1.5"' in body
    # The regression choices: the other dataset; the main one is there (for the script) but hidden.
    assert '<option value="zz-other">zz-other</option>' in body
    assert '<option value="wp" hidden disabled>wp</option>' in body
    assert f'<option value="{setup["dataset"].pk}" data-name="wp" selected>wp v1</option>' in body
    assert 'id="experiment-presets" type="application/json"' in body
    assert "Baseline evaluation" in body and "Promotion gates" in body and "learning_rate" in body


def test_quick_preset_fills_the_stages_from_quick_config(client, project_team, setup):
    client.force_login(project_team["editor"])
    body = _body(client.get(_url(setup, "new/?preset=quick")))
    grpo = re.search(r'<textarea id="cfg-grpo"[^>]*>(.*?)</textarea>', body, re.S).group(1)
    assert json.loads(html.unescape(grpo)) == {**DEFAULT_CONFIG["grpo"], **QUICK_CONFIG["grpo"]}
    common = re.search(r'<textarea id="cfg-common"[^>]*>(.*?)</textarea>', body, re.S).group(1)
    assert json.loads(html.unescape(common)) == QUICK_CONFIG["common"]
    assert 'id="exp-preset-quick" data-preset checked' in body
    presets = json.loads(html.unescape(re.search(r'id="experiment-presets" type="application/json">(.*?)</script>',
                                                 body, re.S).group(1)))
    assert json.loads(presets["quick"]["sft"])["max_steps"] == QUICK_CONFIG["sft"]["max_steps"]
    assert json.loads(presets["default"]["sft"]) == DEFAULT_CONFIG["sft"]


BAD_INPUT = [
    # (what, changes, field, words in the error)
    ("unknown stage key", {"grpo": '{"kind": "grpo", "learnign_rate": 0.001}'}, "grpo",
     ["unknown key 'learnign_rate'", "did you mean 'learning_rate'", "settings reference below"]),
    ("bad value", {"grpo": '{"kind": "grpo", "learning_rate": -1}'}, "grpo", ["'learning_rate' must be > 0"]),
    ("JSON syntax error", {"sft": '{\n  "kind": "sft",\n  "max_steps": 5,,\n}'}, "sft",
     ["Not valid JSON", "line 3, column 18"]),
    ("not an object", {"held_out": "[1, 2]"}, "held_out", ["expected an object of run settings, got list"]),
    ("NaN is not JSON", {"baseline": '{"kind": "eval", "temperature": NaN}'}, "baseline", ["NaN is not valid JSON"]),
    ("NUL in a string", {"common": '{"device": "cpu\\u0000"}'}, "common", ["NUL character"]),
    ("bad key in common", {"common": '{"max_taskz": 3}'}, "common", ["unknown key 'max_taskz'"]),
    ("threshold out of range", {"sft_valid_format_threshold": "1.5"}, "sft_valid_format_threshold",
     ["expected a number from 0.0 to 1.0, got 1.5"]),
    ("threshold not a number", {"latency_p95_max_ratio": "fast"}, "latency_p95_max_ratio",
     ["expected a number from 0.0 to 1000.0, got 'fast'"]),
    ("margin missing", {"success_margin": ""}, "success_margin", ["expected a number from -1.0 to 1.0"]),
    ("missing dataset", {"dataset": ""}, "dataset", ["Choose a dataset."]),
    ("dataset of another project", {"dataset": "999999"}, "dataset", ["no such dataset in this project"]),
    ("missing verifier", {"verifier": None}, "verifier", ["Choose a verifier."]),
    ("missing model", {"model": "abc"}, "model", ["no such model"]),
    ("missing name", {"name": "   "}, "name", ["Give the experiment a name."]),
    ("name too long", {"name": "x" * 201}, "name", ["at most 200 characters"]),
    ("unknown regression dataset", {"regression_datasets": ["nope"]}, "regression_datasets",
     ["Regression dataset 'nope' does not exist"]),
    ("NUL in a regression name", {"regression_datasets": ["wp\x00"]}, "regression_datasets", ["NUL character"]),
    ("NUL in the name", {"name": "a\x00b"}, "name", ["NUL character"]),
    ("too many regression datasets", {"regression_datasets": [f"d{i}" for i in range(51)]}, "regression_datasets",
     ["at most 50"]),
]


@pytest.mark.parametrize(("what", "changes", "field", "words"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_is_shown_beside_its_field_and_nothing_is_created(client, project_team, setup, what, changes,
                                                                     field, words):
    client.force_login(project_team["editor"])
    response = client.post(_url(setup, "new/"), _form(setup, **changes))
    body = _body(response)
    assert response.status_code == 400
    error = _field_error(body, field)
    assert error is not None, f"no error beside {field}: {re.findall(r'field-error.*?</p>', body)}"
    for word in words:
        assert word.lower() in error.lower(), error
    assert "Nothing was created" in body
    others = re.findall(r'<p class="field-error" id="([\w-]+)-error">', body)
    assert others == [field], others
    assert not Experiment.objects.exists() and not Run.objects.exists() and not Job.objects.exists()


def test_errors_are_all_shown_at_once_and_what_was_typed_is_kept(client, project_team, setup):
    client.force_login(project_team["editor"])
    typed_sft = '{"kind": "sft", "note": "<b>mine</b>",}'
    typed_grpo = '{"kind": "grpo", "learning_rate": -1}'
    response = client.post(_url(setup, "new/"), _form(setup, name="keep <me>", sft=typed_sft, grpo=typed_grpo,
                                                       success_margin="2"))
    body = _body(response)
    assert response.status_code == 400
    assert "Not valid JSON" in _field_error(body, "sft")
    assert "'learning_rate' must be > 0" in _field_error(body, "grpo")
    assert "from -1.0 to 1.0" in _field_error(body, "success_margin")
    assert 'value="keep &lt;me&gt;"' in body
    assert html.escape(typed_grpo) in body and "<b>mine</b>" not in body
    assert html.escape(typed_sft) in body
    assert 'name="success_margin" type="number" value="2"' in body
    assert f'<option value="{setup["dataset"].pk}" data-name="wp" selected>' in body
    # The summary links each error to its field.
    assert 'href="#cfg-sft"' in body and 'href="#cfg-grpo"' in body and 'href="#num-success_margin"' in body
    assert not Experiment.objects.exists()


def test_run_config_errors_of_several_stages_are_reported_together(client, project_team, setup):
    client.force_login(project_team["editor"])
    response = client.post(_url(setup, "new/"), _form(setup, sft='{"kind": "sft", "max_steps": 0}',
                                                       grpo='{"kind": "grpo", "learning_rate": -1}'))
    body = _body(response)
    assert "'max_steps'" in _field_error(body, "sft") and "'learning_rate'" in _field_error(body, "grpo")
    assert _field_error(body, "baseline") is None and not Experiment.objects.exists()


def test_a_stage_problem_from_a_shared_setting_is_beside_shared_and_one_post_validates_each_stage_once(
        client, project_team, setup, monkeypatch):
    from webapp.runs.services import run_config

    calls = []
    validate = run_config.validate_run_config
    monkeypatch.setattr(run_config, "validate_run_config", lambda data: calls.append(data["kind"]) or validate(data))
    client.force_login(project_team["editor"])
    response = client.post(_url(setup, "new/"), _form(setup, common='{"warmup_steps": 500}', name=""))
    body = _body(response)
    assert "'warmup_steps' must be <= max_steps" in _field_error(body, "common"), "blamed where the key was set"
    assert "Give the experiment a name." in _field_error(body, "name")
    assert _field_error(body, "grpo") is None and len(calls) == 4
    calls.clear()
    response = client.post(_url(setup, "new/"), _form(setup))
    assert response.status_code == 302 and Run.objects.count() == 1
    assert len(calls) == 4, "each stage once; the baseline's run is created from its check"


def test_a_verifier_without_a_version_is_refused(client, project_team, setup):
    from webapp.verifiers.models import Verifier

    bare = Verifier.objects.create(project=setup["project"], name="bare", kind="json_tool_call")
    client.force_login(project_team["editor"])
    response = client.post(_url(setup, "new/"), _form(setup, verifier=str(bare.pk)))
    assert response.status_code == 400 and "has no version yet" in _field_error(_body(response), "verifier")
    assert not Experiment.objects.exists()


def test_success_creates_the_experiment_its_first_run_and_job(client, project_team, setup):
    other = dataset_create(project=setup["project"], name="regress", tasks=[], actor=project_team["owner"])
    client.force_login(project_team["editor"])
    quick_grpo = json.dumps({**DEFAULT_CONFIG["grpo"], **QUICK_CONFIG["grpo"]})
    response = client.post(_url(setup, "new/"), _form(
        setup, name="  tiny <run>  ", common=json.dumps(QUICK_CONFIG["common"]), grpo=quick_grpo, sft="",
        sft_valid_format_threshold="0.7", success_margin="0.05", regression_datasets=[other.name], quick="on"))
    experiment = Experiment.objects.get()
    assert response.status_code == 302
    assert response["Location"] == _url(setup, f"{experiment.pk}/")
    assert experiment.name == "tiny <run>" and experiment.created_by == project_team["editor"]
    assert experiment.dataset == setup["dataset"] and experiment.model == setup["model"]
    assert experiment.verifier_version == setup["verifier"]
    config = experiment.config
    assert config["common"] == QUICK_CONFIG["common"]
    assert config["grpo"]["max_steps"] == QUICK_CONFIG["grpo"]["max_steps"] and config["grpo"]["algorithm"] == "dapo"
    assert config["sft"] == DEFAULT_CONFIG["sft"], "an empty textarea keeps the stage's defaults"
    assert config["sft_valid_format_threshold"] == 0.7 and config["success_margin"] == 0.05
    assert config["latency_p95_max_ratio"] == 1.5 and config["regression_datasets"] == ["regress"]
    assert list(experiment.stages) == ["baseline"] and experiment.stages["baseline"]["state"] == "waiting"
    run = Run.objects.get()
    assert experiment.stages["baseline"]["run"] == run.pk and run.experiment == experiment and run.stage == "baseline"
    assert run.kind == "eval" and run.config["max_tasks"] == 24
    assert Job.objects.get().run == run
    page = client.get(response["Location"])
    body = _body(page)
    assert "started: the baseline evaluation is queued as run" in body
    assert "tiny &lt;run&gt;" in body and "<run>" not in body.replace("&lt;run&gt;", "")
    baseline = re.search(r'<li class="exp-stage[^"]*" data-stage="baseline">.*?</li>', body, re.S).group(0)
    assert ">queued<" in baseline and f'href="/p/{setup["project"].slug}/runs/{run.pk}/"' in baseline
    assert 'hx-trigger="every 3s"' in body


# ---------------------------------------------------------------------------------------
# One experiment
# ---------------------------------------------------------------------------------------


def _stage_html(body: str, key: str) -> str:
    return re.search(rf'<li class="exp-stage[^"]*" data-stage="{re.escape(key)}">.*?</li>', body, re.S).group(0)


def test_finished_experiment_shows_stages_gates_and_candidate(client, project_team, setup, finished):
    client.force_login(project_team["owner"])
    slug = setup["project"].slug
    body = _body(client.get(_url(setup, f"{finished.pk}/")))
    baseline, sft, grpo, held_out = (_stage_html(body, k) for k in ("baseline", "sft", "grpo", "held_out"))
    assert ">succeeded<" in baseline and f"/p/{slug}/runs/{finished.stages['baseline']['run']}/" in baseline
    assert ">skipped<" in sft and "0.90 &gt;= threshold 0.50" in sft and "/runs/" not in sft
    assert ">succeeded<" in grpo and f"/runs/{finished.stages['grpo']['run']}/" in grpo
    assert ">succeeded<" in held_out
    assert ">failed<" in _stage_html(body, "gates")
    gates = {name: row for name, row in re.findall(r'<tr data-gate="([^"]+)">(.*?)</tr>', body, re.S)}
    assert list(gates) == ["held-out success", "unsafe actions", "latency p95"]
    assert "0.050" in gates["held-out success"] and "0.600" in gates["held-out success"]
    assert ">pass<" in gates["held-out success"] and ">pass<" in gates["unsafe actions"]
    assert ">fail<" in gates["latency p95"] and "100.000" in gates["latency p95"] and "150.000" in gates["latency p95"]
    assert "candidate &lt;= 1.1 x baseline" in gates["latency p95"]
    candidate = finished.candidate_checkpoint
    assert candidate.step == 5
    assert f'href="/p/{slug}/checkpoints/?run={candidate.run_id}"' in body
    assert f'href="/p/{slug}/checkpoints/{candidate.pk}/promote/"' in body
    assert "gates failed: latency p95" in body  # the reason
    assert "hx-trigger" not in body, "a finished experiment does not poll"
    assert "&quot;latency_p95_max_ratio&quot;: 1.1" in body  # the config as submitted


def test_failed_stage_and_running_experiment(client, project_team, setup):
    running = _create(setup)
    failed = _create(setup)
    failed = _finish_stage(failed, "baseline", fail="CUDA <oom>")
    client.force_login(project_team["viewer"])
    body = _body(client.get(_url(setup, f"{running.pk}/")))
    assert 'hx-get="/p/{}/experiments/{}/live/"'.format(setup["project"].slug, running.pk) in body
    assert ">queued<" in _stage_html(body, "baseline") and ">not started<" in _stage_html(body, "grpo")
    assert "The gates run once the held-out evaluation finishes" in body
    live = client.get(_url(setup, f"{running.pk}/live/"), HTTP_HX_REQUEST="true")
    assert _body(live).lstrip().startswith("<div id=\"experiment-live\"") and "<html" not in _body(live)
    body = _body(client.get(_url(setup, f"{failed.pk}/")))
    baseline = _stage_html(body, "baseline")
    assert ">failed<" in baseline and "CUDA &lt;oom&gt;" in baseline and "<oom>" not in body
    assert ">not reached<" in _stage_html(body, "grpo") and "hx-trigger" not in body


def test_detail_costs_a_fixed_number_of_queries(client, project_team, setup, finished):
    client.force_login(project_team["viewer"])
    with CaptureQueriesContext(connection) as queries:
        assert client.get(_url(setup, f"{finished.pk}/")).status_code == 200
    assert len(queries) <= 15, [q["sql"] for q in queries.captured_queries]


# ---------------------------------------------------------------------------------------
# The list
# ---------------------------------------------------------------------------------------


def test_list_shows_state_stage_candidate_gates_and_escapes_names(client, project_team, setup, finished):
    running = _create(setup)
    Experiment.objects.filter(pk=running.pk).update(name="<script>alert(1)</script>")
    client.force_login(project_team["viewer"])
    body = _body(client.get(_url(setup)))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "<script>alert" not in body
    rows = dict(re.findall(r'<tr class="state-\w+" data-experiment="(\d+)">(.*?)</tr>', body, re.S))
    done, live = rows[str(finished.pk)], rows[str(running.pk)]
    assert '<td class="state"' in done and ">succeeded<" in done
    assert "gates" in done and "failed" in done and "latency p95" in done
    assert f"?run={finished.candidate_checkpoint.run_id}" in done and "step 5" in done
    assert ">running<" in live and "baseline" in live and "waiting" in live
    assert "owner" in live  # created by
    assert 'hx-trigger="every 5s"' in body  # one experiment is running: the rows refresh
    assert 'data-nav-key="e"' in body


def test_empty_list_explains_the_pipeline(client, project_team):
    slug = project_team["project"].slug
    client.force_login(project_team["editor"])
    body = _body(client.get(f"/p/{slug}/experiments/"))
    assert "No experiments yet" in body and "SFT" in body and "Promotion gates" in body
    assert f'href="/p/{slug}/experiments/new/"' in body
    client.force_login(project_team["viewer"])
    body = _body(client.get(f"/p/{slug}/experiments/"))
    assert "No experiments yet" in body and f'href="/p/{slug}/experiments/new/"' not in body


def test_keyset_pages_cover_every_experiment_once(client, project_team, setup):
    Experiment.objects.bulk_create(
        Experiment(project=setup["project"], name=f"e{i}", dataset=setup["dataset"],
                   verifier_version=setup["verifier"], model=setup["model"], config=DEFAULT_CONFIG,
                   stages={}) for i in range(55))
    client.force_login(project_team["viewer"])
    first = client.get(_url(setup))
    assert _body(first).count('data-experiment="') == 50 and 'rel="next"' in _body(first)
    second = client.get(_url(setup) + f"?after={first.context['page'].next_cursor}")
    names = [r.experiment.name for r in first.context["rows"]] + [r.experiment.name for r in second.context["rows"]]
    assert sorted(names) == sorted(f"e{i}" for i in range(55)) and 'rel="next"' not in _body(second)
    with CaptureQueriesContext(connection) as queries:
        assert client.get(_url(setup)).status_code == 200
    assert len(queries) <= 12, [q["sql"] for q in queries.captured_queries]
    junk = client.get(_url(setup) + "?after=garbage")
    assert junk.status_code == 200 and "start again from the first page" in _body(junk)


def test_learning_preset_is_the_cpu_recipe_and_says_what_to_expect(client, project_team, setup):
    """The form's Learning preset fills the stages with the recipe that learns, as scripts/cpu_recipe.py runs it."""
    import importlib.util
    from pathlib import Path

    from webapp.runs.services.experiments import LEARNING_CONFIG, preset_of

    path = Path(__file__).resolve().parents[3] / "scripts" / "cpu_recipe.py"
    spec = importlib.util.spec_from_file_location("cpu_recipe_for_preset", path)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    sft, grpo = recipe.training_stages(recipe.parse_args(["--out", "unused"]))
    assert LEARNING_CONFIG["sft"] == sft and LEARNING_CONFIG["grpo"] == grpo

    client.force_login(project_team["editor"])
    body = _body(client.get(_url(setup, "new/?preset=learning")))
    textarea = re.search(r'<textarea id="cfg-grpo"[^>]*>(.*?)</textarea>', body, re.S).group(1)
    assert json.loads(html.unescape(textarea)) == {**DEFAULT_CONFIG["grpo"], **LEARNING_CONFIG["grpo"]}
    assert 'id="exp-preset-learning" data-preset checked' in body
    assert "too short to learn" in body and "65% after GRPO" in body and "59% in another (the demo's example)" in body
    assert preset_of({**DEFAULT_CONFIG, **{k: {**DEFAULT_CONFIG[k], **v} for k, v in LEARNING_CONFIG.items()}}) \
        == "learning"
    assert preset_of(DEFAULT_CONFIG) is None


def test_a_started_stage_says_what_its_run_is_doing_and_a_quick_one_says_it_cannot_learn(client, project_team, setup):
    """The stage label follows the stage: "running" while its run runs (it said "waiting" at 50%)."""
    from webapp.runs.models import RunStatus

    experiment = _create(setup)
    run = Run.objects.get(pk=experiment.stages["baseline"]["run"])
    client.force_login(project_team["viewer"])
    assert ">queued<" in _stage_html(_body(client.get(_url(setup, f"{experiment.pk}/"))), "baseline")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    baseline = _stage_html(_body(client.get(_url(setup, f"{experiment.pk}/"))), "baseline")
    assert ">running<" in baseline and ">waiting<" not in baseline
    Experiment.objects.filter(pk=experiment.pk).update(config=experiment_config_of_quick())
    body = _body(client.get(_url(setup, f"{experiment.pk}/")))
    assert 'id="exp-preset-note"' in body and "too short to learn" in body and "?preset=learning" in body


def experiment_config_of_quick() -> dict:
    from webapp.runs.services.experiments import experiment_config

    return experiment_config(QUICK_CONFIG)
