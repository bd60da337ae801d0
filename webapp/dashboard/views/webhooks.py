"""Settings → Webhooks: owners add, test, pause and delete endpoints; every member sees the deliveries."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.dashboard.views.common import breadcrumbs_for
from webapp.projects.models import Project, Role, WebhookFormat
from webapp.projects.selectors.access import get_project_or_404, has_role
from webapp.projects.selectors.webhooks import webhook_of, webhook_rows
from webapp.projects.services.webhooks import (
    EVENTS,
    MAX_ATTEMPTS,
    NAME_MAX,
    URL_MAX,
    WebhookError,
    webhook_create,
    webhook_delete,
    webhook_send_test,
    webhook_set_active,
)


def _render(request: HttpRequest, project: Project, *, status: int = 200, errors: dict | None = None,
            form: dict | None = None) -> HttpResponse:
    context = {
        "project": project, "rows": webhook_rows(project), "events": EVENTS, "formats": WebhookFormat.choices,
        "is_owner": has_role(request.user, project, Role.OWNER), "errors": errors or {},
        "form": form or {"format": WebhookFormat.SLACK, "events": list(EVENTS)}, "name_max": NAME_MAX,
        "url_max": URL_MAX, "max_attempts": MAX_ATTEMPTS,
        "breadcrumbs": breadcrumbs_for(project, ("Settings", reverse("dashboard:project_settings", args=[project.slug])),
                                       ("Webhooks", None)),
    }
    return render(request, "dashboard/settings/webhooks.html", context, status=status)


@login_required
def webhooks_page(request: HttpRequest, slug: str) -> HttpResponse:
    return _render(request, get_project_or_404(request.user, slug))


def _back(slug: str) -> HttpResponse:
    return redirect(reverse("dashboard:project_webhooks", args=[slug]))


@login_required
@require_POST
def webhook_add(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.OWNER)
    form = {"name": request.POST.get("name", "")[:NAME_MAX], "url": request.POST.get("url", "")[:URL_MAX],
            "format": request.POST.get("format", ""), "events": request.POST.getlist("events")}
    try:
        webhook = webhook_create(project=project, actor=request.user, name=request.POST.get("name", ""),
                                 url=request.POST.get("url", ""), format=form["format"], events=form["events"])
    except WebhookError as exc:
        return _render(request, project, status=400, errors=exc.errors, form=form)
    messages.success(request, f"Webhook {webhook.name} saved: it receives {', '.join(webhook.events)}. "
                              "Send a test to check the endpoint.")
    return _back(slug)


def _webhook_or_404(project: Project, webhook_id: int):
    webhook = webhook_of(project, webhook_id)
    if webhook is None:
        raise Http404("No such webhook in this project.")
    return webhook


@login_required
@require_POST
def webhook_test(request: HttpRequest, slug: str, webhook_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.OWNER)
    webhook = _webhook_or_404(project, webhook_id)
    webhook_send_test(webhook=webhook, actor=request.user)
    messages.success(request, f"A test notification to {webhook.name} is queued: its outcome shows below in a moment.")
    return _back(slug)


@login_required
@require_POST
def webhook_toggle(request: HttpRequest, slug: str, webhook_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.OWNER)
    webhook = webhook_set_active(webhook=_webhook_or_404(project, webhook_id), actor=request.user,
                                 active=request.POST.get("active") == "1")
    messages.success(request, f"Webhook {webhook.name} {'resumed' if webhook.active else 'paused'}.")
    return _back(slug)


@login_required
@require_POST
def webhook_remove(request: HttpRequest, slug: str, webhook_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.OWNER)
    webhook = _webhook_or_404(project, webhook_id)
    name = webhook.name
    webhook_delete(webhook=webhook, actor=request.user)
    messages.success(request, f"Webhook {name} deleted, with its delivery history.")
    return _back(slug)
