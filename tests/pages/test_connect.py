"""Connect a client: the page shows every snippet for the server's own address, and
the README holds the same snippets for `./dev serve`'s, word for word.

The snippets are run against a live server in tests/clients/test_snippets.py, and the
page is looked at in Chromium in tests/browser/test_connect_page.py."""

from __future__ import annotations

import ast
import html
import json
import re
import tomllib
from pathlib import Path

from django.test import Client
from django.urls import reverse
from packaging.requirements import Requirement

from memoryhub.oauth.policy import AGENT_TOKEN_SECONDS, PERSON_TOKEN_SECONDS
from memoryhub.pages.client_configs import (
    DEV_BASE_URL,
    MCP_SDK_REQUIREMENT,
    TOKEN_PATH,
    client_configs,
    mcp_remote_can_sign_in,
    mcp_remote_can_use_client_credentials,
)
from memoryhub.runtime.serve import DEFAULT_HOST, DEFAULT_PORT
from tests.conftest import signed_in

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# `<!-- snippet: key -->`, then the fenced block that follows it.
README_SNIPPET = re.compile(r"<!-- snippet: (?P<key>[a-z0-9-]+) -->\n```(?P<language>\w+)\n(?P<text>.*?)\n```\n",
                            re.DOTALL)
PUBLIC = "https://memory.example.com"


def readme_snippets() -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for match in README_SNIPPET.finditer(README.read_text()):
        assert match["key"] not in found, f"the README has snippet {match['key']} twice"
        found[match["key"]] = (match["language"], match["text"])
    return found


def test_the_readme_holds_every_snippet_as_the_module_makes_it_for_dev_serve():
    assert f"http://{DEFAULT_HOST}:{DEFAULT_PORT}" == DEV_BASE_URL
    configs = client_configs(DEV_BASE_URL)
    assert readme_snippets() == {s.key: (s.language, s.text) for s in configs.snippets}
    assert README.read_text().count("<!-- snippet:") == len(configs.snippets)


def readme_connect_section() -> str:
    """The README's "Connect a client" section, its white space made single spaces."""
    text = README.read_text()
    start = text.index("## Connect a client\n")
    end = text.index("\n## ", start + 1)
    return " ".join(text[start:end].split())


def test_the_readme_says_the_token_lifetimes_the_server_gives():
    person, agent = PERSON_TOKEN_SECONDS // 60, AGENT_TOKEN_SECONDS // 60
    section = readme_connect_section()
    for said in (f"renews its {person}-minute tokens itself", f"a person's {person} minutes, an agent's {agent};",
                 f"its tokens last {agent} minutes"):
        assert said in section, said
    # No other number of minutes anywhere in the section (the snippets included).
    assert {int(n) for n in re.findall(r"(\d+)(?:-minute| minutes?\b)", section)} == {person, agent}
    assert f"a token for URL that lasts {agent} minutes" in client_configs(DEV_BASE_URL)["agent-python"].text


def test_the_sdk_requirement_is_the_one_the_project_is_built_with():
    pinned = [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
              if Requirement(r).name == "mcp"]
    [project] = pinned
    lower = {spec.version for spec in project.specifier if spec.operator == ">="}
    said = Requirement(MCP_SDK_REQUIREMENT)
    assert said.name == "mcp" and {spec.version for spec in said.specifier if spec.operator == ">="} == lower
    assert f'pip install "{MCP_SDK_REQUIREMENT}"' in README.read_text()


