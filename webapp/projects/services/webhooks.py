"""Project webhooks: a run that failed or finished, an experiment whose gates were decided, sent out.

Why here: a notification belongs to the project (owners manage the endpoints in Settings), and the
apps that raise events (runs, experiments) sit above projects, so they call `notify` downward.

How it goes out: `notify` writes one WebhookDelivery per subscribed endpoint in the caller's
transaction and, once that commits, sends the worker task `workers.tasks.deliver_webhook` by name.
The worker POSTs through the judge endpoints' SSRF rule (environments.llm_judge: the operator's
host allowlist, loopback only when allowed, never metadata or link-local, DNS resolved once and the
connection pinned to a checked address), records the status, and retries a failure with backoff
up to MAX_ATTEMPTS; the settings page shows each endpoint's recent deliveries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from environments.llm_judge import JudgeError, JudgePolicy, PolicyError, post_to_checked_host
from webapp.common.bounds import unstorable_text_reason
from webapp.projects.models import DeliveryState, Project, Webhook, WebhookDelivery, WebhookFormat
from webapp.projects.services.projects import audit_log

EVENTS = {
    "run.finished": "A run finished",
    "run.failed": "A run failed",
    "experiment.decided": "An experiment's promotion gates were decided",
}
NAME_MAX = 100
URL_MAX = 2000
MAX_ATTEMPTS = 5
TIMEOUT_SECONDS = 10.0
# Seconds before retry n (1-based): 10 s, 30 s, 90 s, 270 s.
BACKOFF_SECONDS = (10, 30, 90, 270)
TASK_NAME = "workers.tasks.deliver_webhook"


class WebhookError(ValueError):
    """A webhook that cannot be saved; `errors` maps each form field to what to fix."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


def webhook_policy() -> JudgePolicy:
    """The SSRF rule of judge endpoints, from the same operator settings."""
    return JudgePolicy.from_settings(allowed_hosts=settings.CRUCIBLE_JUDGE_ALLOWED_HOSTS,
                                     allow_loopback=settings.CRUCIBLE_JUDGE_ALLOW_LOOPBACK)


def _problems(project: Project, name: str, url: str, fmt: str, events: list[str]) -> dict[str, str]:
    errors: dict[str, str] = {}
    if not name.strip():
        errors["name"] = "Give the webhook a name (e.g. the channel it posts to)."
    elif len(name) > NAME_MAX:
        errors["name"] = f"Use at most {NAME_MAX} characters."
    elif reason := unstorable_text_reason(name):
        errors["name"] = f"The name {reason}."
    elif Webhook.objects.filter(project=project, name=name.strip()).exists():
        errors["name"] = f"This project already has a webhook named {name.strip()!r}: choose another name."
    if len(url) > URL_MAX:
        errors["url"] = f"Use a URL of at most {URL_MAX} characters."
    elif reason := unstorable_text_reason(url):
        errors["url"] = f"The URL {reason}."
    else:
        try:
            webhook_policy().target(url.strip(), who="webhook", field="url")
        except PolicyError as exc:
            errors["url"] = f"{exc}."
    if fmt not in WebhookFormat.values:
        errors["format"] = f"Choose one of: {', '.join(WebhookFormat.values)}."
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        errors["events"] = f"Unknown event {unknown[0]!r}; choose from {', '.join(EVENTS)}."
    elif not events:
        errors["events"] = "Choose at least one event to send."
    return errors


def webhook_create(*, project: Project, actor, name: str, url: str, format: str, events: list[str]) -> Webhook:  # noqa: A002
    """Save an endpoint after checking its URL against the SSRF rule (WebhookError names each bad field)."""
    errors = _problems(project, name, url, format, events)
    if errors:
        raise WebhookError(errors)
    try:
        with transaction.atomic():
            webhook = Webhook.objects.create(project=project, name=name.strip(), url=url.strip(), format=format,
                                             events=sorted(set(events)), created_by=actor)
    except IntegrityError:
        raise WebhookError({"name": f"This project already has a webhook named {name.strip()!r}: "
                                    "choose another name."}) from None
    audit_log(project=project, actor=actor, action="webhook.create", target=webhook,
              data={"name": webhook.name, "events": webhook.events})
    return webhook


def webhook_delete(*, webhook: Webhook, actor) -> None:
    audit_log(project=webhook.project, actor=actor, action="webhook.delete", target=webhook,
              data={"name": webhook.name})
    webhook.delete()


def webhook_set_active(*, webhook: Webhook, actor, active: bool) -> Webhook:
    webhook.active = active
    webhook.save(update_fields=["active"])
    audit_log(project=webhook.project, actor=actor, action="webhook.enable" if active else "webhook.disable",
              target=webhook, data={"name": webhook.name})
    return webhook


