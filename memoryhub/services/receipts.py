"""Serving receipts: a person's own, listed and reopened (decision 10).

A replay re-executes the identical read (same query, filters, limit, task,
and the result budget the original read was cut to) under the reader's rights
of today: an explicit as_of is kept, an implicit one becomes "now". It ranks
with the parameters the read was ranked with (the receipt keeps them), unless
the code that ranks has changed since, which its note then says. It serves
nothing: it returns fragment ids and the difference.

A replay also checks the receipt's entry in the workspace's hash chain
(memoryhub.services.receipt_chain.entry_check).

A receipt is found only among the caller's own (memoryhub.access.own_receipts):
somebody else's id, an id of another workspace and an id that never existed
all get the same answer, so the answer cannot be used to learn whether a
receipt exists.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import prefetch_related_objects
from django.utils import timezone
from oauth2_provider.models import Application

from contract import limits
from memoryhub import access
from memoryhub.access import Caller
from memoryhub.database import replicas
from memoryhub.errors import MemoryhubError, NotFound
from memoryhub.models import Agent, Fragment, Receipt
from memoryhub.services.arguments import checked_text, uuid_or_none
from memoryhub.services.fragments import FragmentView, fragment_views
from memoryhub.services.paging import Page, keyset_page
from memoryhub.services.provenance import provenance_for
from memoryhub.services.receipt_chain import EntryCheck, entry_check
from memoryhub.services.search import (
    Deadline,
    Execution,
    Ranking,
    ResultBudget,
    SearchRequest,
    budget_named,
    ranking_of_record,
    search_execute,
)

WEBSITE = "this website"

RECEIPT_NOT_YOURS = "No receipt with this id is yours to replay; you can reopen only receipts of your own reads."
NOTE_IMPLICIT_AS_OF = "The original read had no as_of; it was replayed as of now."
NOTE_RANKING_CHANGED = ("Search ranks differently since this read, so it was replayed with today's ranking: a "
                        "fragment missing or added now may have moved in the order, not left or entered what you "
                        "may read.")
NOTE_RANKING_UNKNOWN = ("This read was made before receipts kept the ranking that served it, so it was replayed with "
                        "today's ranking: a fragment missing or added now may have moved in the order, not left or "
                        "entered what you may read.")


@dataclass(frozen=True)
class GroundingChange:
    """A fragment served then whose grounding is not what it was at the read."""

    fragment_id: str
    then: str
    now: str
    note: str | None = None


@dataclass
class ReceiptReplay:
    receipt: Receipt
    reader: str
    replayed_as_of: dt.datetime
    chain: EntryCheck
    served_now: list[str] = field(default_factory=list)
    replayed: bool = False
    note: str | None = None
    grounding_changes: list[GroundingChange] = field(default_factory=list)
    # Which app made the read, in plain words (`receipt_clients`).
    client: str = ""

    @property
    def request(self) -> dict:
        return self.receipt.request or {}

    @property
    def served_then(self) -> list[str]:
        return list(self.receipt.served or [])

    @property
    def missing_now(self) -> list[str]:
        now = set(self.served_now)
        return [pk for pk in self.served_then if pk not in now] if self.replayed else []

    @property
    def extra_now(self) -> list[str]:
        then = set(self.served_then)
        return [pk for pk in self.served_now if pk not in then]


def receipt_get(*, caller: Caller, receipt_id: str) -> Receipt:
    """The caller's own receipt, or NotFound (identical for every other case)."""
    mine = access.own_receipts(caller)
    receipt_id = checked_text(receipt_id, field="receipt_id", max_chars=limits.RECEIPT_ID_MAX_CHARS, required=True)
    receipt = access.one_row(Receipt.objects.filter(mine, pk=receipt_id))
    if receipt is None:
        raise NotFound(RECEIPT_NOT_YOURS, field="receipt_id")
    return receipt


def receipt_replay(
    *, caller: Caller, receipt_id: str, deadline_seconds: float | None = None,
) -> ReceiptReplay:
    """memory_receipt: the identical read again, cut to the result budget the
    original was cut to (by name, memoryhub.services.search.budget_named)."""
    receipt = receipt_get(caller=caller, receipt_id=receipt_id)
    replay_as_of = receipt.as_of if receipt.as_of_explicit else timezone.now()
    replay = ReceiptReplay(receipt=receipt, reader=caller.display_name, replayed_as_of=replay_as_of,
                           chain=entry_check(receipt), client=receipt_clients([receipt])[receipt.pk])
    same_budget = budget_named(receipt.budget)
    # The ranking the read was served with, when this code still makes it: a
    # change of weights since then does not show up as a difference. (The
    # workspace's own search settings, its relevance floor, judgment plane
    # and stale policy, are today's, like the reader's rights.)
    same_ranking = ranking_of_record(receipt.ranking)
    try:
        replay.served_now = _re_execute(caller, receipt, replay_as_of, deadline_seconds, same_budget, same_ranking)
    except MemoryhubError as exc:
        replay.note = f"The read could not be re-executed: {exc.message}"
        return replay
    replay.replayed = True
    replay.grounding_changes = _grounding_changes(caller, replay)
    notes = []
    if not receipt.as_of_explicit:
        notes.append(NOTE_IMPLICIT_AS_OF)
    if same_ranking is None:
        notes.append(NOTE_RANKING_CHANGED if receipt.ranking else NOTE_RANKING_UNKNOWN)
    replay.note = " ".join(notes) or None
    return replay


