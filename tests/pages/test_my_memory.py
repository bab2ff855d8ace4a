"""My memory: one's own facts newest first (cursor pages), and search through
the same service the MCP tool calls."""

from __future__ import annotations

import datetime as dt

from django.test import Client
from django.utils import timezone

from memoryhub.models import Fragment, Receipt
from memoryhub.services import paging
from tests.conftest import signed_in
from tests.pages.helpers import remember, share


def _own(user, value: str, *, minutes_ago: int) -> Fragment:
    from memoryhub.services.write import fact_hash

    at = timezone.now() - dt.timedelta(minutes=minutes_ago)
    return Fragment.objects.create(tenant=user.tenant, owner_user=user, value=value, created_at=at, recorded_at=at,
                                   content_hash=fact_hash(value))


def test_it_lists_my_memory_newest_first(people):
    _own(people.bruno, "The oldest fact.", minutes_ago=30)
    _own(people.bruno, "The newest fact.", minutes_ago=1)
    text = signed_in(people.bruno).get("/memory/").content.decode()
    assert text.index("The newest fact.") < text.index("The oldest fact.")


def test_it_validates_ownership(people):
    _own(people.ada, "Ada's private fact.", minutes_ago=1)
    _own(people.cleo, "Cleo's private fact.", minutes_ago=1)
    share(people, "A runbook step everyone in engineering reads.")
    text = signed_in(people.bruno).get("/memory/").content.decode()
    # Browsing shows one's own memory only; neither a teammate's nor a workspace admin's private memory appears.
    assert "Ada's private fact." not in text and "Ada&#x27;s private fact." not in text
    assert "Cleo's private fact." not in text and "Cleo&#x27;s private fact." not in text
    assert "A runbook step" not in text


def test_it_pages_with_a_cursor(people, monkeypatch):
    monkeypatch.setattr(paging, "PAGE_SIZE", 2)
    for minutes in range(5):
        _own(people.bruno, f"Fact number {minutes}.", minutes_ago=minutes + 1)
    client = signed_in(people.bruno)
    seen = []
    url = "/memory/"
    while url:
        response = client.get(url)
        page = response.context["page"]
        assert len(page.items) <= 2
        seen += [view.fragment.value for view in page.items]
        url = f"/memory/?cursor={page.next_cursor}" if page.next_cursor else None
    assert seen == [f"Fact number {n}." for n in range(5)]


def test_a_page_does_not_shift_when_memory_is_written_meanwhile(people, monkeypatch):
    monkeypatch.setattr(paging, "PAGE_SIZE", 2)
    for minutes in range(4):
        _own(people.bruno, f"Fact number {minutes}.", minutes_ago=minutes + 1)
    client = signed_in(people.bruno)
    first = client.get("/memory/").context["page"]
    _own(people.bruno, "Written while reading.", minutes_ago=0)
    second = client.get(f"/memory/?cursor={first.next_cursor}").context["page"]
    assert [view.fragment.value for view in second.items] == ["Fact number 2.", "Fact number 3."]


def test_it_refuses_a_forged_cursor(people):
    response = signed_in(people.bruno).get("/memory/?cursor=not-a-cursor", follow=True)
    assert response.redirect_chain[-1][0] == "/memory/"
    assert b"page link is not valid" in response.content


