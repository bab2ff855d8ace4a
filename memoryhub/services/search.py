"""memory_search: access-checked hybrid retrieval inside one tenant.

A read, in order:

1. validate every argument against the contract's limits;
2. embed the query (outside the transaction: it is most of the cost, and it
   must not hold a connection's snapshot open);
3. in one transaction with statement_timeout armed from the deadline:
   a. the caller's role audience *now* and the read policy (memoryhub.access);
   b. two index queries, each carrying the policy's SQL predicate: pgvector HNSW
      (cosine) with iterative scan, and full-text over a bounded match set;
   c. every candidate row loaded and checked again by the same policy in
      Python; a row that fails is dropped, logged on `memoryhub.enforcement`
      and kept as an EnforcementAlarm;
   d. fusion (weights chosen by measurement, see bench/retrieval_eval.py and
      docs/benchmarks.md), the relevance floor (abstain), the judgment plane's
      arrangement of the already-chosen result;
   e. provenance as this reader may be told it (services.provenance);
   f. the result budget of the interface that asked, if it has one (the MCP
      adapter's 128 KiB tool result): trailing hits that do not fit are
      dropped here, so the receipt records exactly what the client received;
   g. the serving receipt.

`search_execute` does 3a-3f and is also what a receipt replay runs, so a replay
is the identical read. The result is a `SearchResult` of domain objects; the
interfaces render it (the MCP adapter as contract 000's memory_search output,
the pages as HTML).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from django.conf import settings
from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import OperationalError, connection, transaction
from django.db.models import F, Value
from django.utils import timezone
from pgvector.django import CosineDistance

from contract import limits
from memoryhub import access
from memoryhub.access import Caller, ReadPolicy
from memoryhub.embeddings import get_embedder
from memoryhub.errors import DeadlineExceeded, InvalidArgument
from memoryhub.models import TEXT_SEARCH_CONFIG, EnforcementAlarm, Fragment, Receipt, new_receipt_id
from memoryhub.observability import ENFORCEMENT_ALARMS, phase
from memoryhub.services.arguments import checked_instant, checked_int, checked_strings, checked_text
from memoryhub.services.provenance import Provenance, provenance_for

logger = logging.getLogger("memoryhub.search")
enforcement_logger = logging.getLogger("memoryhub.enforcement")


# --------------------------------------------------------------------------- ranking configuration


@dataclass(frozen=True)
class Ranking:
    """How candidates are scored and fused. The default below was chosen by
    measurement on bench/data/retrieval_set.json (bench/retrieval_eval.py);
    docs/benchmarks.md has the comparison it won."""

    fusion: Literal["weighted", "rrf", "vector", "lexical"] = "weighted"
    # The lexical score (r/(r+1) of ts_rank) is an order of magnitude smaller
    # than a cosine similarity, so these weights give both signals a similar
    # say; equal weights or RRF let the weaker ranker drag the result down.
    vector_weight: float = 0.05
    lexical_weight: float = 0.95
    rrf_k: int = 60
    # "or": any of the query's lexemes (recall); "websearch"/"plain": all of them.
    lexical_query: Literal["or", "websearch", "plain"] = "or"
    lexical_ranker: Literal["ts_rank_cd", "ts_rank"] = "ts_rank"
    # PostgreSQL rank normalisation bits; 32 maps a rank r to r/(r+1), a
    # query-independent [0, 1) scale the relevance floor can be set against.
    lexical_normalization: int = 32


RANKING = Ranking()

# How many candidates each index contributes before fusion, per fragment asked for.
CANDIDATES_PER_RESULT = 4
CANDIDATES_MIN = 40
# ts_rank must read every matching row's tsvector, so its cost grows with the
# number of matches (FINDINGS): rank at most this many matches per read.
LEXICAL_MATCH_CAP = 2000
# HNSW candidate list (settings.MEMORYHUB_HNSW_EF_SEARCH); with iterative
# scan, filtered reads keep going until enough visible rows are found. The
# default reaches recall@10 >= 0.95 against exact search under the visibility
# filter at 100k fragments (bench/search_bench.py, docs/benchmarks.md).
def hnsw_ef_search() -> int:
    return int(getattr(settings, "MEMORYHUB_HNSW_EF_SEARCH", 200))
# A fused score below this is no match at all (chosen on the labelled set, see docs/benchmarks.md).
MATCH_THRESHOLD = 0.01
# How much the judgment plane's task affinity can move a fragment, relative to relevance.
JUDGMENT_WEIGHT = 0.5

NOTICE_NOTHING_VISIBLE = (
    "No memory is visible to you yet: you have written none, and no collection your roles can read "
    "holds any."
)
NOTICE_NOTHING_MATCHED = "Nothing in the memory visible to you matched this query."
NOTICE_NOTHING_MATCHED_FILTERS = "Nothing in the memory visible to you matched this query and its filters."
NOTICE_ABSTAINED = "Memory abstained: nothing visible to you was relevant enough to this query to answer it."


# --------------------------------------------------------------------------- request


@dataclass(frozen=True)
class SearchRequest:
    """A validated memory_search request in canonical form (what a receipt keeps)."""

    query: str
    limit: int = limits.LIMIT_DEFAULT
    as_of: dt.datetime | None = None
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None
    resource_ids: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    task: str = ""
    task_tags: tuple[str, ...] = ()

    @classmethod
    def validated(
        cls,
        *,
        query: Any,
        limit: Any = None,
        as_of: Any = None,
        created_after: Any = None,
        created_before: Any = None,
        resource_ids: Any = None,
        agents: Any = None,
        task: Any = None,
        task_tags: Any = None,
    ) -> SearchRequest:
        request = cls(
            query=checked_text(query, field="query", max_chars=limits.QUERY_MAX_CHARS, required=True),
            limit=checked_int(
                limit, field="limit", minimum=limits.LIMIT_MIN, maximum=limits.LIMIT_MAX,
                default=limits.LIMIT_DEFAULT,
            ),
            as_of=checked_instant(as_of, field="as_of"),
            created_after=checked_instant(created_after, field="created_after"),
            created_before=checked_instant(created_before, field="created_before"),
            resource_ids=checked_strings(
                resource_ids, field="resource_ids", max_items=limits.RESOURCE_IDS_MAX_ITEMS,
                item_max_chars=limits.RESOURCE_MAX_CHARS,
            ),
            agents=checked_strings(
                agents, field="agents", max_items=limits.AGENTS_MAX_ITEMS,
                item_max_chars=limits.AGENT_NAME_MAX_CHARS,
            ),
            task=checked_text(task, field="task", max_chars=limits.TASK_MAX_CHARS).strip(),
            task_tags=checked_strings(
                task_tags, field="task_tags", max_items=limits.TASK_TAGS_MAX_ITEMS,
                item_max_chars=limits.TASK_TAG_MAX_CHARS,
            ),
        )
        if request.created_after and request.created_before and request.created_after >= request.created_before:
            raise InvalidArgument("created_after must be earlier than created_before.", field="created_after")
        return request

    def as_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "limit": self.limit,
            "as_of": iso_instant(self.as_of),
            "created_after": iso_instant(self.created_after),
            "created_before": iso_instant(self.created_before),
            "resource_ids": list(self.resource_ids),
            "agents": list(self.agents),
            "task": self.task,
            "task_tags": list(self.task_tags),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SearchRequest:
        return cls.validated(**{key: data.get(key) for key in (
            "query", "limit", "as_of", "created_after", "created_before", "resource_ids", "agents", "task",
            "task_tags",
        )})

    @property
    def has_filters(self) -> bool:
        return bool(self.resource_ids or self.agents or self.created_after or self.created_before)


# --------------------------------------------------------------------------- deadline


class Deadline:
    """The upstream read's time budget. Each statement runs with
    statement_timeout set to what is left, so a slow read is cancelled by
    PostgreSQL itself rather than left running after we gave up on it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds

    def remaining(self) -> float:
        left = self.ends - time.monotonic()
        if left <= 0:
            raise self.exceeded()
        return left

    def arm(self) -> None:
        milliseconds = max(1, int(self.remaining() * 1000))
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [f"{milliseconds}ms"])

    def exceeded(self) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"The search did not finish within its {self.seconds:g} s deadline and was cancelled. "
            "Retry, or narrow the query."
        )


