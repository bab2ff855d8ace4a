"""Workspace administration from the web console: members and roles,
collections, access rules, connected sources and the workspace's settings.

Every service takes the acting person as a `Caller` and works inside that
caller's workspace only; a caller who is not an admin of it is refused here
as well as in the views. The two access checks ("who can read this
collection", "what can this person read") do not restate the rules: they ask
memoryhub.access's one definition about a live shared fragment of the
collection, for each reader.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth import password_validation
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.text import slugify

from memoryhub import access
from memoryhub.access import Caller, caller_is_admin
from memoryhub.errors import Conflict, InvalidArgument, NotFound, PermissionDenied
from memoryhub.models import AccessRule, Agent, Collection, Membership, Role, Source, Tenant, User
from memoryhub.services import workspaces
from memoryhub.services.workspaces import AgentCredentials

BLOCKED_TERMS_MAX = 200
BLOCKED_TERM_MAX_CHARS = 100
_USERNAME = re.compile(r"^[\w.@+-]{1,150}$")


def _require_admin(caller: Caller) -> Tenant:
    if caller.user is None or not caller_is_admin(caller):
        raise PermissionDenied("Only a workspace admin administers the workspace.")
    return caller.tenant


# --------------------------------------------------------------------------- members and roles


def members_list(*, caller: Caller) -> QuerySet[Membership]:
    tenant = _require_admin(caller)
    return (
        Membership.objects.filter(tenant=tenant, user__tenant=tenant)
        .select_related("user")
        .prefetch_related("roles")
        .order_by("user__username")
    )


def member_get(*, caller: Caller, user_id: int) -> Membership:
    tenant = _require_admin(caller)
    membership = (
        Membership.objects.filter(tenant=tenant, user_id=user_id, user__tenant=tenant).select_related("user").first()
    )
    if membership is None:
        raise NotFound("No such person in this workspace.")
    return membership


def _existing_roles(tenant: Tenant, names: Sequence[str]) -> list[Role]:
    wanted = set(names)
    roles = list(Role.objects.filter(tenant=tenant, name__in=wanted))
    unknown = wanted - {role.name for role in roles}
    if unknown:
        raise InvalidArgument(f"No role named {', '.join(sorted(unknown))} in this workspace.", field="roles")
    return roles


def member_add(
    *, caller: Caller, username: str, password: str, email: str = "", roles: Sequence[str] = (),
    is_admin: bool = False,
) -> User:
    """A new person in the caller's workspace, signing in with `password`."""
    tenant = _require_admin(caller)
    username = username.strip()
    if not _USERNAME.match(username):
        raise InvalidArgument("A username is 1-150 letters, digits or . @ + - _.", field="username")
    if User.objects.filter(username__iexact=username).exists():
        raise Conflict(f"The username {username!r} is taken.", field="username")
    candidate = User(username=username, email=email, tenant=tenant)
    try:
        password_validation.validate_password(password, candidate)
    except ValidationError as exc:
        raise InvalidArgument(" ".join(exc.messages), field="password") from None
    _existing_roles(tenant, roles)
    return workspaces.person_add(
        tenant=tenant, username=username, password=password, email=email, roles=roles, is_admin=is_admin
    )


@transaction.atomic
def member_update(*, caller: Caller, user_id: int, roles: Sequence[str], is_admin: bool) -> Membership:
    """Set a member's roles (replacing the old ones) and admin flag. The roles
    apply to their next read: access rules are always today's."""
    tenant = _require_admin(caller)
    membership = member_get(caller=caller, user_id=user_id)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    if membership.is_admin and not is_admin:
        # Locked rows of every admin: two admins demoting each other at once
        # must not leave the workspace with none.
        admins = list(Membership.objects.select_for_update().filter(tenant=tenant, is_admin=True, user__is_active=True))
        if len(admins) <= 1:
            raise Conflict("A workspace keeps at least one admin; make someone else an admin first.",
                           field="is_admin")
    membership.roles.set(_existing_roles(tenant, roles))
    membership.is_admin = is_admin
    membership.save(update_fields=["is_admin"])
    return membership


def roles_list(*, caller: Caller) -> QuerySet[Role]:
    tenant = _require_admin(caller)
    return Role.objects.filter(tenant=tenant).order_by("name")


