"""The run's delete page: the plan, the typed name, refusals (409, 422) shown on the page, escaping, roles,
the run page's Delete link and "being deleted" notice, the runs table's "deleting" mark, and Delete selected."""

from __future__ import annotations

import html

import pytest
from pipeline_data import make_pipeline_project, make_pipeline_run

from webapp.runs.models import Checkpoint, Job, Run
from webapp.runs.selectors.run_delete import RUN_DELETE_JOB_KIND
from webapp.runs.services.promotion import alias_move
from webapp.trajectories.models import Review, Trajectory

HOSTILE = '<img src=x onerror="alert(1)">run'

pytestmark = pytest.mark.usefixtures("jobs_without_broker")


@pytest.fixture
def run(project_team):
    setup = make_pipeline_project(project_team["project"], project_team["owner"])
    return make_pipeline_run(project_team["project"], project_team["owner"], name=HOSTILE, steps=2, setup=setup)


def _url(run: Run, page: str = "delete/") -> str:
    return f"/p/{run.project.slug}/runs/{run.pk}/{page}"


def test_an_editor_sees_what_goes_and_the_name_to_type_escaped(client, project_team, run):
    client.force_login(project_team["editor"])
    page = client.get(_url(run))
    body = page.content.decode()
    assert page.status_code == 200 and HOSTILE not in body and html.escape(HOSTILE) in body
    trajectories = Trajectory.objects.filter(run=run).count()
    assert f"<strong>{trajectories}</strong> trajectories" in body and 'name="confirm"' in body
    assert 'data-delete-run' in client.get(_url(run, "")).content.decode()


def test_viewers_get_no_link_and_no_page(client, project_team, run):
    client.force_login(project_team["viewer"])
    assert "data-delete-run" not in client.get(_url(run, "")).content.decode()
    assert client.get(_url(run)).status_code == 403
    assert client.post(_url(run), {"confirm": HOSTILE}).status_code == 403
    client.force_login(project_team["outsider"])
    assert client.get(_url(run)).status_code == 404
    assert not Job.objects.filter(kind=RUN_DELETE_JOB_KIND).exists()


def test_a_wrong_name_is_422_with_what_was_typed_and_the_right_one_queues_the_deletion(client, project_team, run):
    client.force_login(project_team["editor"])
    wrong = client.post(_url(run), {"confirm": "<b>nope</b>"})
    body = wrong.content.decode()
    assert wrong.status_code == 422 and "Type the run&#x27;s name" in body and "&lt;b&gt;nope&lt;/b&gt;" in body
    assert not Job.objects.filter(kind=RUN_DELETE_JOB_KIND).exists()

    done = client.post(_url(run), {"confirm": f"  {HOSTILE} "})
    assert done.status_code == 302 and done["Location"] == f"/p/{run.project.slug}/runs/"
    job = Job.objects.get(kind=RUN_DELETE_JOB_KIND)
    assert job.payload["run_id"] == run.pk and job.state == "queued"
    listed = client.get(done["Location"]).content.decode()
    assert f"is being deleted (job {job.pk})" in listed and HOSTILE not in listed
    assert listed.count("data-deleting") == 1 and 'hx-trigger="every 5s"' in listed  # marked; polled until gone
    detail = client.get(_url(run, "")).content.decode()
    assert "data-deleting" in detail and f"job {job.pk} is queued" in detail
    jobs = client.get(f"/p/{run.project.slug}/jobs/?kind=run_delete").content.decode()
    assert f'data-job="{job.pk}"' in jobs and f"run_delete · {html.escape(HOSTILE)}" in jobs and HOSTILE not in jobs
    again = client.get(_url(run)).content.decode()
    assert "data-pending" in again and 'name="confirm"' not in again