def test_a_cursor_with_an_offset_postgresql_refuses_is_read_in_utc(people):
    import base64

    def cursor(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    pk = "00000000-0000-0000-0000-000000000000"
    instant, _ = paging.cursor_decode(cursor(f"2026-01-01T00:00:00+23:59|{pk}"))
    assert instant == dt.datetime(2025, 12, 31, 0, 1, tzinfo=dt.UTC) and instant.utcoffset() == dt.timedelta(0)
    client = signed_in(people.bruno)
    for text in (f"2026-01-01T00:00:00+23:59|{pk}", f"2026-01-01T00:00:00+05:30:15.5|{pk}"):
        assert client.get(f"/memory/?cursor={cursor(text)}").status_code == 200
    # Beyond what a datetime holds once in UTC, or with no offset at all: not a cursor this site made.
    for text in (f"0001-01-01T00:00:00+01:00|{pk}", f"2026-01-01T00:00:00|{pk}"):
        response = client.get(f"/memory/?cursor={cursor(text)}", follow=True)
        assert b"page link is not valid" in response.content


def test_it_hides_retired_facts_unless_asked(people):
    old = _own(people.bruno, "Standup is at 9:30.", minutes_ago=5)
    Fragment.objects.filter(pk=old.pk).update(retired_at=timezone.now(), retired_reason="forgotten")
    client = signed_in(people.bruno)
    assert "Standup is at 9:30." not in client.get("/memory/").content.decode()
    assert "Standup is at 9:30." in client.get("/memory/?show=all").content.decode()


def test_search_uses_the_memory_service_and_leaves_a_receipt(people):
    remember(people.bruno, "My favourite editor is Helix.")
    share(people, "Restart the ingest worker with systemctl restart ingest.")
    client = signed_in(people.bruno)
    sent = client.post("/memory/", {"q": "favourite editor"})
    receipt = Receipt.objects.get()
    assert sent.status_code == 302 and sent["Location"] == f"/memory/?receipt={receipt.pk}"
    assert receipt.reader_user == people.bruno
    assert receipt.request["query"] == "favourite editor"
    response = client.get(sent["Location"])
    assert response.status_code == 200
    served = response.context["served"]
    assert served.receipt == receipt
    assert [view.fragment.value for _, view in served.rows][0] == "My favourite editor is Helix."
    assert [pk for pk, _ in served.rows] == receipt.served
    text = response.content.decode()
    assert f"/receipts/{receipt.pk}/" in text
    results = text.split('id="search-results"')[1]
    assert "My favourite editor is Helix." in results
    assert "how closely it matched your search" in results  # the score, in plain words
    assert 'value="favourite editor"' in text  # the search box still says what was asked


def test_reloading_the_results_records_no_new_receipt_and_searching_again_does(people):
    remember(people.bruno, "My favourite editor is Helix.")
    client = signed_in(people.bruno)
    first = client.post("/memory/", {"q": "favourite editor"})["Location"]
    for _ in range(3):
        assert client.get(first).status_code == 200
    assert Receipt.objects.count() == 1
    # A GET naming a query (an old bookmark) fills the box and searches nothing.
    page = client.get("/memory/", {"q": "favourite editor"})
    assert page.status_code == 200 and "served" not in page.context
    assert Receipt.objects.count() == 1
    second = client.post("/memory/", {"q": "favourite editor"})["Location"]
    assert second != first and Receipt.objects.count() == 2


def test_results_reopened_after_forgetting_mark_what_was_forgotten(people):
    from memoryhub.services.fragments import fragment_forget

    fact = remember(people.bruno, "My favourite editor is Helix.").results[0].fragment_id
    client = signed_in(people.bruno)
    results = client.post("/memory/", {"q": "favourite editor"})["Location"]
    assert "fragment__retired" not in client.get(results).content.decode()
    fragment_forget(caller=people.caller(people.bruno), fragment_id=fact)
    text = client.get(results).content.decode()
    assert "Helix" in text and 'class="badge badge--warning fragment__retired">Forgotten' in text


def test_results_are_shown_only_from_ones_own_receipts(people):
    remember(people.ada, "Ada keeps her notes in Obsidian.")
    theirs = signed_in(people.ada).post("/memory/", {"q": "notes"})["Location"]
    response = signed_in(people.bruno).get(theirs)
    assert response.status_code == 404
    assert b"Obsidian" not in response.content
    assert Receipt.objects.count() == 1


def test_a_receipt_opened_in_another_session_shows_what_was_served_without_scores(people):
    remember(people.bruno, "My favourite editor is Helix.")
    location = signed_in(people.bruno).post("/memory/", {"q": "favourite editor"})["Location"]
    text = signed_in(people.bruno).get(location).content.decode().split('id="search-results"')[1]
    assert "My favourite editor is Helix." in text and "score" not in text
    assert Receipt.objects.count() == 1


def test_search_never_shows_what_the_person_may_not_read(people):
    remember(people.ada, "The merger codename is Bluebird.")
    share(people, "The Bluebird account renews in May.", collection="accounts")
    client = signed_in(people.bruno)
    response = client.get(client.post("/memory/", {"q": "Bluebird"})["Location"])
    assert response.context["served"].rows == []
    assert b"Bluebird account" not in response.content and b"merger codename" not in response.content


def test_search_validates_its_limits(people):
    client = signed_in(people.bruno)
    assert client.post("/memory/", {"q": "x" * 2000}).status_code == 302
    response = client.post("/memory/", {"q": "x" * 2001})
    assert response.status_code == 400
    assert client.post("/memory/", {"q": "  "}).status_code == 400
    assert client.post("/memory/", {"q": "x", "limit": "51"}).status_code == 400
    assert Receipt.objects.count() == 1


def test_people_of_no_workspace_and_strangers_are_refused(people):
    assert signed_in(people.nomad).get("/memory/").status_code == 403
    assert Client().get("/memory/").status_code == 302
