"""Search latency at 10k and 100k fragments in one tenant (20 roles, 50
collections), beside its floor, and filtered HNSW recall@10 against exact
search under the same visibility filter.

    python bench/search_bench.py                          # 10k and 100k, 200 / 100 queries
    python bench/search_bench.py --sizes 10000 --queries 300
    python bench/search_bench.py --rebuild                # regenerate the corpora
    python bench/search_bench.py --settled                # the heap settled, as a server's worker has it

For each size:
* search: memory_search end to end (query embedding, role lookup, both index
  queries under the visibility predicate, row check, fusion, receipt, commit),
  and the mean time per search in each of the product's search phases;
* floor: the query embedding alone; bare pgvector top-10 (no filter); bare
  full-text top-10 (no filter, no cap, the product's OR query and ts_rank);
* the product's two index queries alone, under the visibility predicate
  (search.candidate_pool deep; the lexical one is BM25 with the reader's
  statistics, also scoring the vector pool, and includes reading the query's
  lexemes), each on its own and as the ranking runs them, in one statement
  (the floor: the query embedding plus that statement);
* the floor in sequence: for each query, its embedding and then that one
  statement, one query after the other, as a search runs them (the encoder
  timed back to back, as in the floor above, answers faster than it does
  between other work);
* steady: after those passes, each query through the search and through its
  floor in sequence in turn, which goes first alternating, with every
  reader's predicate compiled and every query seen by both (a long-running
  worker's searches; the search pass above includes most readers' first);
* recording the read: the receipt as search writes it, joining the
  workspace's hash chain, and the chain's one statement alone;
* the time Python's cycle collector took, a search (all of the process's
  collections while the searches ran, and the longest), in the first pass
  and the steady one; with --settled the heap is settled after the warm-up
  as a server's worker settles it (mcpapi.serving.settle_heap);
* recall@10 of the filtered HNSW query (iterative scan) against an exact
  scan under the same predicate, for several hnsw.ef_search values: the raw
  top 10 of the index, and the top 10 search keeps (its candidate pool
  re-scored exactly).

The corpus: the labelled set's 1,265 texts as seeds, varied (numbers, names,
half of them joined with another seed's first sentence, a closing clause),
embedded with the production embedder (up to 20,000 distinct texts; the 100k
corpus repeats each five times with another closing clause); 10% private to
50 people, the rest in 50 collections from 3 connected sources, 5% retired.
Each corpus is built once into the benchmark database and reused (--rebuild
empties that database first); the HNSW and GIN indexes are rebuilt after the
bulk load with maintenance_work_mem=1GB.
Results: bench/results/search_bench.json (or --results NAME). Run time on 2 cores: ~10 min for 10k, ~20 min more for
100k (most of it embedding the corpus; later runs reuse the stored corpora).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from common import ROOT, bench_database, summary, timed, write_results

DATA = ROOT / "bench" / "data" / "retrieval_set.json"
ROLES = 20
COLLECTIONS = 50
PEOPLE = 50
NAMES = ["Ada", "Bruno", "Chloe", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jun", "Kofi", "Lena",
         "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq"]
EF_SEARCH_VALUES = (40, 100, 200, 400, 1000)
CLAUSES = ["", "", " Noted in the weekly sync.", " Follow-up owner: {name}.", " Confirmed by {name} on Monday.",
           " See the linked ticket.", " Raised again in the retro.", " {name} will double-check this.",
           " This replaces the earlier note.", " Applies to the EU region too."]


def slug(size: int) -> str:
    return f"bench-{size}"


def _vary(text: str, other: str, rng: random.Random) -> str:
    """A new fragment from a seed: digits and names changed, sometimes joined
    with the first sentence of another seed, a closing clause."""
    text = re.sub(r"\d", lambda m: str(rng.randint(0, 9)) if rng.random() < 0.3 else m.group(0), text)
    for name in NAMES[:6]:
        if name in text and rng.random() < 0.3:
            text = text.replace(name, rng.choice(NAMES))
    if rng.random() < 0.5:
        first_sentence = re.split(r"(?<=[.!?])\s", other, maxsplit=1)[0]
        text = f"{text} {first_sentence}"
    return text + rng.choice(CLAUSES).format(name=rng.choice(NAMES))


class Corpus:
    """Distinct texts with their embeddings, made once per run and shared by
    the sizes: up to UNIQUE_TEXTS are embedded; a larger corpus reuses each
    text (with another closing clause) a few times, as real memory repeats
    itself. Embedding is the slow part (~60 texts/s on 2 cores)."""

    def __init__(self, seeds: list[str]) -> None:
        self.seeds = seeds
        self.texts: list[str] = []
        self.vectors: list[list[float]] = []
        self.rng = random.Random(11)

    def ensure(self, count: int) -> None:
        from memoryhub.embeddings import get_embedder

        started = time.perf_counter()
        embedder = get_embedder()
        while len(self.texts) < count:
            batch = [_vary(self.rng.choice(self.seeds), self.rng.choice(self.seeds), self.rng)
                     for _ in range(min(1024, count - len(self.texts)))]
            self.vectors.extend(embedder.embed(batch))
            self.texts.extend(batch)
            print(f"embedded {len(self.texts)}/{count} distinct texts ({time.perf_counter() - started:.0f}s)",
                  flush=True)


UNIQUE_TEXTS = 20_000


def build(size: int, corpus: Corpus, rebuild: bool) -> None:
    from django.db import connection, transaction

    from memoryhub.models import AccessRule, Agent, Collection, Fragment, Membership, Role, Source, Tenant, User

    existing = Tenant.objects.filter(slug=slug(size)).first()
    if existing is not None and not rebuild and Fragment.objects.filter(tenant=existing).count() == size:
        print(f"[{size}] reusing the corpus", flush=True)
        return
    if existing is not None:
        raise SystemExit(f"[{size}] the stored corpus is incomplete or stale: run again with --rebuild")
    started = time.perf_counter()
    rng = random.Random(size)
    with transaction.atomic():
        tenant = Tenant.objects.create(slug=slug(size), name=f"Bench {size}")
        roles = [Role.objects.create(tenant=tenant, name=f"role-{i}") for i in range(ROLES)]
        collections = [Collection.objects.create(tenant=tenant, name=f"coll-{i}") for i in range(COLLECTIONS)]
        for role in roles:
            for collection in rng.sample(collections, rng.randint(4, 8)):
                AccessRule.objects.create(tenant=tenant, role=role, collection=collection)
        people = []
        for i in range(PEOPLE):
            user = User.objects.create(username=f"{slug(size)}-person-{i}", tenant=tenant)
            Membership.objects.create(tenant=tenant, user=user).roles.set(rng.sample(roles, rng.randint(1, 3)))
            people.append(user)
        sources = []
        for name in ("wiki", "tickets", "crm"):
            agent = Agent.objects.create(tenant=tenant, name=name, kind=Agent.Kind.SOURCE)
            sources.append(Source.objects.create(tenant=tenant, agent=agent))

    distinct = min(size, UNIQUE_TEXTS)
    corpus.ensure(distinct)
    base = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    rows, links = [], []
    for n in range(size):
        text, vector = corpus.texts[n % distinct], corpus.vectors[n % distinct]
        if n >= distinct:
            text += rng.choice(CLAUSES).format(name=rng.choice(NAMES))
        pk = uuid.uuid4()
        recorded = base + dt.timedelta(minutes=rng.randint(0, 500_000))
        retired = recorded + dt.timedelta(days=rng.randint(1, 200)) if rng.random() < 0.05 else None
        private = rng.random() < 0.10
        source = None if private else rng.choice(sources)
        rows.append((
            pk, tenant.pk, rng.choice(people).pk if private else None,
            None if private else rng.choice(collections).pk, source.pk if source else None,
            text, recorded - dt.timedelta(days=rng.randint(0, 60)), recorded, retired,
            "superseded" if retired else "", "[" + ",".join(f"{x:.6f}" for x in vector) + "]",
        ))
        if source is not None:
            links.append((pk, source.agent_id))
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS fragment_embedding_hnsw")
        cursor.execute("DROP INDEX IF EXISTS fragment_search_vector_gin")
        raw = cursor.cursor
        with raw.copy(
            "COPY memoryhub_fragment (id, tenant_id, owner_user_id, collection_id, source_id, value, created_at, "
            "recorded_at, retired_at, retired_reason, embedding, subject_key, confidence, grounding_status, "
            "session_id, client_id, resource_ref, content_hash, embedded_at) FROM STDIN"
        ) as copy:
            for row in rows:
                copy.write_row((*row, "", 1.0, "grounded", "", "", "", "bench", row[7]))
        with raw.copy("COPY memoryhub_fragment_agents (fragment_id, agent_id) FROM STDIN") as copy:
            for link in links:
                copy.write_row(link)
        print(f"[{size}] loaded {size} rows in {time.perf_counter() - started:.0f}s; building indexes", flush=True)
        cursor.execute("SET maintenance_work_mem = '1GB'")
        t0 = time.perf_counter()
        cursor.execute(
            "CREATE INDEX fragment_embedding_hnsw ON memoryhub_fragment USING hnsw (embedding vector_cosine_ops) "
            "WITH (m = 16, ef_construction = 64)"
        )
        hnsw_seconds = time.perf_counter() - t0
        cursor.execute("CREATE INDEX fragment_search_vector_gin ON memoryhub_fragment USING gin (search_vector)")
        cursor.execute("RESET maintenance_work_mem")
        cursor.execute("ANALYZE memoryhub_fragment")
        cursor.execute("ANALYZE memoryhub_fragment_agents")
    from memoryhub.services import tallies

    tallies.fold_tallies()  # what the beat does after a load
    print(f"[{size}] HNSW index built in {hnsw_seconds:.0f}s; corpus ready in {time.perf_counter() - started:.0f}s",
          flush=True)


class Collector:
    """Python's cycle collections while it listens (gc.callbacks): their time and the longest."""

    def __init__(self) -> None:
        import gc

        self.total = self.longest = 0.0
        self.counts = [0, 0, 0]
        self._started = 0.0
        gc.callbacks.append(self._heard)

    def _heard(self, phase: str, info: dict) -> None:  # type: ignore[type-arg]
        if phase == "start":
            self._started = time.perf_counter()
            return
        spent = (time.perf_counter() - self._started) * 1000
        self.total += spent
        self.longest = max(self.longest, spent)
        self.counts[info["generation"]] += 1

    def since(self, mark: tuple[float, list[int]], searches: int) -> dict:  # type: ignore[type-arg]
        """What it heard since `mark` (taken with `mark()` before the searches;
        "longest_ms_so_far" is the longest since then)."""
        total, counts = mark
        return {"ms_per_search": round((self.total - total) / searches, 3),
                "collections_by_generation": [now - then for now, then in zip(self.counts, counts, strict=True)],
                "longest_ms_so_far": round(self.longest, 1)}

    def mark(self) -> tuple[float, list[int]]:
        self.longest = 0.0
        return self.total, list(self.counts)


