"""memory_search: access-checked hybrid retrieval inside one tenant.

A read, in order:

1. validate every argument against the contract's limits;
2. embed the query: where the encoder leaves the process a core, on a thread
   of its own (Embedding) while 3a runs and 3b's statement is compiled, 3b
   waiting for the vector; otherwise at once, before any statement;
3. its statements cancelled when the deadline passes, each atomic on its own
   (a search needs no transaction; inside a caller's, it is a savepoint):
   a. the caller's role audience *now* and the read policy (memoryhub.access);
   b. two index queries, each carrying the policy's SQL predicate: pgvector HNSW
      (cosine) with iterative scan, and full-text over a bounded match set
      (with BM25, one statement);
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

import contextlib
import contextvars
import datetime as dt
import functools
import hashlib
import inspect
import json
import logging
import math
import os
import re
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal, NamedTuple, Protocol, TypeVar, get_args, get_origin, get_type_hints

from django.conf import settings
from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections, transaction
from django.db.models import Case, DateTimeField, F, JSONField, Model, Q, QuerySet, Value, When, signals
from django.db.models.base import ModelState
from django.utils import timezone
from pgvector import Vector
from pgvector.django import CosineDistance

from contract import limits
from contract.receipt_chain import value_hash
from memoryhub import access, cancel_watch
from memoryhub.access import Caller, ReadPolicy
from memoryhub.database import prepared, replicas
from memoryhub.database.lookups import marker_elsewhere, marker_places

# Every statement of a read runs on the read pool's connection: the replica
# chosen for it (replicas.on_pool), or the primary's.
from memoryhub.database.replicas import read_connection as connection
from memoryhub.database.vectors import SentVector, sent_text
from memoryhub.embeddings import embedder_class, get_embedder, leaves_a_core
from memoryhub.errors import DeadlineExceeded, InvalidArgument
from memoryhub.models import (
    TEXT_SEARCH_CONFIG,
    Agent,
    Collection,
    EnforcementAlarm,
    Fragment,
    FragmentTally,
    Receipt,
    Resource,
    Source,
    Tenant,
    new_receipt_id,
)
from memoryhub.observability import ENFORCEMENT_ALARMS, phase
from memoryhub.services import receipt_chain
from memoryhub.services.arguments import checked_instant, checked_int, checked_strings, checked_text
from memoryhub.services.provenance import NOT_GROUNDED, Provenance, provenance_for

logger = logging.getLogger("memoryhub.search")
enforcement_logger = logging.getLogger("memoryhub.enforcement")
M = TypeVar("M", bound=Model)


# --------------------------------------------------------------------------- ranking configuration


@dataclass(frozen=True)
class Ranking:
    """How candidates are scored and fused. The default was chosen by
    measurement on real conversations (bench/locomo_eval.py) and checked on
    the labelled set (bench/retrieval_eval.py); docs/benchmarks.md has the
    rule it was chosen by and the comparison it won."""

    fusion: Literal["weighted", "rrf", "vector", "lexical"] = "weighted"
    # Weighted fusion: lexical (BM25 over the ideal score of the query, in
    # [0, 1)) and cosine similarity, both on an absolute scale.
    vector_weight: float = 0.3
    lexical_weight: float = 0.7
    rrf_k: int = 60
    # "or": any of the query's lexemes (recall); "websearch"/"plain": all of them.
    lexical_query: Literal["or", "websearch", "plain"] = "or"
    # bm25: Okapi BM25 with the reader's own statistics (see lexical_scored);
    # ts_rank/ts_rank_cd: PostgreSQL's ranks (no inverse document frequency),
    # kept for comparison in bench/retrieval_eval.py.
    lexical_ranker: Literal["bm25", "ts_rank_cd", "ts_rank"] = "bm25"
    bm25_k1: float = 0.8
    bm25_b: float = 0.3
    # A word of the fragment itself counts this much more than a word of its context.
    own_words_weight: float = 2.0
    # A fragment of a document is helped by the best-scoring visible candidate
    # right beside it (the turn before or after) and by the best one anywhere
    # in the same document: a reply is found with the question it answers.
    neighbour_weight: float = 1.0
    document_weight: float = 0.3
    # A turn that only asks ("What pet do you have?") states nothing a reader
    # is looking for, though it shares the question's words: the score of a
    # document's fragment is multiplied by 1 - asking_weight x the share of
    # its sentences that are questions (asking_share). Its neighbours are
    # helped by its full score: a question points at the answer after it.
    asking_weight: float = 0.4
    # A question written in a hedged, hypothetical form ("Would Melanie likely
    # enjoy Vivaldi?", QUESTION_FORM_WORDS) asks for an inference, and its
    # evidence rarely shares its words: in the scores that order it the cosine
    # has this share and BM25 the rest (weighted fusion; at most 1). Matching,
    # scores shown and the relevance floor keep the weights above
    # (ordered_matches).
    hedged_vector_weight: float = 0.6
    # PostgreSQL rank normalisation bits for ts_rank (32: r/(r+1)).
    lexical_normalization: int = 32


RANKING = Ranking()

# How many candidates each index contributes before fusion, per fragment asked
# for: deep lists help (the right turn is often 20th-50th on one signal alone).
CANDIDATES_PER_RESULT = 4
CANDIDATES_MIN = 50
# Scoring must read every matching row's tsvector, so its cost grows with the
# number of matches (FINDINGS): score at most this many matches per read.
LEXICAL_MATCH_CAP = 2000
# HNSW candidate list (settings.MEMORYHUB_HNSW_EF_SEARCH); with iterative
# scan, filtered reads keep going until enough visible rows are found. The
# default reaches recall@10 >= 0.95 against exact search under the visibility
# filter at 100k fragments (bench/search_bench.py, docs/benchmarks.md).
def hnsw_ef_search() -> int:
    return int(getattr(settings, "MEMORYHUB_HNSW_EF_SEARCH", 200))
# A candidate without query words that weigh (LEXICAL_MATCH_MIN) that scores
# below this is no match at all: nearest neighbours always exist, relevant or
# not. 0.05 is a cosine similarity of about 0.17 on its own; on the labelled
# set it loses no relevant hit (the sweep in docs/benchmarks.md).
MATCH_THRESHOLD = 0.05
# A candidate whose BM25 score reaches this share of the query's ideal score
# matches whatever its fused score (one rare query word in it is plenty).
LEXICAL_MATCH_MIN = 0.02
# How much the judgment plane's task affinity can move a fragment, relative to relevance.
JUDGMENT_WEIGHT = 0.5

# The code that turns a Ranking's fields into an order (the queries, BM25,
# fusion, matching, the judgment plane's arrangement). A receipt's replay
# reuses the parameters it recorded only while this code is what it was
# (ranking_revision), so no change to it can pass for the identical ranking.
ORDERING_CODE = (
    "candidate_pool", "QueryVector", "read_query_for", "query_lexemes", "_lexemes_sql", "_quoted", "_raw_lexemes",
    "tsquery_for",
    "index_queries", "tallied_statistics", "_nearest_into", "_lexical_into", "_nearest", "nearest_rows",
    "vector_candidates", "LexicalScores", "lexical_scored",
    "shares_statement", "index_predicate", "compiled_predicate", "_predicate_at_marker", "_compile_predicate",
    "CompiledPredicate", "bm25_statement", "BM25Statement", "_VectorSlot",
    "reader_totals_sql", "_reader_totals_statement", "_instant_places", "_reader_totals_compiled", "_lexical_rank",
    "lexical_candidates", "row_check_statement", "RowCheckStatement", "_converters", "_converted_when",
    "_Later", "_checked_rows", "_Aware", "_zoned", "_RowsRead", "row_check",
    "_own_document",
    "fuse_scores", "_with_neighbours", "asking_share", "_own_scores", "is_match", "ordered_matches",
    "_arrange", "is_hedged",
)


_DIGEST_LOCK = threading.Lock()
_digest: str | None = None


def ordering_code_digest() -> str:
    """A digest of ORDERING_CODE's source (of its compiled code where the
    source is not deployed): any edit changes it, even one that changes no
    order, which only costs a replay its recorded parameters.

    Worked out once per process, by one thread: reading the source parses
    this module (inspect's ast.parse, for each class), and CPython 3.11's
    parser failed now and then with two threads at it ("AST constructor
    recursion depth mismatch"), which failed a search when a server worker's
    first searches came at once."""
    global _digest
    if _digest is None:
        with _DIGEST_LOCK:
            if _digest is None:
                _digest = _ordering_code_digest()
    return _digest


def _ordering_code_digest() -> str:
    digest = hashlib.sha256()
    for name in ORDERING_CODE:
        function = globals()[name]
        try:
            digest.update(inspect.getsource(function).encode())
        except (OSError, TypeError):
            digest.update(repr(_compiled(function)).encode())
    return digest.hexdigest()


def _compiled(item: Any) -> Any:
    """What a function (a cached one's own) or a class (its methods,
    properties and cached ones included, and its plain values) was compiled
    into, written the same in every process: marshal's bytes are not
    promised to be (they may follow reference counts, and the order of a set
    of strings follows the process's hash seed)."""
    if not isinstance(item, type):
        return _stable(inspect.unwrap(item).__code__)
    members = []
    for name, member in sorted(vars(item).items()):
        if name.startswith("__"):
            continue
        for part in (member, getattr(member, "func", None), getattr(member, "fget", None),
                     getattr(member, "__func__", None)):
            if hasattr(part, "__code__"):
                members.append((name, _stable(part.__code__)))  # type: ignore[union-attr]
                break
        else:
            members.append((name, _stable(member)))
    return members


def _stable(value: Any) -> Any:
    if isinstance(value, types.CodeType):
        return (value.co_name, value.co_code, value.co_names, value.co_varnames,
                [_stable(const) for const in value.co_consts])
    if isinstance(value, frozenset | set):
        return sorted(repr(_stable(item)) for item in value)
    if isinstance(value, tuple | list):
        return [_stable(item) for item in value]
    return value if value is None or isinstance(value, bool | int | float | str | bytes) else type(value).__name__


def ranking_revision() -> str:
    """What decides an order besides a Ranking's fields: the ordering code,
    the constants above, the patterns it reads text with, the text search
    configuration, the HNSW candidate list and the embedder."""
    embedder = embedder_class()
    decided_by = [
        ordering_code_digest(), CANDIDATES_PER_RESULT, CANDIDATES_MIN, LEXICAL_MATCH_CAP, MATCH_THRESHOLD,
        LEXICAL_MATCH_MIN, JUDGMENT_WEIGHT, TEXT_SEARCH_CONFIG, hnsw_ef_search(),
        [(pattern.pattern, pattern.flags) for pattern in (QUESTION_FORM_WORDS, _SENTENCE, _QUESTION_MARK, _LETTER,
                                                          _WORD, _LEXEME_QUOTE)],
        getattr(embedder, "name", None) or f"{embedder.__module__}.{embedder.__qualname__}",
    ]
    return hashlib.sha256(json.dumps(decided_by).encode()).hexdigest()[:16]


def ranking_record(ranking: Ranking) -> dict[str, Any]:
    """What a serving receipt keeps of the ranking that served it."""
    return {"revision": ranking_revision(), "parameters": asdict(ranking)}


def _fits(value: Any, hint: Any) -> bool:
    """A recorded parameter as its Ranking field takes it: one of a Literal's
    values, or a finite number of at least 0 (a whole one for an int)."""
    if get_origin(hint) is Literal:
        return value in get_args(hint)
    if isinstance(value, bool) or not isinstance(value, (float, int) if hint is float else hint):
        return False
    return not isinstance(value, (float, int)) or (math.isfinite(value) and value >= 0)


def ranking_of_record(record: dict[str, Any] | None) -> Ranking | None:
    """The ranking a receipt recorded, when this code makes it again
    identically (the same revision, the same fields, each of its type and
    finite, no weight below 0); otherwise None."""
    if not isinstance(record, dict) or record.get("revision") != ranking_revision():
        return None
    parameters = record.get("parameters")
    if not isinstance(parameters, dict) or set(parameters) != {item.name for item in fields(Ranking)}:
        return None
    hints = get_type_hints(Ranking)
    if not all(_fits(value, hints[name]) for name, value in parameters.items()):
        return None
    if parameters["vector_weight"] + parameters["lexical_weight"] <= 0 or parameters["hedged_vector_weight"] > 1:
        return None
    return Ranking(**parameters)


NOTICE_NOTHING_VISIBLE = (
    "No memory is visible to you yet: you have written none, and no collection your roles can read "
    "holds any."
)
NOTICE_NOTHING_MATCHED = "Nothing in the memory visible to you matched this query."
NOTICE_NOTHING_MATCHED_FILTERS = "Nothing in the memory visible to you matched this query and its filters."
NOTICE_ABSTAINED = "Memory abstained: nothing visible to you was relevant enough to this query to answer it."
NOTICE_WITHHELD = ("Memories matched, but the documents they rest on have changed or were deleted since, and this "
                   "workspace does not serve such memories.")


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


# How long sending one cancel request may take (it is sent again while the read runs on).
CANCEL_TIMEOUT_SECONDS = 2.0


class Deadline:
    """The upstream read's time budget. While the read runs its statements
    (`watching`), a statement still running when the budget is spent is
    cancelled by PostgreSQL (its cancel request, memoryhub.cancel_watch), so
    a slow read is not left running after we gave up on it; between
    statements, `check` stops it. No statement is spent on it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds

    def remaining(self) -> float:
        left = self.ends - time.monotonic()
        if left <= 0:
            raise self.exceeded()
        return left

    def check(self) -> None:
        """Raise DeadlineExceeded once the budget is spent."""
        self.remaining()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """The statements run inside are cancelled when the budget is spent,
        and none starts after it; a statement cancelled so is DeadlineExceeded."""
        self.check()
        connection.ensure_connection()
        raw = connection.connection
        cancel = functools.partial(raw.cancel_safe, timeout=CANCEL_TIMEOUT_SECONDS)

        def checked(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
            self.check()
            return execute(sql, params, many, context)

        try:
            with cancel_watch.watching(self.ends, cancel), connection.execute_wrapper(checked):
                yield
        except OperationalError as exc:
            if is_cancelled(exc):
                raise self.exceeded() from exc
            raise

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
    # What put it in its place: its score, or a hedged question's own (ordered_matches).
    ordering: float | None = None


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
    """memory_search: what `caller` may see that matches, in rank order, and
    the serving receipt that records it (one statement, after the read)."""
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
    ranking = RANKING
    # On its own a search needs no transaction: each statement is atomic,
    # the receipt's included. Inside a caller's transaction it is a
    # savepoint, so a read cut off at its deadline leaves that usable.
    # The read is served by the read pool (a replica that has replayed every
    # committed write, or the primary); the receipt is written on the primary.
    primary = connections[DEFAULT_DB_ALIAS]
    with transaction.atomic() if primary.in_atomic_block else contextlib.nullcontext():
        execution = replicas.on_pool(lambda: search_execute(
            caller=caller, request=request, as_of=instant, deadline=deadline, receipt_id=receipt_id,
            ranking=ranking, budget=budget,
        ))
        with phase("receipt"):
            receipt_chain.receipt_append(Receipt(
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
                served_hashes=[value_hash(hit.fragment.value, hit.fragment.value_salt)
                               for hit in execution.result.hits],
                abstained=execution.result.abstained,
                budget=budget.name if budget is not None else "",
                ranking=ranking_record(ranking),
            ))
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
    """The read itself; writes nothing but enforcement alarms (outside a
    caller's transaction each stands on its own, whether or not the search
    then completes: it records what the index returned). Receipt replays call
    this with the original request, in a transaction of theirs."""
    # Where the encoder leaves the process a core, the query is embedded on a
    # thread of its own (Embedding) while the first statement runs and the
    # index statement is compiled, and the read waits for it only where that
    # statement needs the vector; inside a caller's transaction (a replay),
    # the snapshot its first statement takes then waits for the encoder too.
    # Otherwise it is embedded at once, before any statement. A task is
    # embedded with the query, in the same batch, when the workspace's
    # judgment plane was on as the caller was read.
    tenant = caller.tenant
    task_text = " ".join([request.task, *request.task_tags]).strip()
    with_task = bool(task_text) and tenant.judgment_plane
    embedding = Embedding([request.query, task_text] if with_task else [request.query])
    # One statement: the workspace's search settings as they are now, the
    # query's lexemes and the caller's audience.
    try:
        with deadline.watching(), index_settings(query=request.query, tenant=tenant, caller=caller) as prologue:
            judging = tenant.judgment_plane and bool(request.task or request.task_tags)
            execution = _execute(
                caller=caller, request=request, as_of=as_of, deadline=deadline, receipt_id=receipt_id,
                ranking=ranking or RANKING, embedding=embedding, task=(task_text, with_task), judging=judging,
                lexemes=prologue.lexemes, audience=prologue.audience,
            )
    except BaseException:
        embedding.cancel()  # a read that failed before it waited: an embedding not yet begun is not begun
        raise
    if budget is not None and execution.result.hits:
        result = execution.result
        fitting = budget.fitting(result)
        if fitting < len(result.hits):
            result.hits = result.hits[:max(0, fitting)]
            result.truncated = True
    return execution


def _execute(
    *, caller: Caller, request: SearchRequest, as_of: dt.datetime, deadline: Deadline, receipt_id: str,
    ranking: Ranking, embedding: Embedding, task: tuple[str, bool], judging: bool,
    lexemes: Sequence[str] | None = None, audience: access.Audience | None = None,
) -> Execution:
    """`task`: the task's text, and whether `embedding` embeds it after the query."""
    tenant = caller.tenant
    policy = access.read_policy(
        caller=caller, as_of=as_of, agents=request.agents, resource_ids=request.resource_ids,
        created_after=request.created_after, created_before=request.created_before, audience=audience,
    )
    candidates, rows, alarms = scored_candidates(
        policy=policy, query=request.query, query_vector=embedding, limit=request.limit, deadline=deadline,
        ranking=ranking, load_embeddings=judging, lexemes=lexemes,
    )
    vectors = embedding.vectors()  # the index statement waited for them
    task_text, with_task = task
    task_vector = vectors[1] if judging and vectors and with_task else None
    if judging and vectors and task_text and not with_task:  # the plane was turned on since: embed it now
        task_vectors = _embedded([task_text])
        task_vector = task_vectors[0] if task_vectors else None
    matches = ordered_matches(candidates, ranking, query=request.query)
    abstained, abstain_reason = False, None
    floor = tenant.relevance_floor
    best = max((score for _, score, _ in matches), default=None)
    if best is not None and best < floor:
        abstained = True
        abstain_reason = (
            f"No visible fragment reached this workspace's relevance floor of {floor:g} "
            f"(the best scored {best:.3f}), so memory declined to answer rather than guess."
        )
    matches = [match for match in matches if match[1] >= floor]
    # A workspace that withholds memories whose document changed or went
    # judges every match, not only the first `limit`.
    withhold = tenant.stale_policy == Tenant.StalePolicy.WITHHOLD
    if not withhold:
        matches = matches[: request.limit]
    # Only what may be served is built into fragments, rendered with its
    # collection, source, agents and documents (the row check read them).
    with phase("serving"):
        building = _Building()
        ranked = [Hit(fragment=_served(rows[pk], building), score=score, ordering=ordering)
                  for pk, score, ordering in matches]
        provenance = provenance_for(caller, [hit.fragment for hit in ranked],
                                    named_agent_ids=policy.named_agent_ids, audience=policy.audience,
                                    instant=as_of)
    for hit in ranked:
        hit.provenance = provenance[hit.fragment.pk]
    withheld = False
    if withhold:
        grounded = [hit for hit in ranked if hit.provenance.grounding not in NOT_GROUNDED]
        withheld, ranked = len(grounded) < len(ranked), grounded[: request.limit]
    if judging and ranked:
        ranked = _arrange(ranked, task_vector=task_vector, task_tags=request.task_tags)

    notice = None
    if not ranked:
        deadline.check()
        if not access.visible_fragments(policy.unnarrowed()).exists():
            notice = NOTICE_NOTHING_VISIBLE
        elif abstained:
            notice = NOTICE_ABSTAINED
        elif withheld:
            notice = NOTICE_WITHHELD
        else:
            notice = NOTICE_NOTHING_MATCHED_FILTERS if request.has_filters else NOTICE_NOTHING_MATCHED

    result = SearchResult(hits=ranked, receipt_id=receipt_id, as_of=as_of, abstained=abstained,
                          abstain_reason=abstain_reason, notice=notice)
    return Execution(result=result, audience=policy.audience, degraded=not vectors, alarms=alarms)


def scored_candidates(
    *, policy: ReadPolicy, query: str, query_vector: list[float] | Embedding | None, limit: int,
    deadline: Deadline, ranking: Ranking, load_embeddings: bool = False, lexemes: Sequence[str] | None = None,
) -> tuple[dict[uuid.UUID, Candidate], Mapping[uuid.UUID, access.FragmentValues], list[str]]:
    """Both index queries under the policy, then every candidate loaded, scored
    and checked again. Returns (candidates, rows that passed, alarmed ids).
    Run inside `index_settings()` (search_execute does); `lexemes`: the
    query's, when index_settings already read them; `query_vector`: the
    query's vector, or its Embedding still under way."""
    deadline.check()
    embedding, vector = (query_vector, None) if isinstance(query_vector, Embedding) else (None, query_vector)
    read_query = read_query_for(query, vector, ranking, lexemes=lexemes)
    candidates, read_query = index_queries(policy=policy, read_query=read_query, limit=limit, deadline=deadline,
                                           ranking=ranking, embedding=embedding)
    deadline.check()
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


def _embedded(texts: list[str]) -> list[list[float]] | None:
    with phase("embedding"):
        return _embed(texts)


def search_warm_up() -> None:
    """Do ahead what a process's first search would otherwise do before it
    could answer: load the encoder and run it once, and work out the ranking
    revision. A server's worker does this as it starts, before it takes
    requests (memoryhub.mcp_adapter.wiring). A failing encoder is logged, not
    raised: searches then answer from full-text search alone, as they would
    have, and try the encoder again. A failing digest is logged too: the
    worker still starts, and its searches fail saying so, as they would."""
    try:
        ordering_code_digest()
    except Exception:  # noqa: BLE001 - the worker still serves what needs no ranking
        logger.exception("the ranking revision could not be worked out; searches will fail until it can")
    try:
        get_embedder().embed(["warm up"])
    except Exception:  # noqa: BLE001 - the worker still serves, as a search would
        logger.exception("the encoder failed to start; searches answer from full-text search alone until it works")


_POOL_LOCK = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _embedding_pool() -> ThreadPoolExecutor:
    global _pool
    with _POOL_LOCK:
        if _pool is None:
            # As many threads as asgiref's and Python's own default pools: one
            # for each search a process runs at once, up to a point.
            _pool = ThreadPoolExecutor(max_workers=min(32, (os.cpu_count() or 1) + 4),
                                       thread_name_prefix="memoryhub-embed")
        return _pool


def _forget_pool() -> None:
    """In a forked child: the parent's threads are not its own."""
    global _pool, _POOL_LOCK
    _pool, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def embeds_alongside() -> bool:
    """Whether a search embeds its query on a thread of its own (Embedding):
    only when the encoder leaves this process a core for the rest of the
    search. A server's worker (one per core) encodes on one thread, and there
    it saved 2.2 ms a search at 10k and 2.6 at 100k; with an encoder on every
    core it gained nothing (+0.4 and -0.2 ms; bench/bench_alongside.py,
    docs/benchmarks.md, "eighth step")."""
    try:
        return leaves_a_core(get_embedder())
    except Exception:  # noqa: BLE001 - an embedder that cannot be made is _embed's to report
        return False


class Embedding:
    """A search's texts being embedded (_embed), when embeds_alongside() on a
    thread of its own, so the search's first statement and the compiling of
    its index statement go on meanwhile (the encoder releases Python's lock
    while it runs); otherwise at once. The search waits for it where a
    statement needs the vector (index_queries), no longer than its deadline.
    None from `vectors`: the embedder failed, and the read is lexical. (An
    embedder touches no database: the thread has no connection of its own.)"""

    def __init__(self, texts: list[str]) -> None:
        self._future: Future[list[list[float]] | None]
        if embeds_alongside():
            try:
                # The request's context goes with it, for the logs of a failure.
                self._future = _embedding_pool().submit(contextvars.copy_context().run, _embedded, texts)
                return
            except RuntimeError:  # the interpreter is shutting down: the pool takes no more work
                pass
        self._future = Future()
        self._future.set_result(_embedded(texts))

    def failed(self) -> bool:
        """Finished without vectors: a statement that would compare with one is not worth compiling."""
        return self._future.done() and self._future.result() is None

    def vectors(self, deadline: Deadline | None = None) -> list[list[float]] | None:
        """The vectors, waited for until `deadline` at most (DeadlineExceeded)."""
        if not self._future.done():
            with phase("embedding_wait"):
                try:
                    return self._future.result(timeout=deadline.remaining() if deadline is not None else None)
                except TimeoutError:
                    assert deadline is not None
                    raise deadline.exceeded() from None
        return self._future.result()

    def query_vector(self, deadline: Deadline | None = None) -> list[float] | None:
        vectors = self.vectors(deadline)
        return vectors[0] if vectors else None

    def cancel(self) -> None:
        self._future.cancel()


class QueryVector(SentVector):
    """A query's embedding as its statements send it: written as text once
    per search (memoryhub.database.vectors). (Given a list, pgvector's
    CosineDistance writes all 384 numbers anew for every statement that
    compares with it.)"""


class index_settings:
    """The read's first statement, and its planner settings kept to the read.

    Every statement that walks the HNSW index sends its planner settings with
    it (_planned_rows). A search on its own runs outside a transaction, so they
    end with that statement. Inside a transaction that goes on after the read
    (a test's, a console view's: the search's atomic block is then a
    savepoint) they are put back on the way out, so it does not inherit them:
    the first statement reads them as they were, and one more restores them.

    The first statement reads, when asked, the query's lexemes (`query`:
    query_lexemes, into `lexemes`), the caller's audience as access.py decides
    it (`caller`: access.role_audience_sql, into `audience`) and the
    workspace's search settings as they are now (`tenant`: its judgment plane,
    relevance floor and stale policy, set on it). Asked for nothing, outside a
    transaction that goes on, it sends nothing."""

    RESTORED = ("hnsw.ef_search", "hnsw.iterative_scan")
    TENANT_FIELDS = ("judgment_plane", "relevance_floor", "stale_policy")

    def __init__(self, *, query: str | None = None, tenant: Tenant | None = None,
                 caller: Caller | None = None) -> None:
        self.query, self.tenant, self.caller = query, tenant, caller
        self.lexemes: list[str] | None = None
        self.audience: access.Audience | None = None
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> index_settings:
        # Inside a nested atomic block (or a transaction opened by hand, with
        # autocommit off), the caller's transaction goes on after the read.
        self.nested = bool(connection.savepoint_ids) or not (connection.get_autocommit()
                                                             or connection.in_atomic_block)
        columns: list[str] = ["current_setting(%s, true)"] * len(self.RESTORED) if self.nested else []
        params: list[Any] = list(self.RESTORED) if self.nested else []
        if self.query is not None:
            sql, lexeme_params = _lexemes_sql(self.query)
            columns.append(sql)
            params += lexeme_params
        audience_sql = access.role_audience_sql(self.caller) if self.caller is not None else None
        if audience_sql is not None:
            columns.append(audience_sql[0])
            params += audience_sql[1]
        if self.tenant is not None:
            table = Tenant._meta.db_table
            fields = ", ".join(self.TENANT_FIELDS)
            # The names are our model's; JSON keeps each value's type.
            columns.append(f"(SELECT jsonb_build_array({fields}) FROM {table} WHERE id = %s)")  # noqa: S608
            params.append(self.tenant.pk)
        if not columns:
            return self
        # Prepared: its text holds none of its values (the caller's ids
        # included: access.role_audience_sql), so it is one of a few texts.
        with phase("prologue"), prepared(), connection.cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(columns), params)
            rest = list(cursor.fetchone())
        if self.nested:
            self.saved = dict(zip(self.RESTORED, rest[: len(self.RESTORED)], strict=True))
            rest = rest[len(self.RESTORED):]
        if self.query is not None:
            self.lexemes = list(rest.pop(0) or [])
        if audience_sql is not None:
            self.audience = access.audience_of(rest.pop(0))
        if self.tenant is not None:
            self._set_tenant(rest.pop(0))
        return self

    def _set_tenant(self, values: str | None) -> None:
        if values is None:
            raise Tenant.DoesNotExist("The workspace no longer exists.")
        # (Django has psycopg hand JSON over as text.)
        for name, value in zip(self.TENANT_FIELDS, json.loads(values), strict=True):
            setattr(self.tenant, name, value)

    def __exit__(self, exc_type, exc, tb) -> None:  # type: ignore[no-untyped-def]
        if exc_type is not None:
            return  # the transaction is aborted; rolling it back undoes set_config
        if not self.nested:
            return  # no transaction, or one that ends with the read: its end undoes set_config
        restore = {name: value for name, value in self.saved.items() if value}
        with connection.cursor() as cursor:
            if restore:
                cursor.execute(*_set_config(restore))
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
    # Its document and place in it, once its row passed the check (fragments
    # of a connected source's document only).
    document: int | None = None
    position: int | None = None
    # The share of its sentences that are questions (asking_share), once its
    # row passed the check (a document's fragment, when fusion lowers asking).
    asking: float = 0.0


@dataclass(frozen=True)
class ReadQuery:
    text: str
    vector: QueryVector | None
    tsquery: SearchQuery | None
    lexemes: tuple[str, ...] = ()


def read_query_for(query: str, vector: list[float] | None, ranking: Ranking, *,
                   lexemes: Sequence[str] | None = None) -> ReadQuery:
    lexemes = query_lexemes(query) if lexemes is None else list(lexemes)
    return ReadQuery(text=query, vector=QueryVector(vector) if vector is not None else None,
                     tsquery=tsquery_for(query, ranking, lexemes=lexemes),
                     lexemes=tuple(lexemes))


def index_filter(policy: ReadPolicy):  # type: ignore[no-untyped-def]
    """The predicate both index queries carry (a seam tests replace to prove
    the row check stands on its own). It reads nothing of the policy but its
    rule: BM25's statement keeps it compiled by rule (compiled_predicate). A
    person's N and mean length are summed from the tallies of the policy's
    own homes (tallied_statistics), not read through this seam: they rank,
    they never admit a row."""
    return policy.queryset_filter()


@dataclass(frozen=True)
class CompiledPredicate:
    """index_filter's predicate for one read, compiled as BM25's statement
    reads it: the visible fragments' SELECT (bm25_statement's `visible`) and
    the vector pool's (_nearest's: the `k` nearest, its query vector `slot`),
    each as (SQL, parameters)."""

    visible: tuple[str, tuple[Any, ...]]
    nearest: tuple[str, tuple[Any, ...]] | None
    slot: _VectorSlot | None
    k: int


@dataclass(frozen=True)
class _PredicateKey:
    """What a compiled predicate depends on: the read's rule at _AN_INSTANT,
    the pool's size and the seam that makes the predicate (tests replace
    it); the policy it was made from rides along, unhashed."""

    rule: access.Rule
    k: int
    seam: Callable[[ReadPolicy], Any]
    policy: ReadPolicy = field(compare=False, hash=False)


def compiled_predicate(policy: ReadPolicy, k: int) -> CompiledPredicate:
    """index_filter(policy) compiled for BM25's statement with a vector pool
    of `k`. Compiled once per rule of a reader's read (its visibility and its
    filters) at _AN_INSTANT and kept for the 512 rules read last; each read
    puts its own instant in the places that one left. (Building the
    predicate and compiling it through the ORM took about 2 ms of every
    search on 2 cores.) A policy with no one time clause is compiled as it
    is."""
    at_marker = policy.at(_AN_INSTANT)
    if at_marker is None:
        return _compile_predicate(index_filter(policy), k, nearest=True)
    compiled, places = _predicate_at_marker(_PredicateKey(at_marker.rule, k, index_filter, at_marker))
    assert compiled.nearest is not None

    def at(statement: tuple[str, tuple[Any, ...]], where: frozenset[int]) -> tuple[str, tuple[Any, ...]]:
        sql, params = statement
        return sql, tuple(policy.as_of if index in where else value for index, value in enumerate(params))

    return replace(compiled, visible=at(compiled.visible, places[0]), nearest=at(compiled.nearest, places[1]))


@functools.lru_cache(maxsize=512)
def _predicate_at_marker(key: _PredicateKey) -> tuple[CompiledPredicate, tuple[frozenset[int], frozenset[int]]]:
    """The predicate compiled at _AN_INSTANT, and the places of the instant
    among each statement's parameters (_instant_places)."""
    compiled = _compile_predicate(key.seam(key.policy), key.k, nearest=True)
    later = key.policy.at(_ANOTHER_INSTANT)
    assert later is not None
    other = _compile_predicate(key.seam(later), key.k, nearest=True)
    assert compiled.nearest and other.nearest and compiled.slot and other.slot
    # The query vector's marker is each compiling's own.
    return compiled, (_instant_places(compiled.visible, other.visible),
                      _instant_places(compiled.nearest, other.nearest,
                                      same=(compiled.slot.marker, other.slot.marker)))


def _compile_predicate(predicate, k: int, *, nearest: bool) -> CompiledPredicate:  # type: ignore[no-untyped-def]
    visible = _sql(Fragment.objects.filter(predicate).order_by().values(*_VISIBLE_COLUMNS))
    if not nearest:
        return CompiledPredicate(visible=visible, nearest=None, slot=None, k=k)
    slot = _VectorSlot()
    nearest_sql, nearest_params = _sql(_nearest(predicate, slot, k))
    if not marker_places(nearest_params, slot.marker) or marker_elsewhere(nearest_sql, nearest_params, slot.marker):
        raise RuntimeError("the vector pool no longer takes the query vector as a parameter")
    return CompiledPredicate(visible=visible, nearest=(nearest_sql, nearest_params), slot=slot, k=k)


# What BM25's statement reads of each visible fragment.
_VISIBLE_COLUMNS = ("pk", "search_vector", "search_length", "recorded_at", "search_counts")


# A read as of at most this long ago sums the reader's totals from the
# tallies; an older one (a replay of an old receipt) counts them. Both give the
# same figures, the tallies corrected by what changed after the read's instant:
# this only bounds how much that correction reads.
TALLIED_WITHIN = dt.timedelta(hours=1)


@dataclass(frozen=True)
class Tallied:
    """A read whose N and mean length BM25 sums from models.FragmentTally:
    the homes the reader may see (access.ReadPolicy.tallied) and its instant."""

    homes: Any  # a Q over a fragment's home, which reads the tallies under the same names
    as_of: dt.datetime


def tallied_statistics(policy: ReadPolicy) -> Tallied | None:
    rule = policy.tallied()
    if rule is None or policy.as_of < timezone.now() - TALLIED_WITHIN:
        return None
    return Tallied(homes=rule.q(), as_of=policy.as_of)


def candidate_pool(limit: int) -> int:
    return max(CANDIDATES_MIN, CANDIDATES_PER_RESULT * limit)


def index_queries(
    *, policy: ReadPolicy, read_query: ReadQuery, limit: int, deadline: Deadline, ranking: Ranking | None = None,
    embedding: Embedding | None = None,
) -> tuple[dict[uuid.UUID, Candidate], ReadQuery]:
    """Both index queries under the policy's predicate: the vector pool, then
    the lexical pool (with BM25, also the lexical score of every vector
    candidate). With `embedding`, `read_query` has no vector yet: the
    statement both pools share is compiled while the query is embedded, then
    the vector is waited for. Returns the candidates and `read_query` with
    its vector."""
    ranking = ranking or RANKING
    pool = candidate_pool(limit)
    found: dict[uuid.UUID, Candidate] = {}
    tallied = tallied_statistics(policy)
    shared = shares_statement(read_query, ranking)
    statement = None
    with phase("index_compile"):
        predicate = index_predicate(policy, read_query, pool, ranking)
        if embedding is not None and shared and not embedding.failed():
            statement = bm25_statement(predicate, read_query, pool, ranking, vector=True, tallied=tallied)
    if embedding is not None:
        vector = embedding.query_vector(deadline)
        read_query = replace(read_query, vector=QueryVector(vector) if vector is not None else None)
    wants_vector = read_query.vector is not None and ranking.fusion != "lexical"
    wants_lexical = read_query.tsquery is not None and (ranking.fusion != "vector" or read_query.vector is None)
    if wants_vector and shared:
        deadline.check()
        with phase("index_query"):
            answer = lexical_scored(predicate, read_query, pool, ranking, vector=read_query.vector, tallied=tallied,
                                    statement=statement)
        _nearest_into(found, answer.pool)
        _lexical_into(found, answer.ranked, answer.scores)
        return found, read_query
    if wants_vector and read_query.vector is not None:
        deadline.check()
        with phase("vector_query"):
            nearest = nearest_rows(predicate, read_query.vector, pool)
        _nearest_into(found, nearest)
    # Without a query vector (embedder down) full-text answers alone.
    if wants_lexical and read_query.tsquery is not None:
        deadline.check()
        with phase("lexical_query"):
            if ranking.lexical_ranker == "bm25":
                answer = lexical_scored(predicate, read_query, pool, ranking, also=list(found), tallied=tallied)
                _lexical_into(found, answer.ranked, answer.scores)
            else:
                ranked = lexical_candidates(predicate, read_query.tsquery, pool, ranking)
                for rank, pk in enumerate(ranked):
                    found.setdefault(pk, Candidate()).lexical_rank = rank
    return found, read_query


def shares_statement(read_query: ReadQuery, ranking: Ranking) -> bool:
    """Both pools in one statement (the vector pool is a part of BM25's), when there is a vector."""
    return (ranking.fusion not in ("lexical", "vector") and read_query.tsquery is not None
            and ranking.lexical_ranker == "bm25" and bool(read_query.lexemes))


def index_predicate(policy: ReadPolicy, read_query: ReadQuery, pool: int, ranking: Ranking):  # type: ignore[no-untyped-def]
    """What index_queries reads the policy through: BM25's statement, its
    predicate compiled once per reader's rule (compiled_predicate); any other
    query, index_filter's predicate, compiled as it runs."""
    return compiled_predicate(policy, pool) if shares_statement(read_query, ranking) else index_filter(policy)


def _nearest_into(found: dict[uuid.UUID, Candidate], nearest: Sequence[tuple[uuid.UUID, float]]) -> None:
    """The vector pool into the candidates: each its rank and, from the
    distance the index query computed to order it, its similarity (the row
    check computes it only for the others)."""
    for rank, (pk, distance) in enumerate(nearest):
        candidate = found.setdefault(pk, Candidate())
        candidate.vector_rank, candidate.vector_similarity = rank, 1.0 - distance


def _lexical_into(found: dict[uuid.UUID, Candidate], ranked: list[uuid.UUID], scores: dict[uuid.UUID, float]) -> None:
    """BM25's answer into the candidates: every candidate its score (0 for one
    that does not match), the top matches their ranks."""
    for pk in found.keys() | scores.keys():
        found.setdefault(pk, Candidate()).lexical_score = scores.get(pk, 0.0)
    for rank, pk in enumerate(ranked):
        found[pk].lexical_rank = rank


def _nearest(predicate, query_vector: Vector | list[float], k: int):  # type: ignore[no-untyped-def]
    """The `k` nearest visible fragments' ids and distances."""
    # ORDER BY the distance alone (no tie-breaker) so the planner can walk the HNSW index.
    return (Fragment.objects.filter(predicate, embedding__isnull=False)
            .annotate(distance=CosineDistance("embedding", query_vector))
            .order_by("distance").values_list("pk", "distance")[:k])


def nearest_rows(predicate, query_vector: Vector | list[float], k: int) -> list[tuple[uuid.UUID, float]]:  # type: ignore[no-untyped-def]
    """The `k` nearest visible fragments in order, each with its cosine distance."""
    return [(pk, float(distance)) for pk, distance in _planned_rows(*_sql(_nearest(predicate, query_vector, k)))]


def vector_candidates(predicate, query_vector: Vector | list[float], k: int) -> list[uuid.UUID]:  # type: ignore[no-untyped-def]
    return [pk for pk, _ in nearest_rows(predicate, query_vector, k)]


def planner_settings() -> dict[str, str]:
    """What a read that walks the HNSW index runs with: ef_search, and an
    iterative scan, so a filter that rejects most neighbours still yields enough."""
    return {"hnsw.ef_search": str(hnsw_ef_search()), "hnsw.iterative_scan": "relaxed_order"}


def _set_config(values: dict[str, str]) -> tuple[str, list[str]]:
    """One SELECT that sets these settings for the rest of the transaction."""
    return ("SELECT " + ", ".join(["set_config(%s, %s, true)"] * len(values)),
            [item for pair in values.items() for item in pair])


def _planned_rows(sql: str, params: Sequence[Any]) -> list[tuple]:
    """The rows of a statement that walks the HNSW index, sent with its planner
    settings (set_config, local to the transaction) in the same round trip:
    outside a transaction the two statements are one implicit transaction, so
    the settings last exactly as long as the read. Inside one they last to its
    end (index_settings restores them when the transaction goes on)."""
    setting, setting_params = _set_config(planner_settings())
    with connection.cursor() as cursor:
        cursor.execute(setting + "; " + sql, [*setting_params, *params])
        cursor.nextset()
        return cursor.fetchall()


_LEXEME_QUOTE = re.compile(r"['\\]")


# Words that give a question its form, not its subject ("Would Melanie likely
# enjoy Vivaldi?"): PostgreSQL's English stop list keeps them, and "likely"
# stems to "like", which half of any conversation says. The full-text side of
# a search leaves them out (a query of nothing else is answered by its
# embedding alone, like a query of stop words); the embedding reads it whole.
QUESTION_FORM_WORDS = re.compile(
    r"\b(?:would|could|might|likely|unlikely|probably|possibly)(?:n[\u2019']t|[\u2019']ve)?\b", re.IGNORECASE)


def is_hedged(query: str) -> bool:
    """The query is written in a hedged, hypothetical form (it holds one of
    QUESTION_FORM_WORDS): Ranking.hedged_vector_weight weighs its cosine."""
    return QUESTION_FORM_WORDS.search(query) is not None


def _lexemes_sql(query: str) -> tuple[str, list[str]]:
    """The expression (and its parameters) that gives the query's lexemes."""
    return ("tsvector_to_array(to_tsvector(%s::regconfig, %s))",
            [TEXT_SEARCH_CONFIG, QUESTION_FORM_WORDS.sub(" ", query)])


def query_lexemes(query: str) -> list[str]:
    """The query's lexemes, stemmed and stop-worded by the same configuration
    as the stored search vectors, once each, without the words that only give
    a question its form."""
    sql, params = _lexemes_sql(query)
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + sql, params)
        return list(cursor.fetchone()[0] or [])


def _quoted(lexeme: str) -> str:
    """A lexeme as a tsquery operand, taken as it is."""
    return "'" + _LEXEME_QUOTE.sub(lambda m: m.group(0) * 2, lexeme) + "'"


def _raw_lexemes(lexemes: Sequence[str]) -> SearchQuery:
    """An OR of `lexemes` as they are ('simple' keeps them unchanged)."""
    return SearchQuery(" | ".join(_quoted(lexeme) for lexeme in lexemes), config="simple", search_type="raw")


def tsquery_for(query: str, ranking: Ranking, *, lexemes: Sequence[str] | None = None) -> SearchQuery | None:
    if ranking.lexical_query in ("websearch", "plain"):
        # All of the query's words, but not those that only give it its form.
        return SearchQuery(QUESTION_FORM_WORDS.sub(" ", query), config=TEXT_SEARCH_CONFIG,
                           search_type=ranking.lexical_query)
    lexemes = query_lexemes(query) if lexemes is None else lexemes
    return _raw_lexemes(lexemes) if lexemes else None


def _sql(queryset) -> tuple[str, tuple]:  # type: ignore[no-untyped-def]
    sql, params = queryset.query.sql_with_params()
    return sql, tuple(params)


class LexicalScores(NamedTuple):
    """What BM25's statement answers (lexical_scored)."""

    # The vector pool in order (empty without a vector), each with the cosine
    # distance the statement computed to order it (as nearest_rows gives them).
    pool: list[tuple[uuid.UUID, float]]
    # The top matches in order.
    ranked: list[uuid.UUID]
    # The BM25 score of every candidate that matches.
    scores: dict[uuid.UUID, float]


def lexical_scored(  # type: ignore[no-untyped-def]
    predicate, read_query: ReadQuery, k: int, ranking: Ranking, *, also: Sequence[uuid.UUID] = (),
    cap: int = LEXICAL_MATCH_CAP, vector: Vector | list[float] | None = None, tallied: Tallied | None = None,
    statement: BM25Statement | None = None,
) -> LexicalScores:
    """Okapi BM25 over what this reader may see, in one statement
    (bm25_statement's; `statement`: that, compiled already for these
    arguments, with a vector pool when `vector` is given).

    Every statistic is the reader's own: the number of fragments N and their
    mean length come from the fragments the policy's predicate admits, and a
    lexeme's document frequency counts only those, so what a reader cannot
    read moves neither their scores nor their order. A fragment's own words
    count `own_words_weight` times its context's (weights A and B of its
    search vector, counted per lexeme as the fragment is written:
    Fragment.search_counts). The score is divided by the query's ideal score (every
    lexeme's idf times k1 + 1, what a fragment saturated with every query word
    would reach), an absolute scale in [0, 1) fusion and the relevance floor
    can rely on.

    With `tallied` (the predicate's homes, for a read that only they
    decide), N and the mean length are summed from the tallies instead of
    counted, with the same result (reader_totals_sql).

    With `vector`, the same statement first finds the vector pool (the `k`
    nearest visible fragments, vector_candidates' query) and scores it as
    it scores `also`.

    Returns the vector pool in order (empty without `vector`) with each
    one's distance, the top `k` matches (of the newest `cap` matches, ties by
    id) in order, and the scores of those and of the fragments of the vector
    pool and of `also` that match (scored whether or not they are among the
    newest `cap`).
    """
    if vector is not None and also:
        raise ValueError("with `vector`, the vector pool is what is scored besides the matches")
    if not read_query.lexemes:
        if isinstance(predicate, CompiledPredicate):
            raise ValueError("a query with no lexemes has no BM25 statement to read a compiled predicate")
        nearest = nearest_rows(predicate, vector, k) if vector is not None else []
        return LexicalScores(pool=nearest, ranked=[], scores={})
    if statement is None:
        statement = bm25_statement(predicate, read_query, k, ranking, also=also, cap=cap, vector=vector is not None,
                                   tallied=tallied)
    if (statement.slot is not None) != (vector is not None):
        raise ValueError("the statement was compiled with a vector pool if and only if one is asked for")
    rows = statement.rows(vector)
    pool = sorted((row for row in rows if row[3] is not None), key=lambda row: row[3])
    return LexicalScores(
        pool=[(pk, float(distance)) for pk, *_, distance in pool],
        ranked=[pk for pk, _, rank, _, _ in rows if rank is not None and rank <= k],
        scores={pk: min(1.0, max(0.0, float(score))) for pk, score, *_ in rows if score is not None},
    )


class _VectorSlot(Vector):
    """Where a query vector goes in a statement compiled before it is known:
    pgvector writes a vector as its text when the expression is made
    (CosineDistance), so this one's text is a marker, found again among the
    compiled parameters as the very object it is (BM25Statement)."""

    def __init__(self) -> None:
        super().__init__([0.0])
        self.marker = f"[vector to come {uuid.uuid4().hex}]"

    def to_text(self) -> str:
        return self.marker


@dataclass(frozen=True)
class BM25Statement:
    """lexical_scored's statement, compiled: its SQL and parameters, and
    `slot`, the marker standing among them for the query vector's text (None:
    no vector pool)."""

    sql: str
    params: tuple[Any, ...]
    slot: str | None = None

    def rows(self, vector: Vector | list[float] | None) -> list[tuple]:
        if self.slot is None:
            with connection.cursor() as cursor:
                cursor.execute(self.sql, self.params)
                return cursor.fetchall()
        assert vector is not None
        # The text CosineDistance writes for this vector (a QueryVector's, once per search).
        text = sent_text(vector)
        params = list(self.params)
        for place in marker_places(params, self.slot):
            params[place] = text
        return _planned_rows(self.sql, params)


def bm25_statement(  # type: ignore[no-untyped-def]
    predicate, read_query: ReadQuery, k: int, ranking: Ranking, *, also: Sequence[uuid.UUID] = (),
    cap: int = LEXICAL_MATCH_CAP, vector: bool = False, tallied: Tallied | None = None,
) -> BM25Statement:
    """lexical_scored's one statement for these arguments, with a vector pool
    when `vector` (the vector itself is put in when it runs, BM25Statement)."""
    lexemes = list(read_query.lexemes)
    compiled = (predicate if isinstance(predicate, CompiledPredicate)
                else _compile_predicate(predicate, k, nearest=vector))
    if compiled.k != k or (vector and compiled.nearest is None):
        raise ValueError("the predicate was compiled for another pool, or without one")
    # The policy's predicate compiled once; the statement reads the fragments
    # through it once for the matches (PostgreSQL pulls the subquery up, so
    # that walks the full-text index): the visible fragments that hold any of
    # the query's lexemes, kept (`matching`), give each lexeme's document
    # frequency and the newest `cap` matches. A match's term frequencies are
    # looked up in its counts (Fragment.search_counts, written with it), not
    # unnested from its vector: that was most of the statement's time where a
    # query matches thousands. PostgreSQL keeps a row's counts compressed when
    # the row is long (an embedding is most of it), and would decompress them
    # at every lookup: `matching` keeps each match's counts decompressed once
    # (`|| '{}'` hands on the value decompressed). Without `tallied`, N and the mean length
    # read the visible fragments once more.
    visible_sql, visible_params = compiled.visible
    visible = f"({visible_sql}) AS v(id, search_vector, search_length, recorded_at, search_counts)"
    k1, b = ranking.bm25_k1, ranking.bm25_b
    if tallied is None:
        stats_sql = f"SELECT count(*)::float8 AS n, coalesce(avg(v.search_length), 0)::float8 AS avgdl FROM {visible}"  # noqa: S608
        stats_params = visible_params
    else:
        stats_sql, stats_params = reader_totals_sql(tallied)
    pool_sql, pool_params = "", ()
    also_sql, also_params = "%s::uuid[]", [ids_array_text(also)]
    slot = compiled.slot if vector else None
    if slot is not None and compiled.nearest is not None:
        nearest_sql, nearest_params = compiled.nearest
        # MATERIALIZED: walked once, by the HNSW index, whatever reads it.
        pool_sql = (f"pool AS MATERIALIZED (SELECT x.id, x.distance, row_number() OVER (ORDER BY x.distance, x.id) "  # noqa: S608
                    f"AS rank FROM ({nearest_sql}) AS x(id, distance)), ")
        pool_params = nearest_params
        also_sql, also_params = "ARRAY(SELECT id FROM pool)", []
    sql = f"""
    WITH {pool_sql}stats AS (
        {stats_sql}
    ), matching AS MATERIALIZED (
        SELECT v.id, v.search_length, v.recorded_at, v.search_counts || '{{}}'::jsonb AS search_counts FROM {visible}
         WHERE v.search_vector @@ %s::tsquery
    ), terms AS (
        SELECT t.lexeme, ln(1 + (s.n - f.df + 0.5) / (f.df + 0.5)) AS idf
          FROM unnest(%s::text[]) AS t(lexeme)
         CROSS JOIN LATERAL (SELECT count(*) AS df FROM matching AS m
                              WHERE jsonb_exists(m.search_counts, t.lexeme)) AS f
         CROSS JOIN stats AS s
    ), matches AS (
        SELECT m.id, m.search_counts, m.search_length FROM matching AS m
         WHERE m.id IN (SELECT n.id FROM matching AS n ORDER BY n.recorded_at DESC, n.id LIMIT %s)
            OR m.id = ANY({also_sql})
    ), scored AS (
        SELECT m.id, sum(t.idf * w.tf * %s / (w.tf + %s * (1 - %s + %s * m.search_length / greatest(s.avgdl, 1))))
               / (SELECT sum(idf) * %s FROM terms) AS score
          FROM matches AS m
         CROSS JOIN stats AS s
          JOIN terms AS t ON jsonb_exists(m.search_counts, t.lexeme)
         CROSS JOIN LATERAL (SELECT (c ->> 0)::float8 * %s + (c ->> 1)::float8 AS tf
                               FROM (SELECT m.search_counts -> t.lexeme) AS counts(c)) AS w
         GROUP BY m.id
    ), ranked AS (
        SELECT id, score, rank FROM (
            SELECT id, score, row_number() OVER (ORDER BY score DESC, id) AS rank FROM scored
        ) AS ordered
        WHERE rank <= %s OR id = ANY({also_sql})
    )
    {"SELECT id, ranked.score, ranked.rank, pool.rank, pool.distance FROM ranked FULL JOIN pool USING (id)"
     if slot is not None else "SELECT id, score, rank, NULL, NULL FROM ranked"}
    ORDER BY 3, 4
    """  # noqa: S608
    # Quoted lexemes cast to tsquery are taken as they are (to_tsquery would
    # parse 'state-of-the-art' again, into a phrase no vector holds).
    matching = " | ".join(_quoted(lexeme) for lexeme in lexemes)
    params = (
        *pool_params, *stats_params, *visible_params, matching, lexemes, cap, *also_params,
        k1 + 1, k1, b, b, k1 + 1, ranking.own_words_weight, k, *also_params,
    )
    return BM25Statement(sql=sql, params=params, slot=slot.marker if slot is not None else None)


def reader_totals_sql(tallied: Tallied) -> tuple[str, tuple]:
    """A SELECT of the reader's N and mean length (`n`, `avgdl`) from the
    tallies of the homes they may see, exactly what counting their visible rows
    gives: the tallies hold every live fragment as of the statement's snapshot;
    the rows recorded after the read's instant are taken away and the rows
    retired after it put back (access.tally_corrections), in one read of those
    rows (few for a read of now, found through the indexes on recorded_at and
    retired_at). The mean is the same division of the same integers as avg()'s.

    Compiled once per reader's homes (_reader_totals_statement), with the read's
    instant put in the places compiling it at _AN_INSTANT left for it."""
    sql, params, places = _reader_totals_statement(tallied.homes)
    return sql, tuple(tallied.as_of if index in places else value for index, value in enumerate(params))


# The instant a reader's totals statement is compiled at, to be found again
# among its parameters: no read is ever of this microsecond.
_AN_INSTANT = dt.datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)
# And one more, to tell where the instant goes (_predicate_at_marker): it
# differs from the first in every field, so that no conversion of an instant
# (to its date, to the second) gives both the same value.
_ANOTHER_INSTANT = dt.datetime(2, 2, 2, 2, 2, 2, 2, tzinfo=dt.UTC)


