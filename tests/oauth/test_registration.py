"""Client registration: RFC 7591 dynamic registration and client ID metadata documents."""

from __future__ import annotations

import json
import uuid

import pytest
from django.test import Client
from oauth2_provider.cimd import SafeMetadataFetcher
from oauth2_provider.models import AccessToken, Application

from memoryhub.oauth.policy import ClientMetadataFetcher
from tests.conftest import signed_in
from tests.oauth.conftest import authorize_url, pkce_pair

pytestmark = pytest.mark.django_db

LOOPBACK = "http://127.0.0.1:7000/callback"


def register(metadata: dict | str, client: Client | None = None) -> tuple[int, dict]:
    body = metadata if isinstance(metadata, str) else json.dumps(metadata)
    response = (client or Client()).post("/o/register/", body, content_type="application/json")
    return response.status_code, response.json()


def test_a_public_client_registers_openly(people):
    status, body = register({"client_name": "Desk assistant", "redirect_uris": [LOOPBACK],
                             "token_endpoint_auth_method": "none"})
    assert status == 201, body
    assert body["token_endpoint_auth_method"] == "none"
    assert "client_secret" not in body
    assert body["grant_types"] == ["authorization_code", "refresh_token"]
    application = Application.objects.get(client_id=body["client_id"])
    assert application.client_type == Application.CLIENT_PUBLIC
    assert application.registration_source == Application.RegistrationSource.DCR
    assert application.redirect_uris == LOOPBACK


def test_every_open_registration_is_public(people):
    # No secret can mean anything when anyone may register; the response says so.
    for method in (None, "client_secret_basic", "client_secret_post"):
        metadata = {"redirect_uris": [LOOPBACK]}
        if method:
            metadata["token_endpoint_auth_method"] = method
        status, body = register(metadata)
        assert status == 201
        assert body["token_endpoint_auth_method"] == "none"
        assert "client_secret" not in body


@pytest.mark.parametrize("uri", ["https://app.example.com/cb", "http://localhost:3000/cb", "http://[::1]:8080/cb"])
def test_https_and_loopback_redirects_are_accepted(people, uri):
    status, body = register({"redirect_uris": [uri]})
    assert status == 201, body


@pytest.mark.parametrize(
    "uri",
    ["http://app.example.com/cb", "cursor://callback", "https://app.example.com/cb#frag",
     "https://*.example.com/cb", "javascript:alert(1)", "https://user@app.example.com/cb"],
)
def test_other_redirects_are_refused(people, uri):
    status, body = register({"redirect_uris": [uri]})
    assert (status, body["error"]) == (400, "invalid_redirect_uri")


@pytest.mark.parametrize("separator", ["\n", "\r", "\t", " ", "\x7f", "\x0b", "\u2028", "\u00a0"])
def test_a_redirect_uri_with_whitespace_or_a_control_character_is_refused(people, separator):
    # Stored URIs are separated by whitespace: one with whitespace inside would be stored as two, and the
    # second ("http://evil.example/cb") would never have been checked.
    status, body = register({"redirect_uris": [f"https://a.example/a{separator}http://evil.example/cb"]})
    assert (status, body["error"]) == (400, "invalid_redirect_uri")
    assert not Application.objects.filter(redirect_uris__contains="evil").exists()


def test_a_client_without_redirect_uris_is_refused(people):
    assert register({"client_name": "x"})[1]["error"] == "invalid_redirect_uri"


def test_a_client_may_ask_for_no_more_than_the_memory_scopes(people):
    assert register({"redirect_uris": [LOOPBACK], "scope": "memory.read memory.write memory.audit"})[0] == 201
    for scope in ("memory.read ingest", "registration", "admin"):
        status, body = register({"redirect_uris": [LOOPBACK], "scope": scope})
        assert (status, body["error"]) == (400, "invalid_client_metadata"), scope


@pytest.mark.parametrize("grant_types", [["client_credentials"], ["password"], ["implicit"],
                                         ["urn:ietf:params:oauth:grant-type:device_code"],
                                         [[]], [{}], [1], [None], "authorization_code"])
def test_only_authorization_code_clients_register(people, grant_types):
    status, body = register({"redirect_uris": [LOOPBACK], "grant_types": grant_types})
    assert (status, body["error"]) == (400, "invalid_client_metadata")


def test_malformed_and_oversized_documents_are_refused(people):
    assert register("not json")[1]["error"] == "invalid_client_metadata"
    assert register("[1, 2]")[1]["error"] == "invalid_client_metadata"
    status, body = register({"redirect_uris": [LOOPBACK], "client_name": "x" * 20_000})
    assert (status, body["error"]) == (400, "invalid_client_metadata")


def test_registration_is_throttled_per_address(people):
    for _ in range(30):
        assert register({"redirect_uris": [LOOPBACK]})[0] == 201
    response = Client().post("/o/register/", json.dumps({"redirect_uris": [LOOPBACK]}),
                             content_type="application/json")
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0


def test_the_registration_token_manages_only_its_client(people):
    _, body = register({"redirect_uris": [LOOPBACK]})
    token = AccessToken.objects.get(application__client_id=body["client_id"])
    assert token.scope == "registration"
    management = Client().get(body["registration_client_uri"],
                              HTTP_AUTHORIZATION=f"Bearer {body['registration_access_token']}")
    assert management.status_code == 200
    assert management.json()["client_id"] == body["client_id"]


