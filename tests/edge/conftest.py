"""Real tokens and the live edge topology, for the root personas (tests/conftest.py).

The edge's servers run in other processes, so its tests use `live_people`
(committed): bruno and ada of "acme", olga of "globex", the agent triage-bot.
`notes_app` is the public MCP client people authorise.

Tokens come from the authorisation server as a client gets them: people through
consent + PKCE, agents through client credentials (tests/oauth/conftest.py's
helpers), for the edge's resource URLs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from oauth2_provider.models import AccessToken, Application

from memoryhub.models import Source, User
from memoryhub.oauth.tokens import token_checksum
from memoryhub.services.ingest import document_upsert, document_validated
from tests.oauth.conftest import REDIRECT_URI, authorization_code, client_credentials, exchange_code, set_public_origin
from tests.support.tokens import make_token

from .live import EdgeStack, edge_stack

HANDBOOK_URI = "https://wiki.example.com/runbooks/frankfurt-staging"
HANDBOOK = {"id": "runbook-7", "title": "Frankfurt staging runbook", "uri": HANDBOOK_URI}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def stack(django_db_setup, django_db_blocker) -> Iterator[EdgeStack]:
    """One edge in front of one memory service, on the test database, for the session."""
    from django.db import connection

    with edge_stack(dict(connection.settings_dict)) as running:
        yield running


@pytest.fixture
def origin(stack: EdgeStack, settings) -> EdgeStack:
    """This process's authorisation server (for tokens) shares the stack's public origin."""
    set_public_origin(settings, stack.edge_url)
    settings.MEMORYHUB_INTERNAL_API = True
    return stack


def public_client() -> Application:
    """A public client as an MCP client registers itself (dynamic client registration)."""
    return Application.objects.create(
        name="Notes app",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=REDIRECT_URI,
        registration_source=Application.RegistrationSource.DCR,
        client_secret="",
        hash_client_secret=False,
    )


@pytest.fixture
def notes_app(live_people: Any) -> Application:
    return public_client()


def handbook_document(people: Any) -> Source:
    """The wiki source's document "runbook-7" (a title and a URI), in `runbooks`, which the
    engineering role reads: bruno, ada and triage-bot (when it names the source) may see it."""
    document_upsert(source=people.wiki, document=document_validated(
        resource_id=HANDBOOK["id"], title=HANDBOOK["title"], uri=HANDBOOK_URI,
        text="The staging cluster in Frankfurt is rebuilt every Sunday at 02:00 UTC; deploys freeze an hour before.",
    ))
    return people.wiki


def person_token(notes_app: Application, user: User, *, resource: str,
                 scope: str = "memory.read memory.write memory.audit") -> str:
    """A person's access token for `notes_app`, through consent and PKCE."""
    code, verifier = authorization_code(user, notes_app, scope=scope, resource=resource)
    answer = exchange_code(notes_app, code, verifier)
    assert answer["status"] == 200, answer
    return answer["access_token"]


def agent_token(people: Any, *, resource: str, scope: str = "memory.read memory.write") -> str:
    """triage-bot's access token, through the client-credentials grant."""
    bot = people.triage_bot
    answer = client_credentials(bot.client_id, bot.client_secret, scope=scope, resource=resource)
    assert answer["status"] == 200, answer
    return answer["access_token"]


def stored(raw: str) -> AccessToken:
    return AccessToken.objects.get(token_checksum=token_checksum(raw))


def planted_credential(*, like: str, resource: list[str], seconds: float, scope: str | None = None) -> str:
    """A token written straight to the database with `like`'s owner: what an
    attacker with write access to nothing but a token table could not mint
    through the exchange (another audience, a longer life)."""
    model = stored(like)
    return make_token(application=model.application, user=model.user, scope=scope or model.scope,
                      resource=resource, expires_in=seconds)
