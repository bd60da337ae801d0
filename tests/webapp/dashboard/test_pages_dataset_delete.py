"""A dataset version's delete page: the plan, the typed "name vN", refusals (409, 422) shown on the page,
escaping, roles, the version page's Delete link and "being deleted" notice, the datasets list's "deleting"
mark and a later version's lineage once its parent is gone, and the Jobs page's row."""

from __future__ import annotations

import html

import pytest
from pipeline_data import make_pipeline_project, make_pipeline_run, make_tasks

from webapp.datasets.models import Split, TaskDataset
from webapp.datasets.selectors.datasets import TaskFilter
from webapp.datasets.services.datasets import dataset_create
from webapp.datasets.services.splits import dataset_split_move
from webapp.runs.models import Job
from webapp.runs.selectors.dataset_delete import DATASET_DELETE_JOB_KIND
from webapp.runs.services.dataset_delete import dataset_delete_execute

HOSTILE = '<img src=x onerror="alert(1)">tasks'

pytestmark = pytest.mark.usefixtures("jobs_without_broker")


@pytest.fixture
def dataset(project_team):
    return dataset_create(project=project_team["project"], name=HOSTILE, tasks=make_tasks(5),
                          actor=project_team["owner"], environment="json_tool_call")


def _url(dataset: TaskDataset, page: str = "delete/") -> str:
    return f"/p/{dataset.project.slug}/datasets/{dataset.pk}/{page}"


def test_an_editor_sees_what_goes_and_the_name_to_type_escaped(client, project_team, dataset):
    client.force_login(project_team["editor"])
    page = client.get(_url(dataset))
    body = page.content.decode()
    assert page.status_code == 200 and HOSTILE not in body and html.escape(HOSTILE) in body
    assert "<strong>5</strong> tasks" in body and 'name="confirm"' in body
    assert f"<code>{html.escape(HOSTILE)} v1</code>" in body
    assert 'id="delete-version"' in client.get(_url(dataset, "")).content.decode()


def test_viewers_get_no_link_and_no_page(client, project_team, dataset):
    client.force_login(project_team["viewer"])
    assert 'id="delete-version"' not in client.get(_url(dataset, "")).content.decode()
    assert client.get(_url(dataset)).status_code == 403
    assert client.post(_url(dataset), {"confirm": f"{HOSTILE} v1"}).status_code == 403
    client.force_login(project_team["outsider"])
    assert client.get(_url(dataset)).status_code == 404
    assert client.get(f"/p/{project_team['other'].slug}/datasets/{dataset.pk}/delete/").status_code == 404
    assert not Job.objects.filter(kind=DATASET_DELETE_JOB_KIND).exists()


def test_a_wrong_name_is_422_and_the_right_one_queues_the_deletion_marked_everywhere(client, project_team, dataset):
    client.force_login(project_team["editor"])
    wrong = client.post(_url(dataset), {"confirm": HOSTILE})
    body = wrong.content.decode()
    assert wrong.status_code == 422 and "the version&#x27;s name and number" in body and HOSTILE not in body
    assert not Job.objects.filter(kind=DATASET_DELETE_JOB_KIND).exists()

    done = client.post(_url(dataset), {"confirm": f"{HOSTILE} v1"})
    assert done.status_code == 302 and done["Location"] == f"/p/{dataset.project.slug}/datasets/"
    job = Job.objects.get(kind=DATASET_DELETE_JOB_KIND)
    listed = client.get(done["Location"]).content.decode()
    assert f"is being deleted (job {job.pk})" in listed and HOSTILE not in listed and listed.count("data-deleting") == 1
    detail = client.get(_url(dataset, "")).content.decode()
    assert "data-deleting" in detail and f"job {job.pk} is queued" in detail and 'id="delete-version"' not in detail
    again = client.get(_url(dataset)).content.decode()
    assert "data-pending" in again and 'name="confirm"' not in again
    jobs = client.get(f"/p/{dataset.project.slug}/jobs/?kind=dataset_delete").content.decode()
    assert f"dataset_delete · {html.escape(HOSTILE)} v1" in jobs and HOSTILE not in jobs


def test_a_run_on_the_version_keeps_it_the_page_says_so_and_a_post_is_refused(client, project_team):
    project, owner = project_team["project"], project_team["owner"]
    setup = make_pipeline_project(project, owner)
    make_pipeline_run(project, owner, name="<b>grpo</b>", steps=1, setup=setup)
    client.force_login(owner)
    page = client.get(_url(setup[0])).content.decode()
    assert "data-blockers" in page and "&#x27;&lt;b&gt;grpo&lt;/b&gt;&#x27;" in page and 'name="confirm"' not in page
    assert "?dataset=tool%20calls" in page
    refused = client.post(_url(setup[0]), {"confirm": "tool calls v1"})
    assert refused.status_code == 409 and "data-blockers" in refused.content.decode()
    assert not Job.objects.filter(kind=DATASET_DELETE_JOB_KIND).exists()


def test_a_later_version_names_its_deleted_parent(client, project_team, dataset):
    later, _moved = dataset_split_move(dataset=dataset, flt=TaskFilter(), to_split=Split.HELD_OUT,
                                       actor=project_team["owner"])
    client.force_login(project_team["editor"])
    assert "data-later" in client.get(_url(dataset)).content.decode()
    client.post(_url(dataset), {"confirm": f"{HOSTILE} v1"})
    job = Job.objects.get(kind=DATASET_DELETE_JOB_KIND)
    dataset_delete_execute(project_id=dataset.project_id, payload=job.payload)
    for page in (_url(later, ""), f"/p/{dataset.project.slug}/datasets/"):
        body = client.get(page).content.decode()
        assert f"from {html.escape(HOSTILE)} v1 (deleted)" in body and HOSTILE not in body
    assert client.get(_url(dataset, "")).status_code == 404
