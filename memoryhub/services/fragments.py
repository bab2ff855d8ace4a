"""Fragments: writing one's own (memory_write), a person's own memory newest
first, one fragment with its provenance and history, and forgetting.

`fragment_write` is the one entry point for writes: a person's write runs the
pipeline now (services.write), an agent's is parked as a proposal
(services.proposals). Idempotency: a key (supplied, or derived from the whole
payload) answers the same payload within 24 hours with the first outcome and
writes nothing; a different payload under the same key is refused for those
24 hours.

Forgetting retires a fragment now (reason "forgotten"); the row stays, so an
as-of read of the past, and the receipts that served it, still account for it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone
from oauth2_provider.models import Application

from contract import limits
from memoryhub import access
from memoryhub.access import Caller
from memoryhub.database import replicas
from memoryhub.errors import Conflict, NotFound, PermissionDenied
from memoryhub.models import Fragment, IdempotencyRecord, Tenant
from memoryhub.services.arguments import checked_text, uuid_or_none
from memoryhub.services.paging import Page, keyset_page
from memoryhub.services.proposals import proposal_park
from memoryhub.services.provenance import DocumentRef, provenance_for
from memoryhub.services.write import WriteOutcome, Writer, pipeline_run

IDEMPOTENCY_WINDOW = dt.timedelta(hours=24)

NOT_YOURS = "No such fragment in your memory."


# --------------------------------------------------------------------------- writing


def fragment_write(
    *,
    caller: Caller,
    content: str,
    session_id: str | None = None,
    resource: str | None = None,
    idempotency_key: str | None = None,
) -> WriteOutcome:
    """Store facts in the caller's private memory (people) or park them as a
    proposal (agents). Nothing written here becomes visible to anyone else."""
    if caller.kind == "system":
        raise PermissionDenied("The system caller writes no memory.")
    content = checked_text(content, field="content", max_chars=limits.CONTENT_MAX_CHARS, required=True)
    session_id = checked_text(session_id, field="session_id", max_chars=limits.SESSION_ID_MAX_CHARS)
    resource = checked_text(resource, field="resource", max_chars=limits.RESOURCE_MAX_CHARS).strip()
    if idempotency_key is not None:
        idempotency_key = checked_text(
            idempotency_key, field="idempotency_key", max_chars=limits.IDEMPOTENCY_KEY_MAX_CHARS, required=True
        )
    payload_hash = _payload_hash(content=content, session_id=session_id, resource=resource)
    # Keys are kept as digests: any length the contract allows fits, and the
    # client's own key text is not stored.
    key = (
        "key:" + hashlib.sha256(idempotency_key.encode()).hexdigest() if idempotency_key
        else f"payload:{payload_hash}"
    )
    now = timezone.now()

    with transaction.atomic():
        record, first_answer = _claim_key(
            tenant=caller.tenant, principal=caller.principal_key, key=key, payload_hash=payload_hash, now=now
        )
        if first_answer is not None:
            return first_answer
        assert record is not None
        if caller.agent is not None:
            outcome = proposal_park(caller=caller, content=content, session_id=session_id, resource=resource, now=now)
        else:
            outcome = pipeline_run(
                writer=Writer(tenant=caller.tenant, user=caller.user, client_id=caller.client_id),
                content=content, session_id=session_id, resource=resource, now=now,
            )
        record.response = outcome.as_record()
        record.save(update_fields=["response"])
    return outcome


def _payload_hash(*, content: str, session_id: str, resource: str) -> str:
    payload = json.dumps({"content": content, "session_id": session_id, "resource": resource}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _claim_key(*, tenant: Tenant, principal: str, key: str, payload_hash: str, now: dt.datetime
               ) -> tuple[IdempotencyRecord | None, WriteOutcome | None]:
    """(record to fill, None) for a new key; (None, first outcome) for a retry.

    One statement claims the key: it inserts the record, or takes over one
    older than the window. A concurrent retry's statement waits on the unique
    index until this write commits (or rolls back), then finds a record it
    may not take over and reads its answer (holding that record's row lock
    until its own transaction ends, which is right after: it writes nothing)."""
    table = IdempotencyRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (tenant_id, principal, key, payload_hash, response, created_at)
            VALUES (%(tenant)s, %(principal)s, %(key)s, %(payload)s, '{{}}'::jsonb, %(now)s)
            ON CONFLICT (tenant_id, principal, key) DO UPDATE
               SET payload_hash = EXCLUDED.payload_hash, response = EXCLUDED.response,
                   created_at = EXCLUDED.created_at
             WHERE {table}.created_at <= %(expired)s
            RETURNING id
            """,  # noqa: S608 - the table name is our model's
            {"tenant": tenant.pk, "principal": principal, "key": key, "payload": payload_hash, "now": now,
             "expired": now - IDEMPOTENCY_WINDOW},
        )
        claimed = cursor.fetchone()
    if claimed is not None:
        record = IdempotencyRecord(id=claimed[0], tenant=tenant, principal=principal, key=key,
                                   payload_hash=payload_hash, response={}, created_at=now)
        record._state.adding = False
        return record, None
    existing = IdempotencyRecord.objects.get(tenant=tenant, principal=principal, key=key)
    if existing.payload_hash != payload_hash:
        raise Conflict(
            "This idempotency_key was already used in the last 24 hours for a different write; "
            "use a new key for new content.",
            field="idempotency_key",
        )
    return None, WriteOutcome.from_record(existing.response)


