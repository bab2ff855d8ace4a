"""Demo memory for the demo workspace (see management/commands/seed_demo.py).

Everything goes through the real services: people's private facts through
fragment_write, shared memory through connected sources (fragment_ingest),
one agent proposal through the agent's own write. Running it again adds nothing:
writes carry fixed idempotency keys and the pipeline merges a fact already
held; sources do not store the same live text twice.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from memoryhub import access
from memoryhub.access import Caller, caller_for_agent, caller_for_user
from memoryhub.models import Agent, Collection, Fragment, Proposal, Source, User
from memoryhub.services.enrichment import fragments_embed_pending
from memoryhub.services.fragments import fragment_write
from memoryhub.services.ingest import fragment_ingest
from memoryhub.services.sources import source_register

PRIVATE = {
    "ada": [
        "I prefer the architecture review on Thursday mornings.",
        "My 1:1 with Bruno is every second Monday at 14:00.",
        "I am presenting the storage migration plan at the March all-hands.",
        "Remind me to ask Chloe about the Initech renewal before the board meeting.",
    ],
    "bruno": [
        "I am the payments on-call this week.",
        "My local dev database runs PostgreSQL 16 on port 5433.",
        "I want to pair with Ada on the queue consumer refactor.",
    ],
    "chloe": [
        "Initech's champion is Dana Okafor, VP of Operations.",
        "I promised Globex a pricing proposal by the 15th.",
        "My territory is the Nordics and the Benelux.",
    ],
}

# collection -> (source name, source kind, [(days ago, text, resource)])
SHARED = {
    "runbooks": ("wiki", "documents", [
        (120, "To restart the payments service, run kubectl rollout restart deploy/payments in the prod "
              "cluster and watch the error rate on the Payments dashboard for ten minutes.",
         ("wiki-runbook-payments", "Payments runbook", "https://wiki.demo.invalid/runbooks/payments")),
        (90, "Database failover: promote the replica with pg_ctl promote, then update the payments "
             "service's DATABASE_URL secret and restart it.",
         ("wiki-runbook-db-failover", "Database failover", "https://wiki.demo.invalid/runbooks/db-failover")),
        (45, "When the queue backlog passes 10,000 messages, scale the consumer deployment to 6 replicas.",
         ("wiki-runbook-queue", "Queue backlog", "https://wiki.demo.invalid/runbooks/queue")),
    ]),
    "incidents": ("incident-log", "tickets", [
        (30, "INC-2041: checkout latency spiked to 4 s for 25 minutes after a cache flush; fixed by "
             "warming the product cache before traffic returned.",
         ("INC-2041", "INC-2041 checkout latency", "https://incidents.demo.invalid/INC-2041")),
        (12, "INC-2057: payment webhooks failed for 40 minutes because the signing secret was rotated "
             "without updating the consumer; the rotation runbook now has a consumer step.",
         ("INC-2057", "INC-2057 webhook failures", "https://incidents.demo.invalid/INC-2057")),
    ]),
    "accounts": ("crm", "crm", [
        (60, "Initech renews its enterprise contract on 1 April; the renewal owner is Chloe.",
         ("crm-initech", "Initech account", "https://crm.demo.invalid/accounts/initech")),
        (20, "Globex is evaluating the analytics add-on; they asked for SSO and a data residency answer.",
         ("crm-globex", "Globex account", "https://crm.demo.invalid/accounts/globex")),
    ]),
    "handbook": ("wiki", "documents", [
        (200, "Expenses under 200 EUR need no pre-approval; submit receipts within 30 days.",
         ("wiki-handbook-expenses", "Expenses policy", "https://wiki.demo.invalid/handbook/expenses")),
        (150, "Core collaboration hours are 10:00 to 15:00 CET; meetings outside them need a reason.",
         ("wiki-handbook-hours", "Working hours", "https://wiki.demo.invalid/handbook/hours")),
    ]),
}

AGENT_PROPOSAL = ("triage-bot", "Tickets mentioning checkout latency go to the payments team first.")


def _source(caller: Caller, name: str, kind: str) -> Source:
    tenant = caller.tenant
    agent = Agent.objects.filter(tenant=tenant, name=name).first()
    if agent is not None:
        return Source.objects.get(agent=agent)
    source, _ = source_register(caller=caller, name=name, kind=kind)
    return source


def demo_memory_seed(*, caller: Caller) -> int:
    """Fill the demo workspace with a little memory, writing as its people, its
    agent and its sources (only the deployment itself may: access.require_system);
    returns how many fragments were new."""
    tenant = access.require_system(caller)
    before = Fragment.objects.filter(tenant=tenant).count()
    now = timezone.now()
    for username, facts in PRIVATE.items():
        user = User.objects.filter(tenant=tenant, username=username).first()
        if user is None:
            continue
        person = caller_for_user(user=user, client_id="demo-seed")
        for index, fact in enumerate(facts):
            fragment_write(caller=person, content=fact, session_id="demo", idempotency_key=f"demo-{username}-{index}")

    for collection_name, (source_name, kind, items) in SHARED.items():
        collection = Collection.objects.filter(tenant=tenant, name=collection_name).first()
        if collection is None:
            continue
        source = _source(caller, source_name, kind)
        for days_ago, text, (external_id, title, uri) in items:
            fragment_ingest(
                source=source, collection=collection, value=text, created_at=now - dt.timedelta(days=days_ago),
                resources=[{"id": external_id, "title": title, "uri": uri}],
            )

    agent_name, proposal_text = AGENT_PROPOSAL
    agent = Agent.objects.filter(tenant=tenant, name=agent_name, kind=Agent.Kind.ASSISTANT).first()
    if agent is not None and not Proposal.objects.filter(agent=agent, content=proposal_text).exists():
        fragment_write(caller=caller_for_agent(agent=agent, client_id="demo-seed"), content=proposal_text,
                       idempotency_key="demo-proposal")

    # No worker runs yet while the demo is seeded: embed now so the first
    # search already has both signals.
    missing = Fragment.objects.filter(tenant=tenant, embedding__isnull=True).values_list("pk", flat=True)
    fragments_embed_pending(fragment_ids=[str(pk) for pk in missing], max_batches=None)
    return Fragment.objects.filter(tenant=tenant).count() - before
