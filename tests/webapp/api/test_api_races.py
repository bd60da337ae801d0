"""Idempotency and races at the API: one row per production id, aliases moved in order, no 500s."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.webapp.races import needs_postgres as _needs_postgres
from tests.webapp.races import race as _race
from webapp.projects.models import AuditEvent
from webapp.projects.services.projects import api_token_issue
from webapp.runs.models import AliasMove, Checkpoint, CheckpointAlias, Run
from webapp.trajectories.models import Trajectory


def _post(token: str, path: str, body: dict):
    return Client().post(path, json.dumps(body), content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {token}")


def _item(key: str) -> dict:
    return {"id": key, "turns": [{"role": "assistant", "content": "done"}]}


def test_the_same_id_twice_in_one_batch_is_stored_once(client, project_team):
    token = api_token_issue(user=project_team["editor"], name="agent").raw
    path = f"/api/projects/{project_team['project'].slug}/trajectories"
    response = _post(token, path, {"trajectories": [_item("a"), _item("b"), _item("a"), {"turns": _item("x")["turns"]}]})
    assert response.status_code == 201
    body = response.json()
    assert body["created"] == 3
    ids = [t["id"] for t in body["trajectories"]]
    assert ids[0] == ids[2] and len(set(ids)) == 3
    again = _post(token, path, {"trajectories": [_item("a"), _item("b")]})
    assert again.status_code == 200 and again.json()["created"] == 0
    assert Trajectory.objects.filter(source="production").count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_posts_of_one_new_id_store_it_once(project_team):
    _needs_postgres()
    token = api_token_issue(user=project_team["editor"], name="agent").raw
    path = f"/api/projects/{project_team['project'].slug}/trajectories"
    for round_ in range(5):
        key = f"prod-{round_}"
        responses = _race(8, lambda _i, key=key: _post(token, path, {"trajectories": [_item(key), _item(f"{key}-b")]}))
        assert all(r.status_code in (200, 201) for r in responses), [r.content for r in responses]
        assert sum(r.json()["created"] for r in responses) == 2
        assert Trajectory.objects.filter(source="production", task_key=key).count() == 1
        assert len({r.json()["trajectories"][0]["id"] for r in responses}) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_promotions_to_a_new_alias_are_ordered_and_never_500(project_team):
    _needs_postgres()
    project, owner = project_team["project"], project_team["owner"]
    token = api_token_issue(user=owner, name="ops").raw
    run = Run.objects.create(project=project, name="r", kind="grpo")
    checkpoints = [Checkpoint.objects.create(run=run, step=i, storage_uri=f"/c/{i}") for i in range(8)]
    for round_ in range(5):
        name = f"fresh-{round_}"
        responses = _race(8, lambda i, name=name: _post(
            token, f"/api/checkpoints/{checkpoints[i].pk}/promote",
            {"alias": name, "force": True, "reason": "race test"}))
        statuses = [r.status_code for r in responses]
        assert set(statuses) <= {200, 409}, [r.content for r in responses]
        alias = CheckpointAlias.objects.get(project=project, name=name)
        moves = list(AliasMove.objects.filter(alias=alias).order_by("id"))
        assert len(moves) == statuses.count(200)
        assert moves[0].previous_checkpoint is None
        for before, after in zip(moves, moves[1:], strict=False):
            assert after.previous_checkpoint_id == before.checkpoint_id
        assert alias.checkpoint_id == moves[-1].checkpoint_id
        assert AuditEvent.objects.filter(action="alias.move", data__alias=name).count() == len(moves)
