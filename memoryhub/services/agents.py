"""Headless agents a workspace admin registers (decision 2): client
credentials shown once, scopes the admin grants (never memory.audit), roles
like people's; rotating the secret and revoking."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application

from memoryhub import access
from memoryhub.access import AGENT_SCOPES, Caller
from memoryhub.errors import Conflict, InvalidArgument, NotFound
from memoryhub.models import Agent, User
from memoryhub.services.arguments import checked_name, storable
from memoryhub.services.conflicts import unique_or_conflict
from memoryhub.services.roles import roles_named

AGENT_NAME_MAX_CHARS = 64
DISPLAY_NAME_MAX_CHARS = 200


@dataclass(frozen=True)
class AgentCredentials:
    agent: Agent
    client_id: str
    client_secret: str  # shown once; only its hash is stored


def agents_list(*, caller: Caller) -> QuerySet[Agent]:
    tenant = access.require_admin(caller)
    return Agent.objects.filter(tenant=tenant, kind=Agent.Kind.ASSISTANT).prefetch_related("roles").order_by("name")


def agent_get(*, caller: Caller, name: str, lock: bool = False) -> Agent:
    tenant = access.require_admin(caller)
    name = storable(name, field="name")
    # FOR NO KEY UPDATE: a rotation or a revocation changes no key, so writes
    # that only refer to the agent (an ingest's fragments) are not held up.
    agents = Agent.objects.select_for_update(no_key=True) if lock else Agent.objects
    agent = agents.filter(tenant=tenant, name=name, kind=Agent.Kind.ASSISTANT).first()
    if agent is None:
        raise NotFound("No such agent in this workspace.", field="name")
    return agent


def agent_name(name: str) -> str:
    """An agent's or source's name as stored; any other name, or one too long, is refused, not rewritten."""
    return checked_name(name, field="name", max_chars=AGENT_NAME_MAX_CHARS, what="An agent or source")


def _validated_scopes(scopes: Sequence[str], allowed: Sequence[str]) -> str:
    unknown = sorted(set(scopes) - set(allowed))
    if unknown:
        raise InvalidArgument(
            # Echoed escaped: what a terminal or a page shows back is never raw control text.
            f"Scopes {', '.join(map(ascii, unknown))} cannot be granted here; choose from {', '.join(allowed)}.",
            field="scopes",
        )
    if not scopes:
        raise InvalidArgument("Grant at least one scope.", field="scopes")
    return " ".join(sorted(set(scopes)))


def client_credentials_application(name: str, created_by: User | None) -> tuple[Application, str]:
    """A confidential OAuth client for the client-credentials grant; its secret
    is returned once and stored only as a hash (services only, after require_admin)."""
    secret = secrets.token_urlsafe(32)
    application = Application.objects.create(
        name=name,
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_CLIENT_CREDENTIALS,
        client_secret=secret,
        hash_client_secret=True,
        user=created_by,
    )
    return application, secret


def name_taken(tenant, slug: str) -> bool:  # type: ignore[no-untyped-def]
    return Agent.objects.filter(tenant=tenant, name=slug).exists()


def name_conflict(slug: str) -> Conflict:
    """The refusal of an agent's or source's name already taken (agents and sources share names)."""
    return Conflict(f"An agent or source named {slug!r} already exists in this workspace.", field="name")


def name_free(tenant, slug: str) -> None:  # type: ignore[no-untyped-def]
    """Refuse `slug` when an agent or source of `tenant` already has it."""
    if name_taken(tenant, slug):
        raise name_conflict(slug)


def credentialed_agent_create(*, caller: Caller, tenant, slug: str, client_name: str,  # type: ignore[no-untyped-def]
                              **fields) -> tuple[Agent, Application, str]:
    """An agent or a source's agent with its own OAuth client. Someone may take
    the name at the same moment: the unique index decides, and the loser's
    client goes with the Conflict."""
    with unique_or_conflict(name_conflict(slug)):
        application, secret = client_credentials_application(client_name, caller.user)
        agent = Agent.objects.create(tenant=tenant, name=slug, application=application, created_by=caller.user,
                                     **fields)
    return agent, application, secret


@transaction.atomic
def agent_register(
    *, caller: Caller, name: str, scopes: Sequence[str], roles: Sequence[str] = (), display_name: str = "",
) -> AgentCredentials:
    tenant = access.require_admin(caller)
    slug = agent_name(name)
    name_free(tenant, slug)
    scope_text = _validated_scopes(list(scopes), AGENT_SCOPES)
    granted = roles_named(tenant, roles)
    agent, application, secret = credentialed_agent_create(
        caller=caller, tenant=tenant, slug=slug, client_name=f"agent:{tenant.slug}:{slug}",
        display_name=(display_name or name)[:DISPLAY_NAME_MAX_CHARS], scopes=scope_text,
    )
    agent.roles.set(granted)
    return AgentCredentials(agent=agent, client_id=application.client_id, client_secret=secret)


@transaction.atomic
def agent_rotate_secret(*, caller: Caller, name: str) -> AgentCredentials:
    """A new secret; the old one and every token minted with it stop working now
    (a rotation usually means the old secret may have leaked)."""
    # Locked: two rotations at once take turns (the later secret is the one that works).
    agent = agent_get(caller=caller, name=name, lock=True)
    return credentials_rotate(agent)


def credentials_rotate(agent: Agent) -> AgentCredentials:
    """For agent_rotate_secret and source_rotate_secret, after their own checks (services only)."""
    if agent.application is None or agent.revoked_at is not None:
        raise InvalidArgument("This agent has no client credentials.")
    secret = secrets.token_urlsafe(32)
    agent.application.client_secret = secret
    agent.application.save(update_fields=["client_secret"])
    AccessToken.objects.filter(application=agent.application).delete()
    return AgentCredentials(agent=agent, client_id=agent.application.client_id, client_secret=secret)


@transaction.atomic
def agent_revoke(*, caller: Caller, name: str, confirm: str | None = None) -> Agent:
    """End an agent for good: its client is deleted, and with it every token it holds.
    The agent row stays, so what it wrote remains attributed. With `confirm` (the
    pages ask the admin to type the name), it must be the name."""
    # Locked: of two revokes at once, the second waits and then finds the client gone.
    agent = agent_get(caller=caller, name=name, lock=True)
    confirmed(agent.name, confirm)
    return credentials_end(agent)


def confirmed(name: str, confirm: str | None) -> None:
    """A typed confirmation of an act that cannot be undone names its object exactly."""
    if confirm is not None and confirm.strip() != name:
        raise InvalidArgument(f"Type {name} exactly to revoke it for good.", field="confirm")


def credentials_end(agent: Agent) -> Agent:
    """For agent_revoke and source_revoke, after their own checks (services only)."""
    application = agent.application
    agent.application = None
    agent.revoked_at = agent.revoked_at or timezone.now()
    agent.save(update_fields=["application", "revoked_at"])
    if application is not None:
        application.delete()
    return agent
