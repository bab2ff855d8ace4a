"""Retrieval quality on the labelled set: recall@10 and nDCG@10 for vector-only,
lexical-only (several tsquery/ranker choices), reciprocal rank fusion and
weighted score fusion, through the real search path (access rules included).

    python bench/retrieval_eval.py                 # fast path embedder (ONNX), all variants
    python bench/retrieval_eval.py --embedders torch,onnx,onnx-int8

The queries are split in two halves by id: weights are tuned on the "dev"
half (odd ids) and reported on the "test" half (even ids) and on all, so the
chosen configuration is not just fitted to the numbers it is judged by.
Results go to bench/results/retrieval_eval.json; docs/benchmarks.md has the
write-up. Runs in a few minutes per embedder.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from common import ROOT, bench_database, write_results

DATA = ROOT / "bench" / "data" / "retrieval_set.json"
SLUG = "retrieval-eval"
EMBEDDERS = {
    "torch": "memoryhub.embeddings.MiniLMTorchEmbedder",
    "onnx": "memoryhub.embeddings.MiniLMOnnxEmbedder",
    "onnx-int8": "memoryhub.embeddings.MiniLMOnnxInt8Embedder",
}
# PostgreSQL's ranks are compared as they were fused before BM25 (no neighbour features).
_TS = dict(neighbour_weight=0.0, document_weight=0.0)
LEXICAL_VARIANTS = {
    "or+bm25": dict(lexical_query="or", lexical_ranker="bm25"),
    "or+ts_rank_cd": dict(**_TS, lexical_query="or", lexical_ranker="ts_rank_cd", lexical_normalization=32),
    "or+ts_rank": dict(**_TS, lexical_query="or", lexical_ranker="ts_rank", lexical_normalization=32),
    "or+ts_rank/len": dict(**_TS, lexical_query="or", lexical_ranker="ts_rank", lexical_normalization=1 | 32),
    "or+ts_rank_cd/len": dict(**_TS, lexical_query="or", lexical_ranker="ts_rank_cd", lexical_normalization=1 | 32),
    "websearch+ts_rank_cd": dict(**_TS, lexical_query="websearch", lexical_ranker="ts_rank_cd",
                                 lexical_normalization=32),
    "plain+ts_rank_cd": dict(**_TS, lexical_query="plain", lexical_ranker="ts_rank_cd", lexical_normalization=32),
}
K = 10


def build_workspace(data: dict):
    """The labelled workspace as a tenant: roles, collections, access rules,
    people, a connected source for the shared fragments. Returns
    (tenant, {fragment key: id}, {username: caller})."""
    from django.db import transaction

    from memoryhub.access import caller_for_user
    from memoryhub.models import AccessRule, Agent, Collection, Fragment, Membership, Role, Source, Tenant, User
    from memoryhub.services.indexing import fragment_context
    from memoryhub.services.write import fact_hash, subject_of

    with transaction.atomic():
        old = Tenant.objects.filter(slug=SLUG).first()
        if old is not None:
            Fragment.objects.filter(tenant=old).delete()
            old.delete()
        tenant = Tenant.objects.create(slug=SLUG, name="Retrieval eval")
        roles = {name: Role.objects.create(tenant=tenant, name=name) for name in data["workspace"]["roles"]}
        collections = {
            name: Collection.objects.create(tenant=tenant, name=name) for name in data["workspace"]["collections"]
        }
        for rule in data["workspace"]["access_rules"]:
            AccessRule.objects.create(
                tenant=tenant, role=roles[rule["role"]], collection=collections[rule["collection"]]
            )
        users = {}
        for person in data["workspace"]["people"]:
            # Login names are per workspace: the old eval workspace's people went with it.
            user = User.objects.create(username=person["username"], tenant=tenant)
            membership = Membership.objects.create(tenant=tenant, user=user)
            membership.roles.set([roles[r] for r in person["roles"]])
            users[person["username"]] = user
        agent = Agent.objects.create(tenant=tenant, name="eval-docs", kind=Agent.Kind.SOURCE)
        source = Source.objects.create(tenant=tenant, agent=agent)
        recorded = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
        keys = {}
        for item in data["fragments"]:
            created = dt.datetime.fromisoformat(item["created_at"].replace("Z", "+00:00"))
            fragment = Fragment.objects.create(
                tenant=tenant,
                owner_user=users[item["owner"]] if item["owner"] else None,
                collection=collections[item["collection"]] if item["collection"] else None,
                source=None if item["owner"] else source,
                value=item["value"],
                context=fragment_context(created_at=created),  # what the services write
                subject_key=subject_of(item["value"]),
                grounding_status=Fragment.Grounding.STATED if item["owner"] else Fragment.Grounding.GROUNDED,
                created_at=created,
                recorded_at=recorded,
                content_hash=fact_hash(item["value"]),
            )
            if not item["owner"]:
                fragment.agents.add(agent)
            keys[item["key"]] = fragment.pk
    callers = {name: caller_for_user(user=user) for name, user in users.items()}
    return tenant, keys, callers


def embed_all(embedder_path: str) -> float:
    from django.conf import settings

    from memoryhub.embeddings import reset_embedder
    from memoryhub.models import Fragment
    from memoryhub.services.enrichment import fragments_embed_pending

    settings.MEMORYHUB_EMBEDDER = embedder_path
    reset_embedder()
    Fragment.objects.filter(tenant__slug=SLUG).update(embedding=None, embedded_at=None)
    started = time.perf_counter()
    fragments_embed_pending(fragment_ids=[str(pk) for pk in Fragment.objects.filter(tenant__slug=SLUG)
                                          .values_list("pk", flat=True)], max_batches=None)
    return time.perf_counter() - started


def collect(queries: list[dict], callers: dict, variants: list[str]) -> dict[str, dict[str, dict]]:
    """Per lexical variant, per query: every visible candidate with its ranks and scores."""
    from django.db import transaction
    from django.utils import timezone

    from memoryhub import access
    from memoryhub.embeddings import get_embedder
    from memoryhub.services.search import Deadline, Ranking, index_settings, scored_candidates

    embedder = get_embedder()
    vectors = dict(zip([q["id"] for q in queries], embedder.embed([q["query"] for q in queries]), strict=True))
    now = timezone.now()
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    for name in variants:
        ranking = Ranking(fusion="weighted", **LEXICAL_VARIANTS[name])
        for q in queries:
            policy = access.read_policy(caller=callers[q["reader"]], as_of=now)
            with transaction.atomic(), index_settings():
                candidates, _, alarms = scored_candidates(
                    policy=policy, query=q["query"], query_vector=vectors[q["id"]], limit=K,
                    deadline=Deadline(60), ranking=ranking,
                )
            assert not alarms
            out[name][q["id"]] = candidates
    return out


def metrics(ranked: list, relevant: set) -> tuple[float, float]:
    top = ranked[:K]
    hits = [1.0 if pk in relevant else 0.0 for pk in top]
    recall = sum(hits) / len(relevant)
    dcg = sum(h / math.log2(i + 2) for i, h in enumerate(hits))
    idcg = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), K)))
    return recall, dcg / idcg


def rank(candidates: dict, ranking, query: str) -> list:
    """Every candidate in the product's order for `query` (a question in a
    hedged form by its own weights, search.ordered_matches), matched or not:
    threshold_sweep decides matching."""
    from memoryhub.services.search import fuse_scores, is_hedged

    if ranking.fusion == "vector":
        candidates = {pk: c for pk, c in candidates.items() if c.vector_rank is not None}
    elif ranking.fusion == "lexical":
        candidates = {pk: c for pk, c in candidates.items() if c.lexical_rank is not None}
    scores = fuse_scores(candidates, ranking, hedged=is_hedged(query))
    return [pk for pk, _ in sorted(scores.items(), key=lambda item: (-item[1], str(item[0])))]


def evaluate(collected: dict[str, dict], queries: list[dict], keys: dict, ranking) -> dict[str, float]:
    recalls, ndcgs = [], []
    by_kind: dict[str, list[float]] = defaultdict(list)
    for q in queries:
        relevant = {keys[k] for k in q["relevant"]}
        recall, ndcg = metrics(rank(collected[q["id"]], ranking, q["query"]), relevant)
        recalls.append(recall)
        ndcgs.append(ndcg)
        by_kind[q["kind"]].append(ndcg)
    return {
        "recall@10": round(sum(recalls) / len(recalls), 4),
        "ndcg@10": round(sum(ndcgs) / len(ndcgs), 4),
        "n": len(queries),
        "ndcg@10_by_kind": {kind: round(sum(v) / len(v), 4) for kind, v in sorted(by_kind.items())},
    }


def configurations(variants: list[str]):
    from memoryhub.services.search import Ranking

    yield "vector-only", variants[0], Ranking(fusion="vector")
    for name in variants:
        yield f"lexical-only {name}", name, Ranking(fusion="lexical", **LEXICAL_VARIANTS[name])
    for name in variants:
        variant = LEXICAL_VARIANTS[name]
        yield f"rrf k=60 equal {name}", name, Ranking(fusion="rrf", **variant)
        for lexical_weight in (0.5, 1.5, 2.0, 3.0):
            yield (f"rrf k=60 lexical x{lexical_weight} {name}", name,
                   Ranking(fusion="rrf", vector_weight=1.0, lexical_weight=lexical_weight, **variant))
        for vector_weight in (0.02, 0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
            yield (f"weighted v={vector_weight:.2f} {name}", name,
                   Ranking(fusion="weighted", vector_weight=vector_weight,
                           lexical_weight=round(1 - vector_weight, 2), **variant))


# nDCG@10 differences smaller than this on ~300 queries are noise; among
# configurations that close to the best, the one with the higher recall wins.
TIE = 0.005


def choose(table: dict) -> str:
    """The configuration chosen on the dev half: best nDCG@10, ties (within
    TIE) broken by recall@10."""
    top = max(row["dev"]["ndcg@10"] for row in table.values())
    close = [label for label, row in table.items() if row["dev"]["ndcg@10"] >= top - TIE]
    return max(close, key=lambda label: (table[label]["dev"]["recall@10"], table[label]["dev"]["ndcg@10"]))


def score_distribution(collected, queries, keys, ranking) -> dict:
    """Top-1 fused score for answerable and for invisible-only queries, and the
    scores of relevant hits, to place the match threshold."""
    from memoryhub.services.search import fuse_scores

    relevant_scores, top_answerable, top_invisible = [], [], []
    for q in queries:
        scores = fuse_scores(collected[q["id"]], ranking)
        ordered = sorted(scores.values(), reverse=True)
        relevant = {keys[k] for k in q["relevant"]}
        if relevant:
            top_answerable.append(ordered[0] if ordered else 0.0)
            ranked = rank(collected[q["id"]], ranking, q["query"])[:K]
            relevant_scores += [scores[pk] for pk in ranked if pk in relevant]
        else:
            top_invisible.append(ordered[0] if ordered else 0.0)

    def quantiles(values):
        values = sorted(values)
        if not values:
            return {}
        return {f"p{p}": round(values[min(len(values) - 1, int(p / 100 * len(values)))], 4) for p in (1, 5, 10, 50, 90)}

    return {"relevant_hits": quantiles(relevant_scores), "top1_answerable": quantiles(top_answerable),
            "top1_invisible_only": quantiles(top_invisible)}


def threshold_sweep(collected, queries, keys, ranking) -> list[dict]:
    """What a match threshold t costs (relevant hits lost from the top 10) and
    buys (queries whose answer is invisible to the reader that come back empty)."""
    from memoryhub.services.search import fuse_scores

    rows = []
    for t in (0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1):
        found = lost = empty_invisible = invisible = empty_answerable = answerable = 0
        for q in queries:
            scores = fuse_scores(collected[q["id"]], ranking)
            ranked = rank(collected[q["id"]], ranking, q["query"])[:K]
            # (as search.is_match: a candidate sharing a word with the query always matches)
            candidates = collected[q["id"]]
            kept = [pk for pk in ranked if candidates[pk].lexical_score or scores[pk] >= t]
            relevant = {keys[k] for k in q["relevant"]}
            if relevant:
                answerable += 1
                hits = [pk for pk in ranked if pk in relevant]
                found += len(hits)
                lost += sum(1 for pk in hits if pk not in kept)
                empty_answerable += not kept
            else:
                invisible += 1
                empty_invisible += not kept
        rows.append({"threshold": t, "relevant_hits_lost": round(lost / max(found, 1), 4),
                     "answerable_queries_empty": round(empty_answerable / max(answerable, 1), 4),
                     "invisible_only_queries_empty": round(empty_invisible / max(invisible, 1), 4)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedders", default="onnx", help="comma-separated: " + ", ".join(EMBEDDERS))
    parser.add_argument("--lexical", default=",".join(LEXICAL_VARIANTS),
                        help="comma-separated lexical variants to try: " + ", ".join(LEXICAL_VARIANTS))
    parser.add_argument("--data", default=str(DATA))
    args = parser.parse_args()
    data = json.loads(Path(args.data).read_text())

    results: dict = {"queries": len(data["queries"]), "fragments": len(data["fragments"]), "embedders": {}}
    with bench_database():
        _, keys, callers = build_workspace(data)
        answerable = [q for q in data["queries"] if q["relevant"]]
        dev = [q for q in answerable if int(q["id"].lstrip("q")) % 2 == 1]
        test = [q for q in answerable if int(q["id"].lstrip("q")) % 2 == 0]
        for embedder_name in args.embedders.split(","):
            seconds = embed_all(EMBEDDERS[embedder_name])
            started = time.perf_counter()
            variants = args.lexical.split(",")
            collected = collect(data["queries"], callers, variants)
            print(f"[{embedder_name}] embedded corpus in {seconds:.1f}s, collected candidates in "
                  f"{time.perf_counter() - started:.1f}s", flush=True)
            table = {}
            for label, lexical, ranking in configurations(variants):
                table[label] = {
                    "ranking": ranking.__dict__,
                    "dev": evaluate(collected[lexical], dev, keys, ranking),
                    "test": evaluate(collected[lexical], test, keys, ranking),
                    "all": evaluate(collected[lexical], answerable, keys, ranking),
                }
            best = choose(table)
            best_ranking = replace(next(r for lbl, _, r in configurations(variants) if lbl == best))
            lexical_of_best = next(lex for lbl, lex, _ in configurations(variants) if lbl == best)
            results["embedders"][embedder_name] = {
                "corpus_embed_seconds": round(seconds, 1),
                "table": table,
                "best_on_dev": best,
                "score_distribution_of_best": score_distribution(
                    collected[lexical_of_best], data["queries"], keys, best_ranking
                ),
            }
            print(f"{'configuration':58} {'dev nDCG':>9} {'test R@10':>9} {'test nDCG':>9} {'all R@10':>9} "
                  f"{'all nDCG':>9}")
            for label, row in sorted(table.items(), key=lambda item: -item[1]["dev"]["ndcg@10"]):
                print(f"{label:58} {row['dev']['ndcg@10']:9.4f} {row['test']['recall@10']:9.4f} "
                      f"{row['test']['ndcg@10']:9.4f} {row['all']['recall@10']:9.4f} {row['all']['ndcg@10']:9.4f}")
            results["embedders"][embedder_name]["threshold_sweep_of_best"] = sweep = threshold_sweep(
                collected[lexical_of_best], data["queries"], keys, best_ranking
            )
            print(f"best on dev: {best}")
            for row in sweep:
                print(row)
            print(json.dumps(results["embedders"][embedder_name]["score_distribution_of_best"], indent=1))
    name = "retrieval_eval"
    if args.lexical != ",".join(LEXICAL_VARIANTS):
        name += "_" + args.lexical.replace(",", "_")
    path = write_results(f"{name}_{args.embedders.replace(',', '_')}", results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
