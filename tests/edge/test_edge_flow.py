"""The official `mcp` client against a real edge process in front of a real
memory-service process: the tools work, and the edge never forwards the
caller's token or holds a secret."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs

import httpx2
import pytest
from oauth2_provider.models import Application

from tests.conftest import People
from tests.support.mcp_client import call, connect

from .conftest import HANDBOOK, agent_token, handbook_document, person_token
from .live import EdgeStack

pytestmark = [pytest.mark.slow]

PERSON_TOOLS = ["memory_receipt", "memory_search", "memory_write", "whoami"]
FACT = "The staging cluster in Frankfurt is rebuilt every Sunday at 02:00 UTC by the platform team."








def test_the_edge_process_has_no_database_no_secret_and_no_django_settings(origin: EdgeStack) -> None:
    edge = origin.edge.environment()
    assert not {"DATABASE_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"} & set(edge)
    assert not [name for name in edge if name.startswith(("DJANGO", "DATABASE", "CELERY"))]
    # The memory service behind it is the one holding them.
    assert "DATABASE_URL" in origin.service.environment()
    health = httpx2.get(f"{origin.edge_url}/healthz", trust_env=False)
    assert health.json() == {"status": "ok", "role": "edge"}
    # It serves the MCP endpoints and nothing of the authorisation server or the pages.
    for path in ("/o/token/", "/o/token/exchange/", "/internal/memory/probe", "/", "/admin/"):
        assert httpx2.post(f"{origin.edge_url}{path}", trust_env=False).status_code == 404, path
    assert httpx2.get(origin.mcp(), trust_env=False).status_code == 405


def test_a_person_uses_the_tools_through_the_edge(
    origin: EdgeStack, live_people: People, notes_app: Application, revision: str
) -> None:
    handbook_document(live_people)
    token = person_token(notes_app, live_people.bruno, resource=origin.mcp())

    async def session() -> tuple:
        async with connect(origin.mcp(), token, revision) as client:
            listed = sorted(tool.name for tool in (await client.list_tools()).tools)
            me = await call(client, "whoami", {})
            written = await call(client, "memory_write", {"content": FACT, "session_id": f"edge-{revision}"})
            found = await call(client, "memory_search", {"query": "When is the Frankfurt staging cluster rebuilt?"})
            receipt = await call(client, "memory_receipt", {"receipt_id": found["receipt_id"]})
        return listed, me, written, found, receipt

    listed, me, written, found, receipt = asyncio.run(session())

    assert listed == PERSON_TOOLS
    assert (me["tenant"], me["subject"], me["principal_kind"]) == (
        str(live_people.bruno.tenant_id), "user:bruno", "user"
    )
    assert me["scopes"] == ["memory.audit", "memory.read", "memory.write"]
    assert me["tools_available"] == PERSON_TOOLS
    assert me["read_pool_ready"] in ("ready", "degraded")
    stored_ids = [result["fragment_id"] for result in written["results"] if result.get("fragment_id")]
    assert stored_ids, written
    assert stored_ids[0] in [fragment["id"] for fragment in found["fragments"]], found
    # A fragment's documents cross the edge with their provenance, as the output schema lists them.
    runbook = [fragment for fragment in found["fragments"] if "deploys freeze" in fragment["value"]]
    assert [fragment["resources"] for fragment in runbook] == [
        [HANDBOOK]
    ], found
    assert receipt["served_then"] == [fragment["id"] for fragment in found["fragments"]]
    assert receipt["reader"] in ("bruno", "user:bruno")


def test_an_agents_write_becomes_a_proposal_through_the_edge(
    origin: EdgeStack, live_people: People, revision: str
) -> None:
    token = agent_token(live_people, resource=origin.mcp())

    async def session() -> tuple:
        async with connect(origin.mcp(), token, revision) as client:
            listed = sorted(tool.name for tool in (await client.list_tools()).tools)
            me = await call(client, "whoami", {})
            written = await call(client, "memory_write", {"content": FACT})
            found = await call(client, "memory_search", {"query": "Frankfurt staging cluster"})
        return listed, me, written, found

    listed, me, written, found = asyncio.run(session())

    assert listed == ["memory_search", "memory_write", "whoami"]
    assert (me["subject"], me["principal_kind"], me["scopes"]) == (
        "agent:triage-bot", "agent", ["memory.read", "memory.write"]
    )
    assert written.get("review_state"), written
    assert "receipt_id" in found


def test_the_read_only_endpoint_works_through_the_edge(
    origin: EdgeStack, live_people: People, notes_app: Application
) -> None:
    token = person_token(notes_app, live_people.ada, resource=origin.mcp("/mcp/readonly"))

    async def session() -> tuple:
        async with connect(origin.mcp("/mcp/readonly"), token, "2026-07-28") as client:
            listed = sorted(tool.name for tool in (await client.list_tools()).tools)
            me = await call(client, "whoami", {})
        return listed, me

    listed, me = asyncio.run(session())
    assert listed == ["memory_receipt", "memory_search", "whoami"]
    # The credential behind a read-only connection cannot write, whatever the token says.
    assert "memory.write" not in me["scopes"]
    [exchange] = [seen for seen in origin.exchanges() if _subject_token(seen) == token][-1:]
    assert "memory.write" not in json.loads(exchange.answer)["scope"].split()


def test_the_callers_token_goes_to_the_exchange_and_nowhere_else(
    origin: EdgeStack, live_people: People, notes_app: Application
) -> None:
    token = person_token(notes_app, live_people.bruno, resource=origin.mcp())
    before = len(origin.recorder.seen)

    async def session() -> None:
        async with connect(origin.mcp(), token, "2026-07-28") as client:
            await call(client, "whoami", {})
            await call(client, "memory_search", {"query": "anything about staging"})

    asyncio.run(session())
    seen = origin.recorder.seen[before:]
    exchanges = [s for s in seen if s.path == "/o/token/exchange/"]
    internal = [s for s in seen if s.path.startswith("/internal/memory/")]
    assert {s.path for s in seen} == {"/o/token/exchange/", "/internal/memory/probe", "/internal/memory/search"}
    # One exchange per MCP request, each presenting the caller's token as its subject and nothing else.
    assert exchanges and internal
    for exchange in exchanges:
        form = {key: values[0] for key, values in parse_qs(exchange.body.decode()).items()}
        assert form == {
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token": token,
            "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "resource": origin.mcp(),
            "audience": origin.audience,
        }
        assert "authorization" not in exchange.headers
        assert exchange.status == 200
    credentials = {json.loads(exchange.answer)["access_token"] for exchange in exchanges}
    assert token not in credentials
    for call_ in internal:
        assert call_.status == 200, call_.answer
        assert token not in call_.body.decode() and token not in json.dumps(call_.headers)
        scheme, _, credential = call_.headers["authorization"].partition(" ")
        assert scheme == "Bearer" and credential in credentials


def test_an_exchanged_credential_is_not_an_mcp_token(
    origin: EdgeStack, live_people: People, notes_app: Application
) -> None:
    token = person_token(notes_app, live_people.bruno, resource=origin.mcp())
    credential = exchange(origin, token)["access_token"]
    for url in (origin.mcp(), f"{origin.service_url}/mcp"):
        answer = _whoami_raw(url, credential)
        assert answer.status_code == 401, (url, answer.text)
        assert 'error="invalid_token"' in answer.headers["www-authenticate"]
    # The token it came from still works: the credential is a second, narrower thing.
    assert _whoami_raw(origin.mcp(), token).status_code == 200


def exchange(stack: EdgeStack, token: str, **overrides: str) -> dict:
    """A token exchange at the memory service, as the edge makes it."""
    data = {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": token,
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "resource": stack.mcp(),
        "audience": stack.audience,
        **overrides,
    }
    answer = httpx2.post(f"{stack.service_url}/o/token/exchange/", data=data, trust_env=False, timeout=60)
    return {"status": answer.status_code, **answer.json()}


def _whoami_raw(url: str, token: str) -> httpx2.Response:
    from tests.mcpapi.rpc_http import modern_headers, modern_request

    body = modern_request("tools/call", {"name": "whoami", "arguments": {}})
    return httpx2.post(url, content=json.dumps(body).encode(), headers=modern_headers("tools/call", "whoami", token),
                       trust_env=False, timeout=60)


def _subject_token(seen) -> str:
    return parse_qs(seen.body.decode()).get("subject_token", [""])[0]
