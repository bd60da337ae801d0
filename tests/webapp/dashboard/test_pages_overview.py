"""The project overview: start-here steps on an empty project, then runs, jobs and promoted aliases."""

from __future__ import annotations

import re

from webapp.runs.models import Checkpoint, CheckpointAlias, Job, Run


def test_an_empty_project_walks_through_the_workflow(client, project_team):
    client.force_login(project_team["editor"])
    body = client.get(f"/p/{project_team['project'].slug}/").content.decode()
    assert "Start here" in body
    assert "Measure a baseline on held-out tasks" in body and "?preset=sft_format" in body
    assert "No runs yet: launch a baseline evaluation" in body


def test_runs_jobs_and_aliases_show_up_and_names_are_escaped(client, project_team):
    project = project_team["project"]
    run = Run.objects.create(project=project, name="<b>run</b>", kind="eval", status="running")
    Job.objects.create(project=project, run=run, kind="eval", state="running", progress=0.5, worker="cpu@h")
    checkpoint = Checkpoint.objects.create(run=run, step=4, storage_uri="/c")
    CheckpointAlias.objects.create(project=project, name="production", checkpoint=checkpoint)
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project.slug}/").content.decode()
    assert "<b>run</b>" not in body and "&lt;b&gt;run&lt;/b&gt;" in body
    assert "1 run running" in body and "cpu@h" in body
    assert "<strong>production</strong>" in body and "step 4" in body
    assert "New run</a>" not in body, "viewers are not offered to launch"
    assert "Measure a baseline on held-out tasks <span class=\"muted\">(done)</span>" in body


def test_editors_get_a_quick_experiment_button_that_opens_the_form_with_tiny_stages(client, project_team):
    slug = project_team["project"].slug
    client.force_login(project_team["editor"])
    body = client.get(f"/p/{slug}/").content.decode()
    assert f'href="/p/{slug}/experiments/new/?preset=quick"' in body
    form = client.get(f"/p/{slug}/experiments/new/?preset=quick").content.decode()
    assert 'id="exp-preset-quick" data-preset checked' in form
    client.force_login(project_team["viewer"])
    assert 'id="quick-experiment"' not in client.get(f"/p/{slug}/").content.decode()


CHECK_STEP = "Create a verifier and sanity-check it"


def _step_done(body: str, label: str) -> bool:
    start = body.index(label)
    return body[start:body.index("</li>", start)].startswith(f'{label} <span class="muted">(done)</span>')


def _latest_badge(body: str) -> str:
    """The verifiers list's "Sanity check (latest version)" cell of its one verifier."""
    return re.sub(r"<[^>]+>", "", re.search(r'<span class="check-badge[^"]*"[^>]*>(.*?)</span>\s*</td>', body, re.S)
                  .group(1)).strip()


def test_the_sanity_check_step_and_the_verifier_pages_agree(client, project_team):
    """The step used to tick as soon as a verifier existed, while the verifier's page said "not checked yet"."""
    from pipeline_data import make_pipeline_run

    from webapp.trajectories.services.sanity_checks import (
        check_create,
        check_label,
        check_score_pending,
    )
    from webapp.verifiers.services.verifiers import verifier_update_config

    project, editor = project_team["project"], project_team["editor"]
    run = make_pipeline_run(project, project_team["owner"], steps=1)
    verifier = run.verifier_version.verifier
    client.force_login(editor)

    def pages() -> tuple[bool, str, str]:
        overview = client.get(f"/p/{project.slug}/").content.decode()
        listing = client.get(f"/p/{project.slug}/verifiers/").content.decode()
        detail = client.get(f"/p/{project.slug}/verifiers/{verifier.pk}/").content.decode()
        latest = re.search(r'<tr data-version="\d+">.*?</tr>', detail, re.S).group(0)  # newest first
        return _step_done(overview, CHECK_STEP), _latest_badge(listing), "not checked yet" if "not checked yet" in latest else "checked"

    assert pages() == (False, "not checked yet", "not checked yet")
    assert "Sanity-check its latest version" in client.get(f"/p/{project.slug}/").content.decode()
    check = check_create(version=run.verifier_version, actor=editor, size=10, run=run, seed=1)
    check_score_pending(check)
    assert pages() == (False, "not checked yet", "not checked yet"), "drawn and scored, nobody judged a verdict yet"
    check_label(item=check.items.order_by("position").first(), actor=editor, right=True)
    done, badge, latest = pages()
    assert done and badge.startswith("checked on 1 output") and latest == "checked"
    verifier_update_config(verifier=verifier, config={"mode": "strict"}, actor=editor)
    assert pages() == (False, "not checked yet", "not checked yet"), "a new version is not checked yet"


def test_a_failed_or_cancelled_run_ticks_no_step(client, project_team):
    project = project_team["project"]
    client.force_login(project_team["viewer"])
    Run.objects.create(project=project, name="baseline", kind="eval", status="failed")
    Run.objects.create(project=project, name="grpo", kind="grpo", status="cancelled")
    body = client.get(f"/p/{project.slug}/").content.decode()
    assert not _step_done(body, "Measure a baseline on held-out tasks")
    assert not _step_done(body, "GRPO with verifiable rewards")
    Run.objects.create(project=project, name="baseline again", kind="eval", status="succeeded")
    assert _step_done(client.get(f"/p/{project.slug}/").content.decode(), "Measure a baseline on held-out tasks")
