"""A real Celery worker delivers a webhook, and tries a failing endpoint again until it answers."""

from __future__ import annotations

import uuid

import pytest

from tests.webapp.projects.test_webhooks import Endpoint
from tests.workers.conftest import start_worker, stop_worker, wait_for
from webapp.projects.models import DeliveryState, WebhookDelivery
from webapp.projects.services import webhooks as wh

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def webhook_worker(settings, django_db_blocker, tmp_path):
    """A worker on a queue of its own that may reach loopback (where the test's endpoint listens)."""
    queue = f"test-hooks-{uuid.uuid4().hex[:8]}"
    settings.CRUCIBLE_WEBHOOK_QUEUE = queue
    settings.CRUCIBLE_JUDGE_ALLOW_LOOPBACK = True
    with django_db_blocker.unblock():
        worker = start_worker(queue, tmp_path / "worker.log", extra_env={
            "CRUCIBLE_WEBHOOK_QUEUE": queue, "CRUCIBLE_JUDGE_ALLOW_LOOPBACK": "true"})
    yield worker
    stop_worker(worker)


def test_the_worker_retries_a_busy_endpoint_then_delivers(project_team, webhook_worker):
    endpoint = Endpoint()
    try:
        endpoint.status = 503
        hook = wh.webhook_create(project=project_team["project"], actor=project_team["owner"], name="ops",
                                 url=endpoint.url, format="json", events=["run.failed"])
        wh.notify(project_team["project"], wh.Notice(event="run.failed", subject="Run 'x' failed", link="",
                                                     fields={"run_id": 1}))  # autocommit: sent at once
        delivery = WebhookDelivery.objects.get(webhook=hook)
        wait_for(lambda: len(endpoint.bodies) == 1, timeout=60, what="the first try")
        endpoint.status = 200  # the endpoint recovers before the retry (10 s later)
        wait_for(lambda: WebhookDelivery.objects.get(pk=delivery.pk).state == DeliveryState.DELIVERED,
                 timeout=60, what="the retry to deliver: " + webhook_worker.log()[-2000:])
        delivery.refresh_from_db()
        assert delivery.attempts == 2 and delivery.last_status == 200 and delivery.last_error == ""
        assert [b["body"]["run_id"] for b in endpoint.bodies] == [1, 1]
    finally:
        endpoint.close()
