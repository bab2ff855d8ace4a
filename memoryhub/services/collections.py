"""Collections of shared memory, and the admin's two checks: who can read a
collection, and what a person can read. Neither restates the rules: both ask
memoryhub.access (`may_read_collection`) about each reader.

An admin renames a collection, retires every live fragment in it (an explicit
step: reads of the past still see them), and deletes it once nothing live is
left: its access rules go, sources stop defaulting to it; one that never held
a fragment goes entirely, one that did stays hidden (its retired fragments
keep their home, readable by nobody) and frees its name."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Count, F, Q, QuerySet
from django.utils import timezone

from memoryhub import access
from memoryhub.access import Caller
from memoryhub.errors import Conflict, InvalidArgument, NotFound, PermissionDenied
from memoryhub.models import (
    AccessRule,
    Collection,
    Fragment,
    Membership,
    Resource,
    ResourceVersion,
    Source,
)
from memoryhub.services.arguments import checked_name, checked_text, storable
from memoryhub.services.conflicts import created_once
from memoryhub.services.members import member_get

COLLECTION_NAME_MAX_CHARS = 64
DESCRIPTION_MAX_CHARS = 200


def collections_list(*, caller: Caller) -> QuerySet[Collection]:
    """The workspace's collections with their rules and fragment counts (`live`, `retired`)."""
    tenant = access.require_admin(caller)
    return (Collection.objects.filter(tenant=tenant, deleted_at__isnull=True).prefetch_related("access_rules__role")
            .annotate(live=Count("fragments", filter=Q(fragments__retired_at__isnull=True)),
                      retired=Count("fragments", filter=Q(fragments__retired_at__isnull=False)))
            .order_by("name"))


def collection_get(*, caller: Caller, collection_id: int | None = None, name: str | None = None) -> Collection:
    tenant = access.require_admin(caller)
    collections = Collection.objects.filter(tenant=tenant, deleted_at__isnull=True)
    collection = (collections.filter(pk=collection_id) if collection_id is not None
                  else collections.filter(name=storable(name or "", field="collection"))).first()
    if collection is None:
        raise NotFound(f"No collection named {name!r} in this workspace." if collection_id is None
                       else "No such collection in this workspace.", field="collection")
    return collection


@transaction.atomic
def collection_create(*, caller: Caller, name: str, description: str = "", exist_ok: bool = False) -> Collection:
    tenant = access.require_admin(caller)
    slug = _slug(name)
    return created_once(
        lambda: Collection.objects.create(tenant=tenant, name=slug, description=checked_text(
            description, field="description", max_chars=DESCRIPTION_MAX_CHARS)),
        existing=lambda: Collection.objects.filter(tenant=tenant, name=slug).first(),
        taken=Conflict(f"A collection named {slug!r} already exists.", field="name"), exist_ok=exist_ok)


def _slug(name: str) -> str:
    """The name as stored; any other name, or one too long, is refused, not rewritten."""
    return checked_name(name, field="name", max_chars=COLLECTION_NAME_MAX_CHARS, what="A collection")


def _locked(caller: Caller, collection_id: int | None, name: str | None) -> Collection:
    """The caller's live collection (by id or name), locked (re-checked after
    the lock: it may have been deleted meanwhile)."""
    collection = Collection.objects.select_for_update().filter(
        pk=collection_get(caller=caller, collection_id=collection_id, name=name).pk, deleted_at__isnull=True).first()
    if collection is None:
        raise NotFound("No such collection in this workspace.", field="collection")
    return collection


@transaction.atomic
def collection_rename(*, caller: Caller, name: str, collection_id: int | None = None,
                      collection: str | None = None) -> Collection:
    """A new name for the collection (by id, or by its name `collection`);
    connectors that send the old name are refused until they use it."""
    tenant = access.require_admin(caller)
    collection_obj = _locked(caller, collection_id, collection)
    slug = _slug(name)
    if slug != collection_obj.name and Collection.objects.filter(tenant=tenant, name=slug).exists():
        raise Conflict(f"A collection named {slug!r} already exists.", field="name")
    collection_obj.name = slug
    try:
        with transaction.atomic():
            collection_obj.save(update_fields=["name"])
    except IntegrityError:
        raise Conflict(f"A collection named {slug!r} already exists.", field="name") from None
    return collection_obj