@dataclass(frozen=True)
class Notice:
    """What happened, in words and in fields: `subject` is the one line a chat shows."""

    event: str
    subject: str
    link: str
    fields: dict[str, Any]


def _payload(webhook: Webhook, project: Project, notice: Notice) -> dict[str, Any]:
    if webhook.format == WebhookFormat.SLACK:
        text = f"[{project.name}] {notice.subject}"
        return {"text": f"{text} <{notice.link}|open>" if notice.link else text}
    return {"event": notice.event, "project": project.slug, "subject": notice.subject, "url": notice.link,
            "sent_at": timezone.now().isoformat(), **notice.fields}


def notify(project: Project, notice: Notice) -> list[WebhookDelivery]:
    """Queue `notice` for every active webhook of the project that wants its event.

    Call it inside the transaction that made the change: the deliveries are written with it and the
    worker is woken only once it commits, so a rolled-back change notifies nobody.
    """
    deliveries = [
        WebhookDelivery.objects.create(webhook=webhook, event=notice.event, subject=notice.subject[:500],
                                       payload=_payload(webhook, project, notice))
        for webhook in Webhook.objects.filter(project=project, active=True)
        if notice.event in (webhook.events or [])
    ]
    for delivery in deliveries:
        transaction.on_commit(lambda pk=delivery.pk: send_delivery(pk))
    return deliveries


def send_delivery(delivery_id: int, countdown: float = 0) -> None:
    """Wake a worker for one delivery (by task name: the web app never imports the workers)."""
    from webapp.common.celery import app

    app.send_task(TASK_NAME, args=[delivery_id], queue=settings.CRUCIBLE_WEBHOOK_QUEUE, countdown=countdown or None)


def webhook_send_test(*, webhook: Webhook, actor) -> WebhookDelivery:
    """A test notification to one endpoint, delivered like any other."""
    notice = Notice(event="test", subject=f"Test notification from Crucible for webhook {webhook.name!r}",
                    link="", fields={"test": True})
    with transaction.atomic():
        delivery = WebhookDelivery.objects.create(webhook=webhook, event="test", subject=notice.subject,
                                                  payload=_payload(webhook, webhook.project, notice))
        transaction.on_commit(lambda: send_delivery(delivery.pk))
    return delivery


@dataclass(frozen=True)
class Attempt:
    """What one try of a delivery did; `retry_in` is set when the worker should try again."""

    state: str
    retry_in: float | None = None


def _error_text(status: int | None, exc: Exception | None, body: bytes = b"") -> str:
    if exc is not None:
        return str(exc)[:500] or type(exc).__name__
    excerpt = body[:200].decode("utf-8", "replace")
    return f"the endpoint answered HTTP {status}" + (f": {excerpt}" if excerpt else "")


def deliver(delivery_id: int) -> Attempt:
    """One try: POST the payload, record the outcome, say whether to retry (the worker's task calls this)."""
    with transaction.atomic():
        delivery = (WebhookDelivery.objects.select_for_update().select_related("webhook").filter(pk=delivery_id)
                    .first())
        if delivery is None or delivery.state != DeliveryState.PENDING:
            return Attempt(state=delivery.state if delivery else "gone")  # a duplicate message: done already
        delivery.attempts += 1
        delivery.save(update_fields=["attempts"])
    status, exc, body = None, None, b""
    try:
        status, body = post_to_checked_host(
            webhook_policy(), delivery.webhook.url, json.dumps(delivery.payload).encode(),
            {"Content-Type": "application/json", "User-Agent": "Crucible-webhook/1"},
            timeout=TIMEOUT_SECONDS, who="webhook")
    except (PolicyError, JudgeError, OSError, TimeoutError) as error:
        exc = error
    except Exception as error:  # noqa: BLE001 - http.client's own errors: the endpoint misbehaved
        exc = error
    delivered = exc is None and status is not None and 200 <= status < 300
    refused = isinstance(exc, PolicyError) or (isinstance(exc, JudgeError) and exc.reason == "refused_host")
    final = delivered or refused or delivery.attempts >= MAX_ATTEMPTS
    delivery.last_status = status
    delivery.last_error = "" if delivered else _error_text(status, exc, body)
    delivery.state = (DeliveryState.DELIVERED if delivered else DeliveryState.FAILED) if final else DeliveryState.PENDING
    delivery.finished_at = timezone.now() if final else None
    delivery.save(update_fields=["last_status", "last_error", "state", "finished_at"])
    if final:
        return Attempt(state=delivery.state)
    return Attempt(state=delivery.state, retry_in=BACKOFF_SECONDS[min(delivery.attempts, len(BACKOFF_SECONDS)) - 1])
