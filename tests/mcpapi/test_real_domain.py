"""The official `mcp` client against the single-process product (memoryhub.asgi under a real
uvicorn, the real database, tokens from its own authorisation server), at every revision
the server accepts. (tests/edge/test_edge_flow.py does the same through an edge process.)

What only the real domain can show: a fragment's documents come back with their provenance
and pass the client's check against the listed output schema, a search leaves a receipt that
replays, an agent's write waits for review, and whoami's probe reads under the caller's own
rights.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from oauth2_provider.models import Application

from memoryhub.models import Proposal
from tests.conftest import LiveServer, People
from tests.edge.conftest import HANDBOOK, agent_token, handbook_document, person_token, public_client
from tests.mcpapi.rpc_http import call_tool, tool_result
from tests.support.mcp_client import call, connect

pytestmark = [pytest.mark.slow]

QUESTION = "When is the Frankfurt staging cluster rebuilt?"


@pytest.fixture
def notes_app(asgi_server: LiveServer, live_people: People) -> Application:
    """The public MCP client people authorise, once the server has set the public origin."""
    return public_client()


def test_a_person_reads_fragments_with_their_documents(
    asgi_server: LiveServer, live_people: People, notes_app: Application, revision: str
) -> None:
    handbook_document(live_people)
    mcp_url = asgi_server.url + "/mcp"
    token = person_token(notes_app, live_people.bruno, resource=mcp_url)
    noted = f"Frankfurt staging rebuilds page the on-call engineer first ({revision})."

    async def session() -> tuple[dict[str, Any], ...]:
        async with connect(mcp_url, token, revision) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert listed["memory_search"].output_schema is not None
            me = await call(client, "whoami", {})
            written = await call(client, "memory_write", {"content": noted, "resource": "https://pager.example.com/p/42"})
            found = await call(client, "memory_search", {"query": QUESTION, "limit": 5})
            receipt = await call(client, "memory_receipt", {"receipt_id": found["receipt_id"]})
        return me, written, found, receipt

    me, written, found, receipt = asyncio.run(session())

    assert (me["subject"], me["principal_kind"], me["read_pool_ready"]) == ("user:bruno", "user", "ready")
    by_value = {fragment["value"]: fragment for fragment in found["fragments"]}
    runbook = next(fragment for value, fragment in by_value.items() if "deploys freeze" in value)
    assert runbook["resources"] == [HANDBOOK]
    assert runbook["grounding_status"] == "grounded"
    assert runbook["agents"] == ["wiki"]
    assert [result["operation"] for result in written["results"]] == ["stored"], written
    mine = by_value[noted]
    # A document the writer named that no source has: only the name he gave, no title, no URI
    # (memoryhub.services.provenance: exactly as for a document he may not read).
    assert mine["resources"] == [{"id": "https://pager.example.com/p/42", "title": "", "uri": ""}]
    # The receipt replays exactly what was served, in order.
    assert receipt["served_then"] == [fragment["id"] for fragment in found["fragments"]]
    assert receipt["receipt_id"] == found["receipt_id"]


def test_what_a_role_may_not_read_is_not_served(
    asgi_server: LiveServer, live_people: People, notes_app: Application, revision: str
) -> None:
    """olga is in another workspace; carol, a member of acme without the engineering role,
    sees neither the handbook nor bruno's private fragments."""
    handbook_document(live_people)
    mcp_url = asgi_server.url + "/mcp"
    tokens = {user.username: person_token(notes_app, user, resource=mcp_url)
              for user in (live_people.carol, live_people.olga)}

    async def searches() -> dict[str, dict[str, Any]]:
        served = {}
        for name, token in tokens.items():
            async with connect(mcp_url, token, revision) as client:
                served[name] = await call(client, "memory_search", {"query": QUESTION})
        return served

    for name, found in asyncio.run(searches()).items():
        assert found["fragments"] == [], (name, found)
        assert found["receipt_id"], name


def test_an_agents_write_waits_for_review(asgi_server: LiveServer, live_people: People, revision: str) -> None:
    mcp_url = asgi_server.url + "/mcp"
    token = agent_token(live_people, resource=mcp_url)
    content = f"Deploy freezes start an hour before the Frankfurt rebuild ({revision})."

    async def session() -> tuple[list[str], dict[str, Any], dict[str, Any]]:
        async with connect(mcp_url, token, revision) as client:
            listed = sorted(tool.name for tool in (await client.list_tools()).tools)
            written = await call(client, "memory_write", {"content": content, "session_id": "triage-42"})
            found = await call(client, "memory_search", {"query": "Frankfurt deploy freeze"})
        return listed, written, found

    listed, written, found = asyncio.run(session())

    assert listed == ["memory_search", "memory_write", "whoami"]
    assert written["review_state"] == "pending", written
    proposal = Proposal.objects.get(content=content)
    assert (proposal.agent.name, proposal.session_id, proposal.state) == ("triage-bot", "triage-42", "pending")
    # Not memory until a person approves it.
    assert content not in [fragment["value"] for fragment in found["fragments"]]


@pytest.fixture
def short_deadlines(settings: Any) -> None:
    """A 1 s search deadline inside a 3 s tool deadline; asks before `asgi_server` builds the app."""
    settings.MEMORYHUB_SEARCH_DEADLINE_SECONDS = 1.0
    settings.MEMORYHUB_TOOL_DEADLINE_SECONDS = 3.0


def test_a_search_held_up_in_the_database_fails_at_its_deadline(
    short_deadlines: None, asgi_server: LiveServer, live_people: People, notes_app: Application
) -> None:
    """The injected slow query: another transaction holds the fragment table locked, so the
    search's index query waits. The deadline's statement_timeout cancels it and the caller
    reads a tool error; nothing is left waiting, and the next search is served."""
    from django.db import connection, transaction

    from memoryhub.embeddings import get_embedder
    from memoryhub.models import Receipt

    mcp_url = asgi_server.url + "/mcp"
    token = person_token(notes_app, live_people.bruno, resource=mcp_url)
    # The server runs in this process: load its embedder now, which is not what this test times out.
    get_embedder().embed(["warm up"])
    first = tool_result(call_tool(mcp_url, token, "memory_search", {"query": QUESTION}))
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("LOCK TABLE memoryhub_fragment IN ACCESS EXCLUSIVE MODE")
        held = tool_result(call_tool(mcp_url, token, "memory_search", {"query": QUESTION}))
    after = tool_result(call_tool(mcp_url, token, "memory_search", {"query": QUESTION}))

    assert held["isError"] is True
    # The database cancels the statement half a second before the MCP layer would stop waiting.
    assert held["content"][0]["text"].startswith(
        "The search did not finish within its 0.5 s deadline and was cancelled."
    ), held
    assert first["isError"] is False and after["isError"] is False, (first, after)
    # The cancelled read left no receipt; the two served ones did.
    assert Receipt.objects.filter(subject="user:bruno").count() == 2
