"""Template helpers the pages share."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def get_item(mapping, key):
    """mapping[key], or '' when it is absent (forms look up errors and values by field name)."""
    if not hasattr(mapping, "get"):
        return ""
    value = mapping.get(key, "")
    return "" if value is None else value