# --------------------------------------------------------------------------- reading one's own


@dataclass
class FragmentView:
    """A fragment as a person's pages show it: the row and where it came from."""

    fragment: Fragment
    agents: list[str] = field(default_factory=list)
    resources: list[DocumentRef] = field(default_factory=list)
    app_name: str = ""
    owned: bool = False
    grounding: str = ""
    grounding_note: str | None = None

    @property
    def grounding_label(self) -> str:
        return dict(Fragment.Grounding.choices).get(self.grounding, self.grounding)

    @property
    def live(self) -> bool:
        return self.fragment.retired_at is None


def fragment_views(caller: Caller, fragments: Iterable[Fragment]) -> list[FragmentView]:
    """Views of fragments the caller may be shown (checked by the caller of this)."""
    fragments = list(fragments)
    client_ids = {f.client_id for f in fragments if f.client_id}
    app_names = dict(
        Application.objects.filter(client_id__in=client_ids).values_list("client_id", "name")
    ) if client_ids else {}
    provenance = provenance_for(caller, fragments)
    return [
        FragmentView(
            fragment=fragment, agents=list(provenance[fragment.pk].agents),
            resources=list(provenance[fragment.pk].documents), app_name=app_names.get(fragment.client_id, ""),
            owned=access.owns_fragment(caller, fragment), grounding=provenance[fragment.pk].grounding,
            grounding_note=provenance[fragment.pk].grounding_note,
        )
        for fragment in fragments
    ]


def _loaded(caller: Caller) -> QuerySet[Fragment]:
    return (
        access.with_access_facts(Fragment.objects.filter(tenant=caller.tenant))
        .select_related("collection")
        .defer("embedding")
    )


@replicas.reads_from_pool
def fragments_browse(
    *, caller: Caller, cursor: str | None = None, include_retired: bool = False, limit: int | None = None
) -> Page[FragmentView]:
    """The caller's own private memory, newest first. Retired rows (superseded,
    merged, forgotten) only when asked for: they are history, not memory."""
    access.require_person(caller, what="browse memory")
    queryset = _loaded(caller).filter(access.own_fragments(caller))
    if not include_retired:
        queryset = queryset.filter(retired_at__isnull=True)
    page = keyset_page(queryset, key="recorded_at", cursor=cursor, limit=limit)
    return Page(items=fragment_views(caller, page.items), next_cursor=page.next_cursor)


@replicas.reads_from_pool
def fragment_get(*, caller: Caller, fragment_id: Any, own: bool = False) -> FragmentView:
    """One fragment the caller may look at: their own (live or retired), or one
    today's access rules let them read now (`own`: their own only, as before
    forgetting). Anything else is NotFound, the same answer as for an id that
    never existed."""
    access.require_person(caller, what="browse memory")
    pk = uuid_or_none(fragment_id)
    fragment = _loaded(caller).filter(pk=pk).first() if pk is not None else None
    if fragment is None or not access.fragments_shown_to(caller, [fragment]):
        raise NotFound(NOT_YOURS)
    if own and not access.owns_fragment(caller, fragment):
        raise NotFound(NOT_YOURS)
    return fragment_views(caller, [fragment])[0]


@replicas.reads_from_pool
def fragment_history(*, caller: Caller, fragment: Fragment) -> tuple[list[Fragment], Fragment | None]:
    """(the caller's own facts this one replaced, the fact that replaced it).
    Only within the caller's own memory: shared fragments have no history here."""
    if not access.owns_fragment(caller, fragment):
        return [], None
    own = Fragment.objects.filter(access.own_fragments(caller)).defer("embedding")
    replaced = list(own.filter(successor=fragment).order_by("-recorded_at", "-pk"))
    successor = own.filter(pk=fragment.successor_id).first() if fragment.successor_id else None
    return replaced, successor


def fragment_forget(*, caller: Caller, fragment_id: Any) -> Fragment:
    """Retire one of the caller's own live fragments now, with reason "forgotten".

    Only the owner forgets, and only a person (contract 001: no deletion through
    an AI client). The row stays: as-of reads before now still see it."""
    user = access.require_person(caller, what="forget memory")
    pk = uuid_or_none(fragment_id)
    if pk is None:
        raise NotFound(NOT_YOURS)
    with transaction.atomic():
        # The write pipeline's per-writer lock: a concurrent write must not
        # supersede the fact being forgotten (or forget what it just stored).
        Writer(tenant=caller.tenant, user=user).hold()
        fragment = Fragment.objects.select_for_update().filter(access.own_fragments(caller), pk=pk).first()
        if fragment is None:
            raise NotFound(NOT_YOURS)
        if fragment.retired_at is not None:
            raise Conflict(f"This fragment was already retired ({fragment.retired_reason}).")
        fragment.retired_at = timezone.now()
        fragment.retired_reason = Fragment.Retired.FORGOTTEN
        fragment.save(update_fields=["retired_at", "retired_reason"])
    return fragment
