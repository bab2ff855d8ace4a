"""Workspace administration in Chromium: every page renders under the CSP,
fits a phone, and its main action works."""

from __future__ import annotations

import re

import pytest

from memoryhub.models import AccessRule, Source, Tenant
from tests.browser.support import fits_a_phone, shoot, start
from tests.oauth.browser import in_browser
from tests.oauth.conftest import set_public_origin
from tests.pages.personas import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_an_admin_administers_the_workspace(asgi_server, settings, people):
    base = asgi_server.url
    set_public_origin(settings, base)

    def administer(page):
        watcher = start(page, base, "ada", PASSWORD, "/workspace/")
        phones = {}
        seen = {}

        def visit(name, path, ready):
            page.goto(f"{base}{path}")
            page.wait_for_selector(ready)
            shoot(page, f"workspace-{name}")
            phones[name] = fits_a_phone(page)
            seen[name] = page.inner_text("main")

        visit("overview", "/workspace/", ".tile-list")
        visit("members", "/workspace/members/", "#members")
        visit("collections", "/workspace/collections/", "#collections")

        page.goto(f"{base}/workspace/access/")
        page.select_option("#grant-title ~ form select[name=role]", label="leads")
        page.select_option("#grant-title ~ form select[name=collection]", label="accounts")
        page.click("#grant-title ~ form button[type=submit]")
        page.wait_for_selector("#readers")
        page.select_option("#check-person-select", label="carol")
        page.click("#check-person ~ form button[type=submit]")
        page.wait_for_selector("#reach")
        shoot(page, "workspace-access")
        phones["access"] = fits_a_phone(page)
        seen["readers"], seen["reach"] = page.inner_text("#readers"), page.inner_text("#reach")

        visit("agents", "/workspace/agents/", "#add-agent")
        visit("sources", "/workspace/sources/", "#sources")
        page.fill("#id_name", "helpdesk")
        page.fill("#id_kind", "tickets")
        page.select_option("#id_collection", label="accounts")
        page.click("#add-source ~ form button[type=submit]")
        page.wait_for_selector("#client-secret")
        seen["secret"] = page.inner_text("#client-secret")
        page.evaluate("document.getElementById('client-secret').textContent = '(shown once)'")
        shoot(page, "workspace-source-credentials")

        visit("settings", "/workspace/settings/", "#settings-form")
        page.check("#id_judgment_plane")
        page.fill("#id_relevance_floor", "0.15")
        page.select_option("#id_write_policy", "blocklist")
        page.fill("#id_blocked_terms", "Project Falcon")
        page.click("#settings-form button[type=submit]")
        page.wait_for_selector(".message--success")
        watcher.assert_clean()
        return phones, seen

    phones, seen = in_browser(administer)
    assert all(phones.values()), phones
    assert "3 members" in seen["overview"]
    assert "olga" not in seen["members"] and "bruno" in seen["members"]
    # The two checks after granting leads the accounts collection: ada (leads) and carol (sales) read it.
    assert re.findall(r"^\s*(?:agent\s+)?([\w-]+) via", seen["readers"], re.M) == ["ada", "carol"]
    assert "accounts" in seen["reach"] and "runbooks" not in seen["reach"]
    assert AccessRule.objects.filter(tenant=people.acme, role__name="leads", collection__name="accounts").exists()
    source = Source.objects.get(tenant=people.acme, agent__name="helpdesk")
    assert source.default_collection.name == "accounts" and len(seen["secret"]) > 20
    acme = Tenant.objects.get(pk=people.acme.pk)
    assert (acme.judgment_plane, acme.relevance_floor, acme.blocked_terms) == (True, 0.15, ["Project Falcon"])