def phase_seconds() -> dict[str, float]:
    """The search phase timers' totals so far (observability.SEARCH_PHASE_SECONDS), by phase."""
    from prometheus_client import REGISTRY

    totals = {}
    for metric in REGISTRY.collect():
        if metric.name == "memoryhub_search_phase_seconds":
            totals = {sample.labels["phase"]: sample.value for sample in metric.samples
                      if sample.name.endswith("_sum")}
    return totals


def phase_means_since(before: dict[str, float], searches: int) -> dict[str, float]:
    """Each phase's mean ms over the `searches` run since `before` (phase_seconds() then)."""
    return {name: round((seconds - before.get(name, 0.0)) * 1000 / searches, 2)
            for name, seconds in phase_seconds().items() if seconds > before.get(name, 0.0)}


def run(size: int, queries: list[str], rng: random.Random, collector: Collector, *, settled: bool = False) -> dict:
    from django.db import connection, transaction
    from django.db.models import ExpressionWrapper, F, FloatField
    from django.test import override_settings
    from django.utils import timezone
    from pgvector.django import CosineDistance

    from memoryhub import access
    from memoryhub.access import caller_for_user
    from memoryhub.embeddings import get_embedder
    from memoryhub.mcp_adapter.render import search_output
    from memoryhub.models import Fragment, User
    from memoryhub.services import search
    from memoryhub.services.search import RANKING, fragments_search

    users = list(User.objects.filter(tenant__slug=slug(size)).order_by("pk"))
    callers = [caller_for_user(user=user) for user in users]
    readers = [rng.choice(callers) for _ in queries]
    embedder = get_embedder()
    embedder.embed(["warm up"])

    def memory_search(caller, query: str) -> dict:  # type: ignore[no-untyped-def]
        # The domain's search and the contract's rendering of it (no MCP result budget).
        return search_output(fragments_search(caller=caller, query=query))

    for query, caller in list(zip(queries, readers, strict=True))[:10]:  # warm caches and the pool
        memory_search(caller, query)
    if settled:
        import os

        from mcpapi.serving import SETTLE_HEAP, settle_heap

        os.environ[SETTLE_HEAP] = "1"
        settle_heap()

    result: dict = {"fragments": size, "queries": len(queries), "heap_settled": settled}
    samples = []
    before = phase_seconds()
    heard = collector.mark()
    for query, caller in zip(queries, readers, strict=True):
        samples += timed(lambda q=query, c=caller: memory_search(c, q), 1)
    result["search"] = summary(samples)
    result["search_collector"] = collector.since(heard, len(queries))
    # Where those searches spent their time, by the product's own phase timers.
    result["search_phases_mean_ms"] = phase_means_since(before, len(queries))

    now = timezone.now()
    DEPTH = search.candidate_pool(10)  # noqa: N806 - what the ranking asks of each index
    result.update(floor_in_sequence(queries, readers, now, DEPTH))
    result.update(steady(queries, readers, now, DEPTH, memory_search, collector))

    vectors = embedder.embed(queries)
    result["floor_query_embedding"] = summary(
        [t for q in queries for t in timed(lambda q=q: embedder.embed([q]), 1)])

    def bare_vector(vector):
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM memoryhub_fragment ORDER BY embedding <=> %s::vector LIMIT 10",
                           ["[" + ",".join(map(str, vector)) + "]"])
            return cursor.fetchall()

    result["floor_bare_pgvector"] = summary([t for v in vectors for t in timed(lambda v=v: bare_vector(v), 1)])

    def bare_fulltext(query):
        tsquery = search.tsquery_for(query, RANKING)
        if tsquery is None:
            return []
        return list(Fragment.objects.filter(search_vector=tsquery)
                    .order_by(search._lexical_rank(tsquery, RANKING).desc()).values_list("pk", flat=True)[:10])

    result["floor_bare_fulltext"] = summary([t for q in queries for t in timed(lambda q=q: bare_fulltext(q), 1)])

    vector_times, lexical_times, index_times, visible_shares = [], [], [], []
    recall: dict[int, dict[str, list[float]]] = {ef: {"raw": [], "pool": [], "ms": []} for ef in EF_SEARCH_VALUES}
    for query, vector, caller in zip(queries, vectors, readers, strict=True):
        policy = access.read_policy(caller=caller, as_of=now)
        predicate = policy.queryset_filter()
        with transaction.atomic(), search.index_settings():
            # What the ranking must do: both pools (search.candidate_pool), BM25 also scoring the vector pool.
            found = search.vector_candidates(predicate, vector, DEPTH)
            vector_times += timed(lambda p=predicate, v=vector: search.vector_candidates(p, v, DEPTH), 1)
            # A person's read sums N and the mean length from the tallies, as search does (and decides so
            # in the timed part, as search does).
            # BM25's statement reads the predicate as search reads it (search.index_predicate).
            lexical_times += timed(lambda q=query, v=vector, f=found, r=policy: bm25(r, q, v, DEPTH, also=f), 1)
            # As search runs them: the vector pool inside BM25's statement (and the query's lexemes).
            index_times += timed(lambda q=query, v=vector, r=policy: bm25(r, q, v, DEPTH, vector=v), 1)
            # Exact: an ORDER BY the index cannot serve forces a scan of every visible row.
            exact = list(
                Fragment.objects.filter(predicate, embedding__isnull=False)
                .annotate(d=ExpressionWrapper(CosineDistance("embedding", vector) * 1.0, output_field=FloatField()))
                .order_by(F("d").asc(), "pk").values_list("pk", flat=True)[:10]
            )
            for ef in EF_SEARCH_VALUES:
                # Every statement that walks the index sends the configured ef_search with it.
                with override_settings(MEMORYHUB_HNSW_EF_SEARCH=ef):
                    started = time.perf_counter()
                    raw = search.vector_candidates(predicate, vector, 10)
                    # What search itself keeps: its candidate pool, re-scored exactly, top 10.
                    pool = search.vector_candidates(predicate, vector, search.candidate_pool(10))
                    recall[ef]["ms"].append((time.perf_counter() - started) * 1000 / 2)
                rescored = list(
                    Fragment.objects.filter(pk__in=pool).annotate(d=CosineDistance("embedding", vector))
                    .order_by("d", "pk").values_list("pk", flat=True)[:10]
                )
                if exact:
                    recall[ef]["raw"].append(len(set(raw) & set(exact)) / len(exact))
                    recall[ef]["pool"].append(len(set(rescored) & set(exact)) / len(exact))
        if len(visible_shares) < 20:
            visible_shares.append(Fragment.objects.filter(predicate).count() / size)
    result.update(receipt_cost(callers, rng))
    result["index_query_vector_filtered"] = summary(vector_times)
    result["index_query_lexical_filtered"] = summary(lexical_times)
    result["index_queries_one_statement"] = summary(index_times)
    result["filtered_recall@10_vs_exact"] = {
        str(ef): {
            "index_top10": round(sum(r["raw"]) / len(r["raw"]), 4),
            "index_top10_min": round(min(r["raw"]), 4),
            "search_pool_top10": round(sum(r["pool"]) / len(r["pool"]), 4),
            "search_pool_top10_min": round(min(r["pool"]), 4),
            "vector_query_p50_ms": summary(r["ms"])["p50_ms"],
        }
        for ef, r in recall.items()
    }
    result["hnsw_ef_search_in_production"] = search.hnsw_ef_search()
    result["visible_share_mean"] = round(sum(visible_shares) / len(visible_shares), 3)
    return result


