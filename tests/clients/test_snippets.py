"""The Connect page's snippets, run as written against the real ASGI server.

Each snippet comes from memoryhub.pages.client_configs for the live server's address (as
the page renders it there); only the token or the agent's credentials are filled in, the
way a person would. The Node clients are the pinned MCP Inspector and mcp-remote
(tests/support/node.py) on Node 22, started through `npx` exactly as the page shows;
npm stays offline, so what runs is the pinned copy. The person's token is one of the
authorisation server's own (tests/support/tokens.py); the agent gets its own at the
token endpoint. A missing Node or npm fails these tests: they never skip.

Each Node client runs with a home and a temporary folder of the test's own, and afterwards
no file under them may hold the token or the agent's secret (npx writes its command line to
~/.npm/_logs/ unless told not to). mcp-remote signing in by itself is played through: it
prints the sign-in address, Chromium signs in and allows, and the browser's redirect reaches
mcp-remote's own callback.
"""

from __future__ import annotations

import ast
import asyncio
import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

import pytest
from django.utils import timezone
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from oauth2_provider.models import AccessToken

from memoryhub.pages.client_configs import (
    CLIENT_ID_PLACEHOLDER,
    CLIENT_ID_VARIABLE,
    CLIENT_SECRET_PLACEHOLDER,
    CLIENT_SECRET_VARIABLE,
    TOKEN_VARIABLE,
    client_configs,
)
from tests.conftest import PASSWORD, poll
from tests.oauth.browser import in_browser, sign_in
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


def node_env(tools: NodeTools, place: Path, **extra: str) -> dict[str, str]:
    """Node 22 first, npm offline, and a home and temporary folder of the test's own under
    `place` (npm, the Inspector and mcp-remote keep state there), so that everything they
    write can be searched afterwards."""
    home, tmp = place / "home", place / "tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    env = {**tools.env(), "HOME": str(home), "TMPDIR": str(tmp), **extra}
    # npm's cache and logs then live in this home, where files_holding looks.
    leaks = sorted(name for name in env if name.lower() in ("npm_config_cache", "npm_config_logs_dir",
                                                             "npm_config_logs_max", "mcp_remote_config_dir"))
    assert not leaks, f"{leaks} would send npm's or mcp-remote's files elsewhere"
    return env


def files_holding(secret: str, root: Path) -> list[str]:
    """Every file under `root` whose bytes contain `secret`."""
    assert len(secret) >= 16
    return [str(path) for path in sorted(root.rglob("*"))
            if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes()]


def npm_wrote_here(place: Path) -> bool:
    """Whether npm ran with this home (it keeps a folder there)."""
    return (place / "home" / ".npm").is_dir()


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
    # The token is in npx's arguments here; npx must not have logged them to a file.
    assert npm_wrote_here(tmp_path)
    assert files_holding(token, tmp_path) == []


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
    assert npm_wrote_here(tmp_path)
    assert files_holding(token, tmp_path) == []


def stored_agent_tokens(client_id: str) -> list[AccessToken]:
    return list(AccessToken.objects.filter(application__client_id=client_id).order_by("created"))


@pytest.fixture
def roomy_rate_limit(settings):
    """A burst of 100 for the server started after it: mcp-remote started twice in a row as
    one agent sends more than the default burst of 10 within a few seconds."""
    settings.MEMORYHUB_RATE_BURST = 100


