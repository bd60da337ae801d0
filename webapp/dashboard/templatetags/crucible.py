"""Template helpers the pages share."""

from __future__ import annotations

import time

from django import template

register = template.Library()


@register.filter
def get_item(mapping, key):
    """mapping[key], or '' when it is absent (forms look up errors and values by field name)."""
    if not hasattr(mapping, "get"):
        return ""
    value = mapping.get(key, "")
    return "" if value is None else value


@register.filter
def seconds_since(epoch) -> str:
    """"12 s ago" for a Unix time (a rank's heartbeat); "—" for anything that is not one."""
    if isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or epoch <= 0:
        return "—"
    age = max(0.0, time.time() - float(epoch))
    for limit, unit, size in ((120, "s", 1), (7200, "min", 60), (172800, "h", 3600)):
        if age < limit:
            return f"{age / size:.0f} {unit} ago"
    return f"{age / 86400:.0f} d ago"
