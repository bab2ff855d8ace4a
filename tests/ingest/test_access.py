"""Who reads a connected source's fragments, through the core search service
(decision 6): its collection's access rules decide for people; an agent also
has to name the source in `agents`, and naming it never widens the rules."""

from __future__ import annotations

import datetime as dt

from memoryhub.services import ingest
from memoryhub.services.provenance import DocumentRef
from tests.ingest.conftest import search, values

QUERY = "billing database failover runbook"


def ingest_doc(source, collection: str, resource_id: str = "failover.md") -> None:  # type: ignore[no-untyped-def]
    document = ingest.document_validated(
        resource_id=resource_id, collection=collection, created_at=dt.datetime(2026, 1, 5, tzinfo=dt.UTC),
        text="To fail the billing database over, promote the replica and repoint the runbook DNS name.",
    )
    ingest.document_upsert(source=source, document=document)


def served(people, who, **kwargs) -> list[str]:  # type: ignore[no-untyped-def]
    return values(search(people, who, QUERY, **kwargs))


def test_a_person_whose_role_reads_the_collection_sees_it(people):
    ingest_doc(people.wiki, "runbooks")
    assert len(served(people, people.bruno)) == 1


def test_a_person_without_such_a_role_does_not(people):
    ingest_doc(people.wiki, "runbooks")
    assert served(people, people.carol) == []


def test_an_agent_reads_a_source_only_when_it_names_it(people):
    ingest_doc(people.wiki, "runbooks")
    bot = people.triage_bot
    assert served(people, bot) == []
    assert served(people, bot, agents=["tickets"]) == []
    assert len(served(people, bot, agents=["wiki"])) == 1
    assert len(served(people, bot, agents=["wiki", "tickets"])) == 1


def test_naming_the_source_never_widens_the_access_rules(people):
    ingest_doc(people.wiki, "accounts")  # sales and leads only; the agent is engineering
    assert served(people, people.triage_bot, agents=["wiki"]) == []
    assert len(served(people, people.carol)) == 1


def test_an_agent_naming_one_source_does_not_see_another(people):
    ingest_doc(people.wiki, "runbooks", resource_id="wiki-failover.md")
    ingest_doc(people.tickets, "runbooks", resource_id="ticket-123")
    seen = search(people, people.triage_bot, QUERY, agents=["tickets"]).hits
    assert [hit.provenance.agents for hit in seen] == [("tickets",)]
    assert [hit.provenance.documents for hit in seen] == [(DocumentRef(id="ticket-123", title="", uri=""),)]
