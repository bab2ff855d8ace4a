"""Demo memory for the demo workspace."""

from __future__ import annotations

from memoryhub.models import Tenant


def demo_memory_seed(*, tenant: Tenant) -> int:
    """Fill the demo workspace with a little memory; returns how many fragments were new."""
    return 0