@functools.lru_cache(maxsize=512)
def _reader_totals_statement(homes: Q) -> tuple[str, tuple, frozenset[int]]:
    """reader_totals_sql compiled for `homes` at _AN_INSTANT: its SQL, its
    parameters and the places of the instant among them (_instant_places:
    compiled again at _ANOTHER_INSTANT). (Compiling it took
    about 3 ms of every person's search on 2 cores; its text depends on
    nothing but the homes.) Kept for the 512 readers' homes read last: each
    grows with the collections its reader's roles open."""
    sql, params = _reader_totals_compiled(homes, _AN_INSTANT)
    places = _instant_places((sql, params), _reader_totals_compiled(homes, _ANOTHER_INSTANT))
    if not places:
        raise RuntimeError("the reader's totals no longer take their instant as a parameter")
    return sql, params, places


def _instant_places(at_marker: tuple[str, tuple[Any, ...]], at_another: tuple[str, tuple[Any, ...]], *,
                    same: tuple[Any, Any] | None = None) -> frozenset[int]:
    """Where a statement compiled at _AN_INSTANT and again at
    _ANOTHER_INSTANT takes its instant: the parameters that differ, each of
    which must hold the marker as the very object given (a filter's value
    equal to it is no place: it does not change). `same`: a pair of other
    markers, one per compiling, that stand in the same place. Anything else
    that differs (the SQL, or a parameter copied or converted on its way) is
    refused: the statement would be run at the marker."""
    (sql, params), (other_sql, other_params) = at_marker, at_another
    if sql != other_sql or len(params) != len(other_params):
        raise RuntimeError("the statement no longer takes its instant as a parameter, as given")
    found = set()
    for index, (value, other_value) in enumerate(zip(params, other_params, strict=True)):
        if same is not None and value is same[0] and other_value is same[1]:
            continue
        if value is _AN_INSTANT and other_value is _ANOTHER_INSTANT:
            found.add(index)
        elif value != other_value:
            raise RuntimeError("the statement no longer takes its instant as a parameter, as given")
    return frozenset(found)


