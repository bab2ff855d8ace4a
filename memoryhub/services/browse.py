"""A person's own pages: their memory newest first, one fragment with its
provenance and history, their serving receipts; and forgetting.

Selectors page with opaque cursors (keyset on the sort key and the primary
key), so a page never shifts when memory is written while someone reads.
Forgetting retires a fragment now (reason "forgotten"); the row stays, so an
as-of read of the past, and the receipts that served it, still account for it.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from oauth2_provider.models import Application

from memoryhub import access
from memoryhub.access import Caller
from memoryhub.errors import Conflict, InvalidArgument, NotFound, PermissionDenied
from memoryhub.models import Fragment, Receipt, User
from memoryhub.services.search import fragment_provenance
from memoryhub.services.write import Writer

PAGE_SIZE = 25
PAGE_SIZE_MAX = 100

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


# --------------------------------------------------------------------------- cursors


def cursor_encode(instant: dt.datetime, pk: Any) -> str:
    raw = f"{instant.astimezone(dt.UTC).isoformat()}|{pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[dt.datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        instant_text, pk = raw.split("|", 1)
        instant = dt.datetime.fromisoformat(instant_text)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidArgument("This page link is not valid; start again from the first page.",
                              field="cursor") from None
    if instant.tzinfo is None or not pk:
        raise InvalidArgument("This page link is not valid; start again from the first page.", field="cursor")
    return instant, pk


def _keyset_page(queryset: QuerySet, *, key: str, cursor: str | None, limit: int | None) -> Page:
    """Newest first by `key`, ties broken by pk; `limit` rows after the cursor."""
    limit = max(1, min(limit or PAGE_SIZE, PAGE_SIZE_MAX))
    if cursor:
        instant, pk = cursor_decode(cursor)
        try:
            queryset = queryset.filter(Q(**{f"{key}__lt": instant}) | Q(**{key: instant, "pk__lt": pk}))
        except (ValidationError, ValueError):
            raise InvalidArgument("This page link is not valid; start again from the first page.",
                                  field="cursor") from None
    rows = list(queryset.order_by(f"-{key}", "-pk")[: limit + 1])
    following = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        following = cursor_encode(getattr(last, key), last.pk)
    return Page(items=rows, next_cursor=following)


def _person(caller: Caller) -> User:
    if caller.user is None:
        raise PermissionDenied("Only people browse their memory and receipts.")
    return caller.user


# --------------------------------------------------------------------------- fragments


@dataclass
class FragmentView:
    """A fragment as a person's pages show it: the row and where it came from."""

    fragment: Fragment
    agents: list[str] = field(default_factory=list)
    resources: list[dict[str, str]] = field(default_factory=list)
    app_name: str = ""
    owned: bool = False

    @property
    def live(self) -> bool:
        return self.fragment.retired_at is None


def _views(fragments: Iterable[Fragment], user: User) -> list[FragmentView]:
    fragments = list(fragments)
    client_ids = {f.client_id for f in fragments if f.client_id}
    app_names = dict(
        Application.objects.filter(client_id__in=client_ids).values_list("client_id", "name")
    ) if client_ids else {}
    views = []
    for fragment in fragments:
        agents, resources = fragment_provenance(fragment)
        views.append(FragmentView(
            fragment=fragment, agents=agents, resources=resources,
            app_name=app_names.get(fragment.client_id, ""), owned=fragment.owner_user_id == user.pk,
        ))
    return views


def _fragments(caller: Caller) -> QuerySet[Fragment]:
    return (
        access.with_access_facts(Fragment.objects.filter(tenant=caller.tenant))
        .select_related("collection")
        .defer("embedding")
    )


def fragments_browse(
    *, caller: Caller, cursor: str | None = None, include_retired: bool = False, limit: int | None = None
) -> Page[FragmentView]:
    """The caller's own private memory, newest first. Retired rows (superseded,
    merged, forgotten) only when asked for: they are history, not memory."""
    user = _person(caller)
    queryset = _fragments(caller).filter(owner_user=user)
    if not include_retired:
        queryset = queryset.filter(retired_at__isnull=True)
    page = _keyset_page(queryset, key="recorded_at", cursor=cursor, limit=limit)
    return Page(items=_views(page.items, user), next_cursor=page.next_cursor)


