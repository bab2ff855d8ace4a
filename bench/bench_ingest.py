"""Connected-source ingestion: throughput and time-to-searchable, end to end.

    python bench/bench_ingest.py                        # defaults: 3 revisions, 4 clients, 1 worker
    python bench/bench_ingest.py --revisions 5 --clients 8 --trickle 40

What runs: the real ASGI application under uvicorn (in this process, on the
benchmark database of bench/common.py), real Celery workers as subprocesses
(solo pool) on a private queue, and connectors posting documents to
/api/ingest/documents with a client-credentials token from /o/token/.

The corpus: the labelled retrieval set's 1,265 facts grouped into Markdown
documents of 12 paragraphs per collection (about 1.3 KB, two fragments each),
repeated --revisions times with a revision marker so no text repeats.

The floor, measured first on the idle machine: the embedder alone on the bulk
run's fragments, in the worker's batches (floor_embedding_alone).

Two measurements:
- bulk: every document posted by --clients concurrent connectors as fast as
  the API answers. Throughput = fragments / (last vector written − first
  request sent): fragments per second until everything is searchable,
  semantic search included. Per document, time-to-searchable is measured
  from the request being sent to the commit (lexical: the response) and to
  the last of its vectors being written (semantic); under bulk load the
  latter is mostly the time spent queued behind earlier documents.
- trickle: --trickle documents sent one at a time, each only after the
  previous one is embedded: time-to-searchable of a document on an idle system.

Results go to bench/results/ingest.json; docs/benchmarks.md has the write-up.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

from common import ROOT, bench_database, percentile, write_results

DATA = ROOT / "bench" / "data" / "retrieval_set.json"
PARAGRAPHS_PER_DOCUMENT = 12


def corpus(revisions: int) -> list[dict]:
    data = json.loads(DATA.read_text())
    by_collection: dict[str, list[dict]] = defaultdict(list)
    for fact in data["fragments"]:
        by_collection[fact["collection"] or "private"].append(fact)
    documents = []
    for revision in range(revisions):
        for collection, facts in sorted(by_collection.items()):
            for part in range(0, len(facts), PARAGRAPHS_PER_DOCUMENT):
                group = facts[part:part + PARAGRAPHS_PER_DOCUMENT]
                title = f"{collection} notes, part {part // PARAGRAPHS_PER_DOCUMENT + 1} (revision {revision + 1})"
                text = f"# {title}\n\n" + "\n\n".join(
                    f"{fact['value']} (Noted in revision {revision + 1}.)" for fact in group
                )
                documents.append({
                    "resource_id": f"r{revision}/{collection}/{part:04d}.md",
                    "title": title,
                    "uri": f"https://wiki.example.com/r{revision}/{collection}/{part:04d}",
                    "created_at": group[0]["created_at"],
                    "collection": collection,
                    "text": text,
                })
    return documents


def setup_workspace(documents: list[dict]):  # type: ignore[no-untyped-def]
    from memoryhub.access import OPERATOR, system_caller
    from memoryhub.services import access_rules, collections, members, roles, sources, workspaces

    tenant = workspaces.workspace_create(caller=OPERATOR, slug=f"bench-ingest-{uuid.uuid4().hex[:8]}")
    system = system_caller(tenant=tenant)
    roles.role_create(caller=system, name="everyone")
    for name in sorted({d["collection"] for d in documents}):
        collections.collection_create(caller=system, name=name)
        access_rules.access_rule_grant(caller=system, role="everyone", collection=name)
    reader = members.member_add(caller=system, username=f"reader-{tenant.slug}", password=None, roles=["everyone"])
    source, credentials = sources.source_register(caller=system, name="wiki", collection=documents[0]["collection"])
    return tenant, reader, source, credentials


class Server:
    """The project's ASGI application under uvicorn, in a thread of this process."""

    def __init__(self) -> None:
        import socket

        import uvicorn
        from django.conf import settings

        from memoryhub.asgi import django_app
        from memoryhub.mcp_adapter.wiring import build_asgi_application

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        settings.BASE_URL = self.url
        settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "OIDC_ISS_ENDPOINT": self.url}
        config = uvicorn.Config(build_asgi_application(django_app), host="127.0.0.1", port=port,
                                log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)