def test_it_sends_strangers_to_sign_in(db):
    response = Client().get("/connect/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_a_person_in_no_workspace_has_nothing_to_connect(people):
    assert signed_in(people.nomad).get("/connect/").status_code == 403


def test_a_member_sees_every_snippet_for_the_servers_public_address(people, settings):
    settings.BASE_URL = PUBLIC
    response = signed_in(people.bruno).get("/connect/")
    assert response.status_code == 200
    page = response.content.decode()
    configs = client_configs(PUBLIC)
    for snippet in configs.snippets:
        assert f'id="snippet-{snippet.key}"' in page
        assert html.escape(snippet.text) in page, snippet.key
    assert f'<code id="mcp-url">{PUBLIC}/mcp</code>' in page
    assert f'<code id="mcp-readonly-url">{PUBLIC}/mcp/readonly</code>' in page
    assert f"{PUBLIC}/o/token/" in page
    assert "127.0.0.1:8000" not in page
    assert "Acme Inc." in page and "wants to use your memory" in page and "no token" in page
    assert 'href="/workspace/agents/"' not in page  # bruno is no admin
    assert '<strong id="metadata-documents">on</strong>' in page
    assert f'<code id="pip-install">pip install "{html.escape(MCP_SDK_REQUIREMENT)}"</code>' in page
    assert "need https</strong> unless" in page
    prose = " ".join(page.split())
    person, agent = PERSON_TOKEN_SECONDS // 60, AGENT_TOKEN_SECONDS // 60
    assert f"lasts {person} minutes, an agent's {agent}, nothing renews" in prose


def test_the_client_list_leads_to_each_clients_heading(people):
    page = signed_in(people.bruno).get("/connect/").content.decode()
    nav = page[page.index('<nav class="subnav" aria-label="Clients">'):]
    nav = nav[:nav.index("</nav>")]
    targets = re.findall(r'<a href="#([^"]+)">([^<]+)</a>', nav)
    assert len(targets) == 8
    for anchor, name in targets:
        heading = re.search(rf'<h2 id="{re.escape(anchor)}">(.*?)</h2>', page)
        assert heading is not None, anchor
        assert re.sub(r"<[^>]+>", "", heading[1]).startswith(name.split()[0]), (anchor, name)


def test_an_admin_is_sent_to_the_agents_page(people, settings):
    page = signed_in(people.ada).get("/connect/").content.decode()
    assert 'href="/workspace/agents/"' in page


def test_it_says_when_client_metadata_documents_are_off(people, settings):
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_ENABLED": False}
    page = signed_in(people.bruno).get("/connect/").content.decode()
    assert '<strong id="metadata-documents">off</strong>' in page
    assert "MEMORYHUB_CLIENT_METADATA_DOCUMENTS=off" in page


def test_home_and_the_navigation_lead_there(people):
    page = signed_in(people.bruno).get("/").content.decode()
    assert page.count('href="/connect/"') == 2  # the nav and the tile
    assert 'href="/connect/" aria-current="page"' in signed_in(people.bruno).get("/connect/").content.decode()


def test_it_answers_get_only(people):
    assert signed_in(people.bruno).post("/connect/", {"q": "x"}).status_code == 405


def test_the_snippets_are_well_formed_and_name_this_servers_urls():
    configs = client_configs(PUBLIC + "/")  # a trailing slash is not doubled
    assert (configs.mcp_url, configs.readonly_url) == (f"{PUBLIC}/mcp", f"{PUBLIC}/mcp/readonly")
    assert configs.token_endpoint == PUBLIC + reverse("oauth2_provider:token") == PUBLIC + TOKEN_PATH
    for snippet in configs.snippets:
        if snippet.language == "json":
            json.loads(snippet.text)
        elif snippet.language == "python":
            ast.parse(snippet.text)
        assert "//mcp" not in snippet.text
    assert json.loads(configs["claude-desktop"].text) == {
        "mcpServers": {"memoryhub": {"command": "npx", "args": ["-y", "mcp-remote", f"{PUBLIC}/mcp"]}}}
    assert json.loads(configs["cursor"].text) == {"mcpServers": {"memoryhub": {"url": f"{PUBLIC}/mcp"}}}
    assert json.loads(configs["vscode"].text) == {"servers": {"memoryhub": {"type": "http", "url": f"{PUBLIC}/mcp"}}}
    assert configs["claude-code"].text == f"claude mcp add --transport http memoryhub {PUBLIC}/mcp"
    # No client that signs in by itself carries a token.
    for key in ("claude-desktop", "claude-code", "cursor", "vscode", "inspector-ui"):
        assert "Authorization" not in configs[key].text and "TOKEN" not in configs[key].text


def mcp_remote_args(base: str, key: str) -> list[str]:
    return json.loads(client_configs(base)[key].text)["mcpServers"]["memoryhub"]["args"]


def test_mcp_remote_is_told_to_allow_http_only_where_what_follows_can_work():
    """mcp-remote 0.15.1 takes an http URL only for localhost and 127.0.0.1 unless given
    --allow-http; its sign-in's token requests go over http only to localhost, 127.0.0.1 and
    [::1], its client credentials grant's only to the first two. tests/clients runs mcp-remote
    on each of these addresses."""
    for base, sign_in, token, agent in (
        ("https://memory.example.com", False, False, False),
        ("http://127.0.0.1:8000", False, False, False),
        ("http://localhost:8000", False, False, False),
        ("http://[::1]:8000", True, True, False),
        ("http://memory.internal:8000", False, True, False),
    ):
        assert ("--allow-http" in mcp_remote_args(base, "claude-desktop")) is sign_in, base
        assert ("--allow-http" in mcp_remote_args(base, "mcp-remote-token")) is token, base
        assert ("--allow-http" in mcp_remote_args(base, "mcp-remote-agent")) is agent, base
    assert [mcp_remote_can_sign_in(b) for b in ("https://m.example", "http://127.0.0.1:1", "http://localhost:1",
                                                "http://[::1]:1", "http://m.internal")] == [True] * 4 + [False]
    assert [mcp_remote_can_use_client_credentials(b) for b in (
        "https://m.example", "http://127.0.0.1:1", "http://localhost:1", "http://[::1]:1", "http://m.internal",
    )] == [True] * 3 + [False] * 2


def test_the_agents_mcp_remote_form_holds_no_secret_and_renews_itself():
    config = json.loads(client_configs(PUBLIC)["mcp-remote-agent"].text)["mcpServers"]["memoryhub"]
    args = config["args"]
    assert args[:4] == ["-y", "mcp-remote", f"{PUBLIC}/mcp", "--client-credentials"]
    info = json.loads(args[args.index("--static-oauth-client-info") + 1])
    assert info == {"client_id": "${MEMORYHUB_CLIENT_ID}", "client_secret": "${MEMORYHUB_CLIENT_SECRET}"}
    assert config["env"] == {"MEMORYHUB_CLIENT_ID": "<client id>", "MEMORYHUB_CLIENT_SECRET": "<client secret>"}


def test_a_command_whose_arguments_hold_a_token_keeps_npx_from_logging_them():
    configs = client_configs(PUBLIC)
    for line in configs["inspector-cli"].text.splitlines():
        assert not line.startswith("npx") or line.startswith("npx --logs-max=0 -y "), line
    # The mcp-remote forms hand it `${VAR}` placeholders it fills in itself: npx never sees a secret.
    for key in ("mcp-remote-token", "mcp-remote-agent"):
        server = json.loads(configs[key].text)["mcpServers"]["memoryhub"]
        assert all(re.search(r"\$\{MEMORYHUB_[A-Z_]+\}", arg) for arg in server["args"] if "MEMORYHUB_" in arg)
        assert all(value.startswith("<") for value in server["env"].values())
