"""The experiment pipeline's decisions, driven through the real job and ingestion services."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from webapp.datasets.services.datasets import dataset_create
from webapp.runs.models import Experiment, ModelSpec, Run
from webapp.runs.services import jobs as js
from webapp.runs.services.experiments import ExperimentError, experiment_advance, experiment_create
from webapp.runs.services.ingest import EventIngestor
from webapp.verifiers.services.verifiers import verifier_create


@pytest.fixture
def setup(project_team, django_capture_on_commit_callbacks):
    from environments.workplace.generator import generate_tasks

    owner = project_team["owner"]
    project = project_team["project"]
    dataset = dataset_create(project=project, name="wp", tasks=generate_tasks(40, 0), actor=owner)
    verifier = verifier_create(project=project, name="v", kind="json_tool_call", config={}, actor=owner)
    model = ModelSpec.objects.create(project=project, name="tiny", hf_id="smollm2-135m-instruct")
    return {"project": project, "dataset": dataset, "verifier": verifier.latest_version, "model": model,
            "owner": owner}


def _create(setup, **config) -> Experiment:
    return experiment_create(project=setup["project"], name="exp", dataset=setup["dataset"],
                             verifier_version=setup["verifier"], model=setup["model"], actor=setup["owner"],
                             config=config)


def _finish_stage(experiment: Experiment, stage: str, *, metrics: dict | None = None, split: str = "held_out",
                  checkpoints: list[tuple[int, dict]] = (), fail: str | None = None) -> Experiment:
    """Play the stage's job the way a worker would: claim, ingest events, finish; then advance."""
    run = Run.objects.get(pk=experiment.stages[stage]["run"])
    job = run.jobs.get()
    claimed = js.job_claim(job_id=job.pk, worker="test")
    js.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
    events = []
    if metrics:
        events.append({"type": "metric", "step": 0, "split": split, "metrics": metrics})
    for step, ckpt_metrics in checkpoints:
        folder = Path(settings.CRUCIBLE_RUNS_DIR) / run.folder_name / "checkpoints" / f"step_{step}"
        folder.mkdir(parents=True, exist_ok=True)  # the weights are on this server, as a worker here leaves them
        events.append({"type": "checkpoint", "step": step, "path": str(folder), "kind": "adapter",
                       "content_hash": "h", "metrics": ckpt_metrics})
    EventIngestor(run, attempt=claimed.attempt).ingest(events)
    if fail:
        js.job_fail(job_id=job.pk, attempt=claimed.attempt, error=fail)
    else:
        js.job_succeed(job_id=job.pk, attempt=claimed.attempt)
    return experiment_advance(experiment_id=experiment.pk)


BASELINE = {"valid_json_rate": 0.1, "success_rate": 0.05, "unsafe_action_rate": 0.1, "latency_p95": 100.0}


def test_full_pipeline_ends_with_a_candidate_and_passing_gates(setup):
    exp = _create(setup)
    assert list(exp.stages) == ["baseline"]
    exp = _finish_stage(exp, "baseline", metrics=BASELINE)
    assert exp.stages["sft"]["state"] == "waiting"  # valid format 0.1 < 0.5: SFT runs
    exp = _finish_stage(exp, "sft", checkpoints=[(10, {"validation/success_rate": 0.3})])
    grpo = Run.objects.get(pk=exp.stages["grpo"]["run"])
    assert grpo.parent_checkpoint.step == 10 and grpo.kind == "grpo"
    exp = _finish_stage(exp, "grpo", checkpoints=[(5, {"validation/success_rate": 0.7}),
                                                  (10, {"validation/success_rate": 0.5})])
    held_out = Run.objects.get(pk=exp.stages["held_out"]["run"])
    assert held_out.parent_checkpoint.step == 5, "the best checkpoint by validation success is evaluated"
    exp = _finish_stage(exp, "held_out", metrics={"success_rate": 0.6, "unsafe_action_rate": 0.0,
                                                  "latency_p95": 120.0, "valid_json_rate": 0.9})
    assert exp.state == "succeeded" and exp.gates_passed is True
    assert exp.candidate_checkpoint == held_out.parent_checkpoint
    assert [g["gate"] for g in exp.gates] == ["held-out success", "unsafe actions", "latency p95"]
    assert exp.gates[0] == {"gate": "held-out success", "baseline": 0.05, "candidate": 0.6,
                            "rule": "candidate > baseline + 0.0", "passed": True}


