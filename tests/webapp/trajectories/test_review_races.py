"""Reviewers racing for the queue: concurrent 'next item' calls hand each item to exactly one
reviewer, and one reviewer saving the same label twice at once stores it once (PostgreSQL,
threads released together, as the job-claim and promotion races are tested)."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from pipeline_data import make_pipeline_run

from tests.webapp.races import needs_postgres as _needs_postgres
from tests.webapp.races import race as _race
from webapp.projects.services.projects import api_token_issue, membership_set_role
from webapp.trajectories.models import QueueItem, Review
from webapp.trajectories.services.review import queue_claim_next, queue_create, review_save


def _reviewers(project_team, make_user, count: int, prefix: str) -> list:
    users = []
    for i in range(count):
        user = make_user(f"{prefix}{i}")
        membership_set_role(project=project_team["project"], user=user, role="reviewer", actor=project_team["owner"])
        users.append(user)
    return users


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_reviewers_asking_at_once_each_get_a_different_item(project_team, make_user):
    _needs_postgres()
    run = make_pipeline_run(project_team["project"], project_team["owner"], steps=2)
    queue = queue_create(project=project_team["project"], name="race", filter={"run": run.pk}, limit=20,
                         actor=project_team["editor"])
    for round_ in range(2):
        users = _reviewers(project_team, make_user, 8, f"r{round_}-")
        items = _race(8, lambda i, users=users: queue_claim_next(queue=queue, reviewer=users[i]))
        assert all(item is not None for item in items)
        assert len({item.pk for item in items}) == 8
        for item, user in zip(items, users, strict=True):
            assert QueueItem.objects.get(pk=item.pk).locked_by_id == user.pk
    # 4 items left for 8 more reviewers: four get one each, four get nothing, nobody shares.
    users = _reviewers(project_team, make_user, 8, "late-")
    items = _race(8, lambda i: queue_claim_next(queue=queue, reviewer=users[i]))
    taken = [item.pk for item in items if item is not None]
    assert len(taken) == len(set(taken)) == 4
    assert QueueItem.objects.filter(queue=queue, locked_by__isnull=True).count() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_reviewers_at_the_api_never_share_an_item(project_team):
    _needs_postgres()
    run = make_pipeline_run(project_team["project"], project_team["owner"], steps=1)
    queue = queue_create(project=project_team["project"], name="api race", filter={"run": run.pk}, limit=6,
                         actor=project_team["editor"])
    tokens = [api_token_issue(user=project_team[who], name="race").raw for who in ("reviewer", "editor")]
    seen: list[int] = []
    for _round in range(3):
        responses = _race(2, lambda i: Client().post(f"/api/review-queues/{queue.pk}/next", "{}",
                                                     content_type="application/json",
                                                     HTTP_AUTHORIZATION=f"Bearer {tokens[i]}"))
        assert [r.status_code for r in responses] == [200, 200], [r.content for r in responses]
        ids = [r.json()["id"] for r in responses]
        assert len(set(ids)) == 2 and not set(ids) & set(seen)
        seen += ids
        # Each labels what they got, so the next round hands out new items.
        for token, item_id in zip(tokens, ids, strict=True):
            response = Client().post(f"/api/review-queues/{queue.pk}/items/{item_id}/review",
                                     json.dumps({"verdict": "agree"}), content_type="application/json",
                                     HTTP_AUTHORIZATION=f"Bearer {token}")
            assert response.status_code == 201
    assert sorted(seen) == sorted(queue.items.values_list("pk", flat=True))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_same_label_saved_twice_at_once_counts_once(project_team):
    _needs_postgres()
    run = make_pipeline_run(project_team["project"], project_team["owner"], steps=1)
    queue = queue_create(project=project_team["project"], name="double", filter={"run": run.pk}, limit=3,
                         actor=project_team["editor"])
    reviewer = project_team["reviewer"]
    for _ in range(3):
        item = queue_claim_next(queue=queue, reviewer=reviewer)
        reviews = _race(4, lambda i, item=item: review_save(item=item, reviewer=reviewer,
                                                            verdict="agree" if i % 2 else "disagree"))
        assert len({r.pk for r in reviews}) == 1
        item.refresh_from_db()
        assert item.reviews_done == 1 and item.locked_by_id is None
    assert Review.objects.filter(reviewer=reviewer).count() == 3
