"""Retrieval on real long conversations: LoCoMo through the product.

    python bench/locomo_eval.py --data PATH/locomo-dev5.json           # the search service
    python bench/locomo_eval.py --data PATH/locomo-dev5.json --mcp     # and over MCP, with real tokens
    python bench/locomo_eval.py --data PATH --ingest per-turn          # each turn its own document

The data file is never copied into the repository: pass its path (the upstream
`locomo10.json`, or any file in its format). As its README prescribes: each
conversation is one workspace with one person, fed by one connected source;
every turn is one fragment, dated with its session's date; each question is
asked by that person with limit 10; the relevant fragments are the question's
evidence turns (questions without evidence are skipped).

Ingestion goes through the ingestion service a connector's request reaches
(`document_validated` + `document_upsert`), embedding through the enrichment
pipeline the worker runs; questions go through `fragments_search` (what the
MCP adapter calls) and, with --mcp, through `memory_search` over HTTP against
a running ASGI server with an OAuth access token per person.

--ingest conversation (default): a session is one conversation document whose
turns are the source's `turns` (speaker and text; a shared image's caption
follows the text as "[shares an image: ...]"). --ingest per-turn: each turn is
a document of its own whose text is "Speaker: text", as a connector that knows
nothing of conversations would send it.

Reported, overall and per category (1 multi-hop, 2 temporal, 3 open-domain,
4 single-hop, 5 adversarial): R@5, R@10, nDCG@10 (binary gain, log2 discount,
ideal = all evidence first) and hit@10; search p50/p95 beside the floor (the
query embedding plus the ranking's index queries, measured in the same run).
Results: bench/results/locomo_eval[_<label>].json and a Markdown table on
standard output (docs/benchmarks.md, "Retrieval on real conversations", keeps
the runs it compares).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import secrets
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from common import bench_database, percentile, publish

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
K = 10
SECTION = "## Retrieval on real conversations (LoCoMo)"


# ---------------------------------------------------------------------------- the data


def session_instant(text: str) -> dt.datetime:
    """'1:56 pm on 8 May, 2023' -> that instant, in UTC (the data has no zone)."""
    match = re.match(r"\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", text, re.I)
    if match is None:
        raise ValueError(f"unreadable session date {text!r}")
    hour, minute, half, day, month, year = match.groups()
    hour = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    parsed = dt.datetime.strptime(f"{day} {month} {year}", "%d %B %Y")
    return parsed.replace(hour=hour, minute=int(minute), tzinfo=dt.UTC)


def turn_text(turn: dict) -> str:
    caption = turn.get("blip_caption")
    return f"{turn['text']} [shares an image: {caption}]" if caption else turn["text"]


def conversations(path: Path) -> list[dict]:
    samples = json.loads(path.read_text())
    out = []
    for sample in samples:
        conversation = sample["conversation"]
        sessions = []
        n = 1
        while f"session_{n}" in conversation:
            turns = conversation[f"session_{n}"]
            if turns:
                sessions.append({"number": n, "at": session_instant(conversation[f"session_{n}_date_time"]),
                                 "turns": turns})
            n += 1
        questions = [qa for qa in sample["qa"] if qa.get("evidence")]
        out.append({"id": sample["sample_id"], "sessions": sessions, "questions": questions})
    return out


# ---------------------------------------------------------------------------- ingestion


def workspace_slug(conversation_id: str) -> str:
    return "locomo-" + re.sub(r"[^a-z0-9-]", "-", conversation_id.lower())


def build(conversation: dict, mode: str) -> tuple[object, dict[str, str]]:
    """A fresh workspace for one conversation, ingested through the source.
    Returns (the person's caller, {fragment id: dia_id})."""
    from memoryhub import access
    from memoryhub.models import Fragment, Receipt, Tenant
    from memoryhub.services import ingest
    from memoryhub.services.access_rules import access_rule_grant
    from memoryhub.services.collections import collection_create
    from memoryhub.services.enrichment import fragments_embed_pending
    from memoryhub.services.members import member_add
    from memoryhub.services.roles import role_create
    from memoryhub.services.sources import source_register
    from memoryhub.services.workspaces import workspace_create

    slug = workspace_slug(conversation["id"])
    old = Tenant.objects.filter(slug=slug).first()
    if old is not None:
        # The benchmark's own workspace from an earlier run: its receipts keep
        # its readers (they are never deleted in the product), so they go first.
        Receipt.objects.filter(tenant=old).delete()
        Fragment.objects.filter(tenant=old).delete()
        old.delete()
    tenant = workspace_create(caller=access.OPERATOR, slug=slug, name=f"LoCoMo {conversation['id']}")
    system = access.system_caller(tenant=tenant)
    role_create(caller=system, name="reader")
    collection_create(caller=system, name="conversation")
    access_rule_grant(caller=system, role="reader", collection="conversation")
    person = member_add(caller=system, username="person", password=None, roles=["reader"])
    source, _ = source_register(caller=system, name="chat", kind="chat", collection="conversation")

    where: dict[tuple[str, str], str] = {}  # (resource id, text as stored) -> dia_id
    for session in conversation["sessions"]:
        if mode == "per-turn":
            for turn in session["turns"]:
                resource_id = f"{conversation['id']}:{turn['dia_id']}"
                text = f"{turn['speaker']}: {turn_text(turn)}"
                ingest.document_upsert(source=source, document=ingest.document_validated(
                    resource_id=resource_id, text=text, created_at=session["at"]))
                where[(resource_id, "")] = turn["dia_id"]
        else:
            resource_id = f"{conversation['id']}:session_{session['number']}"
            turns = [{"speaker": turn["speaker"], "text": turn_text(turn)} for turn in session["turns"]]
            ingest.document_upsert(source=source, document=ingest.document_validated(
                resource_id=resource_id, title=f"Session {session['number']}", turns=turns,
                created_at=session["at"]))
            for position, turn in enumerate(session["turns"]):
                where[(resource_id, str(position))] = turn["dia_id"]
    while fragments_embed_pending(source_id=source.pk).more:
        pass

    dia: dict[str, str] = {}
    rows = Fragment.objects.filter(tenant=tenant, retired_at__isnull=True).values_list(
        "pk", "resources__external_id", "position")
    for pk, resource_id, position in rows:
        key = (resource_id, "" if mode == "per-turn" else str(position))
        dia[str(pk)] = where[key]
    return access.caller_for_user(user=person, client_id="locomo-eval"), dia


# ---------------------------------------------------------------------------- scoring


def scores(ranked_dia: list[str], evidence: list[str]) -> dict[str, float]:
    relevant = set(evidence)
    seen: set[str] = set()
    gains = []
    for dia_id in ranked_dia[:K]:
        gains.append(1.0 if dia_id in relevant and dia_id not in seen else 0.0)
        seen.add(dia_id)
    found10 = relevant & set(ranked_dia[:K])
    found5 = relevant & set(ranked_dia[:5])
    dcg = sum(gain / math.log2(i + 2) for i, gain in enumerate(gains))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), K)))
    return {"r5": len(found5) / len(relevant), "r10": len(found10) / len(relevant), "ndcg": dcg / ideal,
            "hit10": float(bool(found10))}


