"""memory_write: the write pipeline (decisions 8 and 9).

A write is split into candidate facts. Each candidate, in order:

1. privacy_drop: it carries a secret or a sensitive identifier;
2. policy_drop: the workspace's write policy refuses it;
3. judged against the writer's own live private memory:
   merged (the same fact is already there; nothing is written),
   superseded (same subject, changed value: the old row is retired at this
   instant and points to its successor), or stored.

Everything written is private to the writer. Tier 1 (this module) persists
and answers synchronously; tier 2 (memoryhub.tasks) runs on commit to embed
whatever is still missing and link named resources.

An agent's write is parked as a proposal instead (services.proposals); an
admin's approval runs `pipeline_run` as the agent.

Idempotency: a key (supplied, or derived from the whole payload) answers the
same payload within 24 hours with the first result and writes nothing; a
different payload under the same key is refused for those 24 hours.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from pgvector.django import CosineDistance

from memoryhub.access import Caller
from memoryhub.errors import Conflict, InvalidArgument
from memoryhub.models import Agent, Collection, Fragment, IdempotencyRecord, Resource, Source, Tenant, User
from memoryhub.services import limits
from memoryhub.services.privacy import privacy_explanation, privacy_findings

logger = logging.getLogger("memoryhub.write")

IDEMPOTENCY_WINDOW = dt.timedelta(hours=24)
# Embedding similarity alone cannot tell a paraphrase from a changed value
# ("freeze starts on 20 December" / "on 18 December" are 0.97 apart with
# all-MiniLM-L6-v2), so similarity only nominates a neighbour and the words
# decide (see _judge and the table in tests/memory/test_write_judgement.py).
MERGE_SIMILARITY = 0.90
SUPERSEDE_SIMILARITY = 0.85
NEIGHBOURS = 5
MAX_CANDIDATES = 64
CONFIDENCE_STATED = 0.9
CONFIDENCE_APPROVED_AGENT = 0.8

PRIVACY_DROP = "privacy_drop"
POLICY_DROP = "policy_drop"


# --------------------------------------------------------------------------- candidate facts

_PEM_BLOCK = re.compile(
    r"-----BEGIN [A-Z0-9 ]+-----.*?(?:-----END [A-Z0-9 ]+-----|\Z)", re.DOTALL
)
_BULLET = re.compile(r"^\s*(?:[-*•·‣▪]|\d{1,3}[.)]|[a-z][.)]|#{1,6})\s+")
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_ABBREVIATIONS_TEXT = """
    mr mrs ms dr prof sr jr st vs etc e.g i.e eg ie inc ltd co corp no fig approx dept est al cf jan feb mar
    apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun u.s u.k
