"""Template filters for links from data: only http(s) URLs ever become an href."""

from __future__ import annotations

from urllib.parse import urlsplit

from django import template

register = template.Library()


@register.filter
def web_url(value: object) -> str:
    """`value` when it is an absolute http:// or https:// URL, else "" (a
    javascript:, data: or relative link from a document is shown as text only)."""
    text = str(value or "").strip()
    try:
        parts = urlsplit(text)
    except ValueError:
        return ""
    return text if parts.scheme.lower() in ("http", "https") and parts.netloc else ""