def is_cancelled(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc.__cause__, psycopg.errors.QueryCanceled)


# --------------------------------------------------------------------------- the result


@dataclass
class Hit:
    fragment: Fragment
    score: float
    provenance: Provenance = field(default_factory=Provenance)


@dataclass
class SearchResult:
    """One read's answer: the hits in rank order and what the receipt records."""

    hits: list[Hit]
    receipt_id: str
    as_of: dt.datetime
    abstained: bool = False
    abstain_reason: str | None = None
    notice: str | None = None
    # Trailing hits were dropped to fit the asking interface's result budget.
    truncated: bool = False

    @property
    def served_ids(self) -> list[str]:
        return [str(hit.fragment.pk) for hit in self.hits]


class ResultBudget(Protocol):
    """An interface's bound on the size of what it sends (the MCP adapter's
    128 KiB tool result). Applied once, by the search, before the receipt is
    written; a replay of the receipt applies the same budget by name."""

    @property
    def name(self) -> str: ...

    def fitting(self, result: SearchResult) -> int:
        """How many of `result.hits`, from the first, fit (with truncated set)."""
        ...


_BUDGETS: dict[str, ResultBudget] = {}


def budget_register(budget: ResultBudget) -> ResultBudget:
    """Make an interface's result budget known by name, so a replay of a read
    that was cut to it is cut the same way, whoever replays it."""
    _BUDGETS[budget.name] = budget
    return budget