def _reader_totals_compiled(homes: Q, as_of: dt.datetime) -> tuple[str, tuple]:
    kept_sql, kept_params = _sql(
        FragmentTally.objects.filter(homes).order_by().values_list("fragments", "words", "measured"))
    # Counted in the tallies but not live at the instant (-1: recorded after
    # it, so still unretired), or live at it but not counted (+1: retired since).
    counted_not_live, live_not_counted = (rule.q() for rule in access.tally_corrections(as_of))
    changed_sql, changed_params = _sql(
        Fragment.objects.filter(homes).filter(counted_not_live | live_not_counted)
        .annotate(sign=Case(When(counted_not_live, then=Value(-1)), default=Value(1)))
        .order_by().values_list("search_length", "sign"))
    sql = f"""SELECT (k.fragments + c.fragments)::float8 AS n,
               coalesce((k.words + c.words)::numeric / nullif(k.measured + c.measured, 0), 0)::float8 AS avgdl
          FROM (SELECT coalesce(sum(t.fragments), 0) AS fragments, coalesce(sum(t.words), 0) AS words,
                       coalesce(sum(t.measured), 0) AS measured
                  FROM ({kept_sql}) AS t(fragments, words, measured)) AS k,
               (SELECT coalesce(sum(r.sign), 0) AS fragments, coalesce(sum(r.sign * r.length), 0) AS words,
                       coalesce(sum(r.sign) FILTER (WHERE r.length IS NOT NULL), 0) AS measured
                  FROM ({changed_sql}) AS r(length, sign)) AS c"""  # noqa: S608
    return sql, (*kept_params, *changed_params)


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


