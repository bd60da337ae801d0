"""An experiment's delete page: the plan (its runs), the typed name, refusals (409, 422) shown on the page,
escaping, roles, the experiment page's Delete link and "being deleted" notice, the list's "deleting" mark and
the Jobs page's row."""

from __future__ import annotations

import html

import pytest
from pipeline_data import make_finished_experiment, make_pipeline_project

from webapp.runs.models import Experiment, Job
from webapp.runs.selectors.experiment_delete import EXPERIMENT_DELETE_JOB_KIND
from webapp.runs.services.experiments import experiment_create

HOSTILE = '<img src=x onerror="alert(1)">exp'

pytestmark = pytest.mark.usefixtures("jobs_without_broker")


@pytest.fixture
def experiment(project_team):
    return make_finished_experiment(project_team["project"], project_team["owner"], name=HOSTILE,
                                    baseline_name="<i>baseline</i>")[0]


def _url(experiment: Experiment, page: str = "delete/") -> str:
    return f"/p/{experiment.project.slug}/experiments/{experiment.pk}/{page}"


def test_an_editor_sees_its_runs_and_the_name_to_type_escaped(client, project_team, experiment):
    client.force_login(project_team["editor"])
    page = client.get(_url(experiment))
    body = page.content.decode()
    assert page.status_code == 200 and HOSTILE not in body and html.escape(HOSTILE) in body
    assert "<strong>3</strong> runs" in body and "&lt;i&gt;baseline&lt;/i&gt;" in body and 'name="confirm"' in body
    assert 'id="delete-experiment"' in client.get(_url(experiment, "")).content.decode()


def test_viewers_get_no_link_and_no_page(client, project_team, experiment):
    client.force_login(project_team["viewer"])
    assert 'id="delete-experiment"' not in client.get(_url(experiment, "")).content.decode()
    assert client.get(_url(experiment)).status_code == 403
    assert client.post(_url(experiment), {"confirm": HOSTILE}).status_code == 403
    client.force_login(project_team["outsider"])
    assert client.get(_url(experiment)).status_code == 404
    assert not Job.objects.filter(kind=EXPERIMENT_DELETE_JOB_KIND).exists()


def test_a_wrong_name_is_422_and_the_right_one_queues_the_deletion_marked_everywhere(client, project_team, experiment):
    client.force_login(project_team["editor"])
    wrong = client.post(_url(experiment), {"confirm": "<b>nope</b>"})
    assert wrong.status_code == 422 and "Type the experiment&#x27;s name" in wrong.content.decode()
    assert not Job.objects.filter(kind=EXPERIMENT_DELETE_JOB_KIND).exists()

    done = client.post(_url(experiment), {"confirm": HOSTILE})
    assert done.status_code == 302 and done["Location"] == f"/p/{experiment.project.slug}/experiments/"
    job = Job.objects.get(kind=EXPERIMENT_DELETE_JOB_KIND)
    listed = client.get(done["Location"]).content.decode()
    assert f"is being deleted with its runs (job {job.pk})" in listed and HOSTILE not in listed
    assert listed.count("data-deleting") == 1 and 'hx-trigger="every 5s"' in listed  # marked; polled until gone
    detail = client.get(_url(experiment, "")).content.decode()
    assert "data-deleting" in detail and f"job {job.pk} is queued" in detail and 'id="delete-experiment"' not in detail
    assert "data-pending" in client.get(_url(experiment)).content.decode()
    jobs = client.get(f"/p/{experiment.project.slug}/jobs/?kind=experiment_delete").content.decode()
    assert f"experiment_delete · {html.escape(HOSTILE)}" in jobs and HOSTILE not in jobs


def test_a_running_experiment_has_no_link_and_its_page_lists_why(client, project_team):
    project, owner = project_team["project"], project_team["owner"]
    dataset, verifier, model = make_pipeline_project(project, owner)
    running = experiment_create(project=project, name="live", dataset=dataset,
                                verifier_version=verifier.latest_version, model=model, actor=owner)
    client.force_login(owner)
    assert 'id="delete-experiment"' not in client.get(_url(running, "")).content.decode()
    page = client.get(_url(running)).content.decode()
    assert "data-blockers" in page and "is still running" in page and 'name="confirm"' not in page
    refused = client.post(_url(running), {"confirm": "live"})
    assert refused.status_code == 409 and not Job.objects.filter(kind=EXPERIMENT_DELETE_JOB_KIND).exists()