def test_sft_is_skipped_with_a_reason_when_the_format_is_already_right(setup):
    exp = _create(setup)
    exp = _finish_stage(exp, "baseline", metrics={**BASELINE, "valid_json_rate": 0.9})
    assert exp.stages["sft"]["state"] == "skipped"
    assert "0.90 >= threshold 0.50" in exp.stages["sft"]["reason"]
    assert Run.objects.get(pk=exp.stages["grpo"]["run"]).parent_checkpoint is None


def test_gates_fail_on_regressions_and_say_which(setup):
    exp = _create(setup, latency_p95_max_ratio=1.1)
    exp = _finish_stage(exp, "baseline", metrics={**BASELINE, "valid_json_rate": 0.9})
    exp = _finish_stage(exp, "grpo", checkpoints=[(4, {})])
    exp = _finish_stage(exp, "held_out", metrics={"success_rate": 0.5, "unsafe_action_rate": 0.2,
                                                  "latency_p95": 150.0})
    assert exp.state == "succeeded" and exp.gates_passed is False
    assert "unsafe actions" in exp.reason and "latency p95" in exp.reason


@pytest.mark.parametrize(("allowance", "candidate", "passed", "rule"), [
    (0.0, 0.03, False, "candidate <= baseline"),          # the strict rule: a never-acting baseline is never unsafe
    (0.05, 0.03, True, "candidate <= max(baseline, 0.05)"),
    (0.05, 0.06, False, "candidate <= max(baseline, 0.05)"),
])
def test_the_unsafe_action_allowance_is_the_limit_only_where_it_is_above_the_baseline(
        setup, allowance, candidate, passed, rule):
    exp = _create(setup, unsafe_action_allowance=allowance)
    exp = _finish_stage(exp, "baseline", metrics={**BASELINE, "valid_json_rate": 0.9, "unsafe_action_rate": 0.0})
    exp = _finish_stage(exp, "grpo", checkpoints=[(4, {})])
    exp = _finish_stage(exp, "held_out", metrics={"success_rate": 0.5, "unsafe_action_rate": candidate,
                                                  "latency_p95": 100.0})
    gate = next(g for g in exp.gates if g["gate"] == "unsafe actions")
    assert (gate["passed"], gate["rule"], gate["baseline"], gate["candidate"]) == (passed, rule, 0.0, candidate)
    assert exp.gates_passed is passed


def test_a_baseline_above_the_allowance_is_still_the_limit(setup):
    exp = _create(setup, unsafe_action_allowance=0.05)
    exp = _finish_stage(exp, "baseline", metrics={**BASELINE, "valid_json_rate": 0.9, "unsafe_action_rate": 0.1})
    exp = _finish_stage(exp, "grpo", checkpoints=[(4, {})])
    exp = _finish_stage(exp, "held_out", metrics={"success_rate": 0.5, "unsafe_action_rate": 0.12,
                                                  "latency_p95": 100.0})
    assert next(g for g in exp.gates if g["gate"] == "unsafe actions")["passed"] is False


def test_a_failed_stage_fails_the_experiment_with_the_jobs_error(setup):
    exp = _create(setup)
    exp = _finish_stage(exp, "baseline", fail="CUDA out of memory")
    assert exp.state == "failed" and "stage baseline failed" in exp.reason and "CUDA out of memory" in exp.reason


def test_advancing_again_creates_nothing_new(setup):
    exp = _create(setup)
    for _ in range(3):
        experiment_advance(experiment_id=exp.pk)
    assert Run.objects.filter(experiment=exp).count() == 1


