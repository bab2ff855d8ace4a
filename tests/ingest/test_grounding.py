"""Grounding kept true: a memory linked to a document is served `stale` once
the document changes and `ungrounded` once it is deleted, as of the read's
instant; a workspace may withhold such memories; a receipt replay shows what
changed; nobody learns of a change to a document they may not read."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from django.utils import timezone

from memoryhub.models import AccessRule, Fragment, Tenant
from memoryhub.services import enrichment
from memoryhub.services.ingest import document_delete, document_upsert, document_validated
from memoryhub.services.receipts import receipt_replay
from memoryhub.services.search import fragments_search
from tests.ingest.conftest import doc
from tests.memory.conftest import private_fragment
from tests.support.mcp_client import call, connect
from tests.support.tokens import person_mcp_token

HANDBOOK = "handbook/oncall.md"
MEMORY = "I cover the on-call rotation on Mondays."


def _upsert(people, text: str):
    return document_upsert(source=people.wiki, document=document_validated(**doc(HANDBOOK, text)))


def _linked_memory(people) -> Fragment:
    """Bruno's memory about the handbook, linked by tier 2 as a worker would."""
    fragment = private_fragment(people.caller(people.bruno), MEMORY, resource_ref=HANDBOOK)
    assert enrichment.fragments_link_documents(fragment_ids=[str(fragment.pk)]) == 1
    return Fragment.objects.get(pk=fragment.pk)


def _grounding(people, *, as_of=None, who=None) -> tuple[str, str | None] | None:
    result = fragments_search(caller=people.caller(who or people.bruno), query="on-call rotation Mondays",
                              as_of=as_of)
    for hit in result.hits:
        if hit.fragment.value == MEMORY:
            return hit.provenance.grounding, hit.provenance.grounding_note
    return None


def test_a_linked_memory_goes_stale_when_its_document_changes_and_ungrounded_when_deleted(people):
    _upsert(people, "The on-call rotation changes every Monday.")
    memory = _linked_memory(people)
    assert memory.grounded_versions == {str(memory.resources.get().pk): memory.resources.get().content_hash}
    assert _grounding(people) == ("stated", None)
    before_change = timezone.now()
    _upsert(people, "The on-call rotation changes every Tuesday.")
    status, note = _grounding(people)
    assert status == "stale" and f"“{HANDBOOK}” changed after this memory was linked" in note
    between = timezone.now()
    document_delete(source=people.wiki, resource_id=HANDBOOK)
    status, note = _grounding(people)
    assert status == "ungrounded" and f"“{HANDBOOK}” this memory rests on was deleted" in note
    # The as-of rules hold: each read of the past shows what was true then.
    assert _grounding(people, as_of=before_change) == ("stated", None)
    assert _grounding(people, as_of=between)[0] == "stale"


def test_the_same_content_again_or_a_new_title_does_not_make_it_stale(people):
    _upsert(people, "The on-call rotation changes every Monday.")
    _linked_memory(people)
    _upsert(people, "The on-call rotation changes every Monday.")
    document_upsert(source=people.wiki, document=document_validated(
        **{**doc(HANDBOOK, "The on-call rotation changes every Monday."), "title": "On-call (v2)"}))
    assert _grounding(people) == ("stated", None)


def test_a_documents_own_fragments_are_replaced_never_stale(people):
    first = _upsert(people, "The on-call rotation changes every Monday.")
    old = Fragment.objects.get(value="The on-call rotation changes every Monday.")
    assert list(old.grounded_versions.values()) == [first.content_hash]  # the version it came from
    before = timezone.now()
    _upsert(people, "The on-call rotation changes every Tuesday.")
    now = fragments_search(caller=people.caller(people.bruno), query="on-call rotation")
    then = fragments_search(caller=people.caller(people.bruno), query="on-call rotation", as_of=before)
    assert [(h.fragment.value, h.provenance.grounding) for h in now.hits] == [
        ("The on-call rotation changes every Tuesday.", "grounded")]
    assert [(h.fragment.value, h.provenance.grounding) for h in then.hits] == [
        ("The on-call rotation changes every Monday.", "grounded")]


def test_a_read_before_the_link_was_made_is_not_judged(people):
    _upsert(people, "The on-call rotation changes every Monday.")
    fragment = private_fragment(people.caller(people.bruno), MEMORY, resource_ref=HANDBOOK)
    before_link = timezone.now()
    _upsert(people, "The on-call rotation changes every Tuesday.")
    enrichment.fragments_link_documents(fragment_ids=[str(fragment.pk)])
    # Linked to the Tuesday version: grounded in it now, unjudged before the link.
    assert _grounding(people) == ("stated", None)
    assert _grounding(people, as_of=before_link) == ("stated", None)


def test_nobody_learns_of_a_change_to_a_document_they_may_not_read(people):
    _upsert(people, "The on-call rotation changes every Monday.")
    _linked_memory(people)
    AccessRule.objects.filter(tenant=people.acme, collection__name="runbooks").delete()
    _upsert(people, "The on-call rotation changes every Tuesday.")
    # Bruno still reads his own memory, but no longer the handbook: its change is not his to know.
    assert _grounding(people) == ("stated", None)
    document_delete(source=people.wiki, resource_id=HANDBOOK)
    assert _grounding(people) == ("stated", None)