def database_url() -> str:
    from django.db import connection

    s = connection.settings_dict
    host = quote(s["HOST"], safe="")
    port = f":{s['PORT']}" if s.get("PORT") else ""
    password = f":{quote(s['PASSWORD'])}" if s.get("PASSWORD") else ""
    return f"postgresql://{quote(s['USER'])}{password}@{host}{port}/{s['NAME']}"


def start_workers(count: int, queue: str, log_dir: Path) -> list[subprocess.Popen]:
    env = {**os.environ, "DATABASE_URL": database_url(), "MEMORYHUB_TASK_QUEUE": queue, "LOG_LEVEL": "WARNING"}
    workers = []
    for n in range(count):
        log = (log_dir / f"bench-ingest-worker-{n}.log").open("wb")
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "memoryhub", "worker", "--pool", "solo", "--queues", queue,
             "--hostname", f"bench{n}-{queue}@%h", "--without-mingle", "--without-gossip", "--without-heartbeat",
             "--loglevel", "WARNING"],
            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        ))
    return workers


def stop_workers(workers: list[subprocess.Popen]) -> None:
    from memoryhub.runtime.children import stop_child

    for worker in workers:  # all told at once, then each waited for (killed if it will not go)
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        stop_child(worker, grace=30, group=False)


def token_for(url: str, client_id: str, secret: str) -> str:
    import httpx2

    basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    response = httpx2.post(f"{url}/o/token/", data={"grant_type": "client_credentials"},
                           headers={"Authorization": f"Basic {basic}"}, timeout=30)
    response.raise_for_status()
    return response.json()["access_token"]


def wait_embedded(source, timeout: float = 3600) -> None:  # type: ignore[no-untyped-def]
    from memoryhub.services.ingest import source_progress

    deadline = time.monotonic() + timeout
    while source_progress(source=source)["pending_embedding"]:
        if time.monotonic() > deadline:
            raise RuntimeError("embedding did not finish")
        time.sleep(0.05)


def searchable_at(source, resource_ids: list[str]) -> dict[str, tuple[dt.datetime, int]]:  # type: ignore[no-untyped-def]
    """resource id -> (when its last vector was written, its fragments)."""
    from django.db.models import Count, Max

    from memoryhub.models import Fragment

    rows = (
        Fragment.objects.filter(source=source, retired_at__isnull=True, resources__external_id__in=resource_ids)
        .values("resources__external_id").annotate(last=Max("embedded_at"), n=Count("pk"))
    )
    return {row["resources__external_id"]: (row["last"], row["n"]) for row in rows}


def ms(delta: dt.timedelta) -> float:
    return delta.total_seconds() * 1000


def stats(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(values), 1), "p95_ms": round(percentile(values, 95), 1),
            "max_ms": round(max(values), 1), "n": len(values)}


def bulk(url: str, token: str, source, documents: list[dict], clients: int) -> dict:  # type: ignore[no-untyped-def]
    import httpx2

    sent: dict[str, dt.datetime] = {}
    answered: dict[str, dt.datetime] = {}
    local = threading.local()

    def post(document: dict) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx2.Client(headers={"Authorization": f"Bearer {token}"}, timeout=120)
        sent[document["resource_id"]] = dt.datetime.now(dt.UTC)
        response = client.post(f"{url}/api/ingest/documents", json=document)
        answered[document["resource_id"]] = dt.datetime.now(dt.UTC)
        if response.status_code != 201:
            raise RuntimeError(f"{response.status_code}: {response.text}")

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(post, documents))
    api_seconds = time.perf_counter() - started
    wait_embedded(source)
    done = searchable_at(source, list(sent))
    fragments = sum(n for _, n in done.values())
    first_sent = min(sent.values())
    last_vector = max(last for last, _ in done.values())
    return {
        "documents": len(documents),
        "fragments": fragments,
        "clients": clients,
        "api_seconds": round(api_seconds, 2),
        "api_documents_per_second": round(len(documents) / api_seconds, 1),
        "lexical_fragments_per_second": round(fragments / api_seconds, 1),
        "searchable_seconds": round((last_vector - first_sent).total_seconds(), 2),
        "searchable_fragments_per_second": round(fragments / (last_vector - first_sent).total_seconds(), 1),
        "time_to_lexical": stats([ms(answered[r] - sent[r]) for r in sent]),
        "time_to_semantic": stats([ms(done[r][0] - sent[r]) for r in sent]),
    }


