"""The review console's selectors: the queue with its filters, the history of
decisions, and the preview of what approving a proposal would do.

Deciding a proposal is services.proposals' (`proposal_approve`,
`proposal_reject`); this module only reads. The preview runs the real write
pipeline (`pipeline_run`, exactly what approval runs) inside a savepoint that
is always rolled back: the rows it would write, the fact it would supersede
and the enrichment it would enqueue all vanish with the savepoint, so the
preview cannot drift from what approval does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from memoryhub.access import Caller, caller_is_admin
from memoryhub.errors import MemoryhubError, NotFound, PermissionDenied
from memoryhub.models import Fragment, Proposal
from memoryhub.services.proposals import proposals_pending
from memoryhub.services.write import (
    CONFIDENCE_APPROVED_AGENT,
    CONFIDENCE_STATED,
    Writer,
    pipeline_run,
    split_candidates,
)

AGE_FILTERS: dict[str, tuple[str, dt.timedelta]] = {
    "1h": ("waiting over an hour", dt.timedelta(hours=1)),
    "1d": ("waiting over a day", dt.timedelta(days=1)),
    "7d": ("waiting over a week", dt.timedelta(days=7)),
}


def _require_admin(caller: Caller) -> None:
    if caller.user is None or not caller_is_admin(caller):
        raise PermissionDenied("Only a workspace admin reviews proposals.")


def proposals_queue(*, caller: Caller, agent: str = "", age: str = "") -> QuerySet[Proposal]:
    """Pending proposals of the caller's workspace, oldest first."""
    queryset = proposals_pending(caller=caller)
    if agent:
        queryset = queryset.filter(agent__name=agent)
    if age in AGE_FILTERS:
        queryset = queryset.filter(created_at__lte=timezone.now() - AGE_FILTERS[age][1])
    return queryset.order_by("created_at", "pk")


def proposals_decided(*, caller: Caller, agent: str = "", state: str = "") -> QuerySet[Proposal]:
    """Decided proposals of the caller's workspace, the latest decision first."""
    _require_admin(caller)
    queryset = Proposal.objects.filter(tenant=caller.tenant).exclude(state=Proposal.State.PENDING)
    if agent:
        queryset = queryset.filter(agent__name=agent)
    if state in (Proposal.State.APPROVED, Proposal.State.REJECTED):
        queryset = queryset.filter(state=state)
    return queryset.select_related("agent", "decided_by").order_by("-decided_at", "-pk")


def proposal_get(*, caller: Caller, proposal_id: Any) -> Proposal:
    """A proposal of the caller's workspace (any state); NotFound otherwise."""
    _require_admin(caller)
    try:
        return Proposal.objects.select_related("agent", "decided_by").get(pk=proposal_id, tenant=caller.tenant)
    except (Proposal.DoesNotExist, ValueError, TypeError):
        raise NotFound("No such proposal in this workspace.") from None


@dataclass
class CandidatePreview:
    text: str
    operation: str  # stored / merged / superseded / dropped
    reason: str | None = None
    explanation: str | None = None
    # The agent's existing fragment it would merge into or supersede.
    target_id: str | None = None
    target_value: str = ""


@dataclass
class ProposalPreview:
    outcome: str = ""
    candidates: list[CandidatePreview] = field(default_factory=list)
    error: str | None = None


class _Discard(Exception):
    """Raised inside the savepoint to roll the dry run back."""


def proposals_preview(
    *, caller: Caller, proposals: Iterable[Proposal], contents: dict[Any, str] | None = None
) -> dict[Any, ProposalPreview]:
    """What approving each proposal now would do, without doing it. `contents`
    maps a proposal id to edited content to preview instead of its own."""
    _require_admin(caller)
    contents = contents or {}
    previews: dict[Any, ProposalPreview] = {}
    now = timezone.now()
    # One transaction for the page: each dry run is a savepoint inside it, and
    # the write pipeline's per-agent lock is released when it ends.
    with transaction.atomic():
        for proposal in proposals:
            if proposal.tenant_id != caller.tenant.pk or proposal.state != Proposal.State.PENDING:
                continue
            edited = contents.get(proposal.pk)
            content = edited if edited is not None else proposal.content
            previews[proposal.pk] = _dry_run(proposal, content, now=now, edited=edited is not None)
    return previews


def _dry_run(proposal: Proposal, content: str, *, now: dt.datetime, edited: bool) -> ProposalPreview:
    result: dict[str, Any] = {}
    try:
        with transaction.atomic():
            result = pipeline_run(
                writer=Writer(tenant=proposal.tenant, agent=proposal.agent, client_id=proposal.client_id),
                content=content, session_id=proposal.session_id, resource=proposal.resource, now=now,
                confidence=CONFIDENCE_STATED if edited else CONFIDENCE_APPROVED_AGENT,
            )
            raise _Discard
    except _Discard:
        pass
    except MemoryhubError as exc:
        return ProposalPreview(error=exc.message)
    candidates = []
    targets: dict[str, str] = {}
    for text, item in zip(split_candidates(content), result.get("results", []), strict=False):
        operation = item["operation"]
        target = None
        if operation == "merged":
            target = item["fragment_id"]
        elif operation == "superseded":
            target = item["superseded_fragment_id"]
        if target:
            targets[target] = ""
        candidates.append(CandidatePreview(text=text, operation=operation, reason=item.get("reason"),
                                           explanation=item.get("explanation"), target_id=target))
    if targets:
        # The agent's own memory. Every fragment an agent owns became memory
        # through this console's approval, so showing it to the workspace's
        # admins reveals nothing they were not already shown.
        rows = Fragment.objects.filter(pk__in=list(targets), tenant=proposal.tenant, owner_agent=proposal.agent)
        targets.update({str(pk): value for pk, value in rows.values_list("pk", "value")})
        for candidate in candidates:
            if candidate.target_id:
                candidate.target_value = targets.get(candidate.target_id, "")
    return ProposalPreview(outcome=result.get("outcome", ""), candidates=candidates)
