"""An admin decides agent proposals in Chromium; the agent's next search, over
MCP with its own token, shows what was approved and nothing that was rejected."""

from __future__ import annotations

import pytest

from memoryhub.models import Proposal
from tests.browser.support import DESKTOP, PHONE, call_tool, fits_a_phone, login_of, shoot, start
from tests.oauth.browser import in_browser
from tests.pages.helpers import set_public_origin

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_an_admin_approves_one_proposal_and_rejects_another(asgi_server, settings, live_people):
    people = live_people
    base = asgi_server.url
    set_public_origin(settings, base)
    for content, session in (
        ("The staging cluster is called kestrel.", "incident-12"),
        ("The staging cluster runs on the CEO's laptop.", "incident-12"),
        ("Deploys to staging need a green canary first.", "release-7"),
    ):
        written = call_tool(base, people.triage_bot, "memory_write", {"content": content, "session_id": session})
        assert written["review_state"] == "pending", written
    approve, reject, keep = Proposal.objects.order_by("created_at")
    ada = login_of(people.ada)

    def review(page):
        watcher = start(page, base, ada, "/reviews/")
        page.wait_for_selector("#proposals")
        shoot(page, "reviews-queue")
        phone = fits_a_phone(page)
        page.set_viewport_size(PHONE)
        shoot(page, "reviews-queue-phone")
        page.set_viewport_size(DESKTOP)
        # Keyboard: j moves to the first (oldest) proposal, a approves it.
        page.keyboard.press("j")
        assert page.evaluate("document.activeElement.id") == f"p-{approve.pk}"
        page.keyboard.press("a")
        page.wait_for_selector(".message--success")
        approved_message = page.inner_text(".messages")
        # The mouse: a reason, then Reject.
        page.fill(f"#reason-{reject.pk}", "Not a fact about the cluster.")
        page.click(f"#p-{reject.pk} form[data-reject] button")
        page.wait_for_selector(f"#p-{reject.pk}", state="detached")
        # Edit the third and preview it, without deciding.
        page.click(f"#p-{keep.pk} a[data-edit]")
        page.fill("#id_content", "Deploys to staging need a green canary and a second reviewer.")
        page.click("#edit-form button:has-text('Preview')")
        page.wait_for_selector(".preview")
        shoot(page, "reviews-edit")
        page.goto(f"{base}/reviews/history/")
        history = page.inner_text("#history")
        shoot(page, "reviews-history")
        watcher.assert_clean()
        return approved_message, history, phone

    approved_message, history, phone = in_browser(review)
    assert "Approved triage-bot's proposal" in approved_message and "Stored 1 new fact." in approved_message
    assert "Not a fact about the cluster." in history and "by ada" in history
    assert phone
    assert [p.state for p in Proposal.objects.order_by("created_at")] == ["approved", "rejected", "pending"]

    found = call_tool(base, people.triage_bot, "memory_search", {"query": "staging cluster"})
    values = [fragment["value"] for fragment in found["fragments"]]
    assert values == ["The staging cluster is called kestrel."]
    assert found["fragments"][0]["agents"] == ["triage-bot"]
