"""Connect a client: the page shows every snippet for the server's own address, and
the README holds the same snippets for `./dev serve`'s, word for word.

The snippets are run against a live server in tests/clients/test_snippets.py, and the
page is looked at in Chromium in tests/browser/test_connect_page.py."""

from __future__ import annotations

import ast
import html
import json
import re
from pathlib import Path

from django.test import Client
from django.urls import reverse

from memoryhub.pages.client_configs import DEV_BASE_URL, TOKEN_PATH, client_configs
from memoryhub.runtime.serve import DEFAULT_HOST, DEFAULT_PORT
from tests.conftest import signed_in

README = Path(__file__).resolve().parents[2] / "README.md"
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


def test_mcp_remote_is_allowed_plain_http_only_beyond_this_machine():
    for base, allowed in (("http://127.0.0.1:8000", False), ("http://localhost:8000", False),
                          ("https://memory.example.com", False), ("http://memory.internal:8000", True)):
        args = json.loads(client_configs(base)["claude-desktop"].text)["mcpServers"]["memoryhub"]["args"]
        assert ("--allow-http" in args) is allowed, base
        token_args = json.loads(client_configs(base)["mcp-remote-token"].text)["mcpServers"]["memoryhub"]["args"]
        assert ("--allow-http" in token_args) is allowed, base
