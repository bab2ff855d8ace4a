"""RFC 8414 and RFC 9728 metadata."""

from __future__ import annotations

import pytest

from tests.oauth.conftest import TEST_ORIGIN

MEMORY_SCOPES = ["memory.audit", "memory.read", "memory.write"]
INTERNAL = ("ingest", "registration", "introspection")

pytestmark = pytest.mark.django_db


def test_authorization_server_metadata_describes_what_we_accept(client):
    response = client.get("/.well-known/oauth-authorization-server")
    assert response.status_code == 200
    meta = response.json()
    assert meta["issuer"] == TEST_ORIGIN
    assert meta["authorization_endpoint"] == f"{TEST_ORIGIN}/o/authorize/"
    assert meta["token_endpoint"] == f"{TEST_ORIGIN}/o/token/"
    assert meta["registration_endpoint"] == f"{TEST_ORIGIN}/o/register/"
    assert meta["revocation_endpoint"] == f"{TEST_ORIGIN}/o/revoke_token/"
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["response_types_supported"] == ["code"]
    assert sorted(meta["grant_types_supported"]) == ["authorization_code", "client_credentials", "refresh_token"]
    assert "none" in meta["token_endpoint_auth_methods_supported"]
    assert meta["scopes_supported"] == MEMORY_SCOPES
    assert meta["authorization_response_iss_parameter_supported"] is True
    assert meta["client_id_metadata_document_supported"] is True
    assert "introspection_endpoint" not in meta


def test_no_metadata_mentions_an_internal_scope(client):
    for url in ("/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource/mcp/readonly",
                "/.well-known/oauth-protected-resource/api/admin"):
        meta = client.get(url).json()
        listed = {item for value in meta.values() if isinstance(value, list) for item in value}
        assert not listed & set(INTERNAL), url


@pytest.mark.parametrize(
    ("url", "resource", "scopes"),
    [
        ("/.well-known/oauth-protected-resource/mcp", "/mcp", MEMORY_SCOPES),
        ("/.well-known/oauth-protected-resource", "/mcp", MEMORY_SCOPES),
        ("/.well-known/oauth-protected-resource/mcp/readonly", "/mcp/readonly", ["memory.audit", "memory.read"]),
        ("/.well-known/oauth-protected-resource/api/admin", "/api/admin", ["workspace.admin"]),
    ],
)
def test_protected_resource_metadata_names_the_exact_resource(client, url, resource, scopes):
    meta = client.get(url).json()
    assert meta["resource"] == TEST_ORIGIN + resource
    assert meta["authorization_servers"] == [TEST_ORIGIN]
    assert meta["scopes_supported"] == scopes
    assert meta["bearer_methods_supported"] == ["header"]


def test_other_resources_have_no_metadata(client):
    assert client.get("/.well-known/oauth-protected-resource/admin").status_code == 404
    assert client.get("/.well-known/oauth-protected-resource/mcp/other").status_code == 404


def test_metadata_follows_the_configured_origin(client, settings):
    from tests.oauth.conftest import set_public_origin

    set_public_origin(settings, "https://memory.example.com")
    assert client.get("/.well-known/oauth-protected-resource/mcp").json()["resource"] == (
        "https://memory.example.com/mcp"
    )
    meta = client.get("/.well-known/oauth-authorization-server").json()
    assert meta["issuer"] == "https://memory.example.com"
    assert meta["token_endpoint"] == "https://memory.example.com/o/token/"
