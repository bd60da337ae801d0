"""Review-queue names are unique per project: the service, the API (409), the page, the migration, a race.

Concurrent creates once made several queues with one name. The name is now a unique key of the
project's queues (archived ones too); a taken name is the same conflict wherever it is met, and
migration 0005 renamed the duplicates made before, keeping the oldest as it was.
"""

from __future__ import annotations

import importlib
import json

import pytest
from django.apps import apps as installed_apps
from django.db import IntegrityError, connection, transaction
from django.test import Client

from tests.webapp.races import needs_postgres, race
from webapp.projects.services.projects import api_token_issue
from webapp.runs.models import Run
from webapp.trajectories.models import QueueItem, ReviewQueue, Trajectory
from webapp.trajectories.services.review import QueueNameTaken, queue_create

TAKEN = "already has a review queue named"


def _trajectories(project, count: int = 6) -> Run:
    run = Run.objects.create(project=project, name="r", kind="grpo")
    Trajectory.objects.bulk_create([
        Trajectory(project=project, run=run, task_key=f"t{i}", step=1, sample_index=0, passed=False,
                   turns=[{"role": "assistant", "content": "x"}]) for i in range(count)])
    return run


def _post_json(token: str, path: str, body: dict):
    return Client().post(path, json.dumps(body), content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def run(project_team):
    return _trajectories(project_team["project"])


def test_the_service_refuses_a_taken_name_with_a_409_on_name_and_writes_nothing(project_team, run):
    project, editor = project_team["project"], project_team["editor"]
    first = queue_create(project=project, name="failures", filter={"run": run.pk}, limit=3, actor=editor)
    first.archived = True
    first.save(update_fields=["archived"])
    with pytest.raises(QueueNameTaken) as refused:
        queue_create(project=project, name="  failures ", filter={"run": run.pk}, limit=3, actor=editor)
    assert refused.value.status == 409 and list(refused.value.errors) == ["name"]
    assert TAKEN in refused.value.errors["name"] and "'failures'" in refused.value.errors["name"]
    assert ReviewQueue.objects.filter(project=project).count() == 1
    assert QueueItem.objects.count() == 3


def test_another_project_may_use_the_same_name(project_team, run):
    queue_create(project=project_team["project"], name="failures", filter={"run": run.pk}, actor=project_team["editor"])
    other_run = _trajectories(project_team["other"], 2)
    queue_create(project=project_team["other"], name="failures", filter={"run": other_run.pk},
                 actor=project_team["outsider"])
    assert ReviewQueue.objects.filter(name="failures").count() == 2


def test_the_database_holds_the_rule_too(project_team):
    ReviewQueue.objects.create(project=project_team["project"], name="n")
    with pytest.raises(IntegrityError), transaction.atomic():
        ReviewQueue.objects.create(project=project_team["project"], name="n")


def test_the_api_answers_409_naming_the_field_and_documents_it(client, project_team, bearer, run):
    from webapp.api.api import api

    path = f"/api/projects/{project_team['project'].slug}/review-queues"
    body = json.dumps({"name": "failures", "filter": {"run": run.pk}, "limit": 2})
    first = client.post(path, body, content_type="application/json", **bearer("editor"))
    second = client.post(path, body, content_type="application/json", **bearer("editor"))
    assert (first.status_code, second.status_code) == (201, 409), second.content
    assert TAKEN in second.json()["errors"]["name"] and TAKEN in second.json()["detail"]
    operation = api.get_openapi_schema()["paths"]["/api/projects/{slug}/review-queues"]["post"]
    assert "409" in {str(status) for status in operation["responses"]}
    assert ReviewQueue.objects.filter(project=project_team["project"]).count() == 1


def test_the_page_shows_the_conflict_beside_the_name_field(client, project_team, run):
    client.force_login(project_team["editor"])
    form = {"name": "failures", "kind": "verdict", "filter": f"run={run.pk}", "order": "failures_first",
            "limit": "2", "reviews_per_item": "1", "lock_minutes": "10"}
    url = f"/p/{project_team['project'].slug}/review/new/"
    assert client.post(url, form).status_code == 302
    refused = client.post(url, form)
    assert refused.status_code == 409
    page = refused.content.decode()
    error_start = page.index('id="queue-name-error"')
    assert TAKEN in page[error_start:error_start + 300]
    assert ReviewQueue.objects.filter(project=project_team["project"]).count() == 1


def test_the_migration_renames_duplicates_keeping_the_oldest(project_team):
    """0005 on rows the constraint would refuse: the oldest keeps its name, the rest get free `(n)` names."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite cannot drop a table's constraint in place (it rebuilds the table)")
    migration = importlib.import_module("webapp.trajectories.migrations.0005_rename_duplicate_review_queues")
    project = project_team["project"]
    long_name = "L" * 200
    with transaction.atomic():
        with connection.cursor() as cursor:  # the constraint is in place: drop it inside this savepoint
            cursor.execute("ALTER TABLE trajectories_reviewqueue DROP CONSTRAINT uniq_review_queue_name")
        made = [ReviewQueue.objects.create(project=project, name=name)
                for name in ("dup", "dup", "dup (2)", "dup", long_name, long_name)]
        ReviewQueue.objects.create(project=project_team["other"], name="dup")
        migration.rename_duplicates(installed_apps, None)
        names = [ReviewQueue.objects.get(pk=queue.pk).name for queue in made]
        transaction.set_rollback(True)
    assert names == ["dup", "dup (3)", "dup (2)", "dup (4)", long_name, "L" * 196 + " (2)"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_eight_creates_of_one_name_at_once_make_one_queue_and_seven_conflicts(project_team):
    """All eight pass the check before the insert; the unique key decides, the losers get one clear 409."""
    needs_postgres()
    project = project_team["project"]
    token = api_token_issue(user=project_team["editor"], name="queues").raw
    run = _trajectories(project)
    body = {"name": "same name", "filter": {"run": str(run.pk)}, "limit": 4}
    responses = race(8, lambda _i: _post_json(token, f"/api/projects/{project.slug}/review-queues", body))
    assert sorted(r.status_code for r in responses) == [201] + [409] * 7, [r.content[:200] for r in responses]
    conflicts = {r.json()["errors"]["name"] for r in responses if r.status_code == 409}
    assert len(conflicts) == 1 and TAKEN in conflicts.pop()
    queue = ReviewQueue.objects.get(project=project, name="same name")
    assert queue.size == 4
    assert sorted(QueueItem.objects.filter(queue=queue).values_list("position", flat=True)) == [0, 1, 2, 3]
