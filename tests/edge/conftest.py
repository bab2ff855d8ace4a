"""Personas, real tokens and the live edge topology.

Workspace "acme": ada (admin), bruno (member), the agent triage-bot (read and
write). Workspace "globex": olga. A public MCP client people authorise.

Tokens come from the authorisation server as a client gets them: people through
consent + PKCE, agents through client credentials (tests/oauth/conftest.py's
helpers), for the edge's resource URLs.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, set_token_value

from memoryhub.models import Source, Tenant, User
from memoryhub.services.ingest import document_upsert, document_validated
from memoryhub.services.workspaces import (
    AgentCredentials,
    access_rule_grant,
    agent_register,
    person_add,
    source_connect,
    workspace_create,
)
from tests.oauth.conftest import (
    PASSWORD,
    REDIRECT_URI,
    authorization_code,
    client_credentials,
    exchange_code,
    set_public_origin,
)

from .live import EdgeStack, edge_stack

HANDBOOK_URI = "https://wiki.example.com/runbooks/frankfurt-staging"


@dataclass
class Personas:
    ada: User
    bruno: User
    olga: User
    notes_app: Application
    triage_bot: AgentCredentials


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
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return stack


@pytest.fixture
def personas(transactional_db, settings) -> Personas:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return create_personas()


def create_personas() -> Personas:
    """The workspaces, people, client and agent this module's docstring describes."""
    acme = workspace_create(slug="acme", name="Acme Inc.")
    globex = workspace_create(slug="globex", name="Globex")
    ada = person_add(tenant=acme, username="ada", password=PASSWORD, roles=["engineering"], is_admin=True)
    bruno = person_add(tenant=acme, username="bruno", password=PASSWORD, roles=["engineering"])
    olga = person_add(tenant=globex, username="olga", password=PASSWORD, is_admin=True)
    notes_app = Application.objects.create(
        name="Notes app",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=REDIRECT_URI,
        registration_source=Application.RegistrationSource.DCR,
        client_secret="",
        hash_client_secret=False,
    )
    triage_bot = agent_register(
        tenant=acme, name="triage-bot", scopes=["memory.read", "memory.write"], roles=["engineering"],
        created_by=ada,
    )
    return Personas(ada=ada, bruno=bruno, olga=olga, notes_app=notes_app, triage_bot=triage_bot)


def handbook_document(tenant: Tenant) -> Source:
    """A connected source whose document ("runbook-7", with a title and a URI) is in the
    `handbook` collection, which the engineering role may read."""
    source, _ = source_connect(tenant=tenant, name="handbook-sync", collection="handbook")
    access_rule_grant(tenant=tenant, role="engineering", collection="handbook")
    document_upsert(source=source, document=document_validated(
        resource_id="runbook-7", title="Frankfurt staging runbook", uri=HANDBOOK_URI,
        text="The staging cluster in Frankfurt is rebuilt every Sunday at 02:00 UTC; deploys freeze an hour before.",
    ))
    return source


def person_token(personas: Personas, user: User, *, resource: str,
                 scope: str = "memory.read memory.write memory.audit") -> str:
    """A person's access token, through consent and PKCE."""
    code, verifier = authorization_code(user, personas.notes_app, scope=scope, resource=resource)
    answer = exchange_code(personas.notes_app, code, verifier)
    assert answer["status"] == 200, answer
    return answer["access_token"]


def agent_token(personas: Personas, *, resource: str, scope: str = "memory.read memory.write") -> str:
    bot = personas.triage_bot
    answer = client_credentials(bot.client_id, bot.client_secret, scope=scope, resource=resource)
    assert answer["status"] == 200, answer
    return answer["access_token"]


def stored(raw: str) -> AccessToken:
    return AccessToken.objects.get(token_checksum=hashlib.sha256(raw.encode()).hexdigest())


def planted_credential(*, like: str, resource: list[str], seconds: float, scope: str | None = None) -> str:
    """A token written straight to the database with `like`'s owner: what an
    attacker with write access to nothing but a token table could not mint
    through the exchange (another audience, a longer life)."""
    model = stored(like)
    raw = secrets.token_urlsafe(32)
    token = AccessToken(application=model.application, user=model.user, scope=scope or model.scope,
                        resource=resource, expires=timezone.now() + timedelta(seconds=seconds))
    set_token_value(token, raw)
    token.save()
    return raw
