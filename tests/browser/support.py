"""Helpers for the Chromium tests of the web console: screenshots kept as test
artefacts, and the checks every page gets (no CSP violation, fits a phone)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client

from memoryhub.models import User
from memoryhub.services.agents import AgentCredentials
from tests.conftest import PASSWORD
from tests.pages.helpers import workspace_of

# Git-ignored; docs/screens/ holds the copies committed once.
SCREENS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screens"
DESKTOP = {"width": 1000, "height": 760}
PHONE = {"width": 360, "height": 740}
# A common phone (390) and a narrow one (360).
PHONE_WIDTHS = (390, 360)


class Watcher:
    """Collects what the browser complains about: CSP violations, script errors."""

    def __init__(self, page) -> None:
        self.problems: list[str] = []
        page.on("console", lambda message: message.type in ("error", "warning") and self.problems.append(message.text))
        page.on("pageerror", lambda error: self.problems.append(str(error)))

    def assert_clean(self) -> None:
        assert not [p for p in self.problems if "Content Security Policy" in p or "Refused" in p], self.problems
        assert not [p for p in self.problems if "Error" in p and "favicon" not in p], self.problems


@dataclass(frozen=True)
class Login:
    """What a person types into the sign-in form. Made outside the browser's
    thread: the ORM refuses to run beside Playwright's event loop."""

    workspace: str
    username: str
    password: str = PASSWORD


def login_of(user: User) -> Login:
    return Login(workspace=workspace_of(user), username=user.username)


def sign_in(page, login: Login) -> None:
    """Fill and send the sign-in form the page is on: workspace, username, password."""
    page.fill("#id_workspace", login.workspace)
    page.fill("#id_username", login.username)
    page.fill("#id_password", login.password)
    page.click("button[type=submit]")


def start(page, base: str, login: Login, path: str = "/") -> Watcher:
    """Sign in on the sign-in page and land on `path`."""
    watcher = Watcher(page)
    page.set_viewport_size(DESKTOP)
    page.goto(f"{base}/accounts/login/?next={path}")
    sign_in(page, login)
    page.wait_for_url(f"{base}{path}")
    page.wait_for_load_state()
    return watcher


def shoot(page, name: str) -> None:
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"{name}.png"), full_page=True)


def fits_a_phone(page, width: int | None = None) -> bool:
    """The page on a phone, 390 and 360 px wide unless a width is given: no
    sideways scrolling, its main buttons still a finger wide."""
    size = page.viewport_size
    try:
        for each in (width,) if width else PHONE_WIDTHS:
            page.set_viewport_size({**PHONE, "width": each})
            page_width = page.evaluate("document.documentElement.scrollWidth")
            small = page.evaluate(
                "[...document.querySelectorAll('main .button')]"
                ".filter(b => b.offsetParent && b.getBoundingClientRect().height < 36).length"
            )
            if page_width > each or small:
                return False
        return True
    finally:
        page.set_viewport_size(size)


def call_tool(base: str, agent: AgentCredentials, name: str, arguments: dict) -> dict:
    """One MCP tool call as the agent: client credentials, the real SDK client, the real endpoint."""

    class Storage:
        tokens = None
        client_info = None

        async def get_tokens(self):
            return self.tokens

        async def set_tokens(self, tokens):
            self.tokens = tokens

        async def get_client_info(self):
            return self.client_info

        async def set_client_info(self, info):
            self.client_info = info

    async def run() -> dict:
        provider = ClientCredentialsOAuthProvider(
            server_url=f"{base}/mcp", storage=Storage(), client_id=agent.client_id,
            client_secret=agent.client_secret, issuer=base,
        )
        async with (
            httpx2.AsyncClient(auth=provider, timeout=60) as http,
            Client(streamable_http_client(f"{base}/mcp", http_client=http), mode="2026-07-28", cache=None) as client,
        ):
            result = await client.call_tool(name, arguments)
        assert result.structured_content is not None, result
        return result.structured_content

    return asyncio.run(run())