"""
_ABBREVIATIONS = frozenset(_ABBREVIATIONS_TEXT.split())


def _sentences(line: str) -> list[str]:
    parts, start = [], 0
    for match in _SENTENCE_END.finditer(line):
        before = line[start:match.start()].rsplit(None, 1)
        word = before[-1].casefold().rstrip(".") if before else ""
        # "Dr. Smith", "e.g. Vim", "J. Doe" and "v2. Then" are not sentence ends.
        if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
            continue
        parts.append(line[start:match.end()].strip())
        start = match.end()
    parts.append(line[start:].strip())
    return [part for part in parts if part]


def split_candidates(content: str) -> list[str]:
    """Candidate facts: one per sentence or list item. A PEM block stays whole
    so the privacy check sees it, and hard-wrapped sentences are rejoined."""
    segments: list[str] = []
    position = 0
    for match in _PEM_BLOCK.finditer(content):
        segments.extend(_text_candidates(content[position:match.start()]))
        segments.append(match.group(0).strip())
        position = match.end()
    segments.extend(_text_candidates(content[position:]))
    facts = [segment for segment in segments if any(ch.isalnum() for ch in segment)]
    if len(facts) > MAX_CANDIDATES:
        # A long note is judged in fewer, larger pieces rather than refused.
        size = -(-len(facts) // MAX_CANDIDATES)
        facts = [" ".join(facts[i:i + size]) for i in range(0, len(facts), size)]
    return facts


def _text_candidates(text: str) -> list[str]:
    lines: list[str] = []
    for raw in text.splitlines():
        bullet = _BULLET.match(raw)
        line = raw[bullet.end():] if bullet else raw
        line = line.strip()
        if not line:
            lines.append("")
            continue
        # A lowercase start after an unfinished line continues the same sentence.
        if lines and lines[-1] and not bullet and line[0].islower() and lines[-1][-1] not in ".!?:":
            lines[-1] = f"{lines[-1]} {line}"
        else:
            lines.append(line)
    facts = []
    for line in lines:
        facts.extend(_sentences(line))
    return facts


# --------------------------------------------------------------------------- normalisation and subjects

_SPACE = re.compile(r"\s+")
_TRAILING = re.compile(r"[\s.!?;,]+$")


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    return _TRAILING.sub("", _SPACE.sub(" ", text).strip())


def fact_hash(text: str) -> str:
    return hashlib.sha256(normalise(text).encode()).hexdigest()


_COPULA = re.compile(
    r"^(?P<subject>.+?)\s+(?:is|are|was|were|is now|are now|has been|have been|will be|equals|=)\s+"
    r"(?P<prep>(?:at|in|on|for|with|from|to|by|under|every)\s+)?(?P<value>.+)$"
)
_COLON = re.compile(r"^(?P<subject>[^:]{2,60}):\s+(?P<value>.+)$")
_EXCLUSIVE_VERB = re.compile(
    r"^(?P<subject>(?:i|we|he|she|they|[\w'-]+(?:\s[\w'-]+)?)\s+(?:live|lives|work|works|report|reports|"
    r"am based|is based|are based|moved|sit|sits)\s+(?:in|at|for|to|on))\s+(?P<value>.+)$"
)
_DETERMINER = re.compile(r"^(?:the|a|an)\s+")
# A subject that is only one of these says nothing about what the fact is about.
_EMPTY_SUBJECTS_TEXT = """
    it this that there here these those which what who he she they we i you one everything something nothing
    anything all some
"""
_EMPTY_SUBJECTS = frozenset(_EMPTY_SUBJECTS_TEXT.split())


def subject_of(text: str) -> str:
    """What a fact is about, normalised ("standup|at", "my favourite editor"),
    or "" when it cannot be told. Two facts of one writer with the same
    subject and different values: the newer supersedes the older."""
    sentence = normalise(text)
    if "\n" in text or len(sentence) > 300:
        return ""
    match = _EXCLUSIVE_VERB.match(sentence)
    if match:
        return _SPACE.sub(" ", match.group("subject"))
    match = _COPULA.match(sentence) or _COLON.match(sentence)
    if not match:
        return ""
    subject = _DETERMINER.sub("", match.group("subject").strip(" \"'"))
    words = subject.split()
    if not words or len(words) > 6 or subject in _EMPTY_SUBJECTS or words[0] in _EMPTY_SUBJECTS:
        return ""
    preposition = (match.groupdict().get("prep") or "").strip()
    # "Ada is the tech lead" / "Ada is a runner": a bare name is too broad a subject.
    if len(words) == 1 and not preposition:
        return ""
    return f"{subject}|{preposition}" if preposition else subject


# --------------------------------------------------------------------------- write policy


def policy_refusal(*, tenant: Tenant, text: str) -> str | None:
    if tenant.write_policy != Tenant.WritePolicy.BLOCKLIST:
        return None
    for term in tenant.blocked_terms or []:
        term = str(term).strip()
        if term and re.search(rf"(?<!\w){re.escape(term)}(?!\w)", text, re.IGNORECASE):
            return f"This workspace's write policy refuses facts that mention {term!r}."
    return None


# --------------------------------------------------------------------------- the pipeline


@dataclass(frozen=True)
class Writer:
    """Whose private memory a write goes to: a person, or an agent whose
    proposal was approved."""

    tenant: Tenant
    user: User | None = None
    agent: Agent | None = None
    client_id: str = ""

    def live_private(self):  # type: ignore[no-untyped-def]
        owner = {"owner_user": self.user} if self.user is not None else {"owner_agent": self.agent}
        return Fragment.objects.filter(tenant=self.tenant, retired_at__isnull=True, **owner)

    @property
    def lock_key(self) -> int:
        digest = hashlib.sha256(
            f"{self.tenant.pk}:{'user' if self.user else 'agent'}:{(self.user or self.agent).pk}".encode()  # type: ignore[union-attr]
        ).digest()
        return int.from_bytes(digest[:8], "big", signed=True)


def _embed(texts: list[str]) -> list[list[float]] | None:
    from memoryhub.embeddings import get_embedder

    if not texts:
        return []
    try:
        return get_embedder().embed(texts)
    except Exception:  # noqa: BLE001 - judged without similarity now, embedded by tier 2 later
        logger.exception("embedding at write time failed; enrichment will embed these facts")
        return None


def candidate_result(operation: str, *, fragment_id: Any = None, superseded: Any = None, reason: str | None = None,
            explanation: str | None = None) -> dict[str, Any]:
    return {
        "operation": operation,
        "fragment_id": str(fragment_id) if fragment_id else None,
        "superseded_fragment_id": str(superseded) if superseded else None,
        "reason": reason,
        "explanation": explanation,
    }


_TOKEN = re.compile(r"[\w@.+-]+")
_STOPWORDS_TEXT = """
    a an the is are was were be been being am to of in on at for with by from over under and or but this
    that these those it its i me my we our us you your he she him his her they them their there here as do
    does did has have had will would shall should can could may might must not no so than then too very just
    also into onto about up out off again once all any both each few more most other some such only own same
    now