# ---- client ID metadata documents

DOCUMENTS: dict[str, dict] = {}


class _Documents(SafeMetadataFetcher):
    """Stands in for the network: serves DOCUMENTS."""

    def fetch(self, client_id):
        return DOCUMENTS[client_id], 300


class DocumentFetcher(ClientMetadataFetcher, _Documents):
    """Our fetcher's policy over the stand-in network."""


@pytest.fixture
def cimd(settings):
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER,
                                "CIMD_METADATA_FETCHER": f"{__name__}.DocumentFetcher"}

    def publish(**metadata) -> str:
        client_id = f"https://client.example/{uuid.uuid4().hex}/meta.json"
        DOCUMENTS[client_id] = {"client_id": client_id, "client_name": "Doc client",
                                "token_endpoint_auth_method": "none", **metadata}
        return client_id

    return publish


def test_a_client_identified_by_its_metadata_document_can_ask_for_consent(people, cimd):
    client_id = cimd(redirect_uris=["http://127.0.0.1:8765/callback"])
    _, challenge = pkce_pair()
    page = signed_in(people.bruno).get(authorize_url(Application(client_id=client_id), challenge))
    assert page.status_code == 200, page.content[:300]
    assert b"Doc client" in page.content
    assert b"client.example" in page.content
    application = Application.objects.get(client_id=client_id)
    assert application.registration_source == Application.RegistrationSource.CIMD
    assert application.client_type == Application.CLIENT_PUBLIC


@pytest.mark.parametrize("metadata", [
    {"redirect_uris": ["http://client.example/callback"]},
    {"redirect_uris": ["http://127.0.0.1:8765/callback"], "scope": "memory.read ingest"},
    {"redirect_uris": ["http://127.0.0.1:8765/callback"], "grant_types": ["client_credentials"]},
])
def test_a_metadata_document_breaking_our_policy_is_an_unknown_client(people, cimd, metadata):
    client_id = cimd(**metadata)
    _, challenge = pkce_pair()
    page = signed_in(people.bruno).get(authorize_url(Application(client_id=client_id), challenge))
    assert page.status_code == 400
    assert not Application.objects.filter(client_id=client_id).exists()


def _refused(people, client_id: str) -> str:
    _, challenge = pkce_pair()
    page = signed_in(people.bruno).get(authorize_url(Application(client_id=client_id), challenge))
    assert page.status_code == 400
    return page.content.decode()


def test_an_unreachable_metadata_document_is_explained(people):
    """The real fetcher, on a network where the document's host does not resolve
    (a server with no outbound internet): the page names the URL, the reason and
    what the person can do, instead of only "invalid client_id"."""
    client_id = f"https://{uuid.uuid4().hex}.client.example/meta.json"
    page = _refused(people, client_id)
    assert 'id="metadata-failure"' in page and client_id in page
    assert "its host name could not be resolved from this server" in page
    assert "Errno" not in page and "client_id host" not in page  # fixed words, never the resolver's own text
    assert "register with this server instead" in page and "MEMORYHUB_CLIENT_METADATA_DOCUMENTS=off" in page
    # Asked again within the back-off, the reason is still the one found.
    assert "its host name could not be resolved" in _refused(people, client_id)


def test_a_metadata_document_breaking_our_policy_says_why(people, cimd):
    page = _refused(people, cimd(redirect_uris=["http://client.example/callback"]))
    assert "client policy: redirect URIs must be https, or http on a loopback" in page


def test_a_server_can_stop_offering_metadata_documents(people, settings):
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_ENABLED": False}
    metadata = Client().get("/.well-known/oauth-authorization-server").json()
    assert metadata["client_id_metadata_document_supported"] is False
    assert metadata["registration_endpoint"].endswith("/o/register/")
    page = _refused(people, f"https://{uuid.uuid4().hex}.client.example/meta.json")
    assert "does not accept client metadata documents" in page
    assert "MEMORYHUB_CLIENT_METADATA_DOCUMENTS=off</code>: it then" not in page
    assert "register with this server instead" in page


def test_an_ordinary_unknown_client_gets_no_metadata_story(people):
    page = _refused(people, "no-such-client")
    assert 'id="metadata-failure"' not in page


def test_an_update_meets_the_same_policy(people):
    _, body = register({"redirect_uris": [LOOPBACK]})
    auth = {"HTTP_AUTHORIZATION": f"Bearer {body['registration_access_token']}"}
    bad = Client().put(body["registration_client_uri"], json.dumps({"redirect_uris": ["http://evil.example/cb"]}),
                       content_type="application/json", **auth)
    assert (bad.status_code, bad.json()["error"]) == (400, "invalid_redirect_uri")
    confidential = Client().put(body["registration_client_uri"], json.dumps({
        "redirect_uris": ["https://app.example.com/cb"], "token_endpoint_auth_method": "client_secret_basic",
    }), content_type="application/json", **auth)
    assert confidential.status_code == 200, confidential.content
    assert confidential.json()["token_endpoint_auth_method"] == "none"
    application = Application.objects.get(client_id=body["client_id"])
    assert (application.client_type, application.redirect_uris) == ("public", "https://app.example.com/cb")