def row_check(policy: ReadPolicy, names: Sequence[str], *,
              row: Callable[[Sequence[Any]], access.FragmentValues]) -> Callable[[Sequence[Any]], str | None]:
    """Why a row read by position, in the order of `names`, may not be served
    (None: it may), as policy.row_check gives it (`row`: how a row is built
    into values, where the rule is interpreted). A seam tests replace to
    prove the SQL predicate stands on its own."""
    return policy.row_check(names, row=row)


class _RowsRead(Mapping[uuid.UUID, access.FragmentValues]):
    """The rows the row check passed, by id, each kept as the values it read
    and built into a FragmentValues when first looked up (fusion looks up a
    document's fragments, serving the few it serves), or when an
    interpreted rule reads it (build)."""

    def __init__(self, names: tuple[str, ...], later: tuple[str, ...], convert: Callable[[str, Any], Any]) -> None:
        self._names, self._later, self._convert = names, later, convert
        self._pk_at = names.index("id")
        self._values: dict[uuid.UUID, list[Any]] = {}
        self._built: dict[uuid.UUID, access.FragmentValues] = {}

    def add(self, pk: uuid.UUID, values: list[Any]) -> None:
        self._values[pk] = values

    def build(self, values: Sequence[Any]) -> access.FragmentValues:
        """The row of these values, built (and kept, should it pass)."""
        built = self._built[values[self._pk_at]] = access.FragmentValues.of_row(
            self._names, values, later=self._later, convert=self._convert)
        return built

    def __getitem__(self, pk: uuid.UUID) -> access.FragmentValues:
        values = self._values[pk]  # only a row that passed: one an interpreted rule refused was built too
        built = self._built.get(pk)
        return built if built is not None else self.build(values)

    def __contains__(self, pk: object) -> bool:
        return pk in self._values

    def __iter__(self) -> Iterator[uuid.UUID]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class _Building:
    """How a search's served rows are built into instances (_partial): the
    connection's alias, and whether each model is built plainly, read once
    for all of a search's hits rather than for every instance (a hit is
    about five of them)."""

    def __init__(self) -> None:
        self.alias = connection.alias
        self._plain: dict[type[Model], bool] = {}

    def plain(self, model: type[Model]) -> bool:
        found = self._plain.get(model)
        if found is None:
            found = self._plain[model] = (_plainly_built(model) and not signals.pre_init.has_listeners(model)
                                          and not signals.post_init.has_listeners(model))
        return found