def budget_named(name: str) -> ResultBudget | None:
    return _BUDGETS.get(name) if name else None


# --------------------------------------------------------------------------- the service


def fragments_search(
    *,
    caller: Caller,
    query: str,
    limit: int | None = None,
    as_of: dt.datetime | str | None = None,
    created_after: dt.datetime | str | None = None,
    created_before: dt.datetime | str | None = None,
    resource_ids: Sequence[str] | None = None,
    agents: Sequence[str] | None = None,
    task: str | None = None,
    task_tags: Sequence[str] | None = None,
    deadline_seconds: float | None = None,
    budget: ResultBudget | None = None,
) -> SearchResult:
    """memory_search: what `caller` may see that matches, in rank order; the
    serving receipt is recorded in the same transaction."""
    request = SearchRequest.validated(
        query=query, limit=limit, as_of=as_of, created_after=created_after, created_before=created_before,
        resource_ids=resource_ids, agents=agents, task=task, task_tags=task_tags,
    )
    deadline = Deadline(deadline_seconds or settings.MEMORYHUB_SEARCH_DEADLINE_SECONDS)
    now = timezone.now()
    # An instant in the future has not happened yet: the read is evaluated now,
    # and the receipt keeps that instant so a replay cannot see later memory.
    instant = min(request.as_of, now) if request.as_of else now
    receipt_id = new_receipt_id()
    try:
        with transaction.atomic():
            execution = search_execute(
                caller=caller, request=request, as_of=instant, deadline=deadline, receipt_id=receipt_id,
                budget=budget,
            )
            with phase("receipt"):
                Receipt.objects.create(
                    id=receipt_id,
                    tenant=caller.tenant,
                    reader_user=caller.user,
                    reader_agent=caller.agent,
                    principal_kind=caller.kind,
                    subject=caller.subject,
                    client_id=caller.client_id,
                    roles=list(execution.audience.role_names),
                    request=request.as_json(),
                    as_of=instant,
                    as_of_explicit=request.as_of is not None,
                    served=execution.result.served_ids,
                    abstained=execution.result.abstained,
                    budget=budget.name if budget is not None else "",
                )
    except OperationalError as exc:
        if is_cancelled(exc):
            raise deadline.exceeded() from exc
        raise
    return execution.result


@dataclass
class Execution:
    result: SearchResult
    audience: access.Audience
    degraded: bool = False
    alarms: list[str] = field(default_factory=list)