def bm25(policy, query: str, query_vector: list[float], depth: int, **pools):  # type: ignore[no-untyped-def]
    """BM25's statement as a search runs it for this policy and query (the
    query's lexemes, the predicate search.index_predicate gives, the reader's
    totals), with the vector pool (`vector=`) or scoring `also=`."""
    from memoryhub.services import search

    ranking = search.RANKING
    read_query = search.read_query_for(query, query_vector, ranking)
    return search.lexical_scored(search.index_predicate(policy, read_query, depth, ranking), read_query, depth,
                                 ranking, tallied=search.tallied_statistics(policy), **pools)


def floor_in_sequence(queries: list[str], readers: list, now: dt.datetime, depth: int) -> dict:  # type: ignore[type-arg]
    """The floor as a search meets it: for each query, its embedding and then
    its index statement, one query after the other (the floor's parts below are
    each timed back to back: the encoder, run again and again, answers faster
    than it does between other work, as each search's embedding runs)."""
    whole, embedding, statement = zip(*(floor_once(query, caller, now, depth)
                                        for query, caller in zip(queries, readers, strict=True)), strict=True)
    return {"floor_in_sequence": summary(list(whole)), "floor_in_sequence_embedding": summary(list(embedding)),
            "floor_in_sequence_statement": summary(list(statement))}


