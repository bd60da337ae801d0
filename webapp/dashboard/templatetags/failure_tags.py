"""Template helpers of the Failures page: shares shown as percentages with a fixed decimal."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def percent(share) -> str:
    """0.4213 -> '42.1%'; blank for a missing share."""
    if share is None or share == "":
        return ""
    return f"{float(share) * 100:.1f}%"


@register.filter
def signed_percent(delta) -> str:
    """A change of share in percentage points, always signed: +3.0 pp, -12.5 pp, 0.0 pp."""
    if delta is None or delta == "":
        return ""
    value = float(delta) * 100
    return "0.0 pp" if abs(value) < 0.05 else f"{value:+.1f} pp"


@register.filter
def bucket_label(bucket: str) -> str:
    """wrong_tool -> 'wrong tool' (the names stay searchable in the URLs)."""
    return str(bucket).replace("_", " ")
