"""The memory service's internal API, called directly as an attacker on the
private network would: only a live credential from the exchange opens it, and
only for what its scopes allow."""

from __future__ import annotations

import httpx2
import pytest
from oauth2_provider.models import Application

from memoryhub.services.agents import agent_revoke
from tests.conftest import People

from .conftest import agent_token, person_token, planted_credential, stored
from .live import EdgeStack
from .test_edge_flow import exchange

pytestmark = [pytest.mark.slow]

OPERATIONS = {
    "probe": {},
    "search": {"query": "staging"},
    "write": {"content": "The on-call rota changes on Mondays."},
    "receipt": {"receipt_id": "r-unknown"},
}


def internal(stack: EdgeStack, operation: str, credential: str | None, body: dict | None = None) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {credential}"} if credential is not None else {}
    return httpx2.post(f"{stack.service_url}/internal/memory/{operation}", json=body or OPERATIONS[operation],
                       headers=headers, trust_env=False, timeout=120)


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_the_callers_own_token_is_refused(
    origin: EdgeStack, live_people: People, notes_app: Application, operation: str
) -> None:
    token = person_token(notes_app, live_people.bruno, resource=origin.mcp())
    answer = internal(origin, operation, token)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "invalid_token"
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]


def test_no_credential_and_an_unknown_one_are_refused(origin: EdgeStack) -> None:
    missing = internal(origin, "probe", None)
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert internal(origin, "probe", "not-a-credential").status_code == 401


def test_a_fresh_credential_opens_what_its_scopes_allow(
    origin: EdgeStack, live_people: People, notes_app: Application
) -> None:
    token = person_token(notes_app, live_people.bruno, resource=origin.mcp())
    credential = exchange(origin, token)["access_token"]
    assert internal(origin, "probe", credential).json()["read_pool_ready"] in ("ready", "degraded")
    searched = internal(origin, "search", credential)
    assert searched.status_code == 200 and "receipt_id" in searched.json()
    # A domain refusal travels as the domain said it.
    unknown = internal(origin, "receipt", credential)
    assert unknown.status_code in (403, 404) and unknown.json()["error"]["code"] in ("not_found", "permission_denied")


def test_a_credential_for_another_audience_is_refused(
    origin: EdgeStack, live_people: People, notes_app: Application
) -> None:
    token = person_token(notes_app, live_people.bruno, resource=origin.mcp())
    other = planted_credential(like=token, resource=["https://billing.example.com/internal/memory"], seconds=20)
    assert internal(origin, "probe", other).status_code == 401
    # Two audiences are not one.
    both = planted_credential(like=token, resource=[origin.audience, origin.mcp()], seconds=20)
    assert internal(origin, "probe", both).status_code == 401


def test_a_credential_living_longer_than_a_call_is_refused(
    origin: EdgeStack, live_people: People, notes_app: Application
) -> None:
    token = person_token(notes_app, live_people.bruno, resource=origin.mcp())
    long_lived = planted_credential(like=token, resource=[origin.audience], seconds=3600)
    assert internal(origin, "probe", long_lived).status_code == 401


def test_the_exchange_never_widens_scopes(origin: EdgeStack, live_people: People, notes_app: Application) -> None:
    reader = person_token(notes_app, live_people.bruno, resource=origin.mcp(), scope="memory.read")
    widened = exchange(origin, reader, scope="memory.read memory.write")
    assert (widened["status"], widened["error"]) == (400, "invalid_scope")
    credential = exchange(origin, reader)
    assert credential["scope"] == "memory.read"
    for operation in ("write", "receipt"):
        answer = internal(origin, operation, credential["access_token"])
        assert answer.status_code == 403, operation
        assert answer.json()["error"]["code"] == "insufficient_scope"
        assert 'error="insufficient_scope"' in answer.headers["www-authenticate"]
    # Asking for less than the token holds gives less.
    writer = person_token(notes_app, live_people.bruno, resource=origin.mcp())
    narrowed = exchange(origin, writer, scope="memory.read")
    assert internal(origin, "write", narrowed["access_token"]).status_code == 403


def test_a_widened_stored_scope_is_cut_to_what_the_agent_holds(origin: EdgeStack, live_people: People) -> None:
    token = agent_token(live_people, resource=origin.mcp())
    credential = exchange(origin, token)["access_token"]
    row = stored(credential)
    row.scope = "memory.read memory.write memory.audit"
    row.save(update_fields=["scope"])
    # Agents never see receipts, whatever the row says.
    assert internal(origin, "receipt", credential).status_code == 403


def test_the_wrong_audience_or_resource_is_refused_at_the_exchange(
    origin: EdgeStack, live_people: People, notes_app: Application
) -> None:
    token = person_token(notes_app, live_people.bruno, resource=origin.mcp())
    assert exchange(origin, token, audience="https://billing.example.com/internal/memory")["error"] == "invalid_target"
    assert exchange(origin, token, resource="https://elsewhere.example.com/mcp")["error"] == "invalid_target"
    # Presented at /mcp/readonly, a token for /mcp is not for that resource.
    assert exchange(origin, token, resource=origin.mcp("/mcp/readonly"))["error"] == "invalid_grant"


def test_a_credential_cannot_be_exchanged_again(origin: EdgeStack, live_people: People, notes_app: Application) -> None:
    token = person_token(notes_app, live_people.bruno, resource=origin.mcp())
    credential = exchange(origin, token)["access_token"]
    assert exchange(origin, credential)["error"] == "invalid_grant"


def test_revoking_an_agent_stops_its_live_credential(origin: EdgeStack, live_people: People) -> None:
    token = agent_token(live_people, resource=origin.mcp())
    credential = exchange(origin, token)["access_token"]
    agent_revoke(caller=live_people.system(), name="triage-bot")
    assert internal(origin, "probe", credential).status_code == 401
    assert exchange(origin, token)["error"] == "invalid_grant"