def _partial(model: type[M], values: dict[str, Any], building: _Building) -> M:
    """An instance of `model` with these fields loaded (any other is read from
    the database if used), as Model.from_db gives it. For a model that keeps
    Django's own __init__ and from_db, without receivers of its pre_init or
    post_init signals (a field that needs its own, such as an image's
    dimensions, connects one), the instance is made as unpickling makes one,
    its loaded fields set without Model.__init__'s walk over every field:
    building the few hits a search serves was mostly that walk."""
    names = _loaded_names(model)
    if not building.plain(model):
        loaded = [name for name in names if name in values]
        return model.from_db(building.alias, loaded, [values[name] for name in loaded])
    instance = model.__new__(model)
    instance.__dict__.update({name: values[name] for name in names if name in values})
    state = instance._state = ModelState()
    state.adding, state.db = False, building.alias
    return instance


@functools.cache
def _loaded_names(model: type[Model]) -> tuple[str, ...]:
    return tuple(item.attname for item in model._meta.concrete_fields)


@functools.cache
def _plainly_built(model: type[Model]) -> bool:
    return model.__init__ is Model.__init__ and model.from_db.__func__ is Model.from_db.__func__  # type: ignore[attr-defined]


def _from_json(model: type[Model], rows: list[dict[str, Any]] | None, building: _Building) -> list[Model]:
    """Instances of `model` from the JSON rows of access.fact_columns, each field as the
    database would have handed it over."""
    fields = model._meta.concrete_fields
    return [_partial(model, {item.attname: item.to_python(row[item.attname]) for item in fields}, building)
            for row in rows or ()]


