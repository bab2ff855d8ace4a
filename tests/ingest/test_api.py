"""The ingestion API over HTTP, with the source's own client-credentials token
from /o/token/, against the real ASGI application."""

from __future__ import annotations

import httpx2

from memoryhub.models import Fragment, Resource
from memoryhub.services import sources
from tests.ingest.conftest import client_credentials_token, doc

HANDBOOK = "# Deploys\n\nShip on Tuesdays.\n\n# Rollbacks\n\nRevert the release tag and page the on-call."


def test_a_connector_upserts_reads_and_deletes_a_document(wiki_api):
    created = wiki_api.upsert(doc("handbook/deploys.md", HANDBOOK))
    assert created.status_code == 201, created.text
    assert created.json() == {
        "resource_id": "handbook/deploys.md", "status": "created", "collection": "runbooks",
        "content_hash": created.json()["content_hash"], "fragments": 2, "added": 2, "kept": 0, "retired": 0,
    }
    again = wiki_api.upsert(doc("handbook/deploys.md", HANDBOOK))
    assert again.status_code == 200
    assert (again.json()["status"], again.json()["added"]) == ("unchanged", 0)

    changed = wiki_api.upsert(doc("handbook/deploys.md", HANDBOOK.replace("Tuesdays", "Wednesdays")))
    assert (changed.status_code, changed.json()["status"]) == (200, "updated")
    assert (changed.json()["kept"], changed.json()["added"], changed.json()["retired"]) == (1, 1, 1)

    status = wiki_api.get("handbook/deploys.md")
    assert status.status_code == 200
    assert status.json()["title"] == "On-call" and status.json()["fragments"] == 2
    assert status.json()["created_at"] == "2026-03-01T09:00:00Z"

    deleted = wiki_api.delete("handbook/deploys.md")
    assert deleted.status_code == 200
    assert deleted.json() == {"resource_id": "handbook/deploys.md", "status": "deleted", "retired": 2}
    assert wiki_api.delete("handbook/deploys.md").json()["status"] == "already_deleted"
    assert wiki_api.get("handbook/deploys.md").json()["deleted"] is True
    assert Fragment.objects.filter(retired_at__isnull=True).count() == 0

    progress = wiki_api.progress()
    assert progress.status_code == 200
    assert progress.json() == {"source": "wiki", "documents": 0, "deleted_documents": 1, "fragments": 0,
                               "pending_embedding": 0}


def test_resource_ids_with_slashes_and_odd_characters_round_trip(wiki_api):
    resource_id = "spaces/ENG/pages/Q&A: on-call? 100% #1 / ünïcode"
    assert wiki_api.upsert(doc(resource_id)).status_code == 201
    assert wiki_api.get(resource_id).json()["resource_id"] == resource_id
    assert wiki_api.delete(resource_id).json()["status"] == "deleted"


def test_unknown_documents_are_not_found(wiki_api):
    for response in (wiki_api.get("never-sent.md"), wiki_api.delete("never-sent.md")):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_a_document_of_another_source_is_a_conflict(wiki_api, live_people):
    Resource.objects.create(tenant=live_people.acme, external_id="ticket-9", source=live_people.tickets)
    response = wiki_api.upsert(doc("ticket-9"))
    assert response.status_code == 409
    assert response.json()["error"]["field"] == "resource_id"
    assert wiki_api.delete("ticket-9").status_code == 409


def test_no_token_is_a_bearer_challenge(wiki_api):
    response = wiki_api.upsert(doc(), token="")
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith('Bearer realm="memoryhub-ingest"')
    assert response.json()["error"]["code"] == "not_authenticated"


def test_the_token_is_checked_before_the_body_is_read(wiki_api):
    for token in ("", "not-a-token"):
        response = wiki_api.post_raw(b"{not json", token=token)
        assert response.status_code == 401, response.text


def test_an_unknown_token_is_refused(wiki_api):
    response = wiki_api.upsert(doc(), token="not-a-token")
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
    assert Resource.objects.count() == 0


def test_an_agents_mcp_token_does_not_open_the_ingestion_api(wiki_api, live_people):
    bot = live_people.triage_bot
    token = client_credentials_token(wiki_api.base_url, bot.client_id, bot.client_secret).json()["access_token"]
    response = wiki_api.upsert(doc(), token=token)
    # Issued for the /mcp resource: not valid at this one.
    assert response.status_code == 401
    assert Resource.objects.count() == 0


def test_the_ingest_token_opens_no_mcp_endpoint(wiki_api):
    for path in ("/mcp", "/mcp/readonly"):
        response = httpx2.post(
            f"{wiki_api.base_url}{path}",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={"Authorization": f"Bearer {wiki_api.token}", "Accept": "application/json, text/event-stream",
                     "MCP-Protocol-Version": "2025-06-18"},
            timeout=30,
        )
        assert response.status_code == 401, (path, response.text)


def test_a_revoked_source_is_locked_out(wiki_api, live_people):
    assert wiki_api.upsert(doc("a.md")).status_code == 201
    # No caller-first service revokes a connected source (agents.agent_revoke is for
    # assistants only): end its credentials the way agent_revoke does.
    sources.source_revoke(caller=live_people.system(), name="wiki")
    assert wiki_api.upsert(doc("b.md")).status_code == 401
    credentials = live_people.wiki_credentials
    assert client_credentials_token(wiki_api.base_url, credentials.client_id, credentials.client_secret
                                    ).status_code == 401


def test_a_token_without_the_ingest_grant_is_forbidden(wiki_api, live_people):
    # The admin took the grant away after the token was issued.
    agent = live_people.wiki.agent
    agent.scopes = ""
    agent.save(update_fields=["scopes"])
    response = wiki_api.upsert(doc())
    assert response.status_code == 403
    assert Resource.objects.count() == 0


def test_the_openapi_schema_describes_the_api_and_its_credentials(asgi_server):
    response = httpx2.get(f"{asgi_server.url}/api/schema?format=json", timeout=60)
    assert response.status_code == 200
    schema = response.json()
    assert {"/api/ingest/documents", "/api/ingest/documents/{resource_id}", "/api/ingest/status"} <= set(
        schema["paths"]
    )
    upsert = schema["paths"]["/api/ingest/documents"]["post"]
    assert upsert["security"] == [{"sourceClientCredentials": ["ingest"]}]
    assert set(upsert["responses"]) >= {"200", "201", "400", "401", "403", "409", "413"}
    scheme = schema["components"]["securitySchemes"]["sourceClientCredentials"]
    assert scheme["flows"]["clientCredentials"]["scopes"] == {"ingest": scheme["flows"]["clientCredentials"]
                                                              ["scopes"]["ingest"]}
    document = schema["components"]["schemas"]["DocumentIn"]
    assert document["properties"]["text"]["maxLength"] == 262144
    # text or turns (the service refuses neither and both with a 400 naming the field)
    assert document["required"] == ["resource_id"]
    turn = schema["components"]["schemas"]["TurnIn"]
    assert document["properties"]["turns"]["maxItems"] == 5000
    assert turn["required"] == ["speaker", "text"] and turn["properties"]["speaker"]["maxLength"] == 100
