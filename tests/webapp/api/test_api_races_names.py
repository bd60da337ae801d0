"""Eight requests at once creating the same name: one wins, the rest get one clear answer, never a 500.

Aliases and project models have a unique name per project: one request creates it and the
other seven get the same conflict message (a 409 at the API, the form's field error on the
page). Review queue names are unique per project too; their race test is in
test_review_queue_names.py. Verifiers, datasets and tokens have their own race tests next to
their endpoints. PostgreSQL only: SQLite serialises every write.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.webapp.races import needs_postgres as _needs_postgres
from tests.webapp.races import race as _race
from webapp.projects.services.projects import api_token_issue
from webapp.runs.models import AliasMove, Checkpoint, CheckpointAlias, ModelSpec, Run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _post_json(token: str, path: str, body: dict):
    return Client().post(path, json.dumps(body), content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {token}")


def test_one_checkpoint_promoted_to_a_new_alias_eight_times_at_once_moves_it_once(project_team):
    _needs_postgres()
    project = project_team["project"]
    token = api_token_issue(user=project_team["owner"], name="ops").raw
    run = Run.objects.create(project=project, name="r", kind="grpo")
    checkpoint = Checkpoint.objects.create(run=run, step=1, storage_uri="/c/1")
    responses = _race(8, lambda _i: _post_json(token, f"/api/checkpoints/{checkpoint.pk}/promote",
                                               {"alias": "staging", "force": True, "reason": "race"}))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * 7, [r.content for r in responses]
    conflicts = {r.json()["detail"] for r in responses if r.status_code == 409}
    assert len(conflicts) == 1 and "already points at" in conflicts.pop()
    alias = CheckpointAlias.objects.get(project=project, name="staging")
    assert AliasMove.objects.filter(alias=alias).count() == 1


def test_eight_editors_adding_one_model_name_at_once_register_it_once(project_team):
    _needs_postgres()
    slug = project_team["project"].slug
    browsers = []
    for _ in range(8):
        browser = Client()
        browser.force_login(project_team["editor"])
        browsers.append(browser)
    form = {"name": "racer", "source": "HuggingFaceTB/SmolLM2-135M-Instruct", "gguf_file": "", "tool_format": "auto"}
    responses = _race(8, lambda i: browsers[i].post(f"/p/{slug}/settings/models/add/", form))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [302] + [400] * 7, statuses
    for refused in (r for r in responses if r.status_code == 400):
        assert "has a model named “racer” already" in refused.content.decode()
    assert ModelSpec.objects.filter(project=project_team["project"], name="racer").count() == 1