class _ReadAlready(QuerySet):  # type: ignore[type-arg]
    """A served fragment's linked rows, as the read that checked the fragment
    read them: they iterate, count and answer `in`, `exists()` and the like
    without a statement. Any further query of them (a filter, an order, a
    slice, an iterator, a copy evaluated anew) raises: it would not be the
    read's. Its query matches nothing, so nothing that slips past reads or
    changes a row."""

    def _chain(self) -> QuerySet:  # type: ignore[type-arg]
        raise TypeError(f"{self.model.__name__} rows a search served with a fragment are what it read; "
                        "query them anew through the service that may read them")

    def iterator(self, chunk_size: int | None = None) -> Iterator[Any]:
        return self._chain()  # type: ignore[return-value]

    def __or__(self, other: Any) -> Any:
        return self._chain()

    def __and__(self, other: Any) -> Any:
        return self._chain()

    def __xor__(self, other: Any) -> Any:
        return self._chain()

    def _fetch_all(self) -> None:
        if self._result_cache is None:
            self._chain()
        super()._fetch_all()


@functools.cache
def _matching_nothing(model: type[Model]) -> Any:
    # Shared by every _ReadAlready of the model: none of them chains, so none changes it.
    return model._default_manager.none().query


def _prefetched(instance: Model, name: str, objects: list[Model]) -> None:
    """What prefetch_related(name) would have left on `instance`, from objects
    already read: its `name`.all() answers from them without a statement
    (_ReadAlready; Django's prefetch leaves a queryset filtered by the
    instance, and building one was most of serving a hit)."""
    model = instance._meta.get_field(name).related_model
    queryset: Any = _ReadAlready(model=model, query=_matching_nothing(model))  # type: ignore[arg-type]
    queryset._result_cache = objects
    queryset._prefetch_done = True
    instance._prefetched_objects_cache = {  # type: ignore[attr-defined]
        **getattr(instance, "_prefetched_objects_cache", {}), name: queryset}


