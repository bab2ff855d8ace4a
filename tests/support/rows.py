"""A model instance's stored values, for comparing what two reads built."""

from __future__ import annotations

from typing import Any

from django.db.models import Model


def field_values(instance: Model) -> dict[str, Any]:
    """Every concrete field's value by its attribute name (foreign keys by id)."""
    return {item.attname: getattr(instance, item.attname) for item in instance._meta.concrete_fields}
