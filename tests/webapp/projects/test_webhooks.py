"""Project webhooks: the SSRF rule at save, events written with the change, delivery, retries, the page."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.urls import reverse

from webapp.projects.models import DeliveryState, Webhook, WebhookDelivery
from webapp.projects.services import webhooks as wh
from webapp.runs.models import Run
from webapp.runs.services import jobs as js


class Endpoint:
    """A local HTTP endpoint (the outside world's chat server): records bodies, answers `status`."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.status = 200
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", 0))
                endpoint.bodies.append({"body": json.loads(self.rfile.read(length)), "path": self.path,
                                        "type": self.headers.get("Content-Type")})
                self.send_response(endpoint.status)
                self.end_headers()
                self.wfile.write(b"ok" if endpoint.status < 300 else b"busy, try later")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/abc"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint(settings):
    settings.CRUCIBLE_JUDGE_ALLOW_LOOPBACK = True  # the local endpoint lives on loopback
    server = Endpoint()
    yield server
    server.close()


def _webhook(project, owner, url, fmt="slack", events=("run.finished", "run.failed")):
    return wh.webhook_create(project=project, actor=owner, name=f"hook-{fmt}", url=url, format=fmt,
                             events=list(events))


def _finished_run(project, *, fail: bool, callbacks_capture):
    run = Run.objects.create(project=project, name="nightly <grpo>", kind="grpo")
    with callbacks_capture(execute=False):
        job = js.job_create(project=project, kind="grpo", run=run)
    claimed = js.job_claim(job_id=job.pk, worker="w")
    js.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
    with callbacks_capture(execute=False) as sent:
        if fail:
            js.job_fail(job_id=job.pk, attempt=claimed.attempt, error="CUDA out of memory")
        else:
            js.job_succeed(job_id=job.pk, attempt=claimed.attempt)
    return run, sent


def test_the_url_follows_the_judge_endpoints_ssrf_rule(project_team, settings):
    project, owner = project_team["project"], project_team["owner"]
    settings.CRUCIBLE_JUDGE_ALLOW_LOOPBACK = False
    cases = {
        "http://127.0.0.1:9/x": "loopback",
        "http://localhost/x": "loopback",
        "http://169.254.169.254/latest/meta-data": "metadata",
        "http://10.0.0.5/hook": "private or internal",
        "ftp://example.com/x": "must start with http:// or https://",
        "https://user:pw@example.com/x": "must not hold a user name or password",
    }
    for url, problem in cases.items():
        with pytest.raises(wh.WebhookError) as refused:
            _webhook(project, owner, url)
        assert problem in refused.value.errors["url"], (url, refused.value.errors)
        assert "webhook host" in refused.value.errors["url"] or "url " in refused.value.errors["url"]
    assert not Webhook.objects.exists()
    with pytest.raises(wh.WebhookError) as bad:
        wh.webhook_create(project=project, actor=owner, name=" ", url="https://example.com/x", format="xml",
                          events=["run.exploded"])
    assert set(bad.value.errors) == {"name", "format", "events"}
    saved = _webhook(project, owner, "https://hooks.example.com/services/T0/B0/x")
    assert saved.events == ["run.failed", "run.finished"]
    with pytest.raises(wh.WebhookError) as taken:
        _webhook(project, owner, "https://hooks.example.com/other")
    assert "already has a webhook" in taken.value.errors["name"]


def test_a_failed_run_is_posted_slack_style_once_the_change_commits(project_team, endpoint,
                                                                    django_capture_on_commit_callbacks):
    project, owner = project_team["project"], project_team["owner"]
    hook = _webhook(project, owner, endpoint.url)
    run, sent = _finished_run(project, fail=True, callbacks_capture=django_capture_on_commit_callbacks)
    delivery = WebhookDelivery.objects.get(webhook=hook)
    assert delivery.event == "run.failed" and delivery.state == DeliveryState.PENDING
    assert len(sent) == 1  # the worker is woken on commit (job state sync, then this delivery's task)
    attempt = wh.deliver(delivery.pk)
    assert attempt.state == DeliveryState.DELIVERED and attempt.retry_in is None
    [got] = endpoint.bodies
    assert got["path"] == "/hooks/abc" and got["type"] == "application/json"
    text = got["body"]["text"]
    assert "[Acme agents] Run 'nightly <grpo>' (grpo) failed: CUDA out of memory" in text
    assert f"/p/{project.slug}/runs/{run.pk}/|open>" in text
    delivery.refresh_from_db()
    assert (delivery.attempts, delivery.last_status, delivery.last_error) == (1, 200, "")
    assert wh.deliver(delivery.pk).state == DeliveryState.DELIVERED and len(endpoint.bodies) == 1  # a duplicate


def test_plain_json_body_paused_and_unsubscribed_endpoints(project_team, endpoint,
                                                           django_capture_on_commit_callbacks):
    project, owner = project_team["project"], project_team["owner"]
    plain = _webhook(project, owner, endpoint.url, fmt="json", events=["run.finished"])
    failures_only = wh.webhook_create(project=project, actor=owner, name="failures", url=endpoint.url,
                                      format="slack", events=["run.failed"])
    paused = wh.webhook_create(project=project, actor=owner, name="paused", url=endpoint.url, format="json",
                               events=["run.finished"])
    wh.webhook_set_active(webhook=paused, actor=owner, active=False)
    run, _ = _finished_run(project, fail=False, callbacks_capture=django_capture_on_commit_callbacks)
    assert not WebhookDelivery.objects.filter(webhook__in=[failures_only, paused]).exists()
    delivery = WebhookDelivery.objects.get(webhook=plain)
    wh.deliver(delivery.pk)
    body = endpoint.bodies[0]["body"]
    assert body["event"] == "run.finished" and body["project"] == project.slug
    assert body["run_id"] == run.pk and body["run_name"] == "nightly <grpo>" and body["error"] == ""
    assert body["url"].endswith(f"/p/{project.slug}/runs/{run.pk}/")


def test_a_failing_endpoint_is_retried_with_backoff_then_given_up(project_team, endpoint,
                                                                  django_capture_on_commit_callbacks):
    project, owner = project_team["project"], project_team["owner"]
    hook = _webhook(project, owner, endpoint.url)
    _finished_run(project, fail=False, callbacks_capture=django_capture_on_commit_callbacks)
    delivery = WebhookDelivery.objects.get(webhook=hook)
    endpoint.status = 503
    waits = [wh.deliver(delivery.pk).retry_in for _ in range(wh.MAX_ATTEMPTS)]
    assert waits == [10, 30, 90, 270, None]
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED and delivery.attempts == wh.MAX_ATTEMPTS
    assert delivery.last_status == 503 and "HTTP 503: busy, try later" in delivery.last_error
    assert len(endpoint.bodies) == wh.MAX_ATTEMPTS


def test_an_endpoint_refused_at_delivery_is_not_retried(project_team, endpoint, settings,
                                                        django_capture_on_commit_callbacks):
    """The operator withdrew loopback after the webhook was saved: the next delivery refuses, once."""
    project, owner = project_team["project"], project_team["owner"]
    hook = _webhook(project, owner, endpoint.url)
    _finished_run(project, fail=True, callbacks_capture=django_capture_on_commit_callbacks)
    settings.CRUCIBLE_JUDGE_ALLOW_LOOPBACK = False
    attempt = wh.deliver(WebhookDelivery.objects.get(webhook=hook).pk)
    assert attempt.state == DeliveryState.FAILED and attempt.retry_in is None
    assert "loopback" in WebhookDelivery.objects.get(webhook=hook).last_error and endpoint.bodies == []


def test_the_page_owner_adds_and_every_member_reads(client, project_team, endpoint,
                                                    django_capture_on_commit_callbacks):
    project = project_team["project"]
    slug = project.slug
    client.force_login(project_team["owner"])
    add = reverse("dashboard:project_webhook_add", args=[slug])
    refused = client.post(add, {"name": "ops", "url": "http://169.254.169.254/x", "format": "slack",
                                "events": ["run.failed"]})
    assert refused.status_code == 400 and "cloud metadata address" in refused.content.decode()
    assert 'value="ops"' in refused.content.decode()  # what was typed stays
    with django_capture_on_commit_callbacks(execute=False):
        created = client.post(add, {"name": "ops", "url": endpoint.url, "format": "slack", "events": ["run.failed"]})
    assert created.status_code == 302
    hook = Webhook.objects.get(project=project, name="ops")
    WebhookDelivery.objects.create(webhook=hook, event="run.failed", subject="Run '<script>x</script>' failed",
                                   payload={}, state=DeliveryState.FAILED, attempts=5, last_status=500,
                                   last_error="the endpoint answered HTTP 500")
    client.force_login(project_team["viewer"])
    page = client.get(reverse("dashboard:project_webhooks", args=[slug])).content.decode()
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "<script>x</script>" not in page
    assert "1 failed" in page and "HTTP 500" in page and "Save webhook" not in page
    assert client.post(add, {"name": "mine", "url": endpoint.url, "format": "json",
                             "events": ["run.failed"]}).status_code == 403
    test_url = reverse("dashboard:project_webhook_test", args=[slug, hook.pk])
    assert client.post(test_url).status_code == 403
    client.force_login(project_team["outsider"])
    assert client.get(reverse("dashboard:project_webhooks", args=[slug])).status_code == 404
    client.force_login(project_team["owner"])
    with django_capture_on_commit_callbacks(execute=False) as sent:
        assert client.post(test_url).status_code == 302
    assert len(sent) == 1
    test_delivery = WebhookDelivery.objects.filter(webhook=hook, event="test").get()
    assert wh.deliver(test_delivery.pk).state == DeliveryState.DELIVERED
    assert "Test notification" in endpoint.bodies[-1]["body"]["text"]
    delete = reverse("dashboard:project_webhook_delete", args=[slug, hook.pk])
    assert client.post(delete).status_code == 302 and not Webhook.objects.filter(pk=hook.pk).exists()
