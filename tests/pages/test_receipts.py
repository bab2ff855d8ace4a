"""Receipts: a person's own reads, replayed with the difference."""

from __future__ import annotations

from django.test import Client

from memoryhub.models import AccessRule, Receipt
from memoryhub.services.receipts import ReceiptReplay
from memoryhub.services.search import fragments_search
from tests.conftest import signed_in
from tests.pages.helpers import as_agent, remember, search, share


def test_it_lists_my_receipts_newest_first(people):
    search(people.bruno, "first question")
    search(people.bruno, "second question")
    search(people.ada, "ada's question")
    text = signed_in(people.bruno).get("/receipts/").content.decode()
    assert text.index("second question") < text.index("first question")
    assert "ada&#x27;s question" not in text and "ada's question" not in text


def test_the_replay_shows_a_forgotten_fact_missing_now(people):
    fragment_id = remember(people.bruno, "The office wifi is called Acme-Guest.").results[0].fragment_id
    receipt_id = search(people.bruno, "office wifi").receipt_id
    client = signed_in(people.bruno)
    client.post(f"/memory/{fragment_id}/forget/")
    response = client.get(f"/receipts/{receipt_id}/")
    assert response.status_code == 200
    replay = response.context["replay"]
    assert isinstance(replay, ReceiptReplay) and replay.replayed
    assert replay.served_then == [fragment_id]
    assert replay.missing_now == [fragment_id]
    # It is the person's own: the page still says what it was, and that it was forgotten.
    missing = dict(response.context["rows"]["missing_now"])
    assert missing[fragment_id].fragment.value == "The office wifi is called Acme-Guest."
    assert b"forgotten" in response.content


def test_the_replay_never_shows_what_the_person_can_no_longer_read(people):
    fragment = share(people, "The staging database password rotates monthly via vault.")
    receipt_id = search(people.bruno, "staging database").receipt_id
    AccessRule.objects.filter(tenant=people.acme, collection__name="runbooks").delete()
    response = signed_in(people.bruno).get(f"/receipts/{receipt_id}/")
    assert response.context["replay"].missing_now == [str(fragment.pk)]
    assert b"rotates monthly via vault" not in response.content
    assert b"no longer visible to you" in response.content


def test_it_validates_ownership(people):
    receipt_id = search(people.bruno, "anything at all").receipt_id
    for user in (people.ada, people.cleo, people.carol, people.olga):
        assert signed_in(user).get(f"/receipts/{receipt_id}/").status_code == 404
    assert signed_in(people.nomad).get(f"/receipts/{receipt_id}/").status_code == 403
    assert Client().get(f"/receipts/{receipt_id}/").status_code == 302


def test_an_agents_receipt_is_not_a_persons(people):
    receipt_id = fragments_search(caller=as_agent(people.triage_bot), query="runbooks").receipt_id
    assert signed_in(people.ada).get(f"/receipts/{receipt_id}/").status_code == 404
    assert "runbooks" not in signed_in(people.ada).get("/receipts/").content.decode()


def test_each_receipt_says_which_app_searched(people):
    from oauth2_provider.models import Application

    from memoryhub.services.receipts import receipt_clients

    app = Application.objects.create(name="Claude Desktop", client_id="claude-desktop-1",
                                     client_type=Application.CLIENT_PUBLIC,
                                     authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
                                     redirect_uris="http://127.0.0.1:1/cb")
    by_app = fragments_search(caller=people.caller(people.bruno, client_id=app.client_id), query="from the app")
    gone = fragments_search(caller=people.caller(people.bruno, client_id="deleted-client"), query="from a gone app")
    client = signed_in(people.bruno)
    on_site = client.post("/memory/", {"q": "from the website"})["Location"].rsplit("=", 1)[1]
    by_agent = fragments_search(caller=as_agent(people.triage_bot), query="an agent's read")

    listed = {item.receipt.pk: item.client for item in client.get("/receipts/").context["page"].items}
    assert listed == {by_app.receipt_id: "the app “Claude Desktop”", on_site: "this website",
                      gone.receipt_id: "an app no longer registered (deleted-client)"}
    text = client.get("/receipts/").content.decode()
    assert "Searched from <strong><bdi>the app “Claude Desktop”</bdi></strong>" in text
    assert "Searched from <strong><bdi>this website</bdi></strong>" in text
    detail = client.get(f"/receipts/{by_app.receipt_id}/")
    assert detail.context["replay"].client == "the app “Claude Desktop”"
    assert 'id="receipt-client"><bdi>the app “Claude Desktop”</bdi><' in detail.content.decode()
    # An app cannot pass for the site by its name.
    app.name = "this website"
    app.save()
    listed = {item.receipt.pk: item.client for item in client.get("/receipts/").context["page"].items}
    assert listed[by_app.receipt_id] == "the app “this website”" and listed[on_site] == "this website"
    # An agent's read (shown on no person's page) is named by the agent.
    agents_read = Receipt.objects.get(pk=by_agent.receipt_id)
    assert receipt_clients([agents_read]) == {by_agent.receipt_id: "the agent triage-bot"}


def test_the_receipt_page_explains_as_of_in_plain_words(people):
    receipt_id = search(people.bruno, "anything").receipt_id
    text = signed_in(people.bruno).get(f"/receipts/{receipt_id}/").content.decode()
    assert "<code>as_of</code>" in text  # the contract's term stays
    assert "What memory looked like at this moment is what the search saw" in text
    assert "the search named no time" in text
