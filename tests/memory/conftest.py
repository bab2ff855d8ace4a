"""Helpers for the memory core's tests, built on the one persona set
(tests/conftest.py, fixture `people`).

Who plays what here:
  bruno        writes private memory (engineering)
  cleo         bruno's teammate: the same roles
  carol        the same workspace, other roles (sales)
  ada          workspace admin (engineering, leads)
  triage-bot   assistant agent (engineering)
  wiki         connected source writing into runbooks
  olga         the other tenant (globex), with its own runbooks and globex-wiki
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from django.utils import timezone

from memoryhub.access import Caller
from memoryhub.models import Fragment, Source
from memoryhub.services.ingest import fragment_ingest
from memoryhub.services.write import fact_hash, subject_of


@pytest.fixture
def shared_fragment(people) -> Callable[..., Fragment]:
    """A fragment a connected source (the wiki, unless told) contributed to a collection."""

    def make(value: str, collection: str = "runbooks", *, source: Source | None = None,
             created_at: dt.datetime | None = None, resources=()) -> Fragment:
        src = source or people.wiki
        fragment, _ = fragment_ingest(
            source=src, value=value, collection=people.collection(collection, src.tenant),
            created_at=created_at, resources=resources,
        )
        return fragment

    return make


def private_fragment(caller: Caller, value: str, *, embed: bool = True, recorded_at: dt.datetime | None = None,
                     **extra) -> Fragment:
    """A private fragment written straight to the table (for access tests that
    need full control of times and homes)."""
    from memoryhub.embeddings import get_embedder

    now = recorded_at or timezone.now()
    fragment = Fragment.objects.create(
        tenant=caller.tenant, owner_user=caller.user, owner_agent=caller.agent, value=value,
        subject_key=subject_of(value), created_at=extra.pop("created_at", now), recorded_at=now,
        content_hash=fact_hash(value), embedding=get_embedder().embed([value])[0] if embed else None,
        embedded_at=now if embed else None, **extra,
    )
    if caller.agent is not None:
        fragment.agents.add(caller.agent)
    return fragment
