"""The jobs list and its filters (webapp/runs/selectors/jobs.py): every job of a filter, newest first, page by
page, and on PostgreSQL a page read from the filter's own index, whatever the project's other jobs."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.webapp.plans import plan_without_sort
from webapp.runs.models import Job, JobState
from webapp.runs.selectors.jobs import job_list, latest_finished_export, queued_job_count
from webapp.runs.services.exports import latest_exports


@pytest.fixture
def jobs(project_team):
    """Forty jobs of mixed kinds, states and queues in the project, and some in another project."""
    project = project_team["project"]
    kinds = ["grpo", "eval", "verify", "export", "sft"]
    states = [JobState.QUEUED, JobState.SUCCEEDED, JobState.FAILED, JobState.RUNNING]
    made = [Job.objects.create(project=project, kind=kinds[i % 5], state=states[i % 4],
                               queue="gpu" if i % 3 == 0 else "cpu", payload={"checkpoint_id": i % 7})
            for i in range(40)]
    other = type(project).objects.create(name="other", slug="other")
    Job.objects.create(project=other, kind="export", state=JobState.QUEUED, queue="gpu", payload={"checkpoint_id": 1})
    return project, made


def _walk(project, **filters) -> list[int]:
    seen, after = [], None
    while True:
        page = job_list(project, after=after, limit=3, **filters)
        seen += [row.id for row in page.items]
        if page.next_cursor is None:
            return seen
        after = page.next_cursor


@pytest.mark.parametrize("filters", [{"state": "failed"}, {"kind": "export"}, {"queue": "gpu"},
                                     {"state": "queued", "kind": "grpo"}, {}])
def test_each_filter_lists_its_jobs_newest_first_across_pages(jobs, filters):
    project, made = jobs
    expected = sorted((j for j in made if all(getattr(j, k) == v for k, v in filters.items())),
                      key=lambda j: (j.created_at, j.pk), reverse=True)
    assert _walk(project, **filters) == [j.pk for j in expected] and expected


def test_the_export_and_queue_lookups_keep_to_the_project(jobs):
    project, made = jobs
    assert queued_job_count(project) == sum(j.state == JobState.QUEUED for j in made)
    newest = {}
    for job in sorted(made, key=lambda j: j.pk):
        if job.kind == "export":
            newest[job.payload["checkpoint_id"]] = job.pk
    assert {cid: row["id"] for cid, row in latest_exports(project, list(range(7))).items()} == newest
    finished = [j for j in made if j.kind == "export" and j.state == JobState.SUCCEEDED]
    assert latest_finished_export(project, finished[-1].payload["checkpoint_id"]).pk == finished[-1].pk


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the plan is PostgreSQL's")
@pytest.mark.parametrize("column", ["state", "kind", "queue"])
def test_a_filtered_jobs_page_reads_the_index_of_its_filter(jobs, column):
    """Sorting and sequential scans are turned off in the planner: a query the index does not serve
    shows a Sort node over another index's rows instead of the filter's own index."""
    project, _ = jobs
    value = {"state": "failed", "kind": "export", "queue": "gpu"}[column]
    first = job_list(project, limit=3, **{column: value})
    for after in (None, first.next_cursor):
        plan = plan_without_sort(lambda: job_list(project, after=after, limit=3, **{column: value}),  # noqa: B023
                                 'FROM "runs_job"')
        assert f"using job_project_{column}_newest on runs_job" in plan and "Sort" not in plan, plan