def embedding_floor(documents: list[dict]) -> dict:
    """The embedder alone on the bulk run's fragments, in the worker's batches, on an idle machine:
    what "until semantically searchable" cannot beat on this machine with this model."""
    from memoryhub.embeddings import get_embedder
    from memoryhub.services.enrichment import EMBED_BATCH_SIZE
    from memoryhub.services.ingest import chunk_text

    texts = [chunk for document in documents for chunk in chunk_text(document["text"])]
    embedder = get_embedder()
    embedder.embed(texts[:EMBED_BATCH_SIZE])  # loaded and warm, as the worker is after its first task
    started = time.perf_counter()
    for start in range(0, len(texts), EMBED_BATCH_SIZE):
        embedder.embed(texts[start:start + EMBED_BATCH_SIZE])
    seconds = time.perf_counter() - started
    return {"fragments": len(texts), "mean_chars": round(statistics.mean(map(len, texts))),
            "seconds": round(seconds, 2), "fragments_per_second": round(len(texts) / seconds, 1)}


def trickle(url: str, token: str, source, documents: list[dict]) -> dict:  # type: ignore[no-untyped-def]
    import httpx2

    from memoryhub.services.ingest import document_status

    lexical, semantic = [], []
    with httpx2.Client(headers={"Authorization": f"Bearer {token}"}, timeout=120) as client:
        for document in documents:
            sent = dt.datetime.now(dt.UTC)
            response = client.post(f"{url}/api/ingest/documents", json=document)
            answered = dt.datetime.now(dt.UTC)
            assert response.status_code == 201, response.text
            while document_status(source=source, resource_id=document["resource_id"])["pending_embedding"]:
                time.sleep(0.01)
            last, _ = searchable_at(source, [document["resource_id"]])[document["resource_id"]]
            lexical.append(ms(answered - sent))
            semantic.append(ms(last - sent))
    return {"documents": len(documents), "time_to_lexical": stats(lexical), "time_to_semantic": stats(semantic)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revisions", type=int, default=3, help="Copies of the corpus (about 110 documents each).")
    parser.add_argument("--clients", type=int, default=4, help="Concurrent connectors in the bulk run.")
    parser.add_argument("--workers", type=int, default=1, help="Celery worker processes (solo pool each).")
    parser.add_argument("--trickle", type=int, default=30, help="Documents in the one-at-a-time run.")
    args = parser.parse_args()

    with bench_database():
        from memoryhub.celery import app

        documents = corpus(args.revisions + 1)
        per_revision = len(documents) // (args.revisions + 1)
        bulk_docs, spare = documents[:per_revision * args.revisions], documents[per_revision * args.revisions:]
        tenant, reader, source, credentials = setup_workspace(documents)
        floor = embedding_floor(bulk_docs)
        queue = f"bench-ingest-{uuid.uuid4().hex[:8]}"
        app.conf.task_default_queue = queue
        server = Server()
        workers = start_workers(args.workers, queue, Path(tempfile.mkdtemp(prefix="bench-ingest-")))
        try:
            token = token_for(server.url, credentials.client_id, credentials.client_secret)
            # Warm-up: the workers load the embedder on their first task.
            trickle(server.url, token, source, spare[:2])
            load_before = os.getloadavg()[0]
            results = {
                "machine": {"cpus": os.cpu_count(), "workers": args.workers, "worker_pool": "solo",
                            "load_average_1m_before": round(load_before, 2)},
                "floor_embedding_alone": floor,
                "bulk": bulk(server.url, token, source, bulk_docs, args.clients),
                "trickle": trickle(server.url, token, source, spare[2:2 + args.trickle]),
            }
            from memoryhub.access import caller_for_user
            from memoryhub.services.search import fragments_search

            # Semantic search really serves them: a paraphrase with no word of the text in common.
            hits = fragments_search(caller=caller_for_user(user=reader), query="who is on call this week",
                                    agents=["wiki"]).hits
            results["sanity_search_hits"] = len(hits)
            # Other processes share the machine; the load says how much of it the run had.
            results["machine"]["load_average_1m_after"] = round(os.getloadavg()[0], 2)
        finally:
            stop_workers(workers)
            server.stop()
            import redis
            from django.conf import settings

            broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
            broker.delete(queue, *broker.keys(f"_kombu.binding*.{queue}"))
        path = write_results("ingest", results)
        print(json.dumps(results, indent=2))
        print(f"written to {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
