"""Workspace administration: the services behind the admin pages and the
command-line administration (create_workspace, add_person, register_agent)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify
from oauth2_provider.models import AccessToken, Application

from memoryhub.errors import Conflict, InvalidArgument, NotFound
from memoryhub.models import AccessRule, Agent, Collection, Membership, Role, Source, Tenant, User

MEMORY_SCOPES = ("memory.read", "memory.write", "memory.audit")
AGENT_SCOPES = ("memory.read", "memory.write")  # agents never see memory_receipt
INGEST_SCOPE = "ingest"


def tenant_get(*, slug: str) -> Tenant:
    try:
        return Tenant.objects.get(slug=slug)
    except Tenant.DoesNotExist:
        raise NotFound(f"No workspace named {slug!r}.") from None


@transaction.atomic
def workspace_create(*, slug: str, name: str = "") -> Tenant:
    slug = slugify(slug)
    if not slug:
        raise InvalidArgument("A workspace needs a slug of letters, digits or hyphens.", field="slug")
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return tenant


def _roles(tenant: Tenant, names: Sequence[str]) -> list[Role]:
    roles = []
    for name in names:
        clean = slugify(name)
        if not clean:
            raise InvalidArgument(f"Invalid role name {name!r}.", field="roles")
        role, _ = Role.objects.get_or_create(tenant=tenant, name=clean)
        roles.append(role)
    return roles


@transaction.atomic
def person_add(
    *, tenant: Tenant, username: str, password: str | None, email: str = "", roles: Sequence[str] = (),
    is_admin: bool = False,
) -> User:
    """Add a person, or update the roles and admin flag of one already in this workspace."""
    user = User.objects.filter(username=username).first()
    if user is not None and user.tenant_id != tenant.id:
        raise Conflict(f"The username {username!r} is taken.", field="username")
    if user is None:
        user = User(username=username, email=email, tenant=tenant)
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
        user.save()
    elif password:
        user.set_password(password)
        user.save(update_fields=["password"])
    membership, _ = Membership.objects.get_or_create(tenant=tenant, user=user)
    membership.is_admin = is_admin or membership.is_admin
    membership.save(update_fields=["is_admin"])
    membership.roles.add(*_roles(tenant, list(roles)))
    return user


@transaction.atomic
def collection_create(*, tenant: Tenant, name: str, description: str = "") -> Collection:
    collection, _ = Collection.objects.get_or_create(
        tenant=tenant, name=slugify(name), defaults={"description": description}
    )
    return collection


@transaction.atomic
def access_rule_grant(*, tenant: Tenant, role: str, collection: str) -> AccessRule:
    role_obj = _roles(tenant, [role])[0]
    try:
        collection_obj = Collection.objects.get(tenant=tenant, name=collection)
    except Collection.DoesNotExist:
        raise NotFound(f"No collection named {collection!r} in this workspace.", field="collection") from None
    rule, _ = AccessRule.objects.get_or_create(tenant=tenant, role=role_obj, collection=collection_obj)
    return rule


@dataclass(frozen=True)
class AgentCredentials:
    agent: Agent
    client_id: str
    client_secret: str  # shown once; only its hash is stored


def _validate_scopes(scopes: list[str], allowed: tuple[str, ...]) -> str:
    unknown = sorted(set(scopes) - set(allowed))
    if unknown:
        raise InvalidArgument(
            f"Scopes {', '.join(unknown)} cannot be granted here; choose from {', '.join(allowed)}.",
            field="scopes",
        )
    if not scopes:
        raise InvalidArgument("Grant at least one scope.", field="scopes")
    return " ".join(sorted(set(scopes)))


def _client_credentials_application(name: str, created_by: User | None) -> tuple[Application, str]:
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


@transaction.atomic
def agent_register(
    *, tenant: Tenant, name: str, scopes: list[str], roles: Sequence[str] = (), display_name: str = "",
    created_by: User | None = None,
) -> AgentCredentials:
    slug = slugify(name)
    if not slug:
        raise InvalidArgument("An agent needs a name of letters, digits or hyphens.", field="name")
    if Agent.objects.filter(tenant=tenant, name=slug).exists():
        raise Conflict(f"An agent named {slug!r} already exists in this workspace.", field="name")
    scope_text = _validate_scopes(list(scopes), AGENT_SCOPES)
    application, secret = _client_credentials_application(f"agent:{tenant.slug}:{slug}", created_by)
    agent = Agent.objects.create(
        tenant=tenant, name=slug, display_name=display_name or name, application=application,
        scopes=scope_text, created_by=created_by,
    )
    agent.roles.add(*_roles(tenant, list(roles)))
    return AgentCredentials(agent=agent, client_id=application.client_id, client_secret=secret)


@transaction.atomic
def agent_rotate_secret(*, agent: Agent) -> AgentCredentials:
    """A new secret; the old one and every token minted with it stop working now
    (a rotation usually means the old secret may have leaked)."""
    if agent.application is None or agent.revoked_at is not None:
        raise InvalidArgument("This agent has no client credentials.")
    secret = secrets.token_urlsafe(32)
    agent.application.client_secret = secret
    agent.application.save(update_fields=["client_secret"])
    AccessToken.objects.filter(application=agent.application).delete()
    return AgentCredentials(agent=agent, client_id=agent.application.client_id, client_secret=secret)


@transaction.atomic
def agent_revoke(*, agent: Agent) -> Agent:
    """End an agent for good: its client is deleted, and with it every token it holds.
    The agent row stays, so what it wrote remains attributed."""
    application = agent.application
    agent.application = None
    agent.revoked_at = agent.revoked_at or timezone.now()
    agent.save(update_fields=["application", "revoked_at"])
    if application is not None:
        application.delete()
    return agent


@transaction.atomic
def source_connect(
    *, tenant: Tenant, name: str, kind: str = "documents", collection: str | None = None,
    created_by: User | None = None,
) -> tuple[Source, AgentCredentials]:
    """A connected source: an agent of kind `source` whose client may only ingest."""
    slug = slugify(name)
    if Agent.objects.filter(tenant=tenant, name=slug).exists():
        raise Conflict(f"An agent or source named {slug!r} already exists in this workspace.", field="name")
    application, secret = _client_credentials_application(f"source:{tenant.slug}:{slug}", created_by)
    agent = Agent.objects.create(
        tenant=tenant, name=slug, display_name=name, kind=Agent.Kind.SOURCE, application=application,
        scopes=INGEST_SCOPE, created_by=created_by,
    )
    default_collection = collection_create(tenant=tenant, name=collection) if collection else None
    source = Source.objects.create(tenant=tenant, agent=agent, kind=kind, default_collection=default_collection)
    return source, AgentCredentials(agent=agent, client_id=application.client_id, client_secret=secret)