def aggregate(per_question: list[tuple[int, dict[str, float]]]) -> dict:
    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    for category, values in per_question:
        groups["all"].append(values)
        groups[f"c{category}"].append(values)
    return {name: {"n": len(rows), **{key: round(statistics.fmean(r[key] for r in rows), 4)
                                        for key in ("r5", "r10", "ndcg", "hit10")}}
            for name, rows in groups.items()}


def latency(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(samples), 2), "p95_ms": round(percentile(samples, 95), 2),
            "n": len(samples)}


# --bm25-grid: BM25's own parameters (k1, b, own words' weight) tried by bench/locomo_tune.py.
BM25_GRID = [(k1, b, own) for k1 in (0.8, 1.2) for b in (0.3, 0.5, 0.75) for own in (1.0, 1.5, 2.0)]


def candidates_of(caller, query: str, embedder, ranking=None) -> list[dict]:  # type: ignore[no-untyped-def]
    """Every candidate the product's search scores for `query`, with what
    fusion reads (bench/locomo_tune.py fuses them offline)."""
    from django.db import transaction
    from django.utils import timezone

    from memoryhub import access
    from memoryhub.services import search

    vector = embedder.embed([query])[0]
    with transaction.atomic(), search.index_settings():
        policy = access.read_policy(caller=caller, as_of=timezone.now())
        candidates, _, _ = search.scored_candidates(policy=policy, query=query, query_vector=vector, limit=K,
                                                    deadline=search.Deadline(30), ranking=ranking or search.RANKING)
    return [{"id": str(pk), "lexical": c.lexical_score, "cosine": c.vector_similarity, "document": c.document,
             "position": c.position, "asking": c.asking} for pk, c in candidates.items()]


