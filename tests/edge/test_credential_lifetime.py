"""A credential lives as long as one call: at most 25 s by default, and a
captured one replayed after it expired opens nothing.

The replay runs against a second topology whose memory service issues 2 s
credentials (MEMORYHUB_EXCHANGED_TOKEN_SECONDS), so the test waits for the
credential's own stored expiry rather than 25 s. Nothing here times anything:
it waits until the recorded instant has passed, then asserts the refusal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone
from oauth2_provider.models import Application

from tests.conftest import People, poll
from tests.oauth.conftest import set_public_origin

from .conftest import person_token, stored
from .live import EdgeStack, edge_stack
from .test_edge_flow import connect
from .test_internal_api import internal

pytestmark = [pytest.mark.slow]


def _captured_credentials(stack: EdgeStack, since: int) -> list[dict]:
    return [json.loads(seen.answer) for seen in stack.recorder.seen[since:]
            if seen.path == "/o/token/exchange/" and seen.status == 200]


def _list_tools_through(stack: EdgeStack, token: str) -> None:
    async def session() -> None:
        async with connect(stack.mcp(), token, "2026-07-28") as client:
            await client.list_tools()

    asyncio.run(session())


def test_the_default_credential_lives_at_most_25_seconds(
    origin: EdgeStack, live_people: People, notes_app: Application
) -> None:
    token = person_token(notes_app, live_people.bruno, resource=origin.mcp())
    since = len(origin.recorder.seen)
    _list_tools_through(origin, token)
    [answer] = _captured_credentials(origin, since)
    assert 0 < answer["expires_in"] <= 25
    row = stored(answer["access_token"])
    assert timedelta(0) < row.expires - row.created <= timedelta(seconds=25)
    assert row.resource == [origin.audience]
    # Stored as a checksum only: a copy of the database holds no usable credential.
    assert row.token == ""
    # Never past the token it was exchanged for.
    assert row.expires <= stored(token).expires


@pytest.fixture(scope="module")
def short_lived(django_db_setup, django_db_blocker) -> Iterator[EdgeStack]:
    from django.db import connection

    with edge_stack(dict(connection.settings_dict), credential_seconds=2) as running:
        yield running


def test_a_captured_credential_replayed_after_it_expired_is_refused(
    short_lived: EdgeStack, live_people: People, notes_app: Application, settings
) -> None:
    set_public_origin(settings, short_lived.edge_url)
    token = person_token(notes_app, live_people.bruno, resource=short_lived.mcp())
    since = len(short_lived.recorder.seen)
    _list_tools_through(short_lived, token)
    [answer] = _captured_credentials(short_lived, since)
    assert answer["expires_in"] <= 2
    row = stored(answer["access_token"])
    assert row.expires - row.created <= timedelta(seconds=2)
    # Wait until the stored expiry has passed on the clock the service reads.
    poll(lambda: timezone.now() > row.expires + timedelta(milliseconds=200), timeout=30, interval=0.05,
         what="the credential's stored expiry to pass")
    for operation in ("probe", "search", "write"):
        refused = internal(short_lived, operation, answer["access_token"])
        assert refused.status_code == 401, (operation, refused.text)
        assert refused.json()["error"]["code"] == "invalid_token"
    # The caller's token still works: the next request simply gets a fresh credential.
    _list_tools_through(short_lived, token)
    assert len(_captured_credentials(short_lived, since)) == 2