def _served(row: access.FragmentValues, building: _Building) -> Fragment:
    """The fragment of a row the row check passed, with its collection (its
    name), its source (its agent's name), its agents and its documents, from
    what the row check read: rendering it sends no statement. `building`:
    shared by the hits of one search."""
    read = row.converted()
    fragment = _partial(Fragment, read, building)
    _prefetched(fragment, "agents", _from_json(Agent, read["facts_agents"], building))
    _prefetched(fragment, "resources", _from_json(Resource, read["facts_resources"], building))
    if fragment.collection_id is not None:
        fragment.collection = _partial(  # type: ignore[assignment]
            Collection, {"id": fragment.collection_id, "name": read["shown_collection_name"]}, building)
    if fragment.source_id is not None:
        agent_id = read["facts_source_agent_id"]
        source = _partial(Source, {"id": fragment.source_id, "agent_id": agent_id}, building)
        source.agent = _partial(  # type: ignore[attr-defined]
            Agent, {"id": agent_id, "name": read["shown_source_agent_name"]}, building)
        fragment.source = source  # type: ignore[assignment]
    return fragment


def _own_document(row: access.FragmentValues) -> int | None:
    """A connected source's fragment's own document (the first of its linked
    resources, by id, that its source sent), for the neighbour features of
    fusion; read from the row check's linked rows."""
    if row.source_id is None:
        return None
    own = [linked["id"] for linked in row.facts_resources or () if linked["source_id"] == row.source_id]
    return min(own, default=None)


# What the row check leaves in the database (the index queries used it).
ROW_CHECK_DEFERRED = ("search_vector", "search_length", "search_counts", "context")


@dataclass(frozen=True)
class RowCheckStatement:
    """The row check's statement, written once from the models' names: every
    candidate's columns (but ROW_CHECK_DEFERRED, and the embedding unless asked
    for), the access facts fragment_facts reads of a row (access.fact_columns)
    and what rendering a served row needs (its collection's and its source
    agent's names), found by id (its last parameter: an array of ids). Each
    column has its name (a FragmentValues' attribute) and its expression, which
    gives what Django applies to a value read for it (_converters). The
    columns in `zoned` are timestamps read as UTC's wall time, when that is
    the connection's zone (psycopg's compiled loader parses those; Django's
    own loader of a timestamptz is Python, and was most of reading a row),
    each given the connection's tzinfo first (_Aware)."""

    select: tuple[str, ...]
    tables: str
    names: tuple[str, ...]
    expressions: tuple[Any, ...]
    zoned: tuple[int, ...] = ()
    zone: dt.tzinfo | None = None
    # The distance column (with_scores): the cosine distance of the fragments
    # whose ids its first parameter holds, NULL for the others, whose distance
    # the index statement computed; an embedding is stored out of line and is
    # read only where it is needed. One array, so the text stays the same.
    distance: str = ""

    @functools.cached_property
    def converters(self) -> list[tuple[int, Any, list[Any]]]:
        aware = _Aware(self.zone)
        return [*((index, self.expressions[index], [aware]) for index in self.zoned), *_converters(self.expressions)]

    def with_scores(self, scores: Sequence[tuple[str, Any]], *,
                    distance: tuple[Sequence[uuid.UUID], Vector] | None = None,
                    ) -> tuple[str, list[Any], list[str], list[Any]]:
        """The statement with these (name, expression over the fragment's own
        columns: the statement's FROM has no join for it) columns added, after
        `distance` (the ids of the candidates to give a cosine distance, and
        the query's vector) as the column `distance`: its SQL, its parameters
        but the ids, every column's name, and the converters of every column
        that has any."""
        select, params, names = list(self.select), [], list(self.names)
        if distance is not None:
            ids, vector = distance
            select.append(self.distance)
            params += [ids_array_text(ids), vector.to_text()]
            names.append("distance")
        first = len(names)
        for name, expression in scores:
            query = Fragment.objects.all().query
            sql, expression_params = query.get_compiler(connection=connection).compile(
                expression.resolve_expression(query))
            select.append(f"{sql} AS {connection.ops.quote_name(name)}")
            params += expression_params
        added = [(first + index, expression, found)
                 for index, expression, found in _converters([expression for _, expression in scores])]
        return (f"SELECT {', '.join(select)} {self.tables}", params,  # noqa: S608 - our models' names
                [*names, *(name for name, _ in scores)], [*self.converters, *added])


def ids_array_text(ids: Iterable[uuid.UUID]) -> str:
    """Ids as the text of an array, which the statement casts to uuid[]: an
    empty list would go untyped, a list of ids as uuid[], and each way of
    sending would prepare the same text once more; and psycopg dumps a list
    of ids one by one (70 us for a row check's 83, against 37 as text)."""
    return "{" + ",".join(map(str, ids)) + "}"


@functools.cache
def row_check_statement(load_embeddings: bool, zone_name: str, zone: dt.tzinfo | None) -> RowCheckStatement:
    """`zone_name` and `zone`: the connection's (Django's timezone_name and
    timezone), which its own loader reads timestamps in."""
    def quote(value: str) -> str:
        return connection.ops.quote_name(value)

    def column(model: type[Model], name: str, table: str) -> str:
        return f"{table}.{quote(str(model._meta.get_field(name).column))}"  # type: ignore[union-attr]

    def own(item: Any) -> str:
        sql = f"{fragment}.{quote(str(item.column))}"
        return f"({sql} AT TIME ZONE 'UTC')" if item in zoned_fields else sql

    fragment = quote(Fragment._meta.db_table)
    fields = [item for item in Fragment._meta.concrete_fields
              if item.attname not in ROW_CHECK_DEFERRED and (load_embeddings or item.attname != "embedding")]
    # UTC has one wall time per instant; in any other zone (a database's own
    # TIME_ZONE, or USE_TZ off with another TIME_ZONE) Django's loader reads
    # the timestamps itself.
    zoned_fields = [item for item in fields if isinstance(item, DateTimeField)] if zone_name == "UTC" else []
    facts = access.fact_columns("s")
    select = [
        *(own(item) for item in fields),
        *(fact.sql for fact in facts),
        column(Collection, "name", "c"), column(Agent, "name", "a"),
    ]
    expressions = [
        *(item.get_col(Fragment._meta.db_table) for item in fields),
        *(fact.expression for fact in facts),
        Collection._meta.get_field("name").get_col("c"), Agent._meta.get_field("name").get_col("a"),  # type: ignore[union-attr]
    ]
    tables = (
        f"FROM {fragment} "
        f"LEFT JOIN {quote(Collection._meta.db_table)} AS c ON {column(Collection, 'id', 'c')} = "
        f"{column(Fragment, 'collection', fragment)} "
        f"LEFT JOIN {quote(Source._meta.db_table)} AS s ON {column(Source, 'id', 's')} = "
        f"{column(Fragment, 'source', fragment)} "
        f"LEFT JOIN {quote(Agent._meta.db_table)} AS a ON {column(Agent, 'id', 'a')} = {column(Source, 'agent', 's')} "
        f"WHERE {column(Fragment, 'id', fragment)} = ANY(%s::uuid[])"
    )
    names = (*(item.attname for item in fields), *(fact.name for fact in facts), "shown_collection_name",
             "shown_source_agent_name")
    zoned = tuple(index for index, item in enumerate(fields) if item in zoned_fields)
    # pgvector's cosine distance operator (CosineDistance's), the vector sent as its text.
    distance = (f"CASE WHEN {column(Fragment, 'id', fragment)} = ANY(%s::uuid[]) "
                f"THEN ({column(Fragment, 'embedding', fragment)} <=> %s) END AS {quote('distance')}")
    return RowCheckStatement(select=tuple(select), tables=tables, names=names, expressions=tuple(expressions),
                             zoned=zoned, zone=zone, distance=distance)


@dataclass(frozen=True)
class _Aware:
    """The converter of a timestamp the row check read as UTC's wall time,
    when that is the connection's zone: the value Django's loader of a
    timestamptz gives, the same wall time with the connection's tzinfo
    (`zone`: UTC's, or None with USE_TZ off). The row check applies it in
    its own loop, where it knows one (_zoned)."""

    zone: dt.tzinfo | None

    def __call__(self, value: dt.datetime | None, expression: Any, connection: Any) -> dt.datetime | None:
        return None if value is None else value.replace(tzinfo=self.zone)


def _zoned(now: list[tuple[int, Any, list[Any]]],
           ) -> tuple[tuple[int, ...], dt.tzinfo | None, list[tuple[int, Any, list[Any]]]]:
    """Of the converters applied to every row, the columns whose one
    converter is an _Aware (the row check gives them their zone in a loop of
    its own, without a call for each value: most of converting a row), the
    zone (one statement reads in one: RowCheckStatement.zone), and the other
    columns' converters."""
    aware: list[tuple[int, Any, list[Any]]] = []
    others: list[tuple[int, Any, list[Any]]] = []
    for item in now:
        _, _, functions = item
        (aware if len(functions) == 1 and isinstance(functions[0], _Aware) else others).append(item)
    zones = {functions[0].zone for _, _, functions in aware}
    assert len(zones) <= 1, "a row check reads its timestamps in one zone"
    return tuple(index for index, _, _ in aware), next(iter(zones), None), others


def _converters(expressions: Sequence[Any]) -> list[tuple[int, Any, list[Any]]]:
    """What Django applies to the values read for these expressions (its
    backend's and each expression's own, as its compiler gathers them: JSON,
    vectors), by column; columns with none are left out."""
    converters = []
    for index, expression in enumerate(expressions):
        found = [*connection.ops.get_db_converters(expression), *expression.get_db_converters(connection)]
        if found:
            converters.append((index, expression, found))
    return converters


@dataclass(frozen=True)
class _Later:
    """The row check's columns converted when first read (FragmentValues):
    their indexes by name, and each one's converters."""

    indexes: tuple[tuple[str, int], ...]
    converters: dict[str, tuple[Any, list[Any]]]

    def convert(self, name: str, value: Any) -> Any:
        expression, functions = self.converters[name]
        for function in functions:
            value = function(value, expression, connection)
        return value


