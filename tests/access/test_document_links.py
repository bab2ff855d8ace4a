"""A fragment carries a document's title and URI only for a reader who may read
that document (memoryhub.access.readable_documents / document_to_link).

The leak this closes: bruno (engineering; he may not read `accounts`) wrote
`memory_write {"content": "…", "resource": "crm-globex"}` and his own search
then served `{"id": "crm-globex", "title": "Globex account", "uri": …}`; naming
the document's URI worked too, and an unknown id came back differently, so
even existence leaked. Now the writer's link keeps only the id he gave, with
no title, no URI and no hint whether the document exists, at the service, over
MCP and on the pages; and the decision is taken again whenever the fragment is
served, so losing a collection hides its titles at once.
"""

from __future__ import annotations

import asyncio

import pytest
from django.db import connections
from django.utils import timezone

from memoryhub import access
from memoryhub.mcp_adapter import render
from memoryhub.models import AccessRule, Fragment
from memoryhub.services.enrichment import fragments_enrich
from memoryhub.services.fragments import fragment_write
from memoryhub.services.ingest import fragment_ingest
from memoryhub.services.search import fragments_search
from memoryhub.services.sources import source_register
from tests.conftest import signed_in
from tests.support.mcp_client import call, connect
from tests.support.tokens import person_mcp_token

TITLE = "Globex account"
URI = "https://crm.test/accounts/globex"
NOTE = "Follow-up items for the quarterly review meeting."


def crm_document(people) -> Fragment:
    """A document in `accounts` (sales and leads read it; engineering does not)."""
    crm, _ = source_register(caller=people.system(), name="crm", kind="crm", collection="accounts")
    fragment, _ = fragment_ingest(source=crm, value="Globex is evaluating the analytics add-on.",
                                  resources=[{"id": "crm-globex", "title": TITLE, "uri": URI}])
    return fragment


def write_and_enrich(caller, resource: str) -> Fragment:
    outcome = fragment_write(caller=caller, content=NOTE, resource=resource)
    fragment_id = outcome.results[0].fragment_id
    # What the enrichment task runs after commit.
    fragments_enrich(fragment_ids=[fragment_id])
    return Fragment.objects.get(pk=fragment_id)


def served_documents(caller, query: str = "follow-up quarterly review") -> list[dict]:
    output = render.search_output(fragments_search(caller=caller, query=query))
    mine = [f for f in output["fragments"] if f["value"] == NOTE]
    assert len(mine) == 1, output
    return mine[0]["resources"]


# --------------------------------------------------------------------------- the service


@pytest.mark.parametrize("reference", ["crm-globex", URI])
def test_a_writer_who_may_not_read_the_document_gets_only_the_id_he_gave(people, reference):
    crm_document(people)
    fragment = write_and_enrich(people.caller(people.bruno), reference)
    assert list(fragment.resources.all()) == []  # not linked at all
    assert served_documents(people.caller(people.bruno)) == [{"id": reference, "title": "", "uri": ""}]


def test_a_forbidden_document_and_an_unknown_one_look_the_same(people):
    crm_document(people)
    bruno = people.caller(people.bruno)
    write_and_enrich(bruno, "crm-globex")
    forbidden = served_documents(bruno)
    Fragment.objects.filter(owner_user=people.bruno).update(retired_at=timezone.now(), retired_reason="forgotten")
    write_and_enrich(bruno, "crm-nonexistent")
    unknown = served_documents(bruno)
    assert [{**d, "id": "?"} for d in forbidden] == [{**d, "id": "?"} for d in unknown]


def test_a_writer_who_may_read_the_document_sees_its_title_and_uri(people):
    crm_document(people)
    fragment = write_and_enrich(people.caller(people.carol), "crm-globex")
    assert [r.external_id for r in fragment.resources.all()] == ["crm-globex"]
    assert served_documents(people.caller(people.carol)) == [{"id": "crm-globex", "title": TITLE, "uri": URI}]


def test_losing_the_collection_hides_the_title_at_once(people):
    crm_document(people)
    carol = people.caller(people.carol)
    write_and_enrich(carol, URI)
    assert served_documents(carol)[0]["title"] == TITLE
    AccessRule.objects.filter(tenant=people.acme, role__name="sales", collection__name="accounts").delete()
    # Still linked in the database; no longer shown to a reader who may not read it.
    assert Fragment.objects.get(owner_user=people.carol).resources.exists()
    assert served_documents(carol) == [{"id": URI, "title": "", "uri": ""}]