def floor_once(query: str, caller, now: dt.datetime, depth: int) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """One query's floor: its embedding, then its index statement (ms: the
    two, the embedding, the statement)."""
    from django.db import transaction

    from memoryhub import access
    from memoryhub.embeddings import get_embedder
    from memoryhub.services import search

    policy = access.read_policy(caller=caller, as_of=now)
    embedder = get_embedder()
    with transaction.atomic(), search.index_settings():
        started = time.perf_counter()
        vector = embedder.embed([query])[0]
        embedded = time.perf_counter()
        # As index_queries_one_statement below times it.
        bm25(policy, query, vector, depth, vector=vector)
        finished = time.perf_counter()
    return (finished - started) * 1000, (embedded - started) * 1000, (finished - embedded) * 1000


# A search's statements by what they do, told apart by their text (the first
# match wins): the index statement is the one its floor runs too.
STATEMENTS = (("index", "WITH pool"), ("prologue", "tsvector_to_array"), ("receipt", "WITH link AS"),
              ("row_check", '"memoryhub_fragment"."tenant_id"'))


def statement_kind(sql: str) -> str:
    return next((kind for kind, text in STATEMENTS if text in sql), "other")


def steady(queries: list[str], readers: list, now: dt.datetime, depth: int,  # type: ignore[type-arg]
           memory_search: Callable[[Any, str], object], collector: Collector) -> dict:
    """The search beside its floor as a long-running worker meets them: run
    after the passes above, so every reader's predicate is compiled and every
    query has been through both paths once; then each query through the
    search and through its floor in turn, which goes first alternating, so
    both meet the same machine and the same caches. (The passes above time
    the search first, with most readers' first search, which compiles the
    reader's predicate, and the floor after it, on what the search just read.)

    Each search's statements are timed too, from the moment each is sent
    until its rows are read (a wrapper around Django's cursor): the index
    statement, which the floor runs as well, the three others (the prologue,
    the row check, the receipt) and any other, so what the search spends
    beyond its floor splits into those statements and the rest (the query's
    embedding, in the floor too, and the search's own Python)."""
    from django.db import connection

    searched, floors = [], []
    spent: dict[str, list[float]] = {kind: [] for kind in (*(kind for kind, _ in STATEMENTS), "other")}
    this_search: dict[str, float] = {}

    def timed_statement(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            kind = statement_kind(sql)
            this_search[kind] = this_search.get(kind, 0.0) + (time.perf_counter() - started) * 1000

    before = phase_seconds()
    heard = collector.mark()
    for index, (query, caller) in enumerate(zip(queries, readers, strict=True)):
        for path in ("search", "floor") if index % 2 == 0 else ("floor", "search"):
            if path == "search":
                this_search.clear()
                with connection.execute_wrapper(timed_statement):
                    searched += timed(lambda q=query, c=caller: memory_search(c, q), 1)
                for kind, times in spent.items():
                    times.append(this_search.get(kind, 0.0))
            else:
                floors.append(floor_once(query, caller, now, depth)[0])
    # The floor runs no phase timer: these are the searches'.
    phases = phase_means_since(before, len(queries))
    others = [sum(spent[kind][at] for kind in ("prologue", "row_check", "receipt", "other"))
              for at in range(len(searched))]
    beyond = [total - spent["index"][at] - others[at] for at, total in enumerate(searched)]
    return {"search_steady": summary(searched), "floor_in_sequence_steady": summary(floors),
            # The collections of the searches and their floors, taken in turn, a search.
            "steady_collector": collector.since(heard, len(queries)),
            "search_steady_phases_mean_ms": phases,
            # ms a search, p50 and mean: each statement, the three beside the index statement, and
            # the search less all four.
            "search_steady_statements": {
                **{kind: {"p50_ms": round(statistics.median(times), 2), "mean_ms": round(statistics.mean(times), 2)}
                   for kind, times in spent.items()},
                "prologue_row_check_receipt_and_other": summary(others),
                "search_less_its_statements": summary(beyond),
            }}


def receipt_cost(callers: list, rng: random.Random, count: int = 200) -> dict:  # type: ignore[type-arg]
    """What recording a read costs: the receipt as search writes it (served ids
    with their value hashes, joining the workspace's hash chain), and the one
    statement joining the chain adds, each timed in a transaction rolled back
    so the benchmark leaves the chain as it was."""
    from django.db import connection, transaction
    from django.utils import timezone

    from contract.receipt_chain import GENESIS, content_hash, value_hash
    from memoryhub.models import Fragment, Receipt, new_receipt_id
    from memoryhub.services import receipt_chain

    served = [str(pk) for pk in Fragment.objects.values_list("pk", flat=True)[:10]]

    def receipt(caller) -> Receipt:  # type: ignore[no-untyped-def]
        return Receipt(id=new_receipt_id(), tenant=caller.tenant, reader_user=caller.user, principal_kind=caller.kind,
                       subject=caller.subject, client_id=caller.client_id, roles=["r1"],
                       request={"query": "bench", "limit": 10}, as_of=timezone.now(), served=served,
                       served_hashes=[value_hash(pk) for pk in served], created_at=timezone.now())

    def append(caller) -> None:  # type: ignore[no-untyped-def]
        with transaction.atomic():
            receipt_chain.receipt_append(receipt(caller))
            transaction.set_rollback(True)

    def chain_statement(caller) -> None:  # type: ignore[no-untyped-def]
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(receipt_chain.APPEND, {"tenant": caller.tenant.pk, "genesis": GENESIS,
                                                      "content": content_hash({"bench": 1})})
            transaction.set_rollback(True)

    chosen = [rng.choice(callers) for _ in range(count)]
    return {
        "receipt_write_with_chain": summary([t for c in chosen for t in timed(lambda c=c: append(c), 1)]),
        "receipt_chain_statement": summary([t for c in chosen for t in timed(lambda c=c: chain_statement(c), 1)]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", default="200,100", help="queries per size (one number, or one per size)")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--settled", action="store_true",
                        help="settle the heap after the warm-up, as a server's worker does (mcpapi.serving)")
    parser.add_argument("--results", default="search_bench", help="name of the results file in bench/results")
    args = parser.parse_args()
    collector = Collector()
    data = json.loads(DATA.read_text())
    seeds = [item["value"] for item in data["fragments"]]
    sizes = [int(s) for s in args.sizes.split(",")]
    counts = [int(q) for q in args.queries.split(",")]
    counts = (counts + [counts[-1]] * len(sizes))[: len(sizes)]
    results = {}
    with bench_database():
        if args.rebuild:
            from django.db import connection

            # The benchmark database holds nothing else worth keeping; the ORM's
            # cascade would load 100k rows into Python to delete them.
            with connection.cursor() as cursor:
                cursor.execute("TRUNCATE memoryhub_tenant, memoryhub_fragmenttally CASCADE")
        corpus = Corpus(seeds)
        for size, count in zip(sizes, counts, strict=True):
            build(size, corpus, args.rebuild)
            rng = random.Random(7)
            queries = [q["query"] for q in rng.sample(data["queries"], min(count, len(data["queries"])))]
            results[str(size)] = run(size, queries, rng, collector, settled=args.settled)
            print(json.dumps(results[str(size)], indent=1), flush=True)
    path = write_results(args.results, results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
