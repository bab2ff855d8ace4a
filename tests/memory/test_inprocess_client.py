"""The in-process MemoryClient: identity only from the principal, scopes
checked, domain errors mapped to MemoryServiceError, a real probe read."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from mcpapi.client import MemoryServiceError, Principal
from memoryhub.mcp_adapter.client import InProcessMemoryClient, inprocess_client_factory
from tests.memory.conftest import private_fragment


def _principal(caller, *, scopes=("memory.read", "memory.write", "memory.audit"), **overrides) -> Principal:
    fields = {
        "tenant": str(caller.tenant.pk),
        "subject": f"user:{caller.user.username}" if caller.user else f"agent:{caller.agent.name}",
        "kind": caller.kind,
        "scopes": frozenset(scopes),
        "client_id": caller.client_id,
        "resource": "http://127.0.0.1:8000/mcp",
    }
    fields.update(overrides)
    return Principal(**fields)


def run(coroutine):
    return asyncio.run(coroutine)


# The client works in threads of its own: the personas must be committed.
@pytest.fixture
def bruno(live_people):
    return live_people.caller(live_people.bruno)


@pytest.fixture
def bot(live_people):
    # An agent's principal names the OAuth client its credentials belong to.
    return live_people.caller(live_people.triage_bot, client_id=live_people.triage_bot.client_id)


def test_search_write_and_receipt_through_the_client(bruno):
    client = inprocess_client_factory(read_timeout=20)
    principal = _principal(bruno)
    written = run(client.write(principal, {"content": "My favourite editor is Vim.", "session_id": None,
                                           "resource": None, "idempotency_key": None}))
    assert written["results"][0]["operation"] == "stored"
    found = run(client.search(principal, {"query": "favourite editor", "limit": 10,
                                          "as_of": dt.datetime.now(dt.UTC)}))
    assert [f["value"] for f in found["fragments"]] == ["My favourite editor is Vim."]
    replay = run(client.receipt(principal, found["receipt_id"]))
    assert replay["replayed"] is True and replay["served_then"] == replay["served_now"]


def test_arguments_cannot_change_who_is_asking(live_people, bruno):
    private_fragment(live_people.caller(live_people.cleo), "Cleo's private note about the reorg.")
    client = InProcessMemoryClient()
    # Unknown arguments (an identity field) are not passed to the service at all.
    found = run(client.search(_principal(bruno), {"query": "reorg note", "subject": "cleo", "user": "cleo"}))
    assert found["fragments"] == []


def test_domain_errors_become_memory_service_errors(bruno):
    client = InProcessMemoryClient()
    principal = _principal(bruno)
    with pytest.raises(MemoryServiceError) as caught:
        run(client.search(principal, {"query": "x", "limit": 51}))
    assert caught.value.code == "invalid_argument" and "limit" in caught.value.message
    with pytest.raises(MemoryServiceError) as caught:
        run(client.receipt(principal, "rcpt_unknown"))
    assert caught.value.code == "not_found"


def test_scopes_are_checked_per_operation(bruno):
    client = InProcessMemoryClient()
    reader = _principal(bruno, scopes=("memory.read",))
    run(client.search(reader, {"query": "editor"}))
    # The scope check is memoryhub.access.require_scope's: it names the missing scope.
    with pytest.raises(MemoryServiceError) as caught:
        run(client.write(reader, {"content": "Lunch is at noon."}))
    assert caught.value.code == "insufficient_scope" and "memory.write" in caught.value.message
    with pytest.raises(MemoryServiceError) as caught:
        run(client.receipt(reader, "rcpt_x"))
    assert caught.value.code == "insufficient_scope" and "memory.audit" in caught.value.message


def test_an_agent_principal_is_found_by_its_client(bot):
    client = InProcessMemoryClient()
    principal = _principal(bot, scopes=("memory.read", "memory.write"))
    out = run(client.write(principal, {"content": "Triage P1s first."}))
    assert out["review_state"] == "pending"
    with pytest.raises(MemoryServiceError) as caught:
        run(client.receipt(_principal(bot), "rcpt_x"))
    assert caught.value.code == "permission_denied"


def test_a_principal_from_another_tenant_is_refused(live_people, bruno):
    client = InProcessMemoryClient()
    stray = _principal(bruno, tenant=str(live_people.globex.pk))
    with pytest.raises(MemoryServiceError) as caught:
        run(client.search(stray, {"query": "editor"}))
    assert caught.value.code == "permission_denied"
    assert run(client.probe(stray)) == "unavailable"


def test_probe_reads_under_the_principals_rights(bruno, monkeypatch):
    client = InProcessMemoryClient()
    assert run(client.probe(_principal(bruno))) == "ready"
    assert run(client.probe(_principal(bruno, tenant="00000000-0000-0000-0000-000000000000"))) == "unavailable"

    from memoryhub import embeddings

    def broken():
        raise RuntimeError("no model")

    monkeypatch.setattr(embeddings, "get_embedder", broken)
    # Search would still answer (lexically): degraded, not unavailable.
    assert run(client.probe(_principal(bruno))) == "degraded"
