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
import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from pgvector.django import CosineDistance

from contract import limits
from memoryhub import access
from memoryhub.access import Caller
from memoryhub.embeddings import get_embedder
from memoryhub.errors import Conflict, MemoryhubError, NotFound, PermissionDenied
from memoryhub.models import Fragment, Proposal
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

logger = logging.getLogger("memoryhub.reviews")

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


@dataclass(frozen=True)
class NearDuplicate:
    """Something already waiting or remembered in the same place whose text is
    nearly the proposal's. Each carries an id only when the reviewer may open
    it (memoryhub.access says), so the page links nothing it should not."""

    kind: str  # "proposal" (pending) or "memory" (live)
    text: str
    similarity: float
    proposal_id: str | None = None
    fragment_id: str | None = None


@dataclass
class ProposalPreview:
    outcome: str = ""
    candidates: list[CandidatePreview] = field(default_factory=list)
    error: str | None = None
    # Who could read the fact once approved (memoryhub.access.fact_audience).
    audience: access.FactAudience | None = None
    near: list[NearDuplicate] = field(default_factory=list)
    # The near-duplicate check needs the embedder; when it is down, this says so.
    near_unchecked: bool = False


class _Discard(Exception):
    """Raised inside the savepoint to roll the dry run back."""


def proposals_preview(
    *, caller: Caller, proposals: Iterable[Proposal], contents: dict[Any, str] | None = None
) -> dict[Any, ProposalPreview]:
    """What approving each proposal now would do, without doing it. `contents`
    maps a proposal id to edited content to preview instead of its own."""
    access.require_reviewer(caller)
    contents = contents or {}
    proposals = list(proposals)
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
    audiences: dict[int, access.FactAudience] = {}
    for proposal_id, preview in previews.items():
        proposal = next(p for p in proposals if p.pk == proposal_id)
        # Approval writes into the proposing agent's private memory (decision 8).
        if proposal.agent_id not in audiences:
            audiences[proposal.agent_id] = access.fact_audience(caller, owner_agent=proposal.agent)
        preview.audience = audiences[proposal.agent_id]
    _flag_near_duplicates(caller, [p for p in proposals if p.pk in previews], contents, previews)
    return previews


# Near-duplicates are judged by the cosine similarity of the texts' sentence
# embeddings (the same all-MiniLM-L6-v2 vectors search and the write pipeline
# use; pgvector for the stored ones). Measured on pairs of facts
# (tests/reviews/test_preview_audience.py holds them): paraphrases and
# restatements score 0.92 to 0.96 ("The deploy freeze starts on Friday." /
# "Deploy freeze begins Friday." 0.95; "On-call rotates each Monday." 0.94), a
# changed detail 0.97 (a date: exactly what a reviewer should compare), while
# related but different facts stay at or below 0.73 ("The staging database is
# db-stg-2." / "The production database is db-prod-1." 0.73; "Alice leads the
# payments team." / "Bob leads ..." 0.72) and unrelated ones near 0. 0.85 (the
# write pipeline's own threshold for naming a neighbour) sits in the gap. A
# looser paraphrase can fall below it ("Initech's contract renewal is in
# April." 0.80): the flag is a hint, never a gate. PostgreSQL's trigram
# similarity would judge spelling rather than meaning, and the embedded
# PostgreSQL ships without pg_trgm.
NEAR_DUPLICATE_SIMILARITY = 0.85
# What one preview page compares, so its cost is bounded whatever agents send:
# each previewed proposal's first facts, against the newest pending proposals of
# the same agent (and the page's own), and the agent's live memory.
NEAR_FACTS_PER_PROPOSAL = 8
NEAR_PROPOSALS_PER_AGENT = 50
NEAR_MEMORIES_PER_FACT = 3
NEAR_SHOWN_MAX = 5
# Texts embedded within one request; the rest are embedded on later views (the
# cache keeps them), and until then those proposals are not compared.
NEAR_EMBED_BUDGET = 256
_VECTOR_CACHE_SECONDS = 24 * 3600


def _vectors(tenant_id: Any, texts: Iterable[str], *, budget: int) -> dict[str, np.ndarray]:
    """Sentence vectors of `texts` (at most `budget` of them embedded now),
    cached per workspace and embedder (a queue page is reloaded often; a pending
    proposal's text never changes)."""
    embedder = get_embedder()
    wanted = list(dict.fromkeys(texts))
    prefix = f"proposal-vector:{tenant_id}:{embedder.name}:"
    keys = {text: prefix + hashlib.sha256(text.encode()).hexdigest() for text in wanted}
    cached = cache.get_many(list(keys.values()))
    found = {text: np.asarray(cached[key], dtype=np.float32) for text, key in keys.items() if key in cached}
    missing = [text for text in wanted if text not in found][:budget]
    if missing:
        fresh = np.asarray(embedder.embed(missing), dtype=np.float32)
        found.update(zip(missing, fresh, strict=True))
        cache.set_many({keys[text]: [float(x) for x in vector] for text, vector in zip(missing, fresh, strict=True)},
                       timeout=_VECTOR_CACHE_SECONDS)
    return found


