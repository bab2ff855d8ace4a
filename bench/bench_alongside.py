"""A search's query embedded alongside its first statement against embedded at once, paired in one process.

    python bench/bench_alongside.py                      # 10k and 100k, 200 queries each
    python bench/bench_alongside.py --sizes 10000 --queries 100

On search_bench.py's corpora (which it builds; run it first). A search embeds its
query on a thread of its own, while its first statement runs and both pools'
statement is compiled, when the encoder leaves the process a core
(memoryhub.services.search.Embedding, embeds_alongside); otherwise at once, before
any statement. For each encoder, on one thread (as each of a server's workers, one
per core, encodes) and on every core this process may use, every search runs both
ways, the order alternating from one query to the next, and the answers are
compared (the same hits and scores, or the run stops).

Reported: p50 and mean of each way, and the median of the paired differences
(alongside minus at once), which the machine's drift does not move.
Results: bench/results/alongside_bench.json.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from bench_prepared import alternated, paired_main


def run(size: int, queries: list[str], rng: random.Random) -> dict:
    """Both ways with the encoder on one thread and on every core, the same readers for each."""
    from bench_mcp import tokens_for

    from memoryhub.embeddings import usable_cores

    held = tokens_for(size, "http://127.0.0.1:9")
    readers = [rng.choice(held)[0] for _ in queries]
    return {f"encoder_on_{threads}_threads": run_with(readers, queries, threads)
            for threads in sorted({1, usable_cores()})}


def run_with(readers: list, queries: list[str], threads: int) -> dict:  # type: ignore[type-arg]
    from memoryhub import embeddings
    from memoryhub.services import search

    before = embeddings._singleton
    embeddings._singleton = embeddings.MiniLMOnnxEmbedder(threads=threads)
    decided = search.embeds_alongside

    def way(caller, query: str) -> Callable[[bool], list]:  # type: ignore[no-untyped-def]
        def read(alongside: bool) -> list:
            search.embeds_alongside = lambda: alongside  # type: ignore[assignment]
            return [(str(hit.fragment.pk), hit.score) for hit in search.fragments_search(caller=caller,
                                                                                         query=query).hits]
        return read

    work = [way(caller, query) for caller, query in zip(readers, queries, strict=True)]
    try:
        for read in work[:10]:  # warm the encoder, the caches and the connection
            read(True)
            read(False)
        return {"encoder_threads": threads, "embeds_alongside_by_default": decided(),
                **alternated(work, names=("alongside", "at_once"))}
    finally:
        search.embeds_alongside = decided  # type: ignore[assignment]
        embeddings._singleton = before


def main() -> None:
    paired_main(__doc__, "alongside_bench", run)


if __name__ == "__main__":
    main()
