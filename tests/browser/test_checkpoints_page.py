"""The checkpoints page in a real browser: promote through the confirmation page, then roll back.

Set CRUCIBLE_SCREENSHOT_DIR to keep screenshots of the page in the light and dark themes
(ckpt-light.png, ckpt-dark.png).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from browser_session import login

from webapp.datasets.services.datasets import dataset_create
from webapp.projects.models import UserPreference
from webapp.runs.models import Checkpoint, Experiment, ExperimentState, MetricPoint, ModelSpec, Run
from webapp.runs.services.promotion import alias_move
from webapp.verifiers.services.verifiers import verifier_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BASELINE = {"success_rate": 0.05, "valid_json_rate": 0.42, "reward_mean": 0.11, "unsafe_action_rate": 0.04,
            "latency_p95": 310.0}


def _experiment(project, name, candidate, held_out, gates, *, stuff):
    baseline_run = Run.objects.create(project=project, name=f"{name}-baseline", kind="eval")
    held_out_run = Run.objects.create(project=project, name=f"{name}-held-out", kind="eval")
    for run, metrics in ((baseline_run, BASELINE), (held_out_run, held_out)):
        MetricPoint.objects.bulk_create(MetricPoint(run=run, step=0, split="held_out", name=k, value=v)
                                        for k, v in metrics.items())
    return Experiment.objects.create(
        project=project, name=name, state=ExperimentState.SUCCEEDED, candidate_checkpoint=candidate,
        stages={"baseline": {"run": baseline_run.pk}, "held_out": {"run": held_out_run.pk}},
        gates=gates, gates_passed=all(g["passed"] for g in gates), **stuff)


@pytest.fixture
def checkpoints(project_team, settings, tmp_path):
    """Two runs' checkpoints (folders on disk for the kept ones), two experiments, `production` set."""
    settings.DATA_DIR = tmp_path
    settings.CRUCIBLE_RUNS_DIR = tmp_path / "runs"
    from environments.workplace.generator import generate_tasks

    project, owner = project_team["project"], project_team["owner"]
    stuff = {"dataset": dataset_create(project=project, name="wp", tasks=generate_tasks(4, 0), actor=owner),
             "verifier_version": verifier_create(project=project, name="v", kind="json_tool_call", config={},
                                                 actor=owner).latest_version,
             "model": ModelSpec.objects.create(project=project, name="tiny", hf_id="smollm2-135m-instruct")}
    made = {}
    for run_name, kind, steps in (("sft-format", "sft", (50,)), ("grpo <tool-calls>", "grpo", (10, 20, 30, 40))):
        run = Run.objects.create(project=project, name=run_name, kind=kind, config={"keep_top_k": 2})
        for step in steps:
            folder = tmp_path / "runs" / run.folder_name / "checkpoints" / f"step_{step}"
            if step != 10:
                folder.mkdir(parents=True)
                (folder / "adapter_model.safetensors").write_bytes(b"w")
            score = {10: 0.2, 20: 0.45, 30: 0.6, 40: 0.55, 50: 0.3}[step]
            made[step] = Checkpoint.objects.create(
                run=run, step=step, storage_uri=str(folder),
                metrics={"validation/success_rate": score, "validation/valid_json_rate": min(1.0, 0.5 + score),
                         "validation/reward_mean": score * 0.9})
    gate_rows = [
        {"gate": "held-out success", "baseline": 0.05, "candidate": 0.58, "rule": "candidate > baseline + 0.0",
         "passed": True},
        {"gate": "unsafe actions", "baseline": 0.04, "candidate": 0.02, "rule": "candidate <= baseline",
         "passed": True},
        {"gate": "latency p95", "baseline": 310.0, "candidate": 330.0, "rule": "candidate <= 1.25 × baseline",
         "passed": True},
    ]
    _experiment(project, "exp-a", made[30], {**BASELINE, "success_rate": 0.58, "valid_json_rate": 0.97,
                                             "reward_mean": 0.55, "unsafe_action_rate": 0.02, "latency_p95": 330.0},
                gate_rows, stuff=stuff)
    failed_rows = [{**gate_rows[0], "candidate": 0.5}, {**gate_rows[1], "candidate": 0.09, "passed": False},
                   gate_rows[2]]
    _experiment(project, "exp-b", made[40], {**BASELINE, "success_rate": 0.5, "valid_json_rate": 0.4,
                                             "reward_mean": 0.45, "unsafe_action_rate": 0.09, "latency_p95": 300.0},
                failed_rows, stuff=stuff)
    alias_move(checkpoint=made[50], name="production", actor=owner, reason="SFT fixes the format")
    alias_move(checkpoint=made[40], name="candidate", actor=owner, reason="latest GRPO")
    return made


def _panel(page, name: str) -> str:
    return page.locator(f"#alias-{name}").inner_text()