def _facts(content: str) -> list[str]:
    return split_candidates(content)[:NEAR_FACTS_PER_PROPOSAL]


def _flag_near_duplicates(caller: Caller, proposals: list[Proposal], contents: dict[Any, str],
                          previews: dict[Any, ProposalPreview]) -> None:
    """Other pending proposals of the same agent, and the agent's live memory
    (where an approved fact goes), whose text is nearly a previewed one's."""
    if not proposals:
        return
    reviewable = access.proposals_for_review(caller).filter(state=Proposal.State.PENDING)
    others: dict[Any, Proposal] = {p.pk: p for p in proposals}
    for agent_id in {p.agent_id for p in proposals}:
        others.update((p.pk, p) for p in reviewable.filter(agent_id=agent_id).order_by("-created_at", "pk")
                      [:NEAR_PROPOSALS_PER_AGENT])
    texts = {pk: _facts(contents.get(pk, other.content)) for pk, other in others.items()}
    previewed = [text for p in proposals for text in texts[p.pk]]
    try:
        # The page's own facts first: they are compared with everything else.
        vectors = _vectors(caller.tenant.pk, previewed, budget=NEAR_EMBED_BUDGET)
        vectors.update(_vectors(caller.tenant.pk, (t for facts in texts.values() for t in facts),
                                budget=max(0, NEAR_EMBED_BUDGET - len(set(previewed)))))
    except Exception:  # noqa: BLE001 - without the embedder the preview still shows what approving does
        logger.exception("near-duplicate check skipped: the embedder failed")
        for proposal in proposals:
            previews[proposal.pk].near_unchecked = True
        return
    memories: dict[Any, Any] = {}
    for proposal in proposals:
        preview = previews[proposal.pk]
        mine_texts = [text for text in texts[proposal.pk] if text in vectors]
        if len(mine_texts) < len(texts[proposal.pk]):
            preview.near_unchecked = True
            continue
        if not mine_texts:
            continue
        mine = np.stack([vectors[text] for text in mine_texts])
        for other in others.values():
            if other.pk == proposal.pk or other.agent_id != proposal.agent_id:
                continue
            theirs = [vectors[text] for text in texts[other.pk] if text in vectors]
            if not theirs:
                continue
            # The embedder's vectors are L2-normalised: dot products are cosines.
            similarity = float((mine @ np.stack(theirs).T).max())
            if similarity >= NEAR_DUPLICATE_SIMILARITY:
                preview.near.append(NearDuplicate(kind="proposal", text=other.content, similarity=similarity,
                                                  proposal_id=str(other.pk)))
        targets = {c.target_id for c in preview.candidates if c.target_id}
        seen: dict[Any, NearDuplicate] = {}
        if proposal.agent_id not in memories:
            memories[proposal.agent_id] = access.agent_memory_for_review(caller, proposal.agent).filter(
                retired_at__isnull=True, embedding__isnull=False)
        for vector in mine:
            distance = CosineDistance("embedding", [float(x) for x in vector])
            rows = (memories[proposal.agent_id].annotate(distance=distance)
                    .filter(distance__lte=1.0 - NEAR_DUPLICATE_SIMILARITY)
                    .order_by("distance", "pk").values_list("pk", "value", "distance")[:NEAR_MEMORIES_PER_FACT])
            for pk, value, distance in rows:
                if str(pk) in targets:
                    continue  # already named above: approving merges into it or supersedes it
                similarity = 1.0 - float(distance)
                if pk not in seen or seen[pk].similarity < similarity:
                    seen[pk] = NearDuplicate(kind="memory", text=value, similarity=similarity)
        if seen:
            openable = {fragment.pk for fragment in access.fragments_shown_to(
                caller, access.with_access_facts(Fragment.objects.filter(pk__in=list(seen))))}
            preview.near.extend(
                NearDuplicate(kind=item.kind, text=item.text, similarity=item.similarity,
                              fragment_id=str(pk) if pk in openable else None)
                for pk, item in seen.items())
        preview.near.sort(key=lambda item: -item.similarity)
        del preview.near[NEAR_SHOWN_MAX:]


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
