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

The entry point is services.fragments.fragment_write (idempotency, and the
person/agent split): an agent's write is parked as a proposal instead
(services.proposals), and an admin's approval runs `pipeline_run` as the agent.
The outcome is a `WriteOutcome`, which interfaces render (the MCP adapter as
contract 000's memory_write output, the console as a message).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import logging
import re
import unicodedata
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import FloatField, Func, QuerySet, Value
from django.db.models.functions import Cast
from django.utils import timezone
from pgvector import Vector
from pgvector.django import CosineDistance

from memoryhub.database.lookups import Rows
from memoryhub.database.vectors import SentVector, sent_text
from memoryhub.embeddings import get_embedder
from memoryhub.errors import NotFound
from memoryhub.models import Agent, Fragment, Tenant, User
from memoryhub.services.conflicts import lock_key
from memoryhub.services.enrichment import enrichment_enqueue
from memoryhub.services.indexing import fragment_context
from memoryhub.services.privacy import privacy_explanation, privacy_findings

logger = logging.getLogger("memoryhub.write")

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


def live_private(tenant_id: Any, owner_field: str, owner_id: Any) -> QuerySet[Fragment]:
    """The one definition of a writer's live private memory: the unretired
    fragments of a workspace (`tenant_id`) that a person (`owner_field`
    "owner_user") or an agent ("owner_agent") owns (`owner_id`, their key).
    Writer.live_private() reads it, and a write's judgement is compiled from it."""
    if owner_field not in ("owner_user", "owner_agent"):
        raise ValueError(f"a writer is a person or an agent, not {owner_field!r}")
    return Fragment.objects.filter(tenant_id=tenant_id, retired_at__isnull=True, **{owner_field: owner_id})


@dataclass(frozen=True)
class Writer:
    """Whose private memory a write goes to: a person, or an agent whose
    proposal was approved."""

    tenant: Tenant
    user: User | None = None
    agent: Agent | None = None
    client_id: str = ""

    def live_private(self) -> QuerySet[Fragment]:
        return live_private(self.tenant.pk, self.owner_field, self.owner_id)

    @property
    def owner_field(self) -> str:
        return "owner_user" if self.user is not None else "owner_agent"

    @property
    def owner_id(self) -> int:
        return (self.user or self.agent).pk  # type: ignore[union-attr]

    def hold(self) -> None:
        """Take this writer's lock until the transaction ends, and read the
        workspace's write policy in the same statement (not the one read with
        the caller). One write at a time per writer: two concurrent writes must
        not both supersede the same fact or both store the same one, and
        forgetting must not cross a write.

        The same statement has every prepared statement that runs after it in
        the transaction (a write's judgement) planned generically, once for
        every writer, not for each one's values (`plan_cache_mode`, to the end
        of the transaction: of the outermost one, where this runs in a
        savepoint that is released; every caller here begins its own). They
        find rows by exact keys, and the plan that fits is the same for every
        writer; planned for one workspace's values from statistics older than
        it, a workspace PostgreSQL has not counted yet is taken to hold one
        row, and a judgement then read every fact of the writer from the table
        and its vector from out-of-line storage instead of from the writer's
        index (docs/benchmarks.md)."""
        tenant = self.tenant
        with connection.cursor() as cursor:
            # The lock is the statement's first row source: it is taken whatever the join finds.
            cursor.execute(
                f"SELECT t.write_policy, t.blocked_terms::text, set_config('plan_cache_mode', 'force_generic_plan', "  # noqa: S608
                f"true) FROM pg_advisory_xact_lock(%s) AS held LEFT JOIN {Tenant._meta.db_table} AS t ON t.id = %s",
                [self.lock_key, tenant.pk],
            )
            policy, blocked, _ = cursor.fetchone()
        if policy is None:
            raise NotFound("The workspace of this write no longer exists.")
        tenant.write_policy = policy
        tenant.blocked_terms = json.loads(blocked)

    @property
    def lock_key(self) -> int:
        return lock_key(self.tenant.pk, "user" if self.user else "agent", self.owner_id)


def _embed(texts: list[str]) -> list[list[float]] | None:
    if not texts:
        return []
    try:
        return get_embedder().embed(texts)
    except Exception:  # noqa: BLE001 - judged without similarity now, embedded by tier 2 later
        logger.exception("embedding at write time failed; enrichment will embed these facts")
        return None


@dataclass(frozen=True)
class CandidateOutcome:
    """What the pipeline did with one candidate fact."""

    operation: str  # stored / merged / superseded / dropped / proposed
    fragment_id: str | None = None
    superseded_fragment_id: str | None = None
    reason: str | None = None
    explanation: str | None = None

    @classmethod
    def of(cls, operation: str, *, fragment_id: Any = None, superseded: Any = None, reason: str | None = None,
           explanation: str | None = None) -> CandidateOutcome:
        return cls(operation=operation, fragment_id=str(fragment_id) if fragment_id else None,
                   superseded_fragment_id=str(superseded) if superseded else None, reason=reason,
                   explanation=explanation)


@dataclass(frozen=True)
class WriteOutcome:
    """What a write did, candidate by candidate; kept as the first answer to an
    idempotency key and on an approved proposal (`as_record`)."""

    results: tuple[CandidateOutcome, ...] = ()
    # An agent's write: parked as this proposal, awaiting review.
    proposal_id: str | None = None
    review_state: str | None = None
    counts: dict[str, int] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "counts", {
            op: sum(1 for r in self.results if r.operation == op)
            for op in ("stored", "merged", "superseded", "dropped", "proposed")
        })

    @property
    def dropped(self) -> int:
        return self.counts["dropped"]

    @property
    def drop_reasons(self) -> list[str]:
        return list(dict.fromkeys(r.reason for r in self.results if r.operation == "dropped" and r.reason))

    @property
    def summary(self) -> str:
        """One line saying what happened, in plain language."""
        line = _outcome_line(self.counts, self.drop_reasons)
        if self.proposal_id is None:
            return line
        return (f"Parked as proposal {self.proposal_id} for a workspace admin's review; nothing becomes memory "
                f"until a person approves it." + (f" {line}" if self.dropped else ""))

    def as_record(self) -> dict[str, Any]:
        return {
            "results": [vars(result).copy() for result in self.results],
            "proposal_id": self.proposal_id,
            "review_state": self.review_state,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> WriteOutcome:
        keys = ("operation", "fragment_id", "superseded_fragment_id", "reason", "explanation")
        return cls(
            results=tuple(CandidateOutcome(**{key: item.get(key) for key in keys}) for item in record["results"]),
            proposal_id=record.get("proposal_id"),
            review_state=record.get("review_state"),
        )


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


_SAME, _SUBJECT, _NEIGHBOUR = 0, 1, 2


def _judged_rows(writer: Writer, text: str, vector: list[float] | Vector | None) -> dict[int, list[Fragment]]:
    """What _judge weighs, read in one statement from the writer's live private
    memory: the oldest fragment with the same text, the newest with the same
    subject, and the NEIGHBOURS nearest by embedding (exact: ordered by distance,
    then id, over the writer's rows, never from the HNSW graph). Each row is a
    fragment with its id and value loaded, and `kind` and `distance` set."""
    statement, values = judgement_for(writer, text, vector)
    fetched = statement.all(*values)
    found: dict[int, list[Fragment]] = {}
    for pk, value, kind, distance in fetched:
        row = Fragment.from_db(connection.alias, ["id", "value"], [pk, value])
        row.kind, row.distance = kind, distance  # type: ignore[attr-defined]
        found.setdefault(kind, []).append(row)
    return found


def judgement_for(writer: Writer, text: str, vector: list[float] | Vector | None) -> tuple[Rows, list[Any]]:
    """The judgement's statement for `writer`, `text` and `vector`, and its values."""
    subject = subject_of(text)
    values: list[Any] = [writer.tenant.pk, writer.owner_id, fact_hash(text)]
    if subject:
        values.append(subject)
    if vector is not None:
        values.append(sent_text(vector))
    return _judgement(writer.owner_field, bool(subject), vector is not None), values


class _Unindexed(Func):
    """An expression's value as one no index serves: ordering by it reads every
    row the filter keeps and sorts them (exact), where ordering by the
    distance itself could walk the HNSW graph (approximate)."""

    template = "(%(expressions)s + 0)"
    output_field = FloatField()


@functools.cache
def _judgement(owner_field: str, subject: bool, vector: bool) -> Rows:
    """_judged_rows' statement for a writer who is a person (`owner_field`
    "owner_user") or an agent ("owner_agent"), with the same-subject part
    when the text has a subject and the neighbours when it has a vector: each
    part read from live_private(), compiled by Django once per connection and
    run prepared (compiled through the ORM and planned for every candidate, a
    judgement took 5.0 ms; hand-written and prepared, 2.9 on that machine;
    compiled so, with the nearest read from the writer's vector index, 2.8
    against the hand-written one's 3.6 for a writer of 700 live facts, paired
    on a slower one). Its values: the workspace's key, the
    writer's, the text's hash, then its subject and its vector's text where
    the statement has those parts."""
    columns = ("id", "value", "kind", "distance")

    def build(tenant_id: uuid.UUID, owner_id: int, content_hash: str, *rest: str) -> QuerySet[Fragment]:
        live = live_private(tenant_id, owner_field, owner_id)
        nothing = Cast(Value(None), FloatField())
        parts = [live.filter(content_hash=content_hash).annotate(kind=Value(_SAME), distance=nothing)
                 .order_by("recorded_at", "id").values_list(*columns)[:1]]
        given = iter(rest)
        if subject:
            parts.append(live.filter(subject_key=next(given)).annotate(kind=Value(_SUBJECT), distance=nothing)
                         .order_by("-recorded_at", "id").values_list(*columns)[:1])
        if vector:
            # The nearest found by their ids and vectors alone, which the
            # writer's covering index holds (fragment_live_user_vectors,
            # fragment_live_agent_vectors): an index-only scan, where reading
            # each row's vector from the table had been most of the statement's
            # execution. Then their values, and the distance again, for those few.
            distance = _Unindexed(CosineDistance("embedding", Value(next(given))))
            nearest = (live.filter(embedding__isnull=False).annotate(distance=distance)
                       .order_by("distance", "id").values("id")[:NEIGHBOURS])
            parts.append(live.filter(id__in=nearest).annotate(kind=Value(_NEIGHBOUR), distance=distance)
                         .order_by("distance", "id").values_list(*columns)[:NEIGHBOURS])
        first, *others = parts
        if not others:  # one part alone is no union: its own order stands
            return first
        # A union's rows come in no set order unless it is given one: by kind,
        # then the neighbours nearest first (a NaN distance after every number),
        # ties by id.
        return first.union(*others, all=True).order_by("kind", "distance", "id")

    return Rows(build, uuid.UUID, int, str, *[str] * (subject + vector))


def _judge(writer: Writer, text: str, vector: list[float] | Vector | None) -> tuple[str, Fragment | None, str]:
    """merged / superseded / stored against the writer's live private memory.

    * the same text (normalised) is already there: merged;
    * the same subject ("my manager", "standup|at") with another value: superseded;
    * a close neighbour (embedding) that says it with the same words in the
      same order: merged; with the same words reordered, or with one or two
      words changed (a date, a name, a place): superseded, the newer wording wins;
    * anything else: stored.
    """
    found = _judged_rows(writer, text, vector)
    same = found.get(_SAME)
    if same:
        return "merged", same[0], "The same fact is already in your memory."
    previous = found.get(_SUBJECT)
    if previous:
        return "superseded", previous[0], "It updates an earlier fact about the same thing, which is retired."
    if vector is None:
        return "stored", None, ""
    words = content_tokens(text)
    for neighbour in found.get(_NEIGHBOUR, ()):
        similarity = 1.0 - float(vars(neighbour)["distance"])
        # Nearest first, a NaN distance last: past the bound, or where no
        # similarity can be told (an embedding with no direction), none is close.
        if not similarity >= SUPERSEDE_SIMILARITY:
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
) -> WriteOutcome:
    """Run the write pipeline inside the caller's transaction."""
    now = now or timezone.now()
    writer.hold()
    candidates = split_candidates(content)
    results: list[CandidateOutcome | None] = [None] * len(candidates)
    kept: list[int] = []
    for index, text in enumerate(candidates):
        findings = privacy_findings(text)
        if findings:
            results[index] = CandidateOutcome.of(
                "dropped", reason=PRIVACY_DROP, explanation=privacy_explanation(findings)
            )
            continue
        refusal = policy_refusal(tenant=writer.tenant, text=text)
        if refusal:
            results[index] = CandidateOutcome.of("dropped", reason=POLICY_DROP, explanation=refusal)
            continue
        kept.append(index)

    vectors = _embed([candidates[i] for i in kept])
    created: list[Fragment] = []
    for position, index in enumerate(kept):
        text = candidates[index]
        # Sent twice (the judgement, the insert), written as text once.
        vector = SentVector(vectors[position]) if vectors else None
        operation, existing, explanation = _judge(writer, text, vector)
        if operation == "merged":
            assert existing is not None
            results[index] = CandidateOutcome.of(
                "merged", fragment_id=existing.pk, reason="duplicate", explanation=explanation
            )
            continue
        fragment = Fragment.objects.create(
            tenant=writer.tenant,
            owner_user=writer.user,
            owner_agent=writer.agent,
            value=text,
            context=fragment_context(created_at=now),
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
            results[index] = CandidateOutcome.of(
                "superseded", fragment_id=fragment.pk, superseded=existing.pk, reason="updated",
                explanation=explanation,
            )
        else:
            results[index] = CandidateOutcome.of("stored", fragment_id=fragment.pk)

    enrich = [str(f.pk) for f in created if f.embedding is None or f.resource_ref]
    if enrich:
        enrichment_enqueue(fragment_ids=enrich)
    return WriteOutcome(results=tuple(r for r in results if r is not None))


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