def test_mcp_remote_as_an_agent_gets_its_own_tokens_and_renews_them(roomy_rate_limit, asgi_server, live_people,
                                                                    node_clients, tmp_path):
    agent = live_people.triage_bot
    config = json.loads(client_configs(asgi_server.url)["mcp-remote-agent"].text)
    server = config["mcpServers"]["memoryhub"]
    assert server["env"] == {CLIENT_ID_VARIABLE: CLIENT_ID_PLACEHOLDER,
                             CLIENT_SECRET_VARIABLE: CLIENT_SECRET_PLACEHOLDER}
    assert agent.client_secret not in json.dumps(config) and "Bearer" not in json.dumps(config)
    command = shutil.which(server["command"])
    assert command is not None, f"{server['command']} is not on PATH"
    credentials = {CLIENT_ID_VARIABLE: agent.client_id, CLIENT_SECRET_VARIABLE: agent.client_secret}
    parameters = StdioServerParameters(command=command, args=server["args"], cwd=node_clients.root,
                                       env=node_env(node_clients, tmp_path, **credentials))

    async def whoami() -> dict:
        async with Client(parameters, mode="legacy", read_timeout_seconds=120) as client:
            tools = await client.list_tools()
            assert "whoami" in [tool.name for tool in tools.tools]
            me = await client.call_tool("whoami", {})
        assert not me.is_error, me.content
        return me.structured_content or {}

    me = asyncio.run(asyncio.wait_for(whoami(), RUN_TIMEOUT))
    assert (me["subject"], me["principal_kind"], me["tenant"]) == (
        "agent:triage-bot", "agent", str(live_people.acme.pk))
    first = stored_agent_tokens(agent.client_id)
    assert len(first) == 1

    # Its token runs out (as it does after an hour): the next start gets a new one by itself.
    AccessToken.objects.filter(pk=first[0].pk).update(expires=timezone.now() - dt.timedelta(seconds=1))
    again = asyncio.run(asyncio.wait_for(whoami(), RUN_TIMEOUT))
    assert again["subject"] == "agent:triage-bot"
    tokens = stored_agent_tokens(agent.client_id)
    assert len(tokens) == 2 and tokens[1].expires > timezone.now()
    assert files_holding(agent.client_secret, tmp_path) == []


SIGN_IN_ADDRESS = re.compile(r"Please authorize this client by visiting:\s*(?P<url>https?://\S+)")


def test_claude_desktops_mcp_remote_signs_the_person_in_through_the_browser(asgi_server, live_people, node_clients,
                                                                          tmp_path):
    """The Claude Desktop block as written: mcp-remote registers itself, prints where to sign
    in, and gets its token once the person has signed in and allowed it in the browser."""
    config = json.loads(client_configs(asgi_server.url)["claude-desktop"].text)
    server = config["mcpServers"]["memoryhub"]
    assert asgi_server.url.startswith("http://127.0.0.1:")
    command = shutil.which(server["command"])
    assert command is not None, f"{server['command']} is not on PATH"
    # BROWSER=true: the system's browser opener does nothing; the test is the browser.
    parameters = StdioServerParameters(command=command, args=server["args"], cwd=node_clients.root,
                                       env=node_env(node_clients, tmp_path, BROWSER="true"))
    log_path = tmp_path / "mcp-remote.stderr"
    connected = threading.Event()

    async def session(errlog: TextIO) -> tuple[list[str], dict]:
        async with Client(stdio_client(parameters, errlog=errlog), mode="legacy",
                          read_timeout_seconds=RUN_TIMEOUT) as client:
            connected.set()
            tools = await client.list_tools()
            me = await client.call_tool("whoami", {})
        assert not me.is_error, me.content
        return [tool.name for tool in tools.tools], me.structured_content or {}

    def proxy() -> tuple[list[str], dict]:
        with open(log_path, "w") as errlog:
            return asyncio.run(asyncio.wait_for(session(errlog), RUN_TIMEOUT))

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(proxy)

        def printed_address() -> str | None:
            if running.done():
                raise AssertionError(f"mcp-remote stopped before asking to sign in: {running.result()}")
            match = SIGN_IN_ADDRESS.search(log_path.read_text() if log_path.exists() else "")
            return match["url"] if match else None

        address = poll(printed_address, timeout=120, interval=0.2, what="mcp-remote to print its sign-in address")
        assert address.startswith(asgi_server.url + "/o/authorize/"), address

        def sign_in_and_allow(page) -> str:
            page.goto(address)
            sign_in(page, "acme", "bruno", PASSWORD)
            page.wait_for_selector("#consent-title")
            consent = page.inner_text("main")
            page.click("button[name=allow]")
            page.wait_for_url(re.compile(r"^http://(localhost|127\.0\.0\.1):\d+/oauth/callback"))
            return consent

        consent = in_browser(sign_in_and_allow)
        names, me = running.result(timeout=RUN_TIMEOUT)
    assert "wants to use your memory" in consent and "Acme Inc." in consent
    assert connected.is_set()
    assert sorted(names) == sorted(TOOLS)
    assert (me["subject"], me["principal_kind"], me["tenant"]) == ("user:bruno", "user", str(live_people.acme.pk))


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

    # The shell form: the token lands in MEMORYHUB_TOKEN, and it opens /mcp as the agent. What
    # curl is started with is written down on the way (then the real curl runs): no secret.
    recorder = tmp_path / "bin"
    recorder.mkdir()
    (recorder / "curl").write_text('#!/bin/sh\nprintf "%s\\n" "$@" >> "$CURL_ARGV"\nexec /usr/bin/curl "$@"\n')
    (recorder / "curl").chmod(0o755)
    argv = tmp_path / "curl-argv"
    shell_env = {"PATH": f"{recorder}:/usr/bin:/bin", "CURL_ARGV": str(argv), **credentials}
    shell = run(["bash", "-euc", configs["agent-token"].text + f'\nprintf %s "${TOKEN_VARIABLE}"'], env=shell_env)
    token = shell.stdout
    assert token and token not in (agent.client_id, agent.client_secret)
    assert agent.client_id in argv.read_text() and agent.client_secret not in argv.read_text()

    # A refused request (a wrong secret) stops a script run with `set -e` before it goes on.
    refused = subprocess.run(["bash", "-euc", configs["agent-token"].text + "\necho went on"], capture_output=True,
                             text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL,
                             env={**shell_env, CLIENT_SECRET_VARIABLE: "not-the-secret"})
    assert refused.returncode != 0 and "went on" not in refused.stdout, refused
    assert "401" in refused.stderr or "400" in refused.stderr, refused.stderr
    script = tmp_path / "connect.py"
    script.write_text(configs["python-sdk"].text + "\n")
    done = run([sys.executable, str(script)], env={"PATH": "/usr/bin:/bin", TOKEN_VARIABLE: token})
    assert ast.literal_eval(done.stdout.strip().splitlines()[1])["subject"] == "agent:triage-bot"


