"""The Connect page's snippets, run as written against the real ASGI server.

Each snippet comes from memoryhub.pages.client_configs for the live server's address (as
the page renders it there); only the token or the agent's credentials are filled in, the
way a person would. The Node clients are the pinned MCP Inspector and mcp-remote
(tests/support/node.py) on Node 22, started through `npx` exactly as the page shows;
npm stays offline, so what runs is the pinned copy. The person's token is one of the
authorisation server's own (tests/support/tokens.py); the agent gets its own at the
token endpoint. A missing Node or npm fails these tests: they never skip.
"""

from __future__ import annotations

import ast
import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from memoryhub.pages.client_configs import CLIENT_ID_VARIABLE, CLIENT_SECRET_VARIABLE, TOKEN_VARIABLE, client_configs
from tests.pages.helpers import remember
from tests.support.node import NodeTools, NodeToolsUnavailable, client_tools
from tests.support.tokens import person_mcp_token

pytestmark = [pytest.mark.slow]

TOOLS = ["memory_search", "memory_write", "memory_receipt", "whoami"]
RUN_TIMEOUT = 180.0


@pytest.fixture(scope="session")
def node_clients() -> NodeTools:
    try:
        return client_tools()
    except NodeToolsUnavailable as exc:
        problem = str(exc)
    pytest.fail(f"The MCP Inspector and mcp-remote are unavailable (these tests never skip): {problem}", pytrace=False)


def node_env(tools: NodeTools, home: Path, **extra: str) -> dict[str, str]:
    """Node 22 first, npm offline, and a home of the test's own (the Inspector and
    mcp-remote keep state there)."""
    return {**tools.env(), "HOME": str(home), **extra}


def run(command: list[str], *, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (
        f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}")
    return done


def json_documents(text: str) -> list:
    """The JSON values printed one after another (each command prints one)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while True:
        at = text.find("{", at)
        if at < 0:
            return found
        value, at = decoder.raw_decode(text, at)
        found.append(value)


def test_the_inspector_cli_lists_the_tools_and_calls_whoami(asgi_server, live_people, node_clients, tmp_path):
    configs = client_configs(asgi_server.url)
    token, _ = person_mcp_token(live_people.bruno)
    snippet = configs["inspector-cli"].text
    done = run(["bash", "-euc", snippet], cwd=node_clients.root,
               env=node_env(node_clients, tmp_path, **{TOKEN_VARIABLE: token}))
    listed, called = json_documents(done.stdout)
    assert sorted(tool["name"] for tool in listed["tools"]) == sorted(TOOLS)
    me = called["structuredContent"]
    assert (me["subject"], me["principal_kind"], me["tenant"]) == (
        "user:bruno", "user", str(live_people.acme.pk))
    assert token not in done.stdout + done.stderr


def test_mcp_remote_with_a_token_proxies_the_tools_over_stdio(asgi_server, live_people, node_clients, tmp_path):
    remember(live_people.bruno, "The staging database is rebuilt every Friday night.")
    token, _ = person_mcp_token(live_people.bruno)
    config = json.loads(client_configs(asgi_server.url)["mcp-remote-token"].text)
    server = config["mcpServers"]["memoryhub"]
    assert server["env"] == {TOKEN_VARIABLE: "<access token>"}
    command = shutil.which(server["command"])
    assert command is not None, f"{server['command']} is not on PATH"
    # What the desktop client does with the block: start the command with its env, speak stdio.
    parameters = StdioServerParameters(command=command, args=server["args"], cwd=node_clients.root,
                                       env=node_env(node_clients, tmp_path, **{TOKEN_VARIABLE: token}))

    async def session() -> tuple[list[str], dict]:
        async with Client(parameters, mode="legacy", read_timeout_seconds=120) as client:
            tools = await client.list_tools()
            found = await client.call_tool("memory_search", {"query": "when is the staging database rebuilt"})
        assert not found.is_error, found.content
        return [tool.name for tool in tools.tools], found.structured_content or {}

    names, found = asyncio.run(asyncio.wait_for(session(), RUN_TIMEOUT))
    assert sorted(names) == sorted(TOOLS)
    assert [hit["value"] for hit in found["fragments"]][:1] == ["The staging database is rebuilt every Friday night."]


def test_the_python_sdk_snippet_prints_whoami(asgi_server, live_people, tmp_path):
    token, _ = person_mcp_token(live_people.bruno)
    script = tmp_path / "connect.py"
    script.write_text(client_configs(asgi_server.url)["python-sdk"].text + "\n")
    done = run([sys.executable, str(script)], env={"PATH": "/usr/bin:/bin", TOKEN_VARIABLE: token})
    tools_line, whoami_line = done.stdout.strip().splitlines()
    assert sorted(ast.literal_eval(tools_line)) == sorted(TOOLS)
    me = ast.literal_eval(whoami_line)
    assert (me["subject"], me["principal_kind"], me["tenant"]) == ("user:bruno", "user", str(live_people.acme.pk))


def test_the_agent_snippets_get_a_token_and_call_whoami_as_the_agent(asgi_server, live_people, tmp_path):
    configs = client_configs(asgi_server.url)
    agent = live_people.triage_bot
    credentials = {CLIENT_ID_VARIABLE: agent.client_id, CLIENT_SECRET_VARIABLE: agent.client_secret}
    script = tmp_path / "agent.py"
    script.write_text(configs["agent-python"].text + "\n")
    done = run([sys.executable, str(script)], env={"PATH": "/usr/bin:/bin", **credentials})
    me = ast.literal_eval(done.stdout.strip())
    assert (me["subject"], me["principal_kind"], me["tenant"]) == (
        "agent:triage-bot", "agent", str(live_people.acme.pk))
    assert sorted(me["scopes"]) == ["memory.read", "memory.write"]

    # The shell form: the token lands in MEMORYHUB_TOKEN, and it opens /mcp as the agent.
    shell = run(["bash", "-euc", configs["agent-token"].text + f'\nprintf %s "${TOKEN_VARIABLE}"'],
                env={"PATH": "/usr/bin:/bin", **credentials})
    token = shell.stdout
    assert token and token not in (agent.client_id, agent.client_secret)
    script = tmp_path / "connect.py"
    script.write_text(configs["python-sdk"].text + "\n")
    done = run([sys.executable, str(script)], env={"PATH": "/usr/bin:/bin", TOKEN_VARIABLE: token})
    assert ast.literal_eval(done.stdout.strip().splitlines()[1])["subject"] == "agent:triage-bot"