"""
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


def content_tokens(text: str) -> list[str]:
    """The words that carry a fact, in order: lowercased, function words
    dropped, a plural -s folded."""
    tokens = []
    for raw in _TOKEN.findall(normalise(text)):
        token = raw.strip(".-+")
        if not token or token in _STOPWORDS:
            continue
        if len(token) > 3 and token.endswith("s") and not token.endswith("ss") and token.isalpha():
            token = token[:-1]
        tokens.append(token)
    return tokens


def _judge(writer: Writer, text: str, vector: list[float] | None) -> tuple[str, Fragment | None, str]:
    """merged / superseded / stored against the writer's live private memory.

    * the same text (normalised) is already there: merged;
    * the same subject ("my manager", "standup|at") with another value: superseded;
    * a close neighbour (embedding) that says it with the same words in the
      same order: merged; with the same words reordered, or with one or two
      words changed (a date, a name, a place): superseded, the newer wording wins;
    * anything else: stored.
    """
    live = writer.live_private()
    same = live.filter(content_hash=fact_hash(text)).order_by("recorded_at", "pk").first()
    if same is not None:
        return "merged", same, "The same fact is already in your memory."
    subject = subject_of(text)
    if subject:
        previous = live.filter(subject_key=subject).order_by("-recorded_at", "pk").first()
        if previous is not None:
            return "superseded", previous, "It updates an earlier fact about the same thing, which is retired."
    if vector is None:
        return "stored", None, ""
    words = content_tokens(text)
    neighbours = (
        live.filter(embedding__isnull=False)
        .annotate(distance=CosineDistance("embedding", vector))
        .order_by("distance", "pk")[:NEIGHBOURS]
    )
    for neighbour in neighbours:
        similarity = 1.0 - float(neighbour.distance)
        if similarity < SUPERSEDE_SIMILARITY:
            break
        theirs = content_tokens(neighbour.value)
        if theirs == words and similarity >= MERGE_SIMILARITY:
            return "merged", neighbour, "An existing fact in your memory already says this."
        mine, other = set(words), set(theirs)
        shared = mine & other
        if mine == other or (
            len(mine - other) <= 2 and len(other - mine) <= 2 and len(shared) >= 2
            and len(shared) * 2 >= len(mine | other)
        ):
            return (
                "superseded", neighbour,
                "It restates an earlier fact with a changed detail; the earlier one is retired.",
            )
    return "stored", None, ""


def pipeline_run(
    *, writer: Writer, content: str, session_id: str = "", resource: str = "", now: dt.datetime | None = None,
    confidence: float = CONFIDENCE_STATED,
) -> dict[str, Any]:
    """Run the write pipeline inside the caller's transaction; returns the
    memory_write output (without review_state)."""
    now = now or timezone.now()
    # The policy in force now, not when the caller object was built.
    writer.tenant.refresh_from_db(fields=["write_policy", "blocked_terms"])
    with connection.cursor() as cursor:
        # One write at a time per writer: two concurrent writes must not both
        # supersede the same fact or both store the same one.
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [writer.lock_key])
    candidates = split_candidates(content)
    results: list[dict[str, Any] | None] = [None] * len(candidates)
    kept: list[int] = []
    for index, text in enumerate(candidates):
        findings = privacy_findings(text)
        if findings:
            results[index] = candidate_result(
                "dropped", reason=PRIVACY_DROP, explanation=privacy_explanation(findings)
            )
            continue
        refusal = policy_refusal(tenant=writer.tenant, text=text)
        if refusal:
            results[index] = candidate_result("dropped", reason=POLICY_DROP, explanation=refusal)
            continue
        kept.append(index)

    vectors = _embed([candidates[i] for i in kept])
    created: list[Fragment] = []
    for position, index in enumerate(kept):
        text = candidates[index]
        vector = vectors[position] if vectors else None
        operation, existing, explanation = _judge(writer, text, vector)
        if operation == "merged":
            assert existing is not None
            results[index] = candidate_result(
                "merged", fragment_id=existing.pk, reason="duplicate", explanation=explanation
            )
            continue
        fragment = Fragment.objects.create(
            tenant=writer.tenant,
            owner_user=writer.user,
            owner_agent=writer.agent,
            value=text,
            subject_key=subject_of(text),
            confidence=confidence,
            grounding_status=Fragment.Grounding.STATED,
            created_at=now,
            recorded_at=now,
            session_id=session_id,
            client_id=writer.client_id,
            resource_ref=resource,
            content_hash=fact_hash(text),
            embedding=vector,
            embedded_at=now if vector is not None else None,
        )
        if writer.agent is not None:
            fragment.agents.add(writer.agent)
        created.append(fragment)
        if operation == "superseded":
            assert existing is not None
            existing.retired_at = now
            existing.retired_reason = Fragment.Retired.SUPERSEDED
            existing.successor = fragment
            existing.save(update_fields=["retired_at", "retired_reason", "successor"])
            results[index] = candidate_result(
                "superseded", fragment_id=fragment.pk, superseded=existing.pk, reason="updated",
                explanation=explanation,
            )
        else:
            results[index] = candidate_result("stored", fragment_id=fragment.pk)

    enrich = [str(f.pk) for f in created if f.embedding is None or f.resource_ref]
    if enrich:
        from memoryhub.services.enrichment import enrichment_enqueue

        enrichment_enqueue(fragment_ids=enrich)
    final = [r for r in results if r is not None]
    return outcome_summary(final)


def outcome_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    counts = {op: sum(1 for r in results if r["operation"] == op) for op in ("stored", "merged", "superseded",
                                                                            "dropped", "proposed")}
    drop_reasons = list(dict.fromkeys(r["reason"] for r in results if r["operation"] == "dropped"))
    return {
        "outcome": _outcome_line(counts, drop_reasons),
        "results": results,
        "review_state": None,
        "dropped": counts["dropped"],
        "drop_reasons": drop_reasons,
    }


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _outcome_line(counts: dict[str, int], drop_reasons: list[str]) -> str:
    parts = []
    if counts["proposed"]:
        parts.append(f"parked {_plural(counts['proposed'], 'fact')} for review")
    if counts["stored"]:
        parts.append(f"stored {_plural(counts['stored'], 'new fact')}")
    if counts["merged"]:
        parts.append(f"merged {_plural(counts['merged'], 'fact')} into existing fragments")
    if counts["superseded"]:
        parts.append(f"superseded {_plural(counts['superseded'], 'older fact')}")
    if counts["dropped"]:
        parts.append(f"dropped {counts['dropped']} ({', '.join(drop_reasons)})")
    if not parts:
        return "Nothing to remember: the content held no fact."
    line = "; ".join(parts)
    return line[0].upper() + line[1:] + "."


# --------------------------------------------------------------------------- idempotency


def _payload_hash(*, content: str, session_id: str, resource: str) -> str:
    payload = json.dumps({"content": content, "session_id": session_id, "resource": resource}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _claim_key(*, tenant: Tenant, principal: str, key: str, payload_hash: str, now: dt.datetime
               ) -> tuple[IdempotencyRecord | None, dict[str, Any] | None]:
    """(record to fill, None) for a new key; (None, first answer) for a retry.
    Inserting first makes a concurrent retry wait on the unique index until
    this write commits, then read its answer."""
    IdempotencyRecord.objects.filter(
        tenant=tenant, principal=principal, key=key, created_at__lte=now - IDEMPOTENCY_WINDOW
    ).delete()
    try:
        with transaction.atomic():
            record = IdempotencyRecord.objects.create(
                tenant=tenant, principal=principal, key=key, payload_hash=payload_hash, response={}, created_at=now
            )
        return record, None
    except IntegrityError:
        existing = IdempotencyRecord.objects.get(tenant=tenant, principal=principal, key=key)
    if existing.payload_hash != payload_hash:
        raise Conflict(
            "This idempotency_key was already used in the last 24 hours for a different write; "
            "use a new key for new content.",
            field="idempotency_key",
        )
    return None, existing.response


# --------------------------------------------------------------------------- the service


def memory_write(
    *,
    caller: Caller,
    content: str,
    session_id: str | None = None,
    resource: str | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """Store facts in the caller's private memory (people) or park them as a
    proposal (agents); returns the memory_write output of contract 000."""
    content = limits.text(content, field="content", max_chars=limits.CONTENT_MAX_CHARS, required=True)
    session_id = limits.text(session_id, field="session_id", max_chars=limits.SESSION_ID_MAX_CHARS)
    resource = limits.text(resource, field="resource", max_chars=limits.RESOURCE_MAX_CHARS).strip()
    if idempotency_key is not None:
        idempotency_key = limits.text(
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
            from memoryhub.services.proposals import proposal_park

            output = proposal_park(caller=caller, content=content, session_id=session_id, resource=resource, now=now)
        else:
            output = pipeline_run(
                writer=Writer(tenant=caller.tenant, user=caller.user, client_id=caller.client_id),
                content=content, session_id=session_id, resource=resource, now=now,
            )
        record.response = output
        record.save(update_fields=["response"])
    return output


# --------------------------------------------------------------------------- connected sources


def fragment_ingest(
    *,
    source: Source,
    value: str,
    collection: Collection | None = None,
    created_at: dt.datetime | None = None,
    resources: Sequence[dict[str, Any]] = (),
    confidence: float = 1.0,
) -> tuple[Fragment, bool]:
    """A connected source contributes a shared fragment (decision 6): into a
    collection, attributed to the source's agent, with its resources and the
    source's own created_at. Returns (fragment, created); the same live text
    in the same collection from the same source is not stored twice."""
    collection = collection or source.default_collection
    if collection is None or collection.tenant_id != source.tenant_id:
        raise InvalidArgument("A source's fragment needs a collection of its own workspace.", field="collection")
    value = limits.text(value, field="value", max_chars=limits.CONTENT_MAX_CHARS, required=True).strip()
    now = timezone.now()
    with transaction.atomic():
        existing = Fragment.objects.filter(
            tenant_id=source.tenant_id, collection=collection, source=source, content_hash=fact_hash(value),
            retired_at__isnull=True,
        ).first()
        if existing is not None:
            return existing, False
        fragment = Fragment.objects.create(
            tenant_id=source.tenant_id,
            collection=collection,
            source=source,
            value=value,
            subject_key=subject_of(value),
            confidence=confidence,
            grounding_status=Fragment.Grounding.GROUNDED if resources else Fragment.Grounding.UNVERIFIED,
            created_at=created_at or now,
            recorded_at=now,
            content_hash=fact_hash(value),
        )
        fragment.agents.add(source.agent)
        for item in resources:
            external_id = limits.text(item.get("id"), field="resources.id", max_chars=limits.RESOURCE_MAX_CHARS,
                                      required=True)
            resource, _ = Resource.objects.get_or_create(
                tenant_id=source.tenant_id, external_id=external_id,
                defaults={"title": item.get("title", "")[:500], "uri": item.get("uri", "")[:2000], "source": source,
                          "created_at": item.get("created_at") or created_at},
            )
            fragment.resources.add(resource)
        from memoryhub.services.enrichment import enrichment_enqueue

        enrichment_enqueue(fragment_ids=[str(fragment.pk)])
    return fragment, True

