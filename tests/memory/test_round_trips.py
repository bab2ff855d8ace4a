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

# BEGIN, the prologue (planner settings, the workspace's search settings, the
# query's lexemes, the caller's roles and what they open), both index pools
# (the vector pool inside BM25's statement), the row check, the served hits'
# agents and documents (two), the receipt with its place in the chain, COMMIT.
SEARCH_STATEMENTS = 8


def _statements(caller, query: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The statements of one search, rendered as memory_search answers it."""
    with CaptureQueriesContext(connection) as captured:
        result = fragments_search(caller=caller, query=query)
        rendered = search_output(result)
        collections = {hit.fragment.collection.name for hit in result.hits}
    assert result.hits
    # Every served fragment comes with its source's agent (the wiki's) and its collection's name, read
    # with the row check: rendering them costs no statement.
    assert all(hit["agents"] for hit in rendered["fragments"]), rendered
    assert collections == {"runbooks"}
    return [entry["sql"] for entry in captured.captured_queries]


@pytest.mark.django_db(transaction=True)
def test_a_search_sends_a_fixed_number_of_statements(people, shared_fragment):
    shared_fragment("Deploy the billing service on Tuesdays.")
    bruno = people.caller(people.bruno)
    few = _statements(bruno, "billing deploy")
    assert few[0] == "BEGIN" and few[-1] == "COMMIT"
    assert len(few) == SEARCH_STATEMENTS, "\n".join(sql[:120] for sql in few)

    # Many candidates, from documents with agents and many turns: the same count.
    for number in range(12):
        document = ingest.document_validated(resource_id=f"chat/{number}", title=f"Chat {number}", turns=[
            {"speaker": "Ana", "text": f"The billing deploy number {number} went out."},
            {"speaker": "Ben", "text": "Deploy notes are in the billing runbook."}])
        ingest.document_upsert(source=people.wiki, document=document)
    for number in range(30):
        shared_fragment(f"Billing deploy checklist item {number}.")
    many = _statements(bruno, "billing deploy")
    assert len(many) == SEARCH_STATEMENTS, "\n".join(sql[:120] for sql in many)
