"""Agent writes wait as proposals until a person decides them (decision 8).

* `proposal_park`: an agent's memory_write. Candidates carrying a secret are
  dropped at once (privacy_drop) so a secret never sits in the review queue;
  the rest is parked and nothing becomes memory.
* `proposal_approve`: a workspace admin of the same tenant approves, optionally
  with edited content; the write pipeline then runs as if the agent had written
  it at that moment, into the agent's private memory, attributed to it.
* `proposal_reject`: the admin refuses it, with a reason.

Agents approve nothing, and no principal can decide its own proposal. These
services are for the review console: they are never MCP tools (contract 001).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from memoryhub.access import Caller, caller_is_admin
from memoryhub.errors import Conflict, NotFound, PermissionDenied
from memoryhub.models import Proposal
from memoryhub.services import limits
from memoryhub.services.privacy import privacy_explanation, privacy_findings
from memoryhub.services.write import (
    CONFIDENCE_APPROVED_AGENT,
    CONFIDENCE_STATED,
    PRIVACY_DROP,
    Writer,
    candidate_result,
    outcome_summary,
    pipeline_run,
    split_candidates,
)


def proposal_park(
    *, caller: Caller, content: str, session_id: str = "", resource: str = "", now: dt.datetime | None = None
) -> dict[str, Any]:
    """Park an agent's write; returns the memory_write output with review_state."""
    assert caller.agent is not None
    now = now or timezone.now()
    results = []
    parked = []
    for text in split_candidates(content):
        findings = privacy_findings(text)
        if findings:
            results.append(
                candidate_result("dropped", reason=PRIVACY_DROP, explanation=privacy_explanation(findings))
            )
        else:
            parked.append(text)
            results.append(candidate_result("proposed", explanation="Awaiting a workspace admin's review."))
    output = outcome_summary(results)
    if not parked:
        return output
    proposal = Proposal.objects.create(
        tenant=caller.tenant, agent=caller.agent, content="\n".join(parked), session_id=session_id,
        resource=resource, client_id=caller.client_id, created_at=now,
    )
    output["review_state"] = Proposal.State.PENDING.value
    output["proposal_id"] = str(proposal.pk)
    output["outcome"] = (
        f"Parked as proposal {proposal.pk} for a workspace admin's review; nothing becomes memory until a "
        f"person approves it." + (f" {output['outcome']}" if output["dropped"] else "")
    )
    return output


def _decider(caller: Caller) -> None:
    if caller.kind != "user" or caller.user is None:
        raise PermissionDenied("Agents cannot approve or reject proposals; a workspace admin decides them.")
    if not caller_is_admin(caller):
        raise PermissionDenied("Only a workspace admin can approve or reject proposals.")


def _pending(caller: Caller, proposal_id: Any) -> Proposal:
    try:
        proposal = (
            Proposal.objects.select_for_update()
            .select_related("agent", "tenant")
            .get(pk=proposal_id, tenant=caller.tenant)
        )
    except (Proposal.DoesNotExist, ValidationError, ValueError, TypeError):
        raise NotFound("No such proposal in this workspace.", field="proposal_id") from None
    if caller.agent is not None and proposal.agent_id == caller.agent.pk:
        raise PermissionDenied("No one can decide their own proposal.")
    if proposal.state != Proposal.State.PENDING:
        raise Conflict(f"This proposal was already {proposal.state}.", field="proposal_id")
    return proposal


def proposal_approve(
    *, caller: Caller, proposal_id: Any, edited_content: str | None = None, reason: str = ""
) -> dict[str, Any]:
    """Approve (optionally edited): runs the write pipeline as the agent now.
    Returns what the pipeline did, which is also kept on the proposal."""
    _decider(caller)
    if edited_content is not None:
        edited_content = limits.text(
            edited_content, field="edited_content", max_chars=limits.CONTENT_MAX_CHARS, required=True
        )
    now = timezone.now()
    with transaction.atomic():
        proposal = _pending(caller, proposal_id)
        content = edited_content if edited_content is not None else proposal.content
        result = pipeline_run(
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
        proposal.result = result
        proposal.save(update_fields=["state", "decided_at", "decided_by", "decision_reason", "edited_content",
                                     "result"])
    return result


def proposal_reject(*, caller: Caller, proposal_id: Any, reason: str = "") -> Proposal:
    _decider(caller)
    with transaction.atomic():
        proposal = _pending(caller, proposal_id)
        proposal.state = Proposal.State.REJECTED
        proposal.decided_at = timezone.now()
        proposal.decided_by = caller.user
        proposal.decision_reason = reason
        proposal.save(update_fields=["state", "decided_at", "decided_by", "decision_reason"])
    return proposal


def proposals_pending(*, caller: Caller) -> QuerySet[Proposal]:
    """The review queue of the caller's workspace (admins only)."""
    _decider(caller)
    return Proposal.objects.filter(tenant=caller.tenant, state=Proposal.State.PENDING).select_related("agent")
