"""How each MCP client connects to this server: the one place the snippets are made.

The Connect page renders them for the server it runs on (settings.BASE_URL); the README's
"Connect a client" section holds the same snippets for `./dev serve`'s address, and
tests/pages/test_connect.py checks the two are equal, so neither can drift. The tests in
tests/clients/ run the snippets as written against a live server.

Clients that do OAuth themselves (Claude, Cursor, VS Code, mcp-remote, the Inspector's UI)
get the URL alone; the forms that carry a token or an agent's secret read it from an
environment variable, so no secret is ever pasted into a file that is shared or committed.
`npx` writes its whole command line to a debug log under ~/.npm/_logs/, so the one command
whose arguments hold a token (the Inspector's CLI mode) runs it with `--logs-max=0`.

What mcp-remote (0.15.1) accepts over plain http, read from its code:
- the server URL: only `localhost` and `127.0.0.1`, unless `--allow-http` is given;
- its OAuth token requests (code exchange, refresh): `localhost`, `127.0.0.1` and `[::1]`,
  and `--allow-http` does not change that;
- the client credentials grant: `localhost` and `127.0.0.1` only.
So the forms that sign in are given `--allow-http` only where the sign-in can then finish
(`[::1]`), and the token-header form wherever the server URL needs it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from memoryhub.oauth.policy import AGENT_TOKEN_SECONDS, MCP_PATH, MCP_READONLY_PATH, PERSON_TOKEN_SECONDS

# What `./dev serve` prints as its address; the README's snippets are made for it.
DEV_BASE_URL: Final = "http://127.0.0.1:8000"
TOKEN_PATH: Final = "/o/token/"
SERVER_NAME: Final = "memoryhub"
# The environment variables the token-carrying snippets read.
TOKEN_VARIABLE: Final = "MEMORYHUB_TOKEN"
CLIENT_ID_VARIABLE: Final = "MEMORYHUB_CLIENT_ID"
CLIENT_SECRET_VARIABLE: Final = "MEMORYHUB_CLIENT_SECRET"
TOKEN_PLACEHOLDER: Final = "<access token>"
CLIENT_ID_PLACEHOLDER: Final = "<client id>"
CLIENT_SECRET_PLACEHOLDER: Final = "<client secret>"
PERSON_TOKEN_MINUTES: Final = PERSON_TOKEN_SECONDS // 60
AGENT_TOKEN_MINUTES: Final = AGENT_TOKEN_SECONDS // 60
# The lowest `mcp` release the Python snippets are written for (its `Client` and
# `streamable_http_client(url, http_client=…)`).
MCP_SDK_REQUIREMENT: Final = "mcp>=2.3"

# mcp-remote 0.15.1's own rules for plain http (see the module's docstring); urlsplit
# gives "::1" for "[::1]".
MCP_REMOTE_HTTP_URL_HOSTS: Final = ("localhost", "127.0.0.1")
MCP_REMOTE_HTTP_TOKEN_HOSTS: Final = ("localhost", "127.0.0.1", "::1")
MCP_REMOTE_HTTP_CLIENT_CREDENTIALS_HOSTS: Final = ("localhost", "127.0.0.1")


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


def _plain_http_host(url: str) -> str | None:
    """The host of an http:// URL; None for https (or anything else)."""
    parts = urlsplit(url)
    return parts.hostname if parts.scheme == "http" else None


def _mcp_remote_args(url: str, *, signs_in: bool) -> list[str]:
    """`npx` arguments that start mcp-remote for `url`. `--allow-http` is added only where
    mcp-remote would refuse the URL without it and what follows can still work: always for
    a token it is handed (`signs_in=False`), for its own OAuth sign-in only when its token
    requests may go to that host over http. An http server elsewhere gets no flag: mcp-remote
    then stops at once and says it needs https, rather than failing at the code exchange."""
    host = _plain_http_host(url)
    needs_flag = host is not None and host not in MCP_REMOTE_HTTP_URL_HOSTS
    allow_http = needs_flag and (not signs_in or host in MCP_REMOTE_HTTP_TOKEN_HOSTS)
    return ["-y", "mcp-remote", url, *(["--allow-http"] if allow_http else [])]


def mcp_remote_can_sign_in(url: str) -> bool:
    """Whether mcp-remote's own OAuth sign-in can finish against `url`."""
    host = _plain_http_host(url)
    return host is None or host in MCP_REMOTE_HTTP_TOKEN_HOSTS