def search_execute(
    *, caller: Caller, request: SearchRequest, as_of: dt.datetime, deadline: Deadline, receipt_id: str,
    ranking: Ranking | None = None, budget: ResultBudget | None = None,
) -> Execution:
    """The read itself, inside the caller's transaction; writes nothing but
    enforcement alarms. Receipt replays call this with the original request."""
    # Embedding first: PostgreSQL opens the transaction at the first statement,
    # so the slowest step does not keep a snapshot open.
    with phase("embedding"):
        vectors = _embed([request.query])
    query_vector = vectors[0] if vectors else None
    tenant = caller.tenant
    tenant.refresh_from_db(fields=["judgment_plane", "relevance_floor"])
    judging = tenant.judgment_plane and bool(request.task or request.task_tags)
    task_vector = None
    if judging and query_vector is not None:
        task_vectors = _embed([" ".join([request.task, *request.task_tags]).strip()])
        task_vector = task_vectors[0] if task_vectors else None
    with index_settings():
        execution = _execute(
            caller=caller, request=request, as_of=as_of, deadline=deadline, receipt_id=receipt_id,
            ranking=ranking or RANKING, query_vector=query_vector, task_vector=task_vector, judging=judging,
        )
    if budget is not None and execution.result.hits:
        result = execution.result
        fitting = budget.fitting(result)
        if fitting < len(result.hits):
            result.hits = result.hits[:max(0, fitting)]
            result.truncated = True
    return execution


def _execute(
    *, caller: Caller, request: SearchRequest, as_of: dt.datetime, deadline: Deadline, receipt_id: str,
    ranking: Ranking, query_vector: list[float] | None, task_vector: list[float] | None, judging: bool,
) -> Execution:
    tenant = caller.tenant
    policy = access.read_policy(
        caller=caller, as_of=as_of, agents=request.agents, resource_ids=request.resource_ids,
        created_after=request.created_after, created_before=request.created_before,
    )
    candidates, rows, alarms = scored_candidates(
        policy=policy, query=request.query, query_vector=query_vector, limit=request.limit, deadline=deadline,
        ranking=ranking, load_embeddings=judging,
    )
    ranked = _fuse(candidates, rows, ranking)
    # Below the match threshold a candidate is not a match at all: nearest
    # neighbours always exist, relevant or not.
    ranked = [hit for hit in ranked if hit.score >= MATCH_THRESHOLD]
    abstained, abstain_reason = False, None
    floor = tenant.relevance_floor
    if ranked and ranked[0].score < floor:
        abstained = True
        abstain_reason = (
            f"No visible fragment reached this workspace's relevance floor of {floor:g} "
            f"(the best scored {ranked[0].score:.3f}), so memory declined to answer rather than guess."
        )
    ranked = [hit for hit in ranked if hit.score >= floor][: request.limit]
    provenance = provenance_for(caller, [hit.fragment for hit in ranked], named_agent_ids=policy.named_agent_ids,
                                audience=policy.audience)
    for hit in ranked:
        hit.provenance = provenance[hit.fragment.pk]
    if judging and ranked:
        ranked = _arrange(ranked, task_vector=task_vector, task_tags=request.task_tags)

    notice = None
    if not ranked:
        deadline.arm()
        if not access.visible_fragments(policy.unnarrowed()).exists():
            notice = NOTICE_NOTHING_VISIBLE
        elif abstained:
            notice = NOTICE_ABSTAINED
        else:
            notice = NOTICE_NOTHING_MATCHED_FILTERS if request.has_filters else NOTICE_NOTHING_MATCHED

    result = SearchResult(hits=ranked, receipt_id=receipt_id, as_of=as_of, abstained=abstained,
                          abstain_reason=abstain_reason, notice=notice)
    return Execution(result=result, audience=policy.audience, degraded=query_vector is None, alarms=alarms)