def test_promote_through_the_confirmation_then_roll_back(page, live_server, project_team, checkpoints):
    csp_errors: list[str] = []
    page.on("console", lambda m: csp_errors.append(m.text) if "Content Security Policy" in m.text else None)
    login(page, live_server, "owner")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/checkpoints/")
    assert "production" in page.locator(".alias-panel").inner_text()

    page.click(f'tr[data-checkpoint="{checkpoints[20].pk}"] >> text=Promote')
    page.wait_for_url(f"**/checkpoints/{checkpoints[20].pk}/promote/")
    assert "no gates ran for it" in page.locator("form.promote-form").inner_text()
    page.fill("#reason", "beats SFT on the <held-out> set")
    page.click("form.promote-form button[type=submit]")
    assert "Promote anyway" in page.locator("#force-error").inner_text()  # the checkbox was left unticked
    assert page.input_value("#reason") == "beats SFT on the <held-out> set"  # what was typed is kept
    shots = os.environ.get("CRUCIBLE_SCREENSHOT_DIR")
    if shots:
        page.screenshot(path=str(Path(shots) / "ckpt-promote-errors.png"), full_page=True)
    page.check("input[name=force]")
    page.click("form.promote-form button[type=submit]")
    page.wait_for_url(f"**/p/{slug}/checkpoints/#alias-production")
    assert "now points at checkpoint" in page.locator(".messages").inner_text()
    history = _panel(page, "production")
    assert "grpo <tool-calls> · step 20" in history and "beats SFT on the <held-out> set" in history
    assert "forced" in history

    page.on("dialog", lambda dialog: dialog.accept())
    page.fill("#rollback-reason-production", "latency regression")
    page.click("#alias-production button:has-text('Roll back')")
    page.wait_for_selector(".messages li.success:has-text('rolled back')")
    history = _panel(page, "production")
    assert "rollback" in history and "latency regression" in history
    assert history.index("latency regression") < history.index("beats SFT")  # newest first
    assert "production → sft-format · step 50" in history
    assert csp_errors == []

    if shots:
        for theme in ("light", "dark"):
            UserPreference.objects.update_or_create(user=project_team["owner"], defaults={"theme": theme})
            page.goto(f"{live_server.url}/p/{slug}/checkpoints/")
            page.screenshot(path=str(Path(shots) / f"ckpt-{theme}.png"), full_page=True)
        page.goto(f"{live_server.url}/p/{slug}/checkpoints/{checkpoints[40].pk}/promote/")
        page.screenshot(path=str(Path(shots) / "ckpt-promote-dark.png"), full_page=True)


def test_a_dismissed_confirmation_rolls_nothing_back(page, live_server, project_team, checkpoints):
    alias_move(checkpoint=checkpoints[30], name="production", actor=project_team["owner"], reason="gates passed")
    login(page, live_server, "owner")
    page.goto(f"{live_server.url}/p/{project_team['project'].slug}/checkpoints/")
    page.on("dialog", lambda dialog: dialog.dismiss())
    page.click("#alias-production button:has-text('Roll back')")
    page.wait_for_timeout(300)
    assert page.locator(".messages").count() == 0
    from webapp.runs.models import CheckpointAlias

    assert CheckpointAlias.objects.get(name="production").checkpoint == checkpoints[30]


def test_older_moves_load_in_place(page, live_server, project_team, checkpoints):
    owner = project_team["owner"]
    for i in range(6):
        alias_move(checkpoint=checkpoints[30] if i % 2 == 0 else checkpoints[50], name="production", actor=owner,
                   reason=f"flip {i}")
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project_team['project'].slug}/checkpoints/")
    rows = page.locator("#alias-production tr.move")
    assert rows.count() == 5
    page.click("#alias-production >> text=Older moves")
    page.wait_for_function("() => document.querySelectorAll('#alias-production tr.move').length === 7")
    assert "SFT fixes the format" in page.locator("#alias-production").inner_text()
    assert page.locator("#alias-production tr.more").count() == 0
    assert page.url.endswith("/checkpoints/")  # loaded in place, not followed


def test_the_table_follows_an_export_until_it_is_done(page, live_server, project_team, checkpoints, tmp_path):
    from webapp.runs.models import Job, JobState

    ckpt = checkpoints[30]
    out = tmp_path / "runs" / ckpt.run.folder_name / "exports" / "step_30"
    job = Job.objects.create(project=project_team["project"], kind="export", queue="rollout", state=JobState.RUNNING,
                             progress=0.1, payload={"checkpoint_id": ckpt.pk, "out": str(out)})
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{project_team['project'].slug}/checkpoints/")
    row = page.locator(f'tr[data-checkpoint="{ckpt.pk}"]')
    assert "export running" in row.inner_text()
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, progress=1.0)
    row.locator("text=Merged model").wait_for(timeout=10_000)  # the rows poll every 3 s while it runs
    assert page.locator("#checkpoint-rows[hx-trigger]").count() == 0  # and stop once nothing runs
