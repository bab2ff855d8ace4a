"""`mapping|get_item:key`: a value of a dict whose keys are not identifiers (fragment ids)."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def get_item(mapping: Any, key: str) -> Any:
    return mapping.get(key) if isinstance(mapping, dict) else None