def floor_of(caller, query: str, embedder) -> float:  # type: ignore[no-untyped-def]
    """The query embedding plus the ranking's own index queries under the
    reader's policy, nothing else: what no search can do without."""
    from django.db import transaction
    from django.utils import timezone

    from memoryhub import access
    from memoryhub.services import search

    started = time.perf_counter()
    vector = embedder.embed([query])[0]
    with transaction.atomic(), search.index_settings():
        policy = access.read_policy(caller=caller, as_of=timezone.now())
        deadline = search.Deadline(30)
        read_query = search.read_query_for(query, vector, search.RANKING)
        search.index_queries(policy=policy, read_query=read_query, limit=K, deadline=deadline)
    return (time.perf_counter() - started) * 1000


# ---------------------------------------------------------------------------- over MCP


def mcp_token(caller, base_url: str) -> str:  # type: ignore[no-untyped-def]
    from datetime import timedelta

    from django.utils import timezone
    from oauth2_provider.models import AccessToken, Application, set_token_value

    app, _ = Application.objects.get_or_create(
        name="LoCoMo eval", defaults={
            "client_type": Application.CLIENT_PUBLIC, "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
            "redirect_uris": "http://127.0.0.1:9/cb", "client_secret": "", "hash_client_secret": False,
        },
    )
    raw = secrets.token_urlsafe(24)
    token = AccessToken(application=app, user=caller.user, scope="memory.read", resource=[f"{base_url}/mcp"],
                        expires=timezone.now() + timedelta(hours=6))
    set_token_value(token, raw)
    token.save()
    return raw


class McpReader:
    """memory_search through the official MCP client over streamable HTTP."""

    def __init__(self, url: str) -> None:
        import asyncio

        self.url = url
        self.loop = asyncio.new_event_loop()

    def search(self, token: str, query: str) -> list[str]:
        return self.loop.run_until_complete(self._search(token, query))

    async def _search(self, token: str, query: str) -> list[str]:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60, trust_env=False) as http,
            Client(streamable_http_client(f"{self.url}/mcp", http_client=http), mode="2026-07-28",
                   cache=None) as client,
        ):
            answer = await client.call_tool("memory_search", {"query": query, "limit": K})
        if answer.is_error or answer.structured_content is None:
            raise RuntimeError(f"memory_search over MCP failed: {answer.content}")
        return [fragment["id"] for fragment in answer.structured_content["fragments"]]


# ---------------------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> dict:
    import contextlib
    from dataclasses import replace

    from django.db import connection

    from memoryhub.embeddings import get_embedder
    from memoryhub.services import search
    from memoryhub.services.search import fragments_search

    data = conversations(Path(args.data))
    if args.conversations:
        data = [c for c in data if c["id"] in set(args.conversations.split(","))]
    embedder = get_embedder()
    embedder.embed(["warm up"])
    built = {}
    started = time.perf_counter()
    for conversation in data:
        built[conversation["id"]] = build(conversation, args.ingest)
        print(f"ingested {conversation['id']}: {len(built[conversation['id']][1])} fragments", flush=True)
    ingest_seconds = time.perf_counter() - started

    per_question: list[tuple[int, dict[str, float]]] = []
    per_question_mcp: list[tuple[int, dict[str, float]]] = []
    per_conversation: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
    search_ms: list[float] = []
    floor_ms: list[float] = []
    mismatches = 0
    dumped: list[dict] = []
    with contextlib.ExitStack() as stack:
        mcp = None
        tokens: dict[str, str] = {}
        if args.mcp:
            from bench_edge import database_url, free_port, process

            port = free_port()
            url = f"http://127.0.0.1:{port}"
            env = {**os.environ, "DATABASE_URL": database_url(connection.settings_dict), "MEMORYHUB_BASE_URL": url,
                   "MEMORYHUB_RATE_PER_MINUTE": "100000000", "MEMORYHUB_RATE_BURST": "100000000",
                   "LOG_LEVEL": "WARNING"}
            stack.enter_context(process("memoryhub", "memoryhub.asgi:application", port, env,
                                        Path(tempfile.mkdtemp(prefix="locomo-eval-"))))
            mcp = McpReader(url)
            tokens = {cid: mcp_token(caller, url) for cid, (caller, _) in built.items()}
        for conversation in data:
            caller, dia = built[conversation["id"]]
            for qa in conversation["questions"]:
                question = str(qa["question"])
                if args.dump:
                    dumped.append({"conversation": conversation["id"], "category": qa["category"], "question": question,
                                   "evidence": [str(e) for e in qa["evidence"]],
                                   "candidates": [{**c, "dia": dia[c["id"]]}
                                                  for c in candidates_of(caller, question, embedder)]})
                    if args.bm25_grid:
                        dumped[-1]["candidates_by_bm25"] = {
                            f"{k1}/{b}/{own}": [{**c, "dia": dia[c["id"]]} for c in candidates_of(
                                caller, question, embedder,
                                replace(search.RANKING, bm25_k1=k1, bm25_b=b, own_words_weight=own))]
                            for k1, b, own in BM25_GRID}
                t0 = time.perf_counter()
                result = fragments_search(caller=caller, query=question, limit=K)
                search_ms.append((time.perf_counter() - t0) * 1000)
                floor_ms.append(floor_of(caller, question, embedder))
                served = [str(hit.fragment.pk) for hit in result.hits]
                values = scores([dia[pk] for pk in served], [str(e) for e in qa["evidence"]])
                per_question.append((qa["category"], values))
                per_conversation[conversation["id"]].append((qa["category"], values))
                if mcp is not None:
                    over_mcp = mcp.search(tokens[conversation["id"]], question)
                    mismatches += over_mcp != served
                    per_question_mcp.append(
                        (qa["category"], scores([dia[pk] for pk in over_mcp], [str(e) for e in qa["evidence"]])))
    from memoryhub.services import search

    if args.dump:
        Path(args.dump).write_text(json.dumps(dumped))
    result = {
        "data": Path(args.data).name,
        "ingest": args.ingest,
        "candidates_per_index_query": search.candidate_pool(K),
        "conversations": [c["id"] for c in data],
        "questions": len(per_question),
        "ingest_seconds": round(ingest_seconds, 1),
        "service": aggregate(per_question),
        "per_conversation": {cid: aggregate(rows)["all"] for cid, rows in per_conversation.items()},
        "search": latency(search_ms),
        "floor": latency(floor_ms),
    }
    if args.mcp:
        result["mcp"] = aggregate(per_question_mcp)
        result["mcp_rankings_differing_from_service"] = mismatches
    return result