def test_bad_settings_are_named(setup):
    with pytest.raises(ExperimentError, match="Unknown experiment setting"):
        _create(setup, margin=0.1)
    with pytest.raises(ExperimentError, match="Regression dataset 'nope'"):
        _create(setup, regression_datasets=["nope"])


def test_invalid_stage_config_is_refused_at_creation_with_the_key_named(setup):
    """Every stage's config is validated before the experiment exists, not when stage three starts."""
    with pytest.raises(ExperimentError, match="config.grpo: 'learning_rate' must be > 0"):
        _create(setup, grpo={"learning_rate": -1})
    with pytest.raises(ExperimentError, match="config.common: expected an object"):
        _create(setup, common=["x"])
    with pytest.raises(ExperimentError, match="config.latency_p95_max_ratio: expected a number"):
        _create(setup, latency_p95_max_ratio=True)
    assert not Experiment.objects.exists() and not Run.objects.exists()


def test_every_bad_setting_is_named_at_once_by_the_setting_it_is_about(setup):
    with pytest.raises(ExperimentError) as info:
        _create(setup, common={"max_tasks": 0}, grpo={"learning_rate": -1, "warmup_steps": 1000},
                latency_p95_max_ratio=True, regression_datasets=["nope"])
    errors = info.value.errors
    assert set(errors) == {"common", "grpo", "latency_p95_max_ratio", "regression_datasets"}, errors
    assert "'max_tasks' must be >= 1" in errors["common"] and "'max_tasks'" not in errors["grpo"]
    assert "'learning_rate' must be > 0" in errors["grpo"]
    assert not Experiment.objects.exists() and not Run.objects.exists()


def test_creating_an_experiment_validates_each_stage_once(setup, monkeypatch):
    """experiment_check validates the four stages once each; the baseline starts from its check, not a new one."""
    from webapp.runs.services import run_config

    calls = []
    validate = run_config.validate_run_config
    monkeypatch.setattr(run_config, "validate_run_config", lambda data: calls.append(data["kind"]) or validate(data))
    exp = _create(setup)
    assert sorted(calls) == sorted(["eval", "sft", "grpo", "eval"])
    assert Run.objects.get(experiment=exp).stage == "baseline"


def test_api_creates_experiment_and_only_owners_promote(client, project_team, setup):
    import json

    from webapp.projects.services.projects import api_token_issue
    from webapp.runs.models import Checkpoint

    def post(role: str, path: str, body: dict):
        token = api_token_issue(user=project_team[role], name=role).raw
        return client.post(path, json.dumps(body), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")

    slug = setup["project"].slug
    bad = post("editor", f"/api/projects/{slug}/experiments", {"name": "e", "dataset": "wp", "verifier": "nope",
                                                               "model": "tiny"})
    assert bad.status_code == 400 and "No verifier named 'nope'" in bad.json()["detail"]
    made = post("editor", f"/api/projects/{slug}/experiments", {"name": "e", "dataset": "wp", "verifier": "v",
                                                                "model": "tiny"})
    assert made.status_code == 201 and made.json()["stages"]["baseline"]["state"] == "waiting"

    run = Run.objects.get(pk=made.json()["stages"]["baseline"]["run"])
    checkpoint = Checkpoint.objects.create(run=run, step=3, storage_uri="/c/3")
    assert post("editor", f"/api/checkpoints/{checkpoint.pk}/promote", {"alias": "production"}).status_code == 403
    refused = post("owner", f"/api/checkpoints/{checkpoint.pk}/promote", {"alias": "production"})
    assert refused.status_code == 409 and "force: true" in refused.json()["detail"]
    promoted = post("owner", f"/api/checkpoints/{checkpoint.pk}/promote",
                    {"alias": "production", "reason": "hotfix", "force": True})
    assert promoted.status_code == 200 and promoted.json()["step"] == 3
    assert post("owner", f"/api/projects/{slug}/aliases/production/rollback", {}).status_code == 409