def mcp_remote_can_use_client_credentials(url: str) -> bool:
    """Whether mcp-remote's client credentials grant can reach `url`'s token endpoint."""
    host = _plain_http_host(url)
    return host is None or host in MCP_REMOTE_HTTP_CLIENT_CREDENTIALS_HOSTS


# --static-oauth-client-info takes JSON; mcp-remote fills `${…}` in from its environment.
_CLIENT_INFO = json.dumps({"client_id": f"${{{CLIENT_ID_VARIABLE}}}",
                           "client_secret": f"${{{CLIENT_SECRET_VARIABLE}}}"})


def client_configs(base_url: str) -> ClientConfigs:
    """Every snippet for the server whose public origin is `base_url`."""
    base = base_url.rstrip("/")
    url, readonly_url, token_endpoint = base + MCP_PATH, base + MCP_READONLY_PATH, base + TOKEN_PATH
    snippets = (
        Snippet("claude-desktop", "Claude Desktop", "claude_desktop_config.json", "json", _json(
            {"mcpServers": {SERVER_NAME: {"command": "npx", "args": _mcp_remote_args(url, signs_in=True)}}})),
        Snippet("claude-code", "Claude Code", "a terminal", "sh",
                f"claude mcp add --transport http {SERVER_NAME} {url}"),
        Snippet("cursor", "Cursor", "~/.cursor/mcp.json", "json", _json(
            {"mcpServers": {SERVER_NAME: {"url": url}}})),
        Snippet("vscode", "VS Code", ".vscode/mcp.json", "json", _json(
            {"servers": {SERVER_NAME: {"type": "http", "url": url}}})),
        Snippet("inspector-ui", "MCP Inspector", "a terminal", "sh",
                f"npx -y @modelcontextprotocol/inspector --transport http --server-url {url}"),
        Snippet("inspector-cli", "MCP Inspector, CLI mode", "a terminal", "sh", "\n".join((
            f'npx --logs-max=0 -y @modelcontextprotocol/inspector --cli {url} --transport http \\',
            f'  --header "Authorization: Bearer ${TOKEN_VARIABLE}" --method tools/list',
            f'npx --logs-max=0 -y @modelcontextprotocol/inspector --cli {url} --transport http \\',
            f'  --header "Authorization: Bearer ${TOKEN_VARIABLE}" --method tools/call --tool-name whoami',
        ))),
        Snippet("mcp-remote-token", "mcp-remote with a token, while it lasts", "claude_desktop_config.json", "json",
                _json({"mcpServers": {SERVER_NAME: {
                    "command": "npx",
                    "args": [*_mcp_remote_args(url, signs_in=False),
                             "--header", f"Authorization: Bearer ${{{TOKEN_VARIABLE}}}"],
                    "env": {TOKEN_VARIABLE: TOKEN_PLACEHOLDER},
                }}})),
        Snippet("mcp-remote-agent", "mcp-remote as an agent", "claude_desktop_config.json", "json", _json(
            {"mcpServers": {SERVER_NAME: {
                "command": "npx",
                # Never --allow-http: its client credentials grant refuses http beyond this machine.
                "args": ["-y", "mcp-remote", url, "--client-credentials",
                         "--static-oauth-client-info", _CLIENT_INFO],
                "env": {CLIENT_ID_VARIABLE: CLIENT_ID_PLACEHOLDER, CLIENT_SECRET_VARIABLE: CLIENT_SECRET_PLACEHOLDER},
            }}})),
        Snippet("python-sdk", "Python, the mcp SDK", "connect.py", "python", _PYTHON_SDK.format(url=url)),
        Snippet("agent-token", "An agent's token", "a terminal", "sh", "\n".join((
            # The secret goes in on stdin (not in curl's argv); -f makes a refused request fail,
            # and a separate assignment keeps that failure (export VAR=$(…) would hide it).
            f'{TOKEN_VARIABLE}="$(printf %s "${CLIENT_SECRET_VARIABLE}" | curl -fsS {token_endpoint} \\',
            f'  -d grant_type=client_credentials -d resource={url} \\',
            f'  --data-urlencode client_id="${CLIENT_ID_VARIABLE}" --data-urlencode client_secret@- \\',
            """  | python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])')\"""",
            f"export {TOKEN_VARIABLE}",
        ))),
        Snippet("agent-python", "A headless agent in Python", "agent.py", "python",
                _AGENT_PYTHON.format(url=url, token_endpoint=token_endpoint, minutes=AGENT_TOKEN_MINUTES)),
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
    # Client credentials: a token for URL that lasts {minutes} minutes (no refresh token; ask again).
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