def scored_candidates(
    *, policy: ReadPolicy, query: str, query_vector: list[float] | None, limit: int, deadline: Deadline,
    ranking: Ranking, load_embeddings: bool = False,
) -> tuple[dict[uuid.UUID, Candidate], dict[uuid.UUID, Fragment], list[str]]:
    """Both index queries under the policy, then every candidate loaded, scored
    and checked again. Returns (candidates, rows that passed, alarmed ids).
    Run inside `index_settings()` (search_execute does)."""
    deadline.arm()
    read_query = ReadQuery(text=query, vector=query_vector, tsquery=tsquery_for(query, ranking))
    candidates = _candidates(policy=policy, read_query=read_query, limit=limit, deadline=deadline, ranking=ranking)
    deadline.arm()
    with phase("row_check"):
        rows, alarms = _checked_rows(
            policy=policy, candidates=candidates, read_query=read_query, load_embeddings=load_embeddings,
            ranking=ranking,
        )
    return {pk: c for pk, c in candidates.items() if pk in rows}, rows, alarms


def _embed(texts: list[str]) -> list[list[float]] | None:
    try:
        return get_embedder().embed(texts)
    except Exception:  # noqa: BLE001 - a failing embedder degrades search to lexical, it does not fail it
        logger.exception("query embedding failed; answering from full-text search alone")
        return None


class index_settings:
    """Planner settings for this transaction only, restored afterwards so an
    outer transaction (a test, a console view) does not inherit them, nor the
    statement_timeout the deadline arms. One round trip each way."""

    RESTORED = ("hnsw.ef_search", "hnsw.iterative_scan", "statement_timeout")

    def __enter__(self) -> None:
        wanted = {"hnsw.ef_search": str(hnsw_ef_search()), "hnsw.iterative_scan": "relaxed_order"}
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT " + ", ".join(["current_setting(%s, true)"] * len(self.RESTORED)) + ", "
                + ", ".join(["set_config(%s, %s, true)"] * len(wanted)),
                [*self.RESTORED, *(item for pair in wanted.items() for item in pair)],
            )
            self.saved = dict(zip(self.RESTORED, cursor.fetchone()[: len(self.RESTORED)], strict=True))

    def __exit__(self, exc_type, exc, tb) -> None:  # type: ignore[no-untyped-def]
        if exc_type is not None:
            return  # the transaction is aborted; rolling it back undoes SET LOCAL
        restore = {name: value for name, value in self.saved.items() if value}
        with connection.cursor() as cursor:
            if restore:
                cursor.execute("SELECT " + ", ".join(["set_config(%s, %s, true)"] * len(restore)),
                               [item for pair in restore.items() for item in pair])
            for name in self.saved.keys() - restore.keys():
                # Unset before (pgvector not loaded yet in this session): back to its default.
                cursor.execute(f"SET LOCAL {name} TO DEFAULT")


# --------------------------------------------------------------------------- layer 1: index queries


@dataclass
class Candidate:
    """What the index queries and the scoring pass know about one candidate."""

    vector_rank: int | None = None
    lexical_rank: int | None = None
    vector_similarity: float | None = None
    lexical_score: float | None = None


@dataclass(frozen=True)
class ReadQuery:
    text: str
    vector: list[float] | None
    tsquery: SearchQuery | None


def index_filter(policy: ReadPolicy):  # type: ignore[no-untyped-def]
    """The predicate both index queries carry (a seam tests replace to prove
    the row check stands on its own)."""
    return policy.queryset_filter()


def candidate_pool(limit: int) -> int:
    return max(CANDIDATES_MIN, CANDIDATES_PER_RESULT * limit)


def _candidates(
    *, policy: ReadPolicy, read_query: ReadQuery, limit: int, deadline: Deadline, ranking: Ranking | None = None,
) -> dict[uuid.UUID, Candidate]:
    ranking = ranking or RANKING
    pool = candidate_pool(limit)
    predicate = index_filter(policy)
    found: dict[uuid.UUID, Candidate] = {}
    if read_query.vector is not None and ranking.fusion != "lexical":
        deadline.arm()
        with phase("vector_query"):
            ranked = vector_candidates(predicate, read_query.vector, pool)
        for rank, pk in enumerate(ranked):
            found.setdefault(pk, Candidate()).vector_rank = rank
    # Without a query vector (embedder down) full-text answers alone.
    if read_query.tsquery is not None and (ranking.fusion != "vector" or read_query.vector is None):
        deadline.arm()
        with phase("lexical_query"):
            ranked = lexical_candidates(predicate, read_query.tsquery, pool, ranking)
        for rank, pk in enumerate(ranked):
            found.setdefault(pk, Candidate()).lexical_rank = rank
    return found