@transaction.atomic
def role_create(*, caller: Caller, name: str, description: str = "") -> Role:
    tenant = _require_admin(caller)
    slug = slugify(name)
    if not slug:
        raise InvalidArgument("A role needs a name of letters, digits or hyphens.", field="name")
    if Role.objects.filter(tenant=tenant, name=slug).exists():
        raise Conflict(f"A role named {slug!r} already exists.", field="name")
    return Role.objects.create(tenant=tenant, name=slug, description=description)


@transaction.atomic
def role_delete(*, caller: Caller, role_id: int) -> Role:
    """Remove a role: its access rules go with it, and nobody holds it any more."""
    tenant = _require_admin(caller)
    role = Role.objects.filter(tenant=tenant, pk=role_id).first()
    if role is None:
        raise NotFound("No such role in this workspace.")
    role.delete()
    return role


# --------------------------------------------------------------------------- collections and access rules


def collections_list(*, caller: Caller) -> QuerySet[Collection]:
    tenant = _require_admin(caller)
    return Collection.objects.filter(tenant=tenant).prefetch_related("access_rules__role").order_by("name")


def collection_get(*, caller: Caller, collection_id: int) -> Collection:
    tenant = _require_admin(caller)
    collection = Collection.objects.filter(tenant=tenant, pk=collection_id).first()
    if collection is None:
        raise NotFound("No such collection in this workspace.")
    return collection


def collection_add(*, caller: Caller, name: str, description: str = "") -> Collection:
    tenant = _require_admin(caller)
    slug = slugify(name)
    if not slug:
        raise InvalidArgument("A collection needs a name of letters, digits or hyphens.", field="name")
    if Collection.objects.filter(tenant=tenant, name=slug).exists():
        raise Conflict(f"A collection named {slug!r} already exists.", field="name")
    return workspaces.collection_create(tenant=tenant, name=slug, description=description)


def access_rules_list(*, caller: Caller) -> QuerySet[AccessRule]:
    tenant = _require_admin(caller)
    return (
        AccessRule.objects.filter(tenant=tenant)
        .select_related("role", "collection")
        .order_by("collection__name", "role__name")
    )


@transaction.atomic
def access_rule_grant(*, caller: Caller, role_id: int, collection_id: int) -> AccessRule:
    """Holders of the role may read the collection, from their next read on."""
    tenant = _require_admin(caller)
    role = Role.objects.filter(tenant=tenant, pk=role_id).first()
    if role is None:
        raise NotFound("No such role in this workspace.", field="role")
    collection = collection_get(caller=caller, collection_id=collection_id)
    if AccessRule.objects.filter(tenant=tenant, role=role, collection=collection).exists():
        raise Conflict(f"{role.name} may already read {collection.name}.")
    return workspaces.access_rule_grant(tenant=tenant, role=role.name, collection=collection.name)


@transaction.atomic
def access_rule_revoke(*, caller: Caller, rule_id: int) -> AccessRule:
    tenant = _require_admin(caller)
    rule = AccessRule.objects.filter(tenant=tenant, pk=rule_id).select_related("role", "collection").first()
    if rule is None:
        raise NotFound("No such access rule in this workspace.")
    rule.delete()
    return rule


@dataclass(frozen=True)
class Reader:
    kind: str  # "person" or "agent"
    name: str
    roles: tuple[str, ...]
    user_id: int | None = None


def _shared_fragment_facts(collection: Collection, instant) -> dict:  # type: ignore[no-untyped-def]
    """The facts of a live fragment of `collection` contributed by no connected
    source, as memoryhub.access's row check reads a loaded row."""
    return {
        "pk": None, "tenant_id": collection.tenant_id, "owner_user_id": None, "owner_agent_id": None,
        "collection_id": collection.pk, "source_id": None, "source__agent_id": None,
        "recorded_at": instant, "retired_at": None, "created_at": instant,
        "agent_links": [], "resource_links": [],
    }


def _readers(tenant: Tenant) -> list[tuple[Caller, Reader]]:
    readers = []
    memberships = (
        Membership.objects.filter(tenant=tenant, user__tenant=tenant, user__is_active=True)
        .select_related("user").order_by("user__username")
    )
    for membership in memberships:
        person = access.caller_for_user(user=membership.user)
        readers.append((person, Reader(kind="person", name=membership.user.username, roles=(),
                                       user_id=membership.user_id)))
    for agent in Agent.objects.filter(tenant=tenant, kind=Agent.Kind.ASSISTANT, revoked_at__isnull=True):
        readers.append((access.caller_for_agent(agent=agent), Reader(kind="agent", name=agent.name, roles=())))
    return readers