def fragment_get(*, caller: Caller, fragment_id: Any) -> FragmentView:
    """One fragment the caller may look at: their own (live or retired), or one
    today's access rules let them read now. Anything else is NotFound, the
    same answer as for an id that never existed."""
    user = _person(caller)
    try:
        pk = uuid.UUID(str(fragment_id))
    except ValueError:
        raise NotFound("No such fragment in your memory.") from None
    fragment = _fragments(caller).filter(pk=pk).first()
    if fragment is None:
        raise NotFound("No such fragment in your memory.")
    if fragment.owner_user_id != user.pk:
        policy = access.read_policy(caller=caller, as_of=timezone.now())
        if not access.fragment_readable(policy=policy, fragment=fragment):
            raise NotFound("No such fragment in your memory.")
    return _views([fragment], user)[0]


def fragment_history(*, caller: Caller, fragment: Fragment) -> tuple[list[Fragment], Fragment | None]:
    """(the caller's own facts this one replaced, the fact that replaced it).
    Only within the caller's own memory: shared fragments have no history here."""
    user = _person(caller)
    if fragment.owner_user_id != user.pk:
        return [], None
    own = Fragment.objects.filter(tenant=caller.tenant, owner_user=user).defer("embedding")
    replaced = list(own.filter(successor=fragment).order_by("-recorded_at", "-pk"))
    successor = own.filter(pk=fragment.successor_id).first() if fragment.successor_id else None
    return replaced, successor


def fragment_forget(*, caller: Caller, fragment_id: Any) -> Fragment:
    """Retire one of the caller's own live fragments now, with reason "forgotten".

    Only the owner forgets, and only a person (contract 001: no deletion through
    an AI client). The row stays: as-of reads before now still see it."""
    user = _person(caller)
    pk = _uuid_or_none(fragment_id)
    if pk is None:
        raise NotFound("No such fragment in your memory.")
    with transaction.atomic():
        with connection.cursor() as cursor:
            # The write pipeline's per-writer lock: a concurrent write must not
            # supersede the fact being forgotten (or forget what it just stored).
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [Writer(tenant=caller.tenant, user=user).lock_key])
        fragment = (
            Fragment.objects.select_for_update()
            .filter(pk=pk, tenant=caller.tenant, owner_user=user)
            .first()
        )
        if fragment is None:
            raise NotFound("No such fragment in your memory.")
        if fragment.retired_at is not None:
            raise Conflict(f"This fragment was already retired ({fragment.retired_reason}).")
        fragment.retired_at = timezone.now()
        fragment.retired_reason = Fragment.Retired.FORGOTTEN
        fragment.save(update_fields=["retired_at", "retired_reason"])
    return fragment


def _uuid_or_none(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


# --------------------------------------------------------------------------- receipts


def receipts_browse(*, caller: Caller, cursor: str | None = None, limit: int | None = None) -> Page[Receipt]:
    """The caller's own serving receipts, newest first, whichever app made the read."""
    user = _person(caller)
    queryset = Receipt.objects.filter(tenant=caller.tenant, reader_user=user)
    return _keyset_page(queryset, key="created_at", cursor=cursor, limit=limit)


def receipt_fragments(*, caller: Caller, fragment_ids: Iterable[str]) -> dict[str, FragmentView]:
    """What a receipt page may show of the fragments a read served: the
    caller's own (with their state) and whatever they may read now. A fragment
    they can no longer see stays an id: a receipt never widens today's rights."""
    user = _person(caller)
    pks = [pk for pk in (_uuid_or_none(value) for value in fragment_ids) if pk is not None]
    if not pks:
        return {}
    policy = access.read_policy(caller=caller, as_of=timezone.now())
    shown = [
        fragment for fragment in _fragments(caller).filter(pk__in=pks)
        if fragment.owner_user_id == user.pk or access.fragment_readable(policy=policy, fragment=fragment)
    ]
    return {str(view.fragment.pk): view for view in _views(shown, user)}