def test_what_keeps_the_run_is_listed_instead_of_the_form_and_a_post_is_refused(client, project_team, run):
    checkpoint = Checkpoint.objects.create(run=run, step=2, storage_uri="/nowhere")
    alias_move(checkpoint=checkpoint, name="production", actor=project_team["owner"], reason="ship")
    client.force_login(project_team["owner"])
    page = client.get(_url(run)).content.decode()
    assert "data-blockers" in page and "&#x27;production&#x27; (step 2)" in page and 'name="confirm"' not in page
    refused = client.post(_url(run), {"confirm": HOSTILE})
    assert refused.status_code == 409 and "data-blockers" in refused.content.decode()
    assert not Job.objects.filter(kind=RUN_DELETE_JOB_KIND).exists()


def test_reviews_need_an_owner_the_editor_is_told_so_and_the_owner_may(client, project_team, run):
    Review.objects.create(trajectory=Trajectory.objects.filter(run=run).first(), reviewer=project_team["reviewer"],
                          verdict="agree")
    client.force_login(project_team["editor"])
    page = client.get(_url(run)).content.decode()
    assert "only an owner of the project can delete labels" in page and 'name="confirm"' not in page
    client.force_login(project_team["owner"])
    assert client.post(_url(run), {"confirm": HOSTILE}).status_code == 302


def _many(run_ids: list[int]) -> str:
    return ",".join(map(str, run_ids))


def test_delete_selected_lists_each_plan_and_queues_a_job_per_run_that_may_go(client, project_team, run):
    project = project_team["project"]
    other = make_pipeline_run(project, project_team["owner"], name="other run", steps=1,
                              setup=(run.dataset, run.verifier_version.verifier, run.model))
    kept = make_pipeline_run(project, project_team["owner"], name="promoted", steps=1,
                             setup=(run.dataset, run.verifier_version.verifier, run.model))
    alias_move(checkpoint=Checkpoint.objects.create(run=kept, step=1, storage_uri="/nowhere"), name="production",
               actor=project_team["owner"], reason="ship")
    url = f"/p/{project.slug}/runs/delete/"
    client.force_login(project_team["editor"])
    assert 'id="delete-selected-button"' in client.get(f"/p/{project.slug}/runs/").content.decode()
    page = client.get(url, {"ids": _many([run.pk, other.pk, kept.pk])}).content.decode()
    assert page.count("data-goes") == 2 and page.count("data-kept") == 1 and "Type <code>2</code>" in page
    assert HOSTILE not in page and html.escape(HOSTILE) in page and "Delete 2 runs" in page

    wrong = client.post(url, {"ids": _many([run.pk, other.pk, kept.pk]), "confirm": "3"})
    assert wrong.status_code == 422 and "Type 2, the number of runs" in wrong.content.decode()
    assert not Job.objects.filter(kind=RUN_DELETE_JOB_KIND).exists()

    done = client.post(url, {"ids": _many([run.pk, other.pk, kept.pk]), "confirm": "2"}, follow=True)
    jobs = list(Job.objects.filter(kind=RUN_DELETE_JOB_KIND).order_by("id"))
    assert sorted(job.payload["run_id"] for job in jobs) == sorted([run.pk, other.pk])
    body = done.content.decode()
    assert f"2 runs are being deleted (jobs {jobs[0].pk}, {jobs[1].pk})" in body and "Kept 1:" in body


def test_delete_selected_refuses_what_cannot_be_chosen(client, project_team, run):
    project = project_team["project"]
    url = f"/p/{project.slug}/runs/delete/"
    client.force_login(project_team["viewer"])
    assert client.get(url, {"ids": str(run.pk)}).status_code == 403
    client.force_login(project_team["editor"])
    assert client.get(url, {"ids": f"{run.pk},999999"}).status_code == 404
    empty = client.get(url, {"ids": "x"}, follow=True)
    assert "Tick the runs to delete" in empty.content.decode()
    many = client.get(url, {"ids": _many(range(1, 27))}, follow=True)
    assert "Delete at most 25 runs at once" in many.content.decode()
    client.force_login(project_team["outsider"])
    assert client.get(url, {"ids": str(run.pk)}).status_code == 404
