"""How each MCP client connects to this server: the one place the snippets are made.

The Connect page renders them for the server it runs on (settings.BASE_URL); the README's
"Connect a client" section holds the same snippets for `./dev serve`'s address, and
tests/pages/test_connect.py checks the two are equal, so neither can drift. The tests in
tests/clients/ run the snippets as written against a live server.

Clients that do OAuth themselves (Claude, Cursor, VS Code, mcp-remote, the Inspector's UI)
get the URL alone; the forms that carry a token read it from an environment variable, so
no secret is ever pasted into a file that is shared or committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from memoryhub.oauth.policy import LOOPBACK_HOSTS, MCP_PATH, MCP_READONLY_PATH

# What `./dev serve` prints as its address; the README's snippets are made for it.
DEV_BASE_URL: Final = "http://127.0.0.1:8000"
TOKEN_PATH: Final = "/o/token/"
SERVER_NAME: Final = "memoryhub"
# The environment variables the token-carrying snippets read.
TOKEN_VARIABLE: Final = "MEMORYHUB_TOKEN"
CLIENT_ID_VARIABLE: Final = "MEMORYHUB_CLIENT_ID"
CLIENT_SECRET_VARIABLE: Final = "MEMORYHUB_CLIENT_SECRET"
TOKEN_PLACEHOLDER: Final = "<access token>"


@dataclass(frozen=True)
class Snippet:
    key: str  # its id on the page and its marker in the README
    title: str
    where: str  # the file it goes in, or where it is typed
    language: str  # json, sh or python
    text: str


@dataclass(frozen=True)
class ClientConfigs:
    base_url: str
    mcp_url: str
    readonly_url: str
    token_endpoint: str
    snippets: tuple[Snippet, ...]

    def __getitem__(self, key: str) -> Snippet:
        for snippet in self.snippets:
            if snippet.key == key:
                return snippet
        raise KeyError(key)

    @property
    def by_name(self) -> dict[str, Snippet]:
        """The snippets by key with "_" for "-", as templates look them up."""
        return {snippet.key.replace("-", "_"): snippet for snippet in self.snippets}


def _json(value: object) -> str:
    return json.dumps(value, indent=2)


def _mcp_remote_args(url: str) -> list[str]:
    # mcp-remote refuses plain http except to this machine unless told the network is trusted.
    parts = urlsplit(url)
    allow_http = parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS
    return ["-y", "mcp-remote", url, *(["--allow-http"] if allow_http else [])]


def client_configs(base_url: str) -> ClientConfigs:
    """Every snippet for the server whose public origin is `base_url`."""
    base = base_url.rstrip("/")
    url, readonly_url, token_endpoint = base + MCP_PATH, base + MCP_READONLY_PATH, base + TOKEN_PATH
    snippets = (
        Snippet("claude-desktop", "Claude Desktop", "claude_desktop_config.json", "json", _json(
            {"mcpServers": {SERVER_NAME: {"command": "npx", "args": _mcp_remote_args(url)}}})),
        Snippet("claude-code", "Claude Code", "a terminal", "sh",
                f"claude mcp add --transport http {SERVER_NAME} {url}"),
        Snippet("cursor", "Cursor", "~/.cursor/mcp.json", "json", _json(
            {"mcpServers": {SERVER_NAME: {"url": url}}})),
        Snippet("vscode", "VS Code", ".vscode/mcp.json", "json", _json(
            {"servers": {SERVER_NAME: {"type": "http", "url": url}}})),
        Snippet("inspector-ui", "MCP Inspector", "a terminal", "sh",
                f"npx -y @modelcontextprotocol/inspector --transport http --server-url {url}"),
        Snippet("inspector-cli", "MCP Inspector, CLI mode", "a terminal", "sh", "\n".join((
            f'npx -y @modelcontextprotocol/inspector --cli {url} --transport http \\',
            f'  --header "Authorization: Bearer ${TOKEN_VARIABLE}" --method tools/list',
            f'npx -y @modelcontextprotocol/inspector --cli {url} --transport http \\',
            f'  --header "Authorization: Bearer ${TOKEN_VARIABLE}" --method tools/call --tool-name whoami',
        ))),
        Snippet("mcp-remote-token", "mcp-remote with a token", "claude_desktop_config.json", "json", _json(
            {"mcpServers": {SERVER_NAME: {
                "command": "npx",
                "args": [*_mcp_remote_args(url), "--header", f"Authorization: Bearer ${{{TOKEN_VARIABLE}}}"],
                "env": {TOKEN_VARIABLE: TOKEN_PLACEHOLDER},
            }}})),
        Snippet("python-sdk", "Python, the mcp SDK", "connect.py", "python", _PYTHON_SDK.format(url=url)),
        Snippet("agent-token", "An agent's token", "a terminal", "sh", "\n".join((
            f'export {TOKEN_VARIABLE}="$(curl -s -u "${CLIENT_ID_VARIABLE}:${CLIENT_SECRET_VARIABLE}" \\',
            f'  -d grant_type=client_credentials -d resource={url} {token_endpoint} \\',
            """  | python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])')\"""",
        ))),
        Snippet("agent-python", "A headless agent in Python", "agent.py", "python",
                _AGENT_PYTHON.format(url=url, token_endpoint=token_endpoint)),
    )
    return ClientConfigs(base_url=base, mcp_url=url, readonly_url=readonly_url, token_endpoint=token_endpoint,
                         snippets=snippets)


_PYTHON_SDK = '''\
import asyncio
import os

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL = "{url}"


async def main() -> None:
    headers = {{"Authorization": f"Bearer {{os.environ['MEMORYHUB_TOKEN']}}"}}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(URL, http_client=http)) as client,
    ):
        tools = await client.list_tools()
        print([tool.name for tool in tools.tools])
        me = await client.call_tool("whoami", {{}})
        print(me.structured_content)


asyncio.run(main())'''

_AGENT_PYTHON = '''\
import asyncio
import os

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL = "{url}"
TOKEN_ENDPOINT = "{token_endpoint}"


async def main() -> None:
    # Client credentials: a token for URL that lasts 60 minutes (no refresh token; ask again).
    async with httpx2.AsyncClient(timeout=60) as http:
        answer = await http.post(
            TOKEN_ENDPOINT,
            data={{"grant_type": "client_credentials", "resource": URL}},
            auth=(os.environ["MEMORYHUB_CLIENT_ID"], os.environ["MEMORYHUB_CLIENT_SECRET"]),
        )
        answer.raise_for_status()
        token = answer.json()["access_token"]
    async with (
        httpx2.AsyncClient(headers={{"Authorization": f"Bearer {{token}}"}}, timeout=60) as http,
        Client(streamable_http_client(URL, http_client=http)) as client,
    ):
        me = await client.call_tool("whoami", {{}})
        print(me.structured_content)


asyncio.run(main())'''
