"""A person searches their memory, forgets a fact, and the receipt of the
earlier search, replayed, shows the fact missing now. In Chromium."""

from __future__ import annotations

import pytest

from memoryhub.models import Fragment, Receipt
from tests.browser.support import fits_a_phone, login_of, shoot, start
from tests.oauth.browser import in_browser
from tests.pages.helpers import remember, set_public_origin, share

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_person_forgets_a_fact_and_the_receipt_shows_it_missing_now(asgi_server, settings, live_people):
    people = live_people
    base = asgi_server.url
    set_public_origin(settings, base)
    wifi = remember(people.bruno, "The office wifi network is called Acme-Guest.", session_id="onboarding")
    wifi_id = wifi.results[0].fragment_id
    remember(people.bruno, "The office wifi password hint is on the fridge.")
    remember(people.bruno, "My desk is on the third floor by the window.")
    share(people, "The office wifi is rebooted every Sunday at 03:00.")
    bruno = login_of(people.bruno)

    def visit(page):
        watcher = start(page, base, bruno, "/")
        shoot(page, "home")
        phones = {"home": fits_a_phone(page)}
        page.click("main a:has-text('My memory')")
        page.wait_for_selector("#my-fragments")
        shoot(page, "memory")
        phones["memory"] = fits_a_phone(page)

        page.fill("input[name=q]", "office wifi network")
        page.click("form[role=search] button[type=submit]")
        page.wait_for_selector("#search-results")
        served = page.inner_text("#search-results")
        shoot(page, "memory-search")
        page.click(f"#search-results a[href='/memory/{wifi_id}/']")
        page.wait_for_selector("#fragment-title")
        provenance = page.inner_text("main")
        shoot(page, "fragment")
        phones["fragment"] = fits_a_phone(page)

        page.click("a:has-text('Forget this')")
        page.wait_for_selector("#forget-title")
        shoot(page, "forget")
        page.click("#confirm-forget")
        page.wait_for_selector(".message--success")
        after_forget = page.inner_text("main")

        page.click("nav.site-nav a:has-text('Receipts')")
        page.wait_for_selector("#receipts")
        shoot(page, "receipts")
        phones["receipts"] = fits_a_phone(page)
        page.click("#receipts a")
        page.wait_for_selector("#missing-now")
        missing = page.eval_on_selector_all("#missing-now [data-fragment]", "els => els.map(e => e.dataset.fragment)")
        missing_text = page.inner_text("#missing-now")
        shoot(page, "receipt")
        phones["receipt"] = fits_a_phone(page)
        watcher.assert_clean()
        return served, provenance, after_forget, missing, missing_text, phones

    served, provenance, after_forget, missing, missing_text, phones = in_browser(visit)
    assert "The office wifi network is called Acme-Guest." in served
    assert "onboarding" in provenance and "You (private)" in provenance
    assert "Forgotten." in after_forget and "Acme-Guest" not in after_forget
    assert missing == [wifi_id]
    assert "forgotten" in missing_text
    assert all(phones.values()), phones

    assert Fragment.objects.get(pk=wifi_id).retired_reason == Fragment.Retired.FORGOTTEN
    receipt = Receipt.objects.get(reader_user=people.bruno)
    assert wifi_id in receipt.served
