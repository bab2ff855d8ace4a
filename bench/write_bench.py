"""memory_write latency (services.fragments.fragment_write): a person with an
existing private memory writes short facts (one or two sentences) through the
whole tier-1 pipeline: validation, idempotency record, privacy and policy
checks, embedding, merge/supersede judgement against their live private
memory, insert, commit.

    python bench/write_bench.py                 # 200 writes against 500 existing facts
    python bench/write_bench.py --writes 500 --existing 2000

Results: bench/results/write_bench.json. Run time: about a minute.
"""

from __future__ import annotations

import argparse
import json
import random

from common import ROOT, bench_database, summary, timed, write_results

DATA = ROOT / "bench" / "data" / "retrieval_set.json"
SLUG = "bench-writes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--existing", type=int, default=500)
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


if __name__ == "__main__":
    main()