def vector_candidates(predicate, query_vector: list[float], k: int) -> list[uuid.UUID]:  # type: ignore[no-untyped-def]
    # ORDER BY the distance alone (no tie-breaker) so the planner can walk the HNSW index.
    return list(
        Fragment.objects.filter(predicate, embedding__isnull=False)
        .order_by(CosineDistance("embedding", query_vector))
        .values_list("pk", flat=True)[:k]
    )


_LEXEME_QUOTE = re.compile(r"['\\]")


def tsquery_for(query: str, ranking: Ranking) -> SearchQuery | None:
    if ranking.lexical_query == "websearch":
        return SearchQuery(query, config=TEXT_SEARCH_CONFIG, search_type="websearch")
    if ranking.lexical_query == "plain":
        return SearchQuery(query, config=TEXT_SEARCH_CONFIG, search_type="plain")
    # OR of the query's own lexemes, stemmed and stop-worded by the same
    # configuration as the stored tsvector; 'simple' then keeps them as they are.
    with connection.cursor() as cursor:
        cursor.execute("SELECT tsvector_to_array(to_tsvector(%s::regconfig, %s))", [TEXT_SEARCH_CONFIG, query])
        lexemes = cursor.fetchone()[0] or []
    if not lexemes:
        return None
    raw = " | ".join("'" + _LEXEME_QUOTE.sub(lambda m: m.group(0) * 2, lexeme) + "'" for lexeme in lexemes)
    return SearchQuery(raw, config="simple", search_type="raw")


def _lexical_rank(tsquery: SearchQuery, ranking: Ranking) -> SearchRank:
    return SearchRank(
        F("search_vector"), tsquery, cover_density=ranking.lexical_ranker == "ts_rank_cd",
        normalization=Value(ranking.lexical_normalization),
    )


def lexical_candidates(predicate, tsquery: SearchQuery, k: int, ranking: Ranking | None = None,  # type: ignore[no-untyped-def]
                       cap: int = LEXICAL_MATCH_CAP) -> list[uuid.UUID]:
    ranking = ranking or RANKING
    # Bound the set ts_rank has to read: the newest `cap` visible matches.
    matches = (
        Fragment.objects.filter(predicate).filter(search_vector=tsquery).order_by("-recorded_at").values("pk")[:cap]
    )
    return list(
        Fragment.objects.filter(pk__in=matches)
        .order_by(_lexical_rank(tsquery, ranking).desc(), "pk")
        .values_list("pk", flat=True)[:k]
    )


# --------------------------------------------------------------------------- layer 2: row check


def row_refusal(policy: ReadPolicy, fragment: Fragment) -> str | None:
    """Why this row may not be served (None: it may). A seam tests replace to
    prove the SQL predicate stands on its own."""
    return policy.refusal(fragment)


def _checked_rows(
    *, policy: ReadPolicy, candidates: dict[uuid.UUID, Candidate], read_query: ReadQuery, load_embeddings: bool,
    ranking: Ranking | None = None,
) -> tuple[dict[uuid.UUID, Fragment], list[str]]:
    """Load every candidate, score it on both signals (a candidate only one
    index found still gets its true score on the other), and check it again."""
    ranking = ranking or RANKING
    queryset = access.with_access_facts(Fragment.objects.filter(pk__in=list(candidates))).select_related("collection")
    if read_query.vector is not None:
        queryset = queryset.annotate(distance=CosineDistance("embedding", read_query.vector))
    if read_query.tsquery is not None:
        queryset = queryset.annotate(lexical=_lexical_rank(read_query.tsquery, ranking))
    if not load_embeddings:
        queryset = queryset.defer("embedding")
    rows: dict[uuid.UUID, Fragment] = {}
    alarms = []
    for fragment in queryset:
        refusal = row_refusal(policy, fragment)
        if refusal is None:
            rows[fragment.pk] = fragment
            candidate = candidates[fragment.pk]
            distance = getattr(fragment, "distance", None)
            candidate.vector_similarity = None if distance is None else 1.0 - float(distance)
            candidate.lexical_score = float(getattr(fragment, "lexical", 0.0) or 0.0)
            continue
        alarms.append(str(fragment.pk))
        ENFORCEMENT_ALARMS.inc()
        enforcement_logger.warning(
            "row check refused a fragment the index query returned: tenant=%s fragment=%s reader=%s:%s reason=%s",
            policy.caller.tenant.pk, fragment.pk, policy.caller.kind, policy.caller.subject, refusal,
        )
        EnforcementAlarm.objects.create(
            tenant=policy.caller.tenant, fragment_id=fragment.pk, subject=policy.caller.subject[:255],
            principal_kind=policy.caller.kind, reason=refusal[:200],
        )
    return rows, alarms