def test_a_workspace_can_withhold_stale_memories(people):
    _upsert(people, "The on-call rotation changes every Monday.")
    _linked_memory(people)
    before_change = timezone.now()
    _upsert(people, "The on-call rotation changes every Tuesday.")
    Tenant.objects.filter(pk=people.acme.pk).update(stale_policy=Tenant.StalePolicy.WITHHOLD)
    assert _grounding(people) is None
    only_mine = fragments_search(caller=people.caller(people.bruno), query="I cover Mondays")
    assert only_mine.hits == [] and "this workspace does not serve such memories" in only_mine.notice
    assert _grounding(people, as_of=before_change) == ("stated", None)
    # The document's own new text is still served.
    result = fragments_search(caller=people.caller(people.bruno), query="on-call rotation")
    assert [hit.fragment.value for hit in result.hits] == ["The on-call rotation changes every Tuesday."]


def test_a_replay_shows_the_grounding_that_changed_since_the_read(people):
    _upsert(people, "The on-call rotation changes every Monday.")
    memory = _linked_memory(people)
    bruno = people.caller(people.bruno)
    read = fragments_search(caller=bruno, query="on-call rotation Mondays", as_of=timezone.now())
    assert receipt_replay(caller=bruno, receipt_id=read.receipt_id).grounding_changes == []
    _upsert(people, "The on-call rotation changes every Tuesday.")
    changes = receipt_replay(caller=bruno, receipt_id=read.receipt_id).grounding_changes
    # The read had an explicit as_of, so the replay reads as of then: the change shows only for a read of now.
    assert changes == []
    now_read = fragments_search(caller=bruno, query="on-call rotation Mondays")
    document_delete(source=people.wiki, resource_id=HANDBOOK)
    changes = receipt_replay(caller=bruno, receipt_id=now_read.receipt_id).grounding_changes
    assert [(c.fragment_id, c.then, c.now) for c in changes] == [(str(memory.pk), "stale", "ungrounded")]


# --------------------------------------------------------------------------- over the ingestion API and MCP


def _link_as_a_worker_would(fragment_id: str) -> None:
    from django.db import connections

    try:
        assert enrichment.fragments_link_documents(fragment_ids=[fragment_id]) == 1
    finally:
        connections.close_all()


def _mine(found: dict) -> dict:
    return next(fragment for fragment in found["fragments"] if fragment["value"] == MEMORY)


@pytest.mark.slow
def test_over_the_ingestion_api_and_mcp(wiki_api, live_people, asgi_server):
    assert wiki_api.upsert(doc(HANDBOOK, "The on-call rotation changes every Monday.")).status_code in (200, 201)
    token, _ = person_mcp_token(live_people.bruno)

    async def flow() -> None:
        async with connect(f"{asgi_server.url}/mcp", token, "2026-07-28") as client:
            written = await call(client, "memory_write", {"content": MEMORY, "resource": HANDBOOK})
            assert written["results"][0]["operation"] == "stored"
            fragment_id = written["results"][0]["fragment_id"]
            await asyncio.to_thread(_link_as_a_worker_would, fragment_id)
            query = {"query": "on-call rotation Mondays"}
            first = await call(client, "memory_search", query)
            assert _mine(first)["grounding_status"] == "stated" and "grounding_note" not in _mine(first)
            before_change = dt.datetime.now(dt.UTC).isoformat()
            response = await asyncio.to_thread(wiki_api.upsert, doc(HANDBOOK, "The rotation now changes Tuesdays."))
            assert response.status_code == 200, response.text
            stale = _mine(await call(client, "memory_search", query))
            assert stale["grounding_status"] == "stale" and HANDBOOK in stale["grounding_note"]
            between = dt.datetime.now(dt.UTC).isoformat()
            assert (await asyncio.to_thread(wiki_api.delete, HANDBOOK)).status_code == 200
            gone = _mine(await call(client, "memory_search", query))
            assert gone["grounding_status"] == "ungrounded" and "was deleted" in gone["grounding_note"]
            then = _mine(await call(client, "memory_search", {**query, "as_of": before_change}))
            assert then["grounding_status"] == "stated"
            assert _mine(await call(client, "memory_search", {**query, "as_of": between}))["grounding_status"] == \
                "stale"
            replay = await call(client, "memory_receipt", {"receipt_id": first["receipt_id"]})
            assert replay["grounding_changes"] == [{"id": fragment_id, "then": "stated", "now": "ungrounded",
                                                    "note": gone["grounding_note"]}]
            assert replay["chain"]["verified"] is True

    asyncio.run(flow())


def test_a_document_a_source_only_named_is_never_taken_for_deleted(people):
    """A document named by a source's fact (no content sent) has no version to
    compare: a memory linked to it stays as it was stated."""
    from memoryhub.services.ingest import fragment_ingest

    fragment_ingest(source=people.wiki, value="Desks are booked through the desk tool.",
                    collection=people.collection("runbooks"), resources=[{"id": "desk-doc", "title": "Desks"}])
    fragment = private_fragment(people.caller(people.bruno), "I book desk 12 on Mondays.", resource_ref="desk-doc")
    assert enrichment.fragments_link_documents(fragment_ids=[str(fragment.pk)]) == 1
    result = fragments_search(caller=people.caller(people.bruno), query="book desk Mondays")
    mine = next(hit for hit in result.hits if hit.fragment.pk == fragment.pk)
    assert (mine.provenance.grounding, mine.provenance.grounding_note) == ("stated", None)


def test_a_kept_piece_belongs_to_the_new_version_too(people):
    def chat(reply: str):
        fields = {**doc(HANDBOOK), "text": None, "turns": [{"speaker": "Ana", "text": "Where do pages go?"},
                                                            {"speaker": "Ben", "text": reply}]}
        return document_upsert(source=people.wiki, document=document_validated(**fields))

    chat("To the on-call phone.")
    second = chat("To the on-call pager.")
    assert second.kept == 1 and second.added == 1
    for fragment in Fragment.objects.filter(source=people.wiki, retired_at__isnull=True):
        assert list(fragment.grounded_versions.values()) == [second.content_hash], fragment.value
