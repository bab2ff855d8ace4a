"""Workspace administration in Chromium: every page renders under the CSP,
fits a phone, and its main action works."""

from __future__ import annotations

import re

import pytest

from memoryhub.models import AccessRule, Source, Tenant
from tests.browser.support import fits_a_phone, login_of, shoot, start
from tests.oauth.browser import in_browser
from tests.pages.helpers import set_public_origin

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_an_admin_administers_the_workspace(asgi_server, settings, live_people):
    people = live_people
    base = asgi_server.url
    set_public_origin(settings, base)
    ada = login_of(people.ada)

    def administer(page):
        watcher = start(page, base, ada, "/workspace/")
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
        page.select_option("#grant-title ~ form select[name=role]", label="sales")
        page.select_option("#grant-title ~ form select[name=collection]", label="incidents")
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
    assert "4 members" in seen["overview"]
    assert "olga" not in seen["members"] and "bruno" in seen["members"] and "cleo" in seen["members"]
    # The two checks after granting sales the incidents collection: engineering (ada, bruno, cleo,
    # triage-bot), leads (ada) and now sales (carol) read it; carol reads accounts and incidents.
    readers = re.findall(r"^\s*(?:agent\s+)?([\w-]+) via ([\w, -]+)$", seen["readers"], re.M)
    assert readers == [("ada", "engineering, leads"), ("bruno", "engineering"), ("carol", "sales"),
                       ("cleo", "engineering"), ("triage-bot", "engineering")], seen["readers"]
    assert re.findall(r"^\s*(\w+)\s*$", seen["reach"].split("and now:")[1], re.M) == ["accounts", "incidents"]
    assert AccessRule.objects.filter(tenant=people.acme, role__name="sales", collection__name="incidents").exists()
    source = Source.objects.get(tenant=people.acme, agent__name="helpdesk")
    assert source.default_collection.name == "accounts" and len(seen["secret"]) > 20
    acme = Tenant.objects.get(pk=people.acme.pk)
    assert (acme.judgment_plane, acme.relevance_floor, acme.blocked_terms) == (True, 0.15, ["Project Falcon"])
