"""memory_write latency (services.fragments.fragment_write): a person with an
existing private memory writes short facts (one or two sentences) through the
whole tier-1 pipeline: validation, idempotency record, privacy and policy
checks, embedding, merge/supersede judgement against their live private
memory, insert, commit.

    python bench/write_bench.py                 # 200 writes against 500 existing facts
    python bench/write_bench.py --writes 500 --existing 2000
    python bench/write_bench.py --alongside     # facts embedded alongside the first statements, or at once

Results: bench/results/write_bench.json. Run time: about a minute.

--alongside: as a server's worker writes (the encoder on one thread), each write's
facts embedded alongside its key's claim and its writer's lock
(memoryhub.services.alongside), and embedded at once, before them, paired: two
people with the same existing memory write the same content, one each way, the way
first alternating from one write to the next, and what each write did is compared
(the same operations, or the run stops). Reported: each way's p50 and mean and the
median of the paired differences (alongside minus at once), which the machine's
drift does not move. Results: bench/results/write_alongside_bench.json.
"""

from __future__ import annotations

import argparse
import json
import random

from common import ROOT, bench_database, summary, timed, write_results

DATA = ROOT / "bench" / "data" / "retrieval_set.json"
SLUG = "bench-writes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--existing", type=int, default=500)
    parser.add_argument("--alongside", action="store_true",
                        help="facts embedded alongside the first statements and at once, paired (see above)")
    args = parser.parse_args()
    texts = [item["value"] for item in json.loads(DATA.read_text())["fragments"] if len(item["value"]) < 400]
    rng = random.Random(3)
    with bench_database():
        from django.db import connection

        from memoryhub.access import caller_for_user
        from memoryhub.embeddings import get_embedder
        from memoryhub.models import Fragment, IdempotencyRecord, Membership, Tenant, User
        from memoryhub.services.fragments import fragment_write

        old = Tenant.objects.filter(slug=SLUG).first()
        if old is not None:
            with connection.cursor() as cursor:
                cursor.execute("DELETE FROM memoryhub_fragment WHERE tenant_id = %s", [old.pk])
            IdempotencyRecord.objects.filter(tenant=old).delete()
            User.objects.filter(tenant=old).delete()
            old.delete()
        tenant = Tenant.objects.create(slug=SLUG, name="Write bench")
        if args.alongside:
            alongside_run(tenant, texts, rng, args)
            return
        user = User.objects.create(username=f"{SLUG}-writer", tenant=tenant)
        Membership.objects.create(tenant=tenant, user=user)
        caller = caller_for_user(user=user)
        get_embedder().embed(["warm up"])
        for n in range(args.existing):
            fragment_write(caller=caller, content=f"{rng.choice(texts)} (note {n})")
        writes = [f"{rng.choice(texts)} (update {n})" for n in range(args.writes)]
        samples = [t for content in writes
                   for t in timed(lambda c=content: fragment_write(caller=caller, content=c), 1)]
        result = {
            "existing_private_fragments": args.existing,
            "write": summary(samples),
            "floor_embedding_one_fact": summary(
                [t for content in writes[:50] for t in timed(lambda c=content: get_embedder().embed([c]), 1)]
            ),
            "fragments_after": Fragment.objects.filter(tenant=tenant).count(),
        }
    print(json.dumps(result, indent=1))
    print(f"wrote {write_results('write_bench', result)}")


def alongside_run(tenant, texts: list[str], rng: random.Random, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    from bench_prepared import alternated

    from memoryhub import embeddings
    from memoryhub.access import caller_for_user
    from memoryhub.models import Membership, User
    from memoryhub.services import alongside
    from memoryhub.services.fragments import fragment_write

    embeddings._singleton = embeddings.MiniLMOnnxEmbedder(threads=1)  # as each of a server's workers encodes
    callers = {}
    for way in (True, False):
        user = User.objects.create(username=f"{SLUG}-{'alongside' if way else 'at-once'}", tenant=tenant)
        Membership.objects.create(tenant=tenant, user=user)
        callers[way] = caller_for_user(user=user)
    for n in range(args.existing):
        content = f"{rng.choice(texts)} (note {n})"
        for caller in callers.values():
            fragment_write(caller=caller, content=content)
    decided = alongside.embeds_alongside

    def write(content: str):  # type: ignore[no-untyped-def]
        def once(way: bool) -> list:  # type: ignore[type-arg]
            alongside.embeds_alongside = lambda: way  # type: ignore[assignment]
            return [(r.operation, r.reason) for r in fragment_write(caller=callers[way], content=content).results]
        return once

    work = [write(f"{rng.choice(texts)} (update {n})") for n in range(args.writes)]
    try:
        for once in work[:10]:  # warm the encoder, the caches and the connection
            once(True)
            once(False)
        result = {"existing_private_fragments": args.existing, "encoder_threads": 1,
                  "embeds_alongside_by_default": decided(),
                  **alternated(work[10:], names=("alongside", "at_once"))}
    finally:
        alongside.embeds_alongside = decided  # type: ignore[assignment]
    print(json.dumps(result, indent=1))
    print(f"wrote {write_results('write_alongside_bench', result)}")


if __name__ == "__main__":
    main()
