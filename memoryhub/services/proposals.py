"""Agent writes wait as proposals until a person decides them (decision 8).

* `proposal_park`: an agent's memory_write. Candidates carrying a secret are
  dropped at once (privacy_drop) so a secret never sits in the review queue;
  the rest is parked and nothing becomes memory.
* `proposal_approve`: a workspace admin of the same workspace approves,
  optionally with edited content; the write pipeline then runs as if the agent
  had written it at that moment, into the agent's private memory, attributed
  to it.
* `proposal_reject`: the admin refuses it, with a reason.
* The review console's selectors: the queue with its filters, the history of
  decisions, one proposal, and the preview of what approving would do. The
  preview runs the real write pipeline (`pipeline_run`, exactly what approval
  runs) inside a savepoint that is always rolled back: the rows it would
  write, the fact it would supersede and the enrichment it would enqueue all
  vanish with the savepoint, so the preview cannot drift from approval.

Who may review and decide is memoryhub.access's (`require_reviewer`,
`require_decider`). These services are for the review console: never MCP
tools (contract 001).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from contract import limits
from memoryhub import access
from memoryhub.access import Caller
from memoryhub.errors import Conflict, MemoryhubError, NotFound, PermissionDenied
from memoryhub.models import Proposal
from memoryhub.services.arguments import checked_text
from memoryhub.services.privacy import privacy_explanation, privacy_findings
from memoryhub.services.write import (
    CONFIDENCE_APPROVED_AGENT,
    CONFIDENCE_STATED,
    PRIVACY_DROP,
    CandidateOutcome,
    WriteOutcome,
    Writer,
    pipeline_run,
    split_candidates,
)

REASON_MAX_CHARS = 2000

AGE_FILTERS: dict[str, tuple[str, dt.timedelta]] = {
    "1h": ("waiting over an hour", dt.timedelta(hours=1)),
    "1d": ("waiting over a day", dt.timedelta(days=1)),
    "7d": ("waiting over a week", dt.timedelta(days=7)),
}


# --------------------------------------------------------------------------- parking


def proposal_park(
    *, caller: Caller, content: str, session_id: str = "", resource: str = "", now: dt.datetime | None = None
) -> WriteOutcome:
    """Park an agent's write (called by services.fragments.fragment_write)."""
    if caller.agent is None:
        raise PermissionDenied("Only an agent's write is parked as a proposal.")
    now = now or timezone.now()
    results = []
    parked = []
    for text in split_candidates(content):
        findings = privacy_findings(text)
        if findings:
            results.append(
                CandidateOutcome.of("dropped", reason=PRIVACY_DROP, explanation=privacy_explanation(findings))
            )
        else:
            parked.append(text)
            results.append(CandidateOutcome.of("proposed", explanation="Awaiting a workspace admin's review."))
    if not parked:
        return WriteOutcome(results=tuple(results))
    proposal = Proposal.objects.create(
        tenant=caller.tenant, agent=caller.agent, content="\n".join(parked), session_id=session_id,
        resource=resource, client_id=caller.client_id, created_at=now,
    )
    return WriteOutcome(results=tuple(results), proposal_id=str(proposal.pk),
                        review_state=Proposal.State.PENDING.value)


# --------------------------------------------------------------------------- deciding


def _pending(caller: Caller, proposal_id: Any) -> Proposal:
    try:
        proposal = (
            Proposal.objects.select_for_update()
            .select_related("agent", "tenant")
            .get(pk=proposal_id, tenant=caller.tenant)
        )
    except (Proposal.DoesNotExist, ValidationError, ValueError, TypeError):
        raise NotFound("No such proposal in this workspace.", field="proposal_id") from None
    access.require_decider(caller, proposal)
    if proposal.state != Proposal.State.PENDING:
        raise Conflict(f"This proposal was already {proposal.state}.", field="proposal_id")
    return proposal


def proposal_approve(
    *, caller: Caller, proposal_id: Any, edited_content: str | None = None, reason: str = ""
) -> WriteOutcome:
    """Approve (optionally edited): runs the write pipeline as the agent now.
    Returns what the pipeline did, which is also kept on the proposal."""
    access.require_reviewer(caller)
    if edited_content is not None:
        edited_content = checked_text(
            edited_content, field="edited_content", max_chars=limits.CONTENT_MAX_CHARS, required=True
        )
    reason = checked_text(reason, field="reason", max_chars=REASON_MAX_CHARS)
    now = timezone.now()
    with transaction.atomic():
        proposal = _pending(caller, proposal_id)
        content = edited_content if edited_content is not None else proposal.content
        outcome = pipeline_run(
            writer=Writer(tenant=proposal.tenant, agent=proposal.agent, client_id=proposal.client_id),
            content=content,
            session_id=proposal.session_id,
            resource=proposal.resource,
            now=now,
            # A person rewrote it: as sure as a person's own statement.
            confidence=CONFIDENCE_STATED if edited_content is not None else CONFIDENCE_APPROVED_AGENT,
        )
        proposal.state = Proposal.State.APPROVED
        proposal.decided_at = now
        proposal.decided_by = caller.user
        proposal.decision_reason = reason
        proposal.edited_content = edited_content or ""
        proposal.result = outcome.as_record()
        proposal.save(update_fields=["state", "decided_at", "decided_by", "decision_reason", "edited_content",
                                     "result"])
    return outcome


