"""The pages people expect, in Chromium: error pages in the site's frame that
say why and offer a way back; a search that reloads without searching again;
receipts that name the app that searched; a review preview that says who will
read the fact and what is nearly the same."""

from __future__ import annotations

import pytest

from memoryhub.models import Receipt
from tests.browser.support import DESKTOP, PHONE, fits_a_phone, login_of, shoot, start
from tests.oauth.browser import in_browser
from tests.pages.helpers import propose, remember, set_public_origin

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_error_pages_have_the_navigation_the_reason_and_a_way_back(asgi_server, settings, live_people):
    people = live_people
    base = asgi_server.url
    set_public_origin(settings, base)
    settings.ROOT_URLCONF = "tests.pages.failing_urls"
    bruno = login_of(people.bruno)

    def visit(page):
        watcher = start(page, base, bruno, "/")
        seen = {}
        for name, path in (("error-404", "/no/such/page/"), ("error-403", "/workspace/members/"),
                           ("error-500", "/broken/")):
            response = page.goto(f"{base}{path}")
            page.wait_for_selector("#error-reason")
            seen[name] = {
                "status": response.status,
                "reason": page.inner_text("#error-reason"),
                "nav": page.eval_on_selector_all("nav.site-nav a", "els => els.map(e => e.textContent.trim())"),
                "styled": page.evaluate("getComputedStyle(document.querySelector('.card')).borderRadius") != "0px",
                "phone": fits_a_phone(page),
            }
            shoot(page, name)
            if name == "error-403":
                page.set_viewport_size(PHONE)
                shoot(page, "error-403-phone")
                page.set_viewport_size(DESKTOP)
        page.click("#error-way-back a")
        page.wait_for_url(f"{base}/")
        # The browser reports each error status it was answered with (and the favicon's 404); nothing else.
        expected = "Failed to load resource: the server responded with a status of "
        assert [p for p in watcher.problems if not p.startswith(expected)] == [], watcher.problems
        return seen

    seen = in_browser(visit)
    assert seen["error-404"]["status"] == 404 and "There is no page at this address" in seen["error-404"]["reason"]
    assert seen["error-403"]["status"] == 403
    assert seen["error-403"]["reason"] == "Only workspace admins can open this page."
    assert seen["error-500"]["status"] == 500 and "Something went wrong on our side" in seen["error-500"]["reason"]
    for name, page in seen.items():
        assert "My memory" in page["nav"] and "Receipts" in page["nav"], (name, page["nav"])
        assert page["styled"] and page["phone"], name


def test_reload_back_and_forward_record_no_new_receipt_and_search_does(asgi_server, settings, live_people):
    people = live_people
    base = asgi_server.url
    set_public_origin(settings, base)
    remember(people.bruno, "The office wifi network is called Acme-Guest.")
    bruno = login_of(people.bruno)

    def visit(page):
        watcher = start(page, base, bruno, "/memory/")
        page.fill("input[name=q]", "office wifi")
        page.click("form[role=search] button[type=submit]")
        page.wait_for_selector("#search-results")
        first = page.get_attribute("#results", "data-receipt")
        receipts = [first]
        for _ in range(2):
            page.reload()
            page.wait_for_selector("#search-results")
            receipts.append(page.get_attribute("#results", "data-receipt"))
        page.click("nav.site-nav a:has-text('Receipts')")
        page.wait_for_selector("#receipts")
        listed = page.inner_text("#receipts")
        shoot(page, "receipts-clients")
        page.go_back()
        page.wait_for_selector("#search-results")
        receipts.append(page.get_attribute("#results", "data-receipt"))
        page.go_forward()
        page.wait_for_selector("#receipts")
        page.go_back()
        page.wait_for_selector("#search-results")
        shown = page.inner_text("#results")
        shoot(page, "memory-search-reload")
        page.click("form[role=search] button[type=submit]")  # the box still holds the query
        page.wait_for_selector("#search-results")
        again = page.get_attribute("#results", "data-receipt")
        watcher.assert_clean()
        return receipts, again, listed, shown

    receipts, again, listed, shown = in_browser(visit)
    assert len(set(receipts)) == 1 and again != receipts[0]
    assert list(Receipt.objects.filter(reader_user=people.bruno).order_by("created_at")
                .values_list("pk", flat=True)) == [receipts[0], again]
    assert "Searched from this website" in listed
    assert "Acme-Guest" in shown and "how closely it matched your search" in shown


def test_the_review_preview_says_who_will_read_it_and_what_is_nearly_the_same(asgi_server, settings, live_people):
    people = live_people
    base = asgi_server.url
    set_public_origin(settings, base)
    first = propose(people.triage_bot, "The deploy freeze starts on Friday.")
    second = propose(people.triage_bot, "Deploy freeze begins Friday.")
    ada = login_of(people.ada)

    def review(page):
        watcher = start(page, base, ada, f"/reviews/{first.pk}/")
        page.wait_for_selector(".preview__near")
        audience = page.inner_text(".preview__audience")
        near = page.inner_text(".preview__near")
        shoot(page, "reviews-near-duplicate")
        phone = fits_a_phone(page)
        page.click(f".preview__near a[href='/reviews/{second.pk}/']")
        page.wait_for_url(f"{base}/reviews/{second.pk}/")
        watcher.assert_clean()
        return audience, near, phone

    audience, near, phone = in_browser(review)
    assert "only the agent triage-bot." in audience and "private memory" in audience
    assert "Deploy freeze begins Friday." in near and "pending proposal" in near.lower()
    assert phone