def _converted_when(names: Sequence[str], converters: Sequence[tuple[int, Any, list[Any]]],
                    ) -> tuple[list[tuple[int, Any, list[Any]]], _Later]:
    """The converters applied to every row the row check reads, and those of
    its JSON columns (a fragment's linked rows, its grounded versions), whose
    parsing waits until a value is read: a row is parsed only where its
    check (a rule that reads links), fusion (its own documents) or serving
    reads it."""
    now: list[tuple[int, Any, list[Any]]] = []
    later: list[tuple[int, Any, list[Any]]] = []
    for index, expression, functions in converters:
        json_column = isinstance(getattr(expression, "output_field", None), JSONField)
        (later if json_column else now).append((index, expression, functions))
    return now, _Later(indexes=tuple((names[index], index) for index, _, _ in later),
                       converters={names[index]: (expression, functions) for index, expression, functions in later})


def _checked_rows(
    *, policy: ReadPolicy, candidates: dict[uuid.UUID, Candidate], read_query: ReadQuery, load_embeddings: bool,
    ranking: Ranking | None = None,
) -> tuple[Mapping[uuid.UUID, access.FragmentValues], list[str]]:
    """Load every candidate, give it its cosine similarity where the index
    queries did not (a candidate of the vector pool has it already), and its
    lexical score where they did not (BM25's statement scored every
    candidate; a ts_rank ranking scores it here), and check it again. Each
    row is checked as read, by position (row_check); one that passes is
    built into values (access.FragmentValues) when looked up (_RowsRead),
    and a served one into a fragment afterwards (_served)."""
    if not candidates:
        return {}, []
    ranking = ranking or RANKING
    scores: list[tuple[str, Any]] = []
    distance_of = None
    if read_query.vector is not None:
        missing = [pk for pk, candidate in candidates.items() if candidate.vector_similarity is None]
        distance_of = (missing, read_query.vector)
    if read_query.tsquery is not None and ranking.lexical_ranker != "bm25":
        scores.append(("lexical", _lexical_rank(read_query.tsquery, ranking)))
    sql, params, names, converters = row_check_statement(
        load_embeddings, connection.timezone_name, connection.timezone).with_scores(scores, distance=distance_of)
    with prepared(), connection.cursor() as cursor:
        cursor.execute(sql, [*params, ids_array_text(candidates)])
        fetched = cursor.fetchall()
    alarms = []
    lowers_asking = ranking.fusion == "weighted" and bool(ranking.asking_weight)
    now, later = _converted_when(names, converters)
    later_names = tuple(name for name, _ in later.indexes)
    row_names = tuple(names)  # every row's own, read by its converted()
    # A compiled rule reads facts as the loop below leaves them: none waits to be converted.
    assert not set(later_names) & set(access.ROW_FACT_NAMES.values()), later_names
    rows = _RowsRead(row_names, later_names, later.convert)
    refusal_of = row_check(policy, row_names, row=rows.build)
    place = {name: index for index, name in enumerate(row_names)}
    pk_at, position_at, source_at = place["id"], place["position"], place["source_id"]
    distance_at, lexical_at = place.get("distance"), place.get("lexical")
    scores_lexically = ranking.lexical_ranker != "bm25"
    zoned, zone, now = _zoned(now)
    for read in fetched:
        values = list(read)
        for index in zoned:
            value = values[index]
            if value is not None:
                values[index] = value.replace(tzinfo=zone)
        for index, expression, functions in now:
            for function in functions:
                values[index] = function(values[index], expression, connection)
        refusal = refusal_of(values)
        pk = values[pk_at]
        if refusal is None:
            rows.add(pk, values)
            candidate = candidates[pk]
            distance = values[distance_at] if distance_at is not None else None
            if distance is not None:
                candidate.vector_similarity = 1.0 - float(distance)
            if scores_lexically:
                candidate.lexical_score = float((values[lexical_at] if lexical_at is not None else 0.0) or 0.0)
            if values[position_at] is not None and values[source_at] is not None:  # a document's (_own_document)
                row = rows[pk]
                document = _own_document(row)
                if document is not None:
                    candidate.document, candidate.position = document, row.position
                    # Read only where fusion uses it (a document's fragment, see fuse_scores).
                    if lowers_asking:
                        candidate.asking = asking_share(row.value)
            continue
        alarms.append(str(pk))
        ENFORCEMENT_ALARMS.inc()
        enforcement_logger.warning(
            "row check refused a fragment the index query returned: tenant=%s fragment=%s reader=%s:%s reason=%s",
            policy.caller.tenant.pk, pk, policy.caller.kind, policy.caller.subject, refusal,
        )
        EnforcementAlarm.objects.create(
            tenant=policy.caller.tenant, fragment_id=pk, subject=policy.caller.subject[:255],
            principal_kind=policy.caller.kind, reason=refusal[:200],
        )
    return rows, alarms


# --------------------------------------------------------------------------- fusion and arrangement


def fuse_scores(candidates: dict[uuid.UUID, Candidate], ranking: Ranking | None = None, *,
                hedged: bool = False) -> dict[uuid.UUID, float]:
    """A relevance score in [0, 1] per candidate: each candidate's own score,
    helped (weighted fusion) by the best candidate beside it and the best one
    in its document, and lowered by how much of it only asks. `hedged`: the
    query is written in a hypothetical form (is_hedged). `candidates` holds
    only rows that passed the row check, so no fragment the reader cannot see
    ever moves a score."""
    ranking = ranking or RANKING
    own = _own_scores(candidates, ranking, hedged=hedged)
    if ranking.fusion != "weighted":
        return own
    scores = own
    if ranking.neighbour_weight or ranking.document_weight:
        scores = _with_neighbours(candidates, own, ranking)
    if not ranking.asking_weight:
        return scores
    # Only a turn of a document is lowered: the answer beside it is what the
    # reader wants, and it has just been raised by the question's full score.
    # A memory of its own that asks has nothing beside it to hand over to.
    return {pk: max(0.0, score * (1.0 - ranking.asking_weight * candidates[pk].asking))
            if candidates[pk].document is not None else score
            for pk, score in scores.items()}


def _with_neighbours(candidates: dict[uuid.UUID, Candidate], own: dict[uuid.UUID, float],
                     ranking: Ranking) -> dict[uuid.UUID, float]:
    by_document: dict[int, dict[int, list[uuid.UUID]]] = {}
    for pk, candidate in candidates.items():
        if candidate.document is not None and candidate.position is not None:
            by_document.setdefault(candidate.document, {}).setdefault(candidate.position, []).append(pk)
    scores: dict[uuid.UUID, float] = {}
    total = 1.0 + ranking.neighbour_weight + ranking.document_weight
    for pk, candidate in candidates.items():
        neighbour = document = 0.0
        if candidate.document is not None and candidate.position is not None:
            places = by_document[candidate.document]
            neighbour = max((own[other] for offset in (-1, 1)
                             for other in places.get(candidate.position + offset, ())), default=0.0)
            document = max((own[other] for members in places.values() for other in members if other != pk),
                           default=0.0)
        # Neighbours only ever raise a score: a fragment with no document (a
        # person's memory) stays on the same scale as a turn.
        mixed = (own[pk] + ranking.neighbour_weight * neighbour + ranking.document_weight * document) / total
        scores[pk] = min(1.0, max(0.0, own[pk], mixed))
    return scores


# A sentence: text up to a run of sentence-ending marks (with the quotes or
# brackets that close it), or up to the end.
_SENTENCE = re.compile(
    r"(?P<words>[^.!?\u2026\u3002\uff01\uff1f\u061f]+)(?P<end>[.!?\u2026\u3002\uff01\uff1f\u061f]*)")
_QUESTION_MARK = re.compile(r"[?\uff1f\u061f]")
_LETTER = re.compile(r"\w")


def asking_share(text: str) -> float:
    """The share of `text`'s sentences that are questions (their closing marks
    hold a question mark: ?, ?!, the full-width and the Arabic ones): 1.0 for
    "What pet do you have?", 0.5 for "Nice! Where was it?", 0 for a
    statement. A piece with no word in it (an emoticon) is no sentence."""
    sentences = [match for match in _SENTENCE.finditer(text) if _LETTER.search(match["words"])]
    if not sentences:
        return 0.0
    return sum(bool(_QUESTION_MARK.search(match["end"])) for match in sentences) / len(sentences)


def _own_scores(candidates: dict[uuid.UUID, Candidate], ranking: Ranking, *,
                hedged: bool = False) -> dict[uuid.UUID, float]:
    scores: dict[uuid.UUID, float] = {}
    share = min(1.0, ranking.hedged_vector_weight) if hedged else None
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
        elif share is not None:
            score = share * vector + (1.0 - share) * lexical
        else:
            score = (ranking.vector_weight * vector + ranking.lexical_weight * lexical) / (
                ranking.vector_weight + ranking.lexical_weight
            )
        scores[pk] = min(1.0, max(0.0, score))
    return scores


def is_match(candidate: Candidate, score: float) -> bool:
    """A candidate shares words with the query that weigh something (at least
    LEXICAL_MATCH_MIN of the query's ideal BM25 score: a date number or a word
    every fragment has is not enough), or scores at least MATCH_THRESHOLD."""
    return (candidate.lexical_score or 0.0) >= LEXICAL_MATCH_MIN or score >= MATCH_THRESHOLD


def ordered_matches(candidates: dict[uuid.UUID, Candidate], ranking: Ranking, *,
                    query: str) -> list[tuple[uuid.UUID, float, float]]:
    """The candidates that match, in rank order, each with its relevance
    score and the score that ordered it. A question in a hedged form
    (is_hedged) is ordered by its own weights (Ranking.hedged_vector_weight),
    but what matches, its scores, the relevance floor and abstaining stay
    those of the ordinary weights: a question's form only reorders what
    would be served anyway."""
    scores = fuse_scores(candidates, ranking)
    order = fuse_scores(candidates, ranking, hedged=True) if is_hedged(query) else scores
    # Ties broken by id: the same rules, data and instant give the same order.
    matched = (pk for pk, score in scores.items() if is_match(candidates[pk], score))
    # (A UUID compares as its number, which orders ids as their text does.)
    return [(pk, scores[pk], order[pk]) for pk in sorted(matched, key=lambda pk: (-order[pk], pk))]


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

    def placed(hit: Hit) -> float:
        return hit.score if hit.ordering is None else hit.ordering

    return sorted(hits, key=lambda hit: (-(placed(hit) + JUDGMENT_WEIGHT * affinity(hit)), str(hit.fragment.pk)))


# --------------------------------------------------------------------------- instants


def iso_instant(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z") if value else None