def _may_read(reader: Caller, facts: dict, instant) -> tuple[bool, access.Audience]:  # type: ignore[no-untyped-def]
    audience = access.audience_for(reader)
    rule = access.visibility_rule(caller=reader, audience=audience, as_of=instant)
    return rule.holds(facts), audience


def collection_readers(*, caller: Caller, collection_id: int) -> list[Reader]:
    """Everyone who may read the collection's shared memory now, with the
    roles that give them the right."""
    tenant = _require_admin(caller)
    collection = collection_get(caller=caller, collection_id=collection_id)
    instant = timezone.now()
    facts = _shared_fragment_facts(collection, instant)
    granting = set(AccessRule.objects.filter(tenant=tenant, collection=collection).values_list("role__name", flat=True))
    found = []
    for reader_caller, reader in _readers(tenant):
        allowed, audience = _may_read(reader_caller, facts, instant)
        if allowed:
            found.append(Reader(kind=reader.kind, name=reader.name, user_id=reader.user_id,
                                roles=tuple(name for name in audience.role_names if name in granting)))
    return found


def member_readable_collections(*, caller: Caller, user_id: int) -> list[Collection]:
    """The collections this person may read now (besides their own private memory)."""
    tenant = _require_admin(caller)
    membership = member_get(caller=caller, user_id=user_id)
    if not membership.user.is_active:
        return []
    person = access.caller_for_user(user=membership.user)
    instant = timezone.now()
    audience = access.audience_for(person)
    rule = access.visibility_rule(caller=person, audience=audience, as_of=instant)
    return [
        collection for collection in Collection.objects.filter(tenant=tenant).order_by("name")
        if rule.holds(_shared_fragment_facts(collection, instant))
    ]


# --------------------------------------------------------------------------- connected sources


def sources_list(*, caller: Caller) -> QuerySet[Source]:
    tenant = _require_admin(caller)
    return Source.objects.filter(tenant=tenant).select_related("agent", "default_collection").order_by("agent__name")


def source_register(
    *, caller: Caller, name: str, kind: str = "documents", collection_id: int | None = None
) -> tuple[Source, AgentCredentials]:
    """A connected source with its own client credentials (shown once), feeding
    `collection` by default."""
    tenant = _require_admin(caller)
    if not slugify(name):
        raise InvalidArgument("A source needs a name of letters, digits or hyphens.", field="name")
    collection = collection_get(caller=caller, collection_id=collection_id).name if collection_id else None
    return workspaces.source_connect(tenant=tenant, name=name, kind=kind, collection=collection,
                                     created_by=caller.user)


# --------------------------------------------------------------------------- settings


def workspace_settings_update(
    *, caller: Caller, judgment_plane: bool, relevance_floor: float, write_policy: str,
    blocked_terms: Sequence[str],
) -> Tenant:
    tenant = _require_admin(caller)
    if not 0.0 <= relevance_floor <= 1.0:
        raise InvalidArgument("The relevance floor is a score between 0 and 1.", field="relevance_floor")
    if write_policy not in Tenant.WritePolicy.values:
        raise InvalidArgument(f"Unknown write policy {write_policy!r}.", field="write_policy")
    terms = list(dict.fromkeys(term.strip() for term in blocked_terms if term.strip()))
    if len(terms) > BLOCKED_TERMS_MAX:
        raise InvalidArgument(f"At most {BLOCKED_TERMS_MAX} blocked terms.", field="blocked_terms")
    if any(len(term) > BLOCKED_TERM_MAX_CHARS for term in terms):
        raise InvalidArgument(f"A blocked term is at most {BLOCKED_TERM_MAX_CHARS} characters.",
                              field="blocked_terms")
    if write_policy == Tenant.WritePolicy.BLOCKLIST and not terms:
        raise InvalidArgument("The blocklist policy needs at least one blocked term.", field="blocked_terms")
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        tenant.judgment_plane = judgment_plane
        tenant.relevance_floor = relevance_floor
        tenant.write_policy = write_policy
        tenant.blocked_terms = terms
        tenant.save(update_fields=["judgment_plane", "relevance_floor", "write_policy", "blocked_terms"])
    return tenant
