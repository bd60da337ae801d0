"""Small helpers every page view shares."""

from __future__ import annotations

from django.http import HttpRequest, QueryDict
from django.urls import NoReverseMatch, reverse

from webapp.projects.models import Project


def has_page(name: str) -> bool:
    """Whether a URL name exists yet (pages of later issues link here once they land)."""
    try:
        reverse(name, args=["x", 1])
    except NoReverseMatch:
        try:
            reverse(name, args=["x"])
        except NoReverseMatch:
            return False
    return True


def breadcrumbs_for(project: Project, *trail: tuple[str, str | None]) -> list[tuple[str, str | None]]:
    return [(project.name, reverse("dashboard:project", args=[project.slug])), *trail]


def query_without_after(request: HttpRequest) -> QueryDict:
    """The current filters, for links that keep them (the pager adds its own `after`)."""
    query = request.GET.copy()
    query.pop("after", None)
    return query


def run_ids_from_text(raw: str) -> list[int]:
    """The run ids of a `?ids=4,7,9` selection (compare, delete selected): positive, in order, once each;
    anything else in the text is passed over."""
    ids: list[int] = []
    for part in raw.split(","):
        part = part.strip()
        if part.isdigit() and 0 < int(part) < 2**63 and int(part) not in ids:
            ids.append(int(part))
    return ids
