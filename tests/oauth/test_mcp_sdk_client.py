"""The official `mcp` SDK's OAuth providers against the whole product: the MCP
gateway answers 401, the client discovers us, registers, sends the person
through sign-in and consent in Chromium, and calls whoami with what it got."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from tests.conftest import PASSWORD
from tests.oauth.browser import Callback, in_browser, sign_in
from tests.oauth.conftest import set_public_origin

pytestmark = [pytest.mark.browser, pytest.mark.slow]


class MemoryStorage:
    """The SDK's TokenStorage, kept in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@pytest.fixture
def base(asgi_server, settings) -> str:
    """The whole product (gateway + Django) under uvicorn; issuer and resources at its URL."""
    set_public_origin(settings, asgi_server.url)
    return asgi_server.url


async def whoami(url: str, auth: httpx2.Auth) -> dict:
    async with (
        httpx2.AsyncClient(auth=auth, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode="2026-07-28", cache=None) as client,
    ):
        result = await client.call_tool("whoami", {})
    assert result.structured_content is not None, result
    return result.structured_content


def test_a_person_connects_the_sdk_client_through_consent(base, live_people):
    with Callback() as callback:
        consent_pages: list[str] = []

        async def redirect_handler(authorization_url: str) -> None:
            def sign_in_and_allow(page):
                page.goto(authorization_url)
                sign_in(page, "acme", "bruno", PASSWORD)
                page.wait_for_selector("#consent-title")
                consent_pages.append(page.inner_text("main"))
                page.click("button[name=allow]")
                page.wait_for_url(f"{callback.url}*")

            await anyio.to_thread.run_sync(in_browser, sign_in_and_allow)

        async def callback_handler() -> AuthorizationCodeResult:
            [returned] = callback.received
            answer = {key: values[0] for key, values in parse_qs(urlsplit(returned).query).items()}
            return AuthorizationCodeResult(code=answer["code"], state=answer.get("state"), iss=answer.get("iss"))

        storage = MemoryStorage()
        provider = OAuthClientProvider(
            server_url=f"{base}/mcp",
            client_metadata=OAuthClientMetadata(client_name="SDK notes", redirect_uris=[callback.url]),
            storage=storage,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
        )
        me = asyncio.run(whoami(f"{base}/mcp", provider))

    assert "SDK notes wants to use your memory" in consent_pages[0]
    assert (me["subject"], me["principal_kind"], me["tenant"]) == (
        "user:bruno", "user", str(live_people.bruno.tenant_id))
    assert sorted(me["scopes"]) == ["memory.audit", "memory.read", "memory.write"]
    # The client registered itself as a public client and got a rotating refresh token.
    assert storage.client_info.token_endpoint_auth_method == "none"
    assert storage.tokens.refresh_token
    assert storage.tokens.expires_in == 900


def test_an_agent_connects_with_the_sdk_client_credentials_provider(base, live_people):
    provider = ClientCredentialsOAuthProvider(
        server_url=f"{base}/mcp", storage=MemoryStorage(), client_id=live_people.triage_bot.client_id,
        client_secret=live_people.triage_bot.client_secret, issuer=base,
    )
    me = asyncio.run(whoami(f"{base}/mcp", provider))
    assert (me["subject"], me["principal_kind"]) == ("agent:triage-bot", "agent")
    # It asked for every scope the resource lists and got what its admin granted.
    assert sorted(me["scopes"]) == ["memory.read", "memory.write"]
