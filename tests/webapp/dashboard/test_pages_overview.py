"""The project overview: start-here steps on an empty project, then runs, jobs and promoted aliases."""

from __future__ import annotations

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
    assert 'id="exp-quick" checked' in form
    client.force_login(project_team["viewer"])
    assert 'id="quick-experiment"' not in client.get(f"/p/{slug}/").content.decode()
