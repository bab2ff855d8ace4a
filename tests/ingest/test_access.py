"""Who reads a connected source's fragments, through the core search service
(decision 6): its collection's access rules decide for people; an agent also
has to name the source in `agents`, and naming it never widens the rules."""

from __future__ import annotations

import datetime as dt

from memoryhub.services import ingest
from memoryhub.services.search import memory_search

QUERY = "billing database failover runbook"


def ingest_doc(source, collection: str, resource_id: str = "failover.md") -> None:  # type: ignore[no-untyped-def]
    document = ingest.document_validated(
        resource_id=resource_id, collection=collection, created_at=dt.datetime(2026, 1, 5, tzinfo=dt.UTC),
        text="To fail the billing database over, promote the replica and repoint the runbook DNS name.",
    )
    ingest.document_upsert(source=source, document=document)


def served(caller, **kwargs) -> list[str]:  # type: ignore[no-untyped-def]
    return [f["value"] for f in memory_search(caller=caller, query=QUERY, **kwargs)["fragments"]]


def test_a_person_whose_role_reads_the_collection_sees_it(acme):
    ingest_doc(acme.wiki, "runbooks")
    assert len(served(acme.owner)) == 1


def test_a_person_without_such_a_role_does_not(acme):
    ingest_doc(acme.wiki, "runbooks")
    assert served(acme.outsider) == []


def test_an_agent_reads_a_source_only_when_it_names_it(acme):
    ingest_doc(acme.wiki, "runbooks")
    assert served(acme.agent) == []
    assert served(acme.agent, agents=["tickets"]) == []
    assert len(served(acme.agent, agents=["wiki"])) == 1
    assert len(served(acme.agent, agents=["wiki", "tickets"])) == 1


def test_naming_the_source_never_widens_the_access_rules(acme):
    ingest_doc(acme.wiki, "accounts")  # sales only; the agent is engineering
    assert served(acme.agent, agents=["wiki"]) == []
    assert len(served(acme.outsider)) == 1


def test_an_agent_naming_one_source_does_not_see_another(acme):
    ingest_doc(acme.wiki, "runbooks", resource_id="wiki-failover.md")
    ingest_doc(acme.tickets, "runbooks", resource_id="ticket-123")
    seen = memory_search(caller=acme.agent, query=QUERY, agents=["tickets"])["fragments"]
    assert [f["agents"] for f in seen] == [["tickets"]]
    assert [r["id"] for f in seen for r in f["resources"]] == ["ticket-123"]