REFUSED_HTTP = "Non-HTTPS URLs are only allowed for localhost or when --allow-http flag is provided"


@pytest.mark.parametrize(("host", "refused"), [
    ("127.0.0.1", set()),
    ("localhost", set()),
    # mcp-remote takes [::1] over http only with --allow-http; its sign-in's token requests
    # may go there, its client credentials grant may not.
    ("[::1]", {"mcp-remote-agent"}),
    # Elsewhere over http neither sign-in can finish: those forms stop at once instead.
    ("memory.invalid", {"claude-desktop", "mcp-remote-agent"}),
])
def test_mcp_remote_takes_each_snippets_plain_http_address_only_where_it_can_work(node_clients, tmp_path, host,
                                                                                  refused):
    """Each mcp-remote block started for an http server on `host` (nothing listens there):
    mcp-remote either refuses the address at once, or goes on to connect."""
    configs = client_configs(f"http://{host}:1")
    secrets = {TOKEN_VARIABLE: "t" * 32, CLIENT_ID_VARIABLE: "agent-id", CLIENT_SECRET_VARIABLE: "s" * 32}
    for key in ("claude-desktop", "mcp-remote-token", "mcp-remote-agent"):
        server = json.loads(configs[key].text)["mcpServers"]["memoryhub"]
        done = subprocess.run([server["command"], *server["args"]], cwd=node_clients.root, capture_output=True,
                              text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL,
                              env=node_env(node_clients, tmp_path, BROWSER="true", **secrets))
        assert done.returncode != 0, (key, done.stderr[-2000:])  # nothing answers on port 1
        assert (REFUSED_HTTP in done.stderr) is (key in refused), (key, done.stderr[-2000:])
        assert (f"Connecting to remote server: http://{host}:1/mcp" in done.stderr) is (key not in refused), key