@transaction.atomic
def collection_retire_fragments(*, caller: Caller, confirm: str, collection_id: int | None = None,
                                collection: str | None = None) -> int:
    """Retire every live fragment of the collection now (the admin types its
    name). Reads of the past still see them; nobody's read of now does. The
    documents sources sent into it count as deleted, so a source sending one
    again is taken as new, not as unchanged."""
    collection_obj = _locked(caller, collection_id, collection)
    if confirm != collection_obj.name:
        raise InvalidArgument(f"Type {collection_obj.name} exactly to retire its fragments.", field="confirm")
    now = timezone.now()
    live = Fragment.objects.filter(collection=collection_obj, retired_at__isnull=True)
    documents = list(Resource.objects.filter(
        deleted_at__isnull=True, source__isnull=False, fragments__in=live.filter(source__isnull=False),
        source=F("fragments__source")).distinct().values_list("pk", flat=True))
    retired = live.update(retired_at=now, retired_reason=Fragment.Retired.FORGOTTEN)
    Resource.objects.filter(pk__in=documents).update(deleted_at=now, updated_at=now, content_hash="")
    ResourceVersion.objects.bulk_create([ResourceVersion(resource_id=pk, content_hash="", started_at=now)
                                         for pk in documents])
    return retired


@transaction.atomic
def collection_delete(*, caller: Caller, collection_id: int | None = None, collection: str | None = None) -> str:
    """Delete a collection (by id or name) with nothing live in it; returns its name."""
    found = _locked(caller, collection_id, collection)
    live = Fragment.objects.filter(collection=found, retired_at__isnull=True).count()
    if live:
        raise Conflict(f"{found.name} still holds {live} live fragment{'s' if live != 1 else ''}: retire them "
                       "first.", field="collection")
    name = found.name
    AccessRule.objects.filter(collection=found).delete()
    Source.objects.filter(default_collection=found).update(default_collection=None)
    if not Fragment.objects.filter(collection=found).exists():
        found.delete()
    else:
        found.deleted_at = timezone.now()
        found.name = f"{name[:60]}--deleted-{found.pk}"
        found.save(update_fields=["deleted_at", "name"])
    return name


def collection_names(*, caller: Caller) -> list[str]:
    """The names of the workspace's collections, for forms."""
    tenant = access.require_admin(caller)
    return list(Collection.objects.filter(tenant=tenant, deleted_at__isnull=True).order_by("name")
                .values_list("name", flat=True))


Reader = access.Reader


def collection_readers(*, caller: Caller, collection_id: int | None = None, name: str | None = None) -> list[Reader]:
    """Everyone who may read the collection (by id or name) now, with the
    roles that give them the right (memoryhub.access.fact_audience)."""
    collection = collection_get(caller=caller, collection_id=collection_id, name=name)
    return list(access.fact_audience(caller, collection=collection).readers)


def member_readable_collections(*, caller: Caller, user_id: int) -> list[Collection]:
    """The collections this person may read now (besides their own private memory)."""
    return member_reach(caller=caller, user_id=user_id)[1]


def member_reach(*, caller: Caller, user_id: int | None = None,
                 username: str | None = None) -> tuple[Membership, list[Collection]]:
    """A person of the caller's workspace (by id or login name) and the
    collections they may read now (besides their own private memory)."""
    tenant = access.require_admin(caller)
    membership = member_get(caller=caller, user_id=user_id, username=username)
    try:
        person = access.caller_for_user(user=membership.user)
    except PermissionDenied:
        return membership, []  # deactivated: reads nothing
    audience = access.role_audience(person)
    return membership, [
        collection for collection in Collection.objects.filter(tenant=tenant, deleted_at__isnull=True).order_by("name")
        if access.may_read_collection(person, collection, audience=audience)
    ]
