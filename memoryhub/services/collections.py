"""Collections of shared memory, and the admin's two checks: who can read a
collection, and what a person can read. Neither restates the rules: both ask
memoryhub.access (`may_read_collection`) about each reader."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet
from django.utils.text import slugify

from memoryhub import access
from memoryhub.access import Caller
from memoryhub.errors import Conflict, InvalidArgument, NotFound, PermissionDenied
from memoryhub.models import AccessRule, Agent, Collection, Membership

COLLECTION_NAME_MAX_CHARS = 64
DESCRIPTION_MAX_CHARS = 200


def collections_list(*, caller: Caller) -> QuerySet[Collection]:
    tenant = access.require_admin(caller)
    return Collection.objects.filter(tenant=tenant).prefetch_related("access_rules__role").order_by("name")


def collection_get(*, caller: Caller, collection_id: int | None = None, name: str | None = None) -> Collection:
    tenant = access.require_admin(caller)
    collections = Collection.objects.filter(tenant=tenant)
    collection = (collections.filter(pk=collection_id) if collection_id is not None
                  else collections.filter(name=name or "")).first()
    if collection is None:
        raise NotFound("No such collection in this workspace.", field="collection")
    return collection


@transaction.atomic
def collection_create(*, caller: Caller, name: str, description: str = "", exist_ok: bool = False) -> Collection:
    tenant = access.require_admin(caller)
    slug = slugify(name)[:COLLECTION_NAME_MAX_CHARS]
    if not slug:
        raise InvalidArgument("A collection needs a name of letters, digits or hyphens.", field="name")
    existing = Collection.objects.filter(tenant=tenant, name=slug).first()
    if existing is not None:
        if exist_ok:
            return existing
        raise Conflict(f"A collection named {slug!r} already exists.", field="name")
    return Collection.objects.create(tenant=tenant, name=slug, description=description[:DESCRIPTION_MAX_CHARS])


@dataclass(frozen=True)
class Reader:
    kind: str  # "person" or "agent"
    name: str
    roles: tuple[str, ...]
    user_id: int | None = None


def collection_readers(*, caller: Caller, collection_id: int) -> list[Reader]:
    """Everyone who may read the collection's shared memory now, with the
    roles that give them the right."""
    tenant = access.require_admin(caller)
    collection = collection_get(caller=caller, collection_id=collection_id)
    granting = set(AccessRule.objects.filter(tenant=tenant, collection=collection).values_list("role__name", flat=True))
    found = []
    for reader_caller, reader in _readers(caller):
        audience = access.role_audience(reader_caller)
        if access.may_read_collection(reader_caller, collection, audience=audience):
            found.append(Reader(kind=reader.kind, name=reader.name, user_id=reader.user_id,
                                roles=tuple(name for name in audience.role_names if name in granting)))
    return found


def member_readable_collections(*, caller: Caller, user_id: int) -> list[Collection]:
    """The collections this person may read now (besides their own private memory)."""
    tenant = access.require_admin(caller)
    membership = Membership.objects.filter(tenant=tenant, user_id=user_id, user__tenant=tenant).select_related(
        "user").first()
    if membership is None:
        raise NotFound("No such person in this workspace.")
    try:
        person = access.caller_for_user(user=membership.user)
    except PermissionDenied:
        return []  # deactivated: reads nothing
    audience = access.role_audience(person)
    return [
        collection for collection in Collection.objects.filter(tenant=tenant).order_by("name")
        if access.may_read_collection(person, collection, audience=audience)
    ]


def _readers(caller: Caller) -> list[tuple[Caller, Reader]]:
    tenant = caller.tenant
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
