"""Reads for the webhooks page: each endpoint with its recent deliveries."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q

from webapp.projects.models import DeliveryState, Project, Webhook, WebhookDelivery

RECENT_DELIVERIES = 10


@dataclass(frozen=True)
class WebhookRow:
    webhook: Webhook
    recent: list[WebhookDelivery]
    delivered: int
    failed: int
    pending: int


def webhook_rows(project: Project) -> list[WebhookRow]:
    """The project's webhooks by name, each with its newest deliveries and its totals by state."""
    webhooks = list(Webhook.objects.filter(project=project).select_related("created_by").annotate(
        n_delivered=Count("deliveries", filter=Q(deliveries__state=DeliveryState.DELIVERED)),
        n_failed=Count("deliveries", filter=Q(deliveries__state=DeliveryState.FAILED)),
        n_pending=Count("deliveries", filter=Q(deliveries__state=DeliveryState.PENDING)),
    ).order_by("name"))
    return [WebhookRow(webhook=w, recent=list(w.deliveries.order_by("-created_at", "-id")[:RECENT_DELIVERIES]),
                       delivered=w.n_delivered, failed=w.n_failed, pending=w.n_pending) for w in webhooks]


def webhook_of(project: Project, webhook_id: int) -> Webhook | None:
    return Webhook.objects.filter(project=project, pk=webhook_id).first()
