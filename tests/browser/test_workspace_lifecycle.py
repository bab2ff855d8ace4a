"""The lifecycle of a workspace in Chromium: an admin deactivates, reactivates and
removes people and sets a temporary password; disables, enables, rotates and revokes a
source; renames, retires and deletes collections. The person given a temporary password
signs in with it, changes it, and disconnects their apps. Every page renders under the
CSP and fits a 390 px and a 360 px wide phone (fits_a_phone)."""

from __future__ import annotations

import secrets

import pytest
from oauth2_provider.models import AccessToken, RefreshToken

from memoryhub.models import Collection, Membership, Source
from tests.browser.support import Login, fits_a_phone, login_of, shoot, start
from tests.oauth.browser import in_browser
from tests.pages.helpers import set_public_origin, share
from tests.support.tokens import person_mcp_token

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TEMPORARY = "a temporary passphrase 1"
CHOSEN = "cleo's own passphrase 2"


def test_an_admin_runs_the_lifecycle_and_a_person_takes_over_their_password(asgi_server, settings, live_people):
    people = live_people
    base = asgi_server.url
    set_public_origin(settings, base)
    ada = login_of(people.ada)
    share(people, "The runbook for the VPN outage lives in the wiki.")
    ids = {"bruno": people.bruno.pk, "carol": people.carol.pk, "cleo": people.cleo.pk,
           "runbooks": people.collection("runbooks").pk}

    def member(page, user_id: int, action: str) -> None:
        page.click(f"form[action='/workspace/members/{user_id}/{action}/'] button[type=submit]")
        page.wait_for_selector(".message--success")

    def administer(page):
        watcher = start(page, base, ada, "/workspace/members/")
        phones, seen = {}, {}

        member(page, ids["bruno"], "deactivate")
        seen["deactivated"] = page.inner_text("#members")
        member(page, ids["bruno"], "reactivate")
        member(page, ids["carol"], "deactivate")
        member(page, ids["carol"], "remove")
        page.click(f"details:has(#p{ids['cleo']}-password) summary")
        page.fill(f"#p{ids['cleo']}-password", TEMPORARY)
        page.click(f"form[action='/workspace/members/{ids['cleo']}/password/'] button[type=submit]")
        page.wait_for_selector(".message--success")
        seen["members"] = page.inner_text("#members")
        shoot(page, "workspace-members-lifecycle")
        phones["members"] = fits_a_phone(page)

        page.goto(f"{base}/workspace/sources/")
        page.click("form[action='/workspace/sources/wiki/rotate/'] button[type=submit]")
        page.wait_for_selector("#client-secret")
        seen["rotated"] = page.inner_text("#client-secret")
        page.goto(f"{base}/workspace/sources/")
        page.click("form[action='/workspace/sources/tickets/disable/'] button[type=submit]")
        page.wait_for_selector("#source-tickets .badge--warning")
        seen["disabled"] = page.inner_text("#source-tickets")
        page.click("form[action='/workspace/sources/tickets/enable/'] button[type=submit]")
        page.wait_for_selector("form[action='/workspace/sources/tickets/disable/']")
        page.click("#source-tickets details.revoke summary")
        page.fill("#revoke-tickets", "tickets")
        page.click("form[action='/workspace/sources/tickets/revoke/'] button[type=submit]")
        page.wait_for_selector("#source-tickets .badge--warning")
        seen["sources"] = page.inner_text("#sources")
        shoot(page, "workspace-sources-lifecycle")
        phones["sources"] = fits_a_phone(page)

        page.goto(f"{base}/workspace/collections/")
        page.fill("#id_name", "scratch")
        page.click("#add-collection ~ form button[type=submit]")
        page.wait_for_selector(".message--success")
        scratch = page.locator("#collections li", has_text="scratch")
        scratch.locator("summary").click()
        scratch.locator("input[name=name]").fill("scratchpad")
        scratch.locator("button:has-text('Rename')").click()
        page.wait_for_selector(".message--success")
        scratchpad = page.locator("#collections li", has_text="scratchpad")
        scratchpad.locator("summary").click()
        scratchpad.locator("button:has-text('Delete scratchpad')").click()
        page.wait_for_selector(".message--success")
        runbooks = page.locator("#collections li", has_text="runbooks")
        runbooks.locator("summary").click()
        runbooks.locator(f"#retire-{ids['runbooks']}").fill("runbooks")
        runbooks.locator("button:has-text('Retire its fragments')").click()
        page.wait_for_selector(".message--success")
        seen["collections"] = page.inner_text("#collections")
        shoot(page, "workspace-collections-lifecycle")
        phones["collections"] = fits_a_phone(page)
        watcher.assert_clean()
        return phones, seen

    phones, seen = in_browser(administer)
    # Setting her password ended Cleo's sessions and apps; she connects two afterwards.
    assert not AccessToken.objects.filter(user=people.cleo).exists()
    for name in ("Cleo's desk assistant", "Cleo's editor"):
        _, token = person_mcp_token(people.cleo, name=name)
        RefreshToken.objects.create(user=people.cleo, application=token.application, access_token=token,
                                    token=secrets.token_urlsafe(32))

    def take_over(cleo):
        # Cleo, in a browser of her own, signs in with the temporary password and changes it.
        cleo_watcher = start(cleo, base, Login(workspace="acme", username="cleo", password=TEMPORARY),
                             "/account/password/")
        cleo.fill("#id_old_password", TEMPORARY)
        cleo.fill("#id_new_password", CHOSEN)
        cleo.fill("#id_again", CHOSEN)
        cleo.click("#password-form button[type=submit]")
        cleo.wait_for_selector(".message--success")
        shoot(cleo, "account-password")
        phones["password"] = fits_a_phone(cleo)
        cleo.goto(f"{base}/account/apps/")
        seen["apps"] = cleo.inner_text("main")
        cleo.click("#disconnect-all")
        cleo.wait_for_selector(".message--success")
        seen["apps after"] = cleo.inner_text("main")
        phones["apps"] = fits_a_phone(cleo)
        cleo_watcher.assert_clean()

    in_browser(take_over)
    assert all(phones.values()), phones
    assert "inactive" in seen["deactivated"].lower()
    memberships = {m.user.username: m for m in Membership.objects.filter(tenant=people.acme).select_related("user")}
    assert memberships["bruno"].user.is_active and memberships["bruno"].removed_at is None
    assert not memberships["carol"].user.is_active and memberships["carol"].removed_at is not None
    assert not memberships["carol"].roles.exists()
    assert len(seen["rotated"]) >= 32
    assert "disabled" in seen["disabled"]
    tickets = Source.objects.get(tenant=people.acme, agent__name="tickets")
    assert tickets.agent.revoked_at is not None and tickets.agent.application is None
    assert "revoked" in seen["sources"]
    names = set(Collection.objects.filter(tenant=people.acme, deleted_at__isnull=True).values_list("name", flat=True))
    assert names == {"runbooks", "incidents", "accounts"}
    assert "0 live fragments · 1 retired" in seen["collections"]
    people.cleo.refresh_from_db()
    assert people.cleo.check_password(CHOSEN)
    assert "Cleo's desk assistant" in seen["apps"] and "Cleo's editor" in seen["apps"]
    # Neither renews any more; the access tokens they hold run out (the page says by when).
    assert seen["apps after"].count("Disconnected · its last access ends by") == 2
    assert "Disconnect all" not in seen["apps after"]
    assert not RefreshToken.objects.filter(user=people.cleo, revoked__isnull=True).exists()
