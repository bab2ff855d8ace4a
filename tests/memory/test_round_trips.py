"""How many statements a search sends to PostgreSQL, transaction control and
the receipt included. The count is fixed: it does not grow with the
candidates, the hits, their agents or their documents."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryhub.mcp_adapter.render import search_output
from memoryhub.services import ingest
from memoryhub.services.search import fragments_search

# The prologue (the workspace's search settings, the query's lexemes, the
# caller's roles and what they open), both index pools with their planner
# settings (the vector pool inside BM25's statement, set_config sent with it),
# the row check (each candidate with its agents and documents), the receipt
# with its place in the chain. No BEGIN and no COMMIT: each is atomic on its own.
SEARCH_STATEMENTS = 4


def _statements(caller, query: str, rendered_into: list | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    """The statements of one search, rendered as memory_search answers it
    (the rendering into `rendered_into`)."""
    with CaptureQueriesContext(connection) as captured:
        result = fragments_search(caller=caller, query=query)
        rendered = search_output(result)
        collections = {hit.fragment.collection.name for hit in result.hits}
    assert result.hits
    # Every served fragment comes with its source's agent (the wiki's), its collection's name, its agents
    # and its documents, read with the row check: rendering them costs no statement.
    assert all(hit["agents"] for hit in rendered["fragments"]), rendered
    assert collections == {"runbooks"}
    if rendered_into is not None:
        rendered_into.append(rendered)
    return [entry["sql"] for entry in captured.captured_queries]


@pytest.mark.django_db(transaction=True)
def test_a_search_sends_a_fixed_number_of_statements(people, shared_fragment):
    shared_fragment("Deploy the billing service on Tuesdays.")
    bruno = people.caller(people.bruno)
    few = _statements(bruno, "billing deploy")
    assert not {"BEGIN", "COMMIT", "ROLLBACK"} & set(few), few
    assert len(few) == SEARCH_STATEMENTS, "\n".join(sql[:120] for sql in few)

    # Many candidates, from documents with agents and many turns: the same count.
    for number in range(12):
        document = ingest.document_validated(resource_id=f"chat/{number}", title=f"Chat {number}", turns=[
            {"speaker": "Ana", "text": f"The billing deploy number {number} went out."},
            {"speaker": "Ben", "text": "Deploy notes are in the billing runbook."}])
        ingest.document_upsert(source=people.wiki, document=document)
    for number in range(30):
        shared_fragment(f"Billing deploy checklist item {number}.")
    rendered: list = []
    many = _statements(bruno, "billing deploy", rendered)
    assert len(many) == SEARCH_STATEMENTS, "\n".join(sql[:120] for sql in many)
    # The turns are served with their document, named as it was sent.
    documents = [resource for hit in rendered[0]["fragments"] for resource in hit["resources"]]
    assert documents and all(doc["title"] == f"Chat {doc['id'].split('/')[1]}" for doc in documents), documents


def session() -> tuple:
    """The connection's HNSW settings ('' or None: never set, or a placeholder left empty)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('hnsw.ef_search', true), current_setting('hnsw.iterative_scan', true)")
        return tuple(value or None for value in cursor.fetchone())


# Unset, or pgvector's own defaults once its library is loaded in the session.
DEFAULTS = {(None, None), ("40", "off")}


@pytest.mark.django_db(transaction=True)
def test_the_planner_settings_last_exactly_as_long_as_the_read(people, shared_fragment):
    """Sent in the same round trip as the statement that walks the HNSW index:
    that statement runs with them, and outside a transaction the connection
    does not keep them (a pooled connection serves other reads next)."""
    from memoryhub.services import search

    assert not connection.in_atomic_block
    assert session() in DEFAULTS
    wanted = search.planner_settings()
    assert search._planned_rows("SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')",
                                []) == [(wanted["hnsw.ef_search"], "relaxed_order")]
    assert session() in DEFAULTS

    shared_fragment("Deploy the billing service on Tuesdays.")
    statements = _statements(people.caller(people.bruno), "billing deploy")
    index = [sql for sql in statements if "set_config" in sql]
    assert len(index) == 1 and index[0].startswith("SELECT set_config('hnsw.ef_search'"), index
    assert "ORDER BY" in index[0] and "<=>" in index[0]  # the statement that walks the index
    assert "set_config('hnsw.iterative_scan', 'relaxed_order', true)" in index[0]
    assert session() in DEFAULTS


@pytest.mark.django_db(transaction=True)
def test_a_transaction_opened_by_hand_gets_its_planner_settings_back(people, shared_fragment):
    """With autocommit turned off (no atomic block), the caller's transaction
    goes on after the read: the settings it ran with are put back."""
    shared_fragment("Deploy the billing service on Tuesdays.")
    bruno = people.caller(people.bruno)
    connection.set_autocommit(False)
    try:
        assert session() in DEFAULTS
        assert fragments_search(caller=bruno, query="billing deploy").hits
        assert session() in DEFAULTS
    finally:
        connection.rollback()
        connection.set_autocommit(True)