def markdown(result: dict, label: str) -> str:
    rows = ["| | n | R@5 | R@10 | nDCG@10 | hit@10 |", "|---|---|---|---|---|---|"]
    for key in ("all", "c1", "c2", "c3", "c4", "c5"):
        row = result["service"].get(key)
        if row is None:
            continue
        name = "overall" if key == "all" else f"{key[1]} {CATEGORIES[int(key[1])]}"
        rows.append(f"| {name} | {row['n']} | {row['r5']:.3f} | {row['r10']:.3f} | {row['ndcg']:.3f} | "
                    f"{row['hit10']:.3f} |")
    text = [f"{label}: {result['questions']} questions over {len(result['conversations'])} conversations, "
            f"ingested as `{result['ingest']}`.", "", *rows, "",
            f"Search p50/p95 {result['search']['p50_ms']}/{result['search']['p95_ms']} ms; floor (query embedding + "
            f"index queries) {result['floor']['p50_ms']}/{result['floor']['p95_ms']} ms."]
    if "mcp" in result:
        row = result["mcp"]["all"]
        text.append(f"Over MCP with real tokens: R@10 {row['r10']:.3f}, nDCG@10 {row['ndcg']:.3f}; rankings "
                    f"differing from the service's: {result['mcp_rankings_differing_from_service']}.")
    return "\n".join(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="a LoCoMo file (e.g. locomo-dev5.json); never copied")
    parser.add_argument("--ingest", choices=("conversation", "per-turn"), default="conversation")
    parser.add_argument("--mcp", action="store_true", help="also ask every question over MCP with a real token")
    parser.add_argument("--conversations", default="", help="comma-separated sample ids (default: all)")
    parser.add_argument("--label", default="", help="results go to bench/results/locomo_eval_<label>.json")
    parser.add_argument("--dump", default="", help="also write every question's scored candidates to this file "
                        "(outside the repository: it holds the data's ids), for bench/locomo_tune.py")
    parser.add_argument("--bm25-grid", action="store_true", help="with --dump: also BM25's parameters over a grid")
    parser.add_argument("--pool", type=int, default=0,
                        help="candidates per index query (default: the product's, search.CANDIDATES_MIN)")
    args = parser.parse_args()
    if args.pool:
        import django

        django.setup()
        from memoryhub.services import search

        search.CANDIDATES_MIN = args.pool
    with bench_database():
        result = run(args)
    name = "locomo_eval" + (f"_{args.label}" if args.label else "")
    publish(name, result, SECTION, markdown(result, args.label or "memoryhub"), to_docs=False)
    print(json.dumps(result["service"]["all"]))


if __name__ == "__main__":
    main()
