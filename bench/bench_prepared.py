"""Prepared statements on and off, and lookups compiled once or each call, paired in one process.

    python bench/bench_prepared.py                      # 10k and 100k, 200 queries each
    python bench/bench_prepared.py --sizes 10000 --queries 100

On search_bench.py's corpora (which it builds; run it first), with the same database
connection: every search runs twice, once with the project's prepared
statements (memoryhub.database.prepared: the prologue and the row check) and once without
(what DATABASE_PREPARED_STATEMENTS=0 leaves), the order alternating from one
query to the next, so both see the machine at the same moment; then a bearer
token's check and finding its caller (the two statements an MCP call reads
before its tool runs) the same way. The backend reads the setting for each
cursor, so it is switched between calls. The answer of each pair is compared:
the same hits in the same order, or the run stops.

Then the two lookups of a credential (its token with its holder, the
caller's person), as the product reads them (memoryhub.database.lookups:
compiled once per connection) and as the ORM compiles the same querysets for
each call, both prepared, alternated the same way and compared the same way.

Then every search again, its reader's predicate as the product reads it
(search.index_predicate: compiled once per rule of a reader's read, each
reader's compiled before timing, as a worker that has served them has) and
compiled by the ORM for each search (index_filter's predicate, handed to
BM25's statement as the product handed it before), alternated and compared
the same way.

Reported: p50 and mean of each side, and the median of the paired differences
(on minus off), which the machine's drift from one moment to the next does
not move. Results: bench/results/prepared_bench.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from common import bench_database, write_results
from search_bench import DATA


def paired(work: list[Callable[[], Any]]) -> dict:
    """Run each piece of work prepared and not, alternating which goes first."""
    from django.db import connection

    from memoryhub.database.base import PREPARED_STATEMENTS

    options = connection.settings_dict["OPTIONS"]
    was = options.get(PREPARED_STATEMENTS, True)

    def switched(call: Callable[[], Any]) -> Callable[[bool], Any]:
        def run(on: bool) -> Any:
            options[PREPARED_STATEMENTS] = on
            return call()
        return run

    try:
        return alternated([switched(call) for call in work], names=("prepared", "unprepared"))
    finally:
        options[PREPARED_STATEMENTS] = was


def run(size: int, queries: list[str], rng: random.Random) -> dict:
    from bench_mcp import tokens_for

    from memoryhub import access
    from memoryhub.oauth.tokens import token_verified
    from memoryhub.services.search import fragments_search

    base_url = "http://127.0.0.1:9"
    held = tokens_for(size, base_url)  # (caller, raw access token) for every reader
    readers = [rng.choice(held)[0] for _ in queries]

    def search(caller: access.Caller, query: str) -> Callable[[], list]:
        return lambda: [(str(hit.fragment.pk), hit.score) for hit in fragments_search(caller=caller, query=query).hits]

    work = [search(caller, query) for caller, query in zip(readers, queries, strict=True)]
    for call in work[:10]:  # warm the embedder, the caches and the connection
        call()

    resource = f"{base_url}/mcp"

    def credential(raw: str) -> Callable[[], tuple]:
        def check() -> tuple:
            verified = token_verified(raw, resource=resource)
            assert verified is not None
            caller = access.caller_from_principal(tenant=verified.tenant, subject=verified.subject,
                                                  kind=verified.kind, client_id=verified.client_id)
            return verified, caller.user.pk  # type: ignore[union-attr]
        return check

    checks = [credential(rng.choice(held)[1]) for _ in queries]
    for check in checks[:10]:
        check()
    lookups = [compiled_or_not(raw) for raw in (rng.choice(held)[1] for _ in queries)]
    for lookup in lookups[:10]:
        lookup(True)
        lookup(False)
    return {"fragments": size, "search": paired(work), "token_check_and_caller": paired(checks),
            "lookups_compiled_once": alternated(lookups, names=("compiled_once", "compiled_each_call")),
            "predicate_compiled_once": predicate_compiled_or_not(readers, queries)}


def predicate_compiled_or_not(readers: list, queries: list[str]) -> dict:  # type: ignore[type-arg]
    """Each search with its reader's predicate compiled once per rule
    (search.index_predicate) or compiled for each search (index_filter's
    predicate, which BM25's statement compiles), alternated."""
    from memoryhub.services import search

    compiled_once = search.index_predicate

    def compiled_each_call(policy, read_query, pool, ranking):  # type: ignore[no-untyped-def]
        return search.index_filter(policy)

    def way(caller, query: str) -> Callable[[bool], list]:  # type: ignore[no-untyped-def]
        def run(once: bool) -> list:
            search.index_predicate = compiled_once if once else compiled_each_call  # type: ignore[assignment]
            try:
                return [(str(hit.fragment.pk), hit.score)
                        for hit in search.fragments_search(caller=caller, query=query).hits]
            finally:
                search.index_predicate = compiled_once  # type: ignore[assignment]
        return run

    for caller in {id(caller): caller for caller in readers}.values():
        search.fragments_search(caller=caller, query=queries[0])
    return alternated([way(caller, query) for caller, query in zip(readers, queries, strict=True)],
                      names=("compiled_once", "compiled_each_search"))


def compiled_or_not(raw: str) -> Callable[[bool], tuple]:
    """A token's row with its holder and the caller's row, as the product reads
    them (memoryhub.database.lookups: compiled once per connection), or the
    same querysets compiled by the ORM for each call; both run prepared."""
    from oauth2_provider.models import AccessToken

    from memoryhub import access
    from memoryhub.database import prepared
    from memoryhub.models import User
    from memoryhub.oauth.tokens import access_token_row, token_checksum

    def read(compiled_once: bool) -> tuple:
        if compiled_once:
            token = access_token_row(raw)
            assert token is not None and token.user is not None
            user = access._PERSON_IN_WORKSPACE.by_id.first(token.user.tenant_id, token.user.username)
        else:
            with prepared():
                token = access.one_row(AccessToken.objects.select_related(*access.TOKEN_HOLDER_RELATED).filter(
                    token_checksum=token_checksum(raw)))
                assert token is not None and token.user is not None
                user = access.one_row(User.objects.select_related("membership__tenant").filter(
                    tenant_id=token.user.tenant_id, username=token.user.username))
        assert user is not None
        return token.pk, token.user.membership.tenant_id, user.pk, user.membership.tenant_id
    return read


def alternated(work: list[Callable[[bool], Any]], *, names: tuple[str, str]) -> dict:
    """Each piece of work both ways (True, then False, or the reverse,
    alternating), the answers compared: each way's p50 and mean (under
    `names`) and the median of the paired differences (True minus False)."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for index, call in enumerate(work):
        answers = {}
        for way in ((True, False) if index % 2 else (False, True)):
            started = time.perf_counter()
            answers[way] = call(way)
            times[way].append((time.perf_counter() - started) * 1000)
        if answers[True] != answers[False]:
            raise RuntimeError(f"the answers differ: {answers}")
    differences = [on - off for on, off in zip(times[True], times[False], strict=True)]
    return {"n": len(work), **{name: {"p50_ms": round(statistics.median(times[way]), 3),
                                      "mean_ms": round(statistics.mean(times[way]), 3)}
                               for name, way in zip(names, (True, False), strict=True)},
            "paired_difference_median_ms": round(statistics.median(differences), 3)}


def paired_main(doc: str, results_name: str, run: Callable[[int, list[str], random.Random], dict]) -> None:
    """A paired benchmark's command line: `run` for each size, on its queries and a generator seeded by it."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    data = json.loads(DATA.read_text())
    results = {}
    with bench_database():
        for size in (int(s) for s in args.sizes.split(",")):
            rng = random.Random(size)
            queries = [item["query"] for item in rng.sample(data["queries"], min(args.queries, len(data["queries"])))]
            results[str(size)] = run(size, queries, rng)
            print(json.dumps(results[str(size)], indent=1), flush=True)
    print(f"wrote {write_results(results_name, results)}")


def main() -> None:
    paired_main(__doc__, "prepared_bench", run)


if __name__ == "__main__":
    main()