# --------------------------------------------------------------------------- fusion and arrangement


def fuse_scores(candidates: dict[uuid.UUID, Candidate], ranking: Ranking | None = None) -> dict[uuid.UUID, float]:
    """A relevance score in [0, 1] per candidate."""
    ranking = ranking or RANKING
    scores: dict[uuid.UUID, float] = {}
    for pk, candidate in candidates.items():
        vector = max(0.0, candidate.vector_similarity or 0.0)
        lexical = candidate.lexical_score or 0.0
        if ranking.fusion == "vector":
            score = vector
        elif ranking.fusion == "lexical":
            score = lexical
        elif ranking.fusion == "rrf":
            total = ranking.vector_weight + ranking.lexical_weight
            score = 0.0
            if candidate.vector_rank is not None:
                score += ranking.vector_weight / (ranking.rrf_k + candidate.vector_rank + 1)
            if candidate.lexical_rank is not None:
                score += ranking.lexical_weight / (ranking.rrf_k + candidate.lexical_rank + 1)
            # Scaled so a fragment first in both lists scores 1.
            score = score * (ranking.rrf_k + 1) / total
        else:
            score = (ranking.vector_weight * vector + ranking.lexical_weight * lexical) / (
                ranking.vector_weight + ranking.lexical_weight
            )
        scores[pk] = min(1.0, max(0.0, score))
    return scores


def _fuse(candidates: dict[uuid.UUID, Candidate], rows: dict[uuid.UUID, Fragment], ranking: Ranking) -> list[Hit]:
    scores = fuse_scores(candidates, ranking)
    # Ties broken by id: the same rules, data and instant give the same order.
    ordered = sorted(scores.items(), key=lambda item: (-item[1], str(item[0])))
    return [Hit(fragment=rows[pk], score=score) for pk, score in ordered]


_WORD = re.compile(r"[\w'-]+")


def _arrange(hits: list[Hit], *, task_vector: list[float] | None, task_tags: Sequence[str]) -> list[Hit]:
    """Judgment plane: order the already-chosen fragments for the caller's task.
    Works on the served set only, so the task can never add or remove a fragment."""
    tags = [tag.casefold() for tag in task_tags]

    def affinity(hit: Hit) -> float:
        fragment = hit.fragment
        semantic = 0.0
        if task_vector is not None and fragment.embedding is not None:
            semantic = max(0.0, float(sum(a * b for a, b in zip(task_vector, fragment.embedding, strict=False))))
        tagged = 0.0
        if tags:
            # Titles as this reader may be told them: a document they may not
            # read must not move their ranking either.
            haystack = " ".join(
                [fragment.value, fragment.collection.name if fragment.collection else ""]
                + [document.title for document in hit.provenance.documents]
            ).casefold()
            words = set(_WORD.findall(haystack))
            tagged = sum(1 for tag in tags if tag in words or (" " in tag and tag in haystack)) / len(tags)
        return 0.5 * semantic + 0.5 * tagged if tags and task_vector is not None else semantic or tagged

    return sorted(hits, key=lambda hit: (-(hit.score + JUDGMENT_WEIGHT * affinity(hit)), str(hit.fragment.pk)))


# --------------------------------------------------------------------------- instants


def iso_instant(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z") if value else None