def proposal_reject(*, caller: Caller, proposal_id: Any, reason: str = "") -> Proposal:
    access.require_reviewer(caller)
    reason = checked_text(reason, field="reason", max_chars=REASON_MAX_CHARS)
    with transaction.atomic():
        proposal = _pending(caller, proposal_id)
        proposal.state = Proposal.State.REJECTED
        proposal.decided_at = timezone.now()
        proposal.decided_by = caller.user
        proposal.decision_reason = reason
        proposal.save(update_fields=["state", "decided_at", "decided_by", "decision_reason"])
    return proposal


# --------------------------------------------------------------------------- the console's selectors


def proposals_pending(*, caller: Caller) -> QuerySet[Proposal]:
    """The review queue of the caller's workspace."""
    tenant = access.require_reviewer(caller)
    return Proposal.objects.filter(tenant=tenant, state=Proposal.State.PENDING).select_related("agent")


def proposals_pending_count(*, caller: Caller) -> int | None:
    """How many proposals wait, for a person's home page; None for someone who
    does not review (they are not told)."""
    if not access.is_reviewer(caller):
        return None
    return proposals_pending(caller=caller).count()


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
    tenant = access.require_reviewer(caller)
    queryset = Proposal.objects.filter(tenant=tenant).exclude(state=Proposal.State.PENDING)
    if agent:
        queryset = queryset.filter(agent__name=agent)
    if state in (Proposal.State.APPROVED, Proposal.State.REJECTED):
        queryset = queryset.filter(state=state)
    return queryset.select_related("agent", "decided_by").order_by("-decided_at", "-pk")


def proposal_get(*, caller: Caller, proposal_id: Any) -> Proposal:
    """A proposal of the caller's workspace (any state); NotFound otherwise."""
    tenant = access.require_reviewer(caller)
    try:
        return Proposal.objects.select_related("agent", "decided_by").get(pk=proposal_id, tenant=tenant)
    except (Proposal.DoesNotExist, ValidationError, ValueError, TypeError):
        raise NotFound("No such proposal in this workspace.") from None


def proposal_agents(*, caller: Caller) -> list[str]:
    """Names of the agents with proposals in the caller's workspace (the console's filter)."""
    tenant = access.require_reviewer(caller)
    return sorted(set(Proposal.objects.filter(tenant=tenant).values_list("agent__name", flat=True)))


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
    access.require_reviewer(caller)
    contents = contents or {}
    previews: dict[Any, ProposalPreview] = {}
    now = timezone.now()
    # One transaction for the page: each dry run is a savepoint inside it, and
    # the write pipeline's per-agent lock is released when it ends.
    with transaction.atomic():
        for proposal in proposals:
            if not access.may_review(caller, proposal) or proposal.state != Proposal.State.PENDING:
                continue
            edited = contents.get(proposal.pk)
            content = edited if edited is not None else proposal.content
            previews[proposal.pk] = _dry_run(caller, proposal, content, now=now, edited=edited is not None)
    return previews


def _dry_run(caller: Caller, proposal: Proposal, content: str, *, now: dt.datetime, edited: bool) -> ProposalPreview:
    outcome = WriteOutcome()
    try:
        with transaction.atomic():
            outcome = pipeline_run(
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
    for text, item in zip(split_candidates(content), outcome.results, strict=False):
        target = None
        if item.operation == "merged":
            target = item.fragment_id
        elif item.operation == "superseded":
            target = item.superseded_fragment_id
        if target:
            targets[target] = ""
        candidates.append(CandidatePreview(text=text, operation=item.operation, reason=item.reason,
                                           explanation=item.explanation, target_id=target))
    if targets:
        rows = access.agent_memory_for_review(caller, proposal.agent).filter(pk__in=list(targets))
        targets.update({str(pk): value for pk, value in rows.values_list("pk", "value")})
        for candidate in candidates:
            if candidate.target_id:
                candidate.target_value = targets.get(candidate.target_id, "")
    return ProposalPreview(outcome=outcome.summary, candidates=candidates)
