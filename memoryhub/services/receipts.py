"""memory_receipt: reopen one of the reader's own serving receipts (decision 10).

The replay re-executes the identical read (same query, filters, limit, task)
under the reader's rights of today: an explicit as_of is kept, an implicit one
becomes "now". It serves nothing: it returns fragment ids and the difference.

A receipt is found only among the caller's own: somebody else's id, an id of
another workspace and an id that never existed all get the same answer, so
the answer cannot be used to learn whether a receipt exists.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db import OperationalError, transaction
from django.utils import timezone

from memoryhub.access import Caller
from memoryhub.errors import MemoryhubError, NotFound, PermissionDenied
from memoryhub.models import Receipt
from memoryhub.services import limits
from memoryhub.services.search import Deadline, SearchRequest, is_cancelled, iso_instant, search_execute

RECEIPT_NOT_YOURS = "No receipt with this id is yours to replay; you can reopen only receipts of your own reads."


def receipt_get(*, caller: Caller, receipt_id: str) -> Receipt:
    """The caller's own receipt, or NotFound (identical for every other case)."""
    if caller.kind != "user" or caller.user is None:
        # Decision 2: agents never see memory_receipt.
        raise PermissionDenied("memory_receipt is for people; agents cannot reopen receipts.")
    receipt_id = limits.text(receipt_id, field="receipt_id", max_chars=limits.RECEIPT_ID_MAX_CHARS, required=True)
    receipt = Receipt.objects.filter(pk=receipt_id, tenant=caller.tenant, reader_user=caller.user).first()
    if receipt is None:
        raise NotFound(RECEIPT_NOT_YOURS, field="receipt_id")
    return receipt


def receipt_replay(*, caller: Caller, receipt_id: str, deadline_seconds: float | None = None) -> dict[str, Any]:
    """The memory_receipt output of contract 000."""
    receipt = receipt_get(caller=caller, receipt_id=receipt_id)
    request = receipt.request or {}
    output: dict[str, Any] = {
        "receipt_id": receipt.pk,
        "query": request.get("query", ""),
        "as_of": iso_instant(receipt.as_of),
        "agents": list(request.get("agents") or []),
        "roles": list(receipt.roles or []),
        "reader": caller.user.username if caller.user else receipt.subject,
        "served_then": list(receipt.served or []),
        "served_now": [],
        "missing_now": [],
        "extra_now": [],
        "replayed": False,
        "note": None,
    }
    replay_as_of = receipt.as_of if receipt.as_of_explicit else timezone.now()
    output["replayed_as_of"] = iso_instant(replay_as_of)
    try:
        served_now = _re_execute(caller, receipt, replay_as_of, deadline_seconds)
    except MemoryhubError as exc:
        output["note"] = f"The read could not be re-executed: {exc.message}"
        return output
    then = output["served_then"]
    output.update(
        served_now=served_now,
        missing_now=[pk for pk in then if pk not in set(served_now)],
        extra_now=[pk for pk in served_now if pk not in set(then)],
        replayed=True,
    )
    if not receipt.as_of_explicit:
        output["note"] = "The original read had no as_of; it was replayed as of now."
    return output


def _re_execute(caller: Caller, receipt: Receipt, as_of: dt.datetime, deadline_seconds: float | None) -> list[str]:
    request = SearchRequest.from_json(receipt.request)
    deadline = Deadline(deadline_seconds or settings.MEMORYHUB_SEARCH_DEADLINE_SECONDS)
    try:
        with transaction.atomic():
            execution = search_execute(
                caller=caller, request=request, as_of=as_of, deadline=deadline, receipt_id=receipt.pk
            )
    except OperationalError as exc:
        if is_cancelled(exc):
            raise deadline.exceeded() from exc
        raise
    return execution.served_ids