def _grounding_changes(caller: Caller, replay: ReceiptReplay) -> list[GroundingChange]:
    """Of what the read served then and the caller may read now, each fragment
    whose grounding at the replay's instant differs from the read's."""
    pks = [pk for pk in (uuid_or_none(value) for value in replay.served_then) if pk is not None]
    if not pks:
        return []
    candidates = access.with_access_facts(Fragment.objects.filter(tenant=caller.tenant, pk__in=pks)).defer(
        "embedding", "search_vector")
    shown = access.fragments_shown_to(caller, candidates)
    prefetch_related_objects(shown, "agents", "resources")
    then = provenance_for(caller, shown, instant=replay.receipt.as_of)
    now = provenance_for(caller, shown, instant=replay.replayed_as_of)
    return [
        GroundingChange(str(fragment.pk), then[fragment.pk].grounding, now[fragment.pk].grounding,
                        now[fragment.pk].grounding_note)
        for fragment in shown if then[fragment.pk].grounding != now[fragment.pk].grounding
    ]


def _re_execute(caller: Caller, receipt: Receipt, as_of: dt.datetime, deadline_seconds: float | None,
                budget: ResultBudget | None, ranking: Ranking | None) -> list[str]:
    request = SearchRequest.from_json(receipt.request)
    deadline = Deadline(deadline_seconds or settings.MEMORYHUB_SEARCH_DEADLINE_SECONDS)

    def read() -> Execution:
        # One transaction on the connection the read pool chose (a replica's, or the primary's).
        with transaction.atomic(using=replicas.read_alias()):
            return search_execute(
                caller=caller, request=request, as_of=as_of, deadline=deadline, receipt_id=receipt.pk,
                ranking=ranking, budget=budget,
            )

    return replicas.on_pool(read).result.served_ids


@dataclass(frozen=True)
class ListedReceipt:
    receipt: Receipt
    client: str  # which app made the read, in plain words


def receipts_browse(*, caller: Caller, cursor: str | None = None, limit: int | None = None) -> Page[ListedReceipt]:
    """The caller's own serving receipts, newest first, whichever app made the
    read, each with the app named."""
    page = keyset_page(Receipt.objects.filter(access.own_receipts(caller)), key="created_at", cursor=cursor,
                       limit=limit)
    clients = receipt_clients(page.items)
    return Page(items=[ListedReceipt(receipt, clients[receipt.pk]) for receipt in page.items],
                next_cursor=page.next_cursor)


def receipt_clients(receipts: Iterable[Receipt]) -> dict[str, str]:
    """Receipt id -> the app that made the read, as a person says it: the name
    of the OAuth application its token was issued to, an agent by its name,
    and "this website" for a search on these pages (a person's read with no
    client). A client that has since been deleted is named by its id."""
    receipts = list(receipts)
    client_ids = {receipt.client_id for receipt in receipts if receipt.client_id}
    names = dict(Application.objects.filter(client_id__in=client_ids).values_list("client_id", "name")) \
        if client_ids else {}
    agents = dict(Agent.objects.filter(pk__in={r.reader_agent_id for r in receipts if r.reader_agent_id})
                  .values_list("pk", "name"))
    labels = {}
    for receipt in receipts:
        if receipt.reader_agent_id is not None:
            labels[receipt.pk] = f"the agent {agents.get(receipt.reader_agent_id, '')}".strip()
        elif not receipt.client_id:
            labels[receipt.pk] = WEBSITE
        else:
            name = names.get(receipt.client_id)
            # An app names itself: quoted, so one calling itself "this website" does not pass for the site.
            labels[receipt.pk] = (f"the app “{name}”" if name
                                  else f"an app no longer registered ({receipt.client_id})")
    return labels


def receipt_fragments(*, caller: Caller, fragment_ids: Iterable[str]) -> dict[str, FragmentView]:
    """What a receipt page may show of the fragments a read served: the
    caller's own (with their state) and whatever they may read now. A fragment
    they can no longer see stays an id: a receipt never widens today's rights."""
    access.require_person(caller, what="reopen receipts")
    pks = [pk for pk in (uuid_or_none(value) for value in fragment_ids) if pk is not None]
    if not pks:
        return {}
    candidates = access.with_access_facts(Fragment.objects.filter(tenant=caller.tenant, pk__in=pks)).select_related(
        "collection").defer("embedding")
    shown = access.fragments_shown_to(caller, candidates)
    return {str(view.fragment.pk): view for view in fragment_views(caller, shown)}


@dataclass
class ServedResults:
    """What one of the caller's reads served, in rank order, as it may be shown
    now: each id with its view, or None when the caller can no longer read it."""

    receipt: Receipt
    rows: list[tuple[str, FragmentView | None]]
    client: str = ""

    @property
    def request(self) -> dict:
        return self.receipt.request or {}


def receipt_served(*, caller: Caller, receipt_id: str) -> ServedResults:
    """The results a receipt records, for showing them again (My memory after a
    search, on every reload): read from the receipt, never searched again, so
    no new receipt is written."""
    receipt = receipt_get(caller=caller, receipt_id=receipt_id)
    served = list(receipt.served or [])
    shown = receipt_fragments(caller=caller, fragment_ids=served)
    return ServedResults(receipt=receipt, rows=[(pk, shown.get(pk)) for pk in served],
                         client=receipt_clients([receipt])[receipt.pk])