def test_readable_documents_is_todays_visible_shared_fragments(people):
    fragment = crm_document(people)
    resource = fragment.resources.get()
    assert access.readable_documents(people.caller(people.carol), [resource.pk]) == {resource.pk}
    assert access.readable_documents(people.caller(people.ada), [resource.pk]) == {resource.pk}
    assert access.readable_documents(people.caller(people.bruno), [resource.pk]) == frozenset()
    assert access.readable_documents(people.caller(people.olga), [resource.pk]) == frozenset()
    # An agent reads a connected source's documents only when it names that source.
    agent = people.caller(people.triage_bot)
    sales_bot_roles = agent.agent.roles
    sales_bot_roles.add(*people.acme.roles.filter(name="sales"))
    assert access.readable_documents(agent, [resource.pk]) == frozenset()
    named = access.agent_ids_named(tenant=people.acme, names=["crm"])
    assert access.readable_documents(agent, [resource.pk], named_agent_ids=named) == {resource.pk}
    # Retired fragments do not make a document readable.
    Fragment.objects.filter(pk=fragment.pk).update(retired_at=timezone.now(), retired_reason="forgotten")
    assert access.readable_documents(people.caller(people.carol), [resource.pk]) == frozenset()


def test_document_to_link_names_by_id_or_uri_only_what_the_writer_may_read(people):
    crm_document(people)
    carol, bruno = people.caller(people.carol), people.caller(people.bruno)
    assert access.document_to_link(carol, "crm-globex").external_id == "crm-globex"
    assert access.document_to_link(carol, URI).external_id == "crm-globex"
    assert access.document_to_link(bruno, "crm-globex") is None
    assert access.document_to_link(bruno, URI) is None
    assert access.document_to_link(carol, "") is None


# --------------------------------------------------------------------------- the pages


def test_the_memory_pages_show_no_title_or_uri_of_a_forbidden_document(people):
    crm_document(people)
    fragment = write_and_enrich(people.caller(people.bruno), "crm-globex")
    client = signed_in(people.bruno)
    searched = client.post("/memory/", {"q": "follow-up quarterly review"})["Location"]
    for url in ("/memory/", f"/memory/{fragment.pk}/", searched):
        page = client.get(url)
        assert page.status_code == 200, url
        body = page.content.decode()
        assert NOTE in body and "crm-globex" in body, url
        assert TITLE not in body and "crm.test" not in body, url


def test_the_pages_link_only_http_documents(people):
    """A document link that is not http(s) (stored before ingestion refused such
    URIs, or written around it) is shown as text, never as a link."""
    crm, _ = source_register(caller=people.system(), name="crm", kind="crm", collection="accounts")
    fragment, _ = fragment_ingest(source=crm, value="Initech renews in April.",
                                  resources=[{"id": "crm-initech", "title": "Initech", "uri": "https://crm.test/i"}])
    fragment.resources.update(uri="javascript:alert(document.cookie)")
    body = signed_in(people.carol).get(f"/memory/{fragment.pk}/").content.decode()
    assert "Initech" in body
    assert "javascript:" not in body


# --------------------------------------------------------------------------- over MCP


def enrich_in_thread(fragment_id: str) -> None:
    try:
        fragments_enrich(fragment_ids=[fragment_id])
    finally:
        connections.close_all()


def _token(user, base_url: str) -> str:
    return person_mcp_token(user, scope="memory.read memory.write", name="assistant", base_url=base_url)[0]


def test_over_mcp_the_writer_is_served_only_the_id(live_people, asgi_server):
    people = live_people
    crm_document(people)
    token = _token(people.bruno, asgi_server.url)

    async def scenario() -> list[dict]:
        async with connect(f"{asgi_server.url}/mcp", token, "2026-07-28") as client:
            written = await call(client, "memory_write", {"content": NOTE, "resource": "crm-globex"})
            await asyncio.to_thread(enrich_in_thread, written["results"][0]["fragment_id"])
            found = await call(client, "memory_search", {"query": "follow-up quarterly review"})
            return [f["resources"] for f in found["fragments"] if f["value"] == NOTE]

    assert asyncio.run(scenario()) == [[{"id": "crm-globex", "title": "", "uri": ""}]]
