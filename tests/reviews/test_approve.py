"""Approving a proposal runs the write pipeline as the agent, now."""

from __future__ import annotations

from django.test import Client

from memoryhub.models import Fragment, Proposal
from memoryhub.services.search import fragments_search
from tests.conftest import signed_in
from tests.pages.helpers import as_agent, propose


def test_it_approves_and_the_agent_finds_it(people):
    proposal = propose(people.triage_bot, "The flaky test is test_payment_retry.")
    response = signed_in(people.ada).post(f"/reviews/{proposal.pk}/approve/", follow=True)
    assert b"Approved triage-bot&#x27;s proposal" in response.content
    proposal.refresh_from_db()
    assert (proposal.state, proposal.decided_by) == (Proposal.State.APPROVED, people.ada)
    assert proposal.result["results"][0]["operation"] == "stored"
    fragment = Fragment.objects.get(pk=proposal.result["results"][0]["fragment_id"])
    assert fragment.owner_agent == people.triage_bot.agent
    found = fragments_search(caller=as_agent(people.triage_bot), query="flaky test")
    assert found.served_ids == [str(fragment.pk)]


def test_it_approves_an_edited_proposal(people):
    proposal = propose(people.triage_bot, "The flaky test is test_payment_retyr.")
    signed_in(people.ada).post(f"/reviews/{proposal.pk}/approve/", {"content": "The flaky test is test_payment_retry."})
    proposal.refresh_from_db()
    assert proposal.edited_content == "The flaky test is test_payment_retry."
    assert Fragment.objects.get(owner_agent=people.triage_bot.agent).value == "The flaky test is test_payment_retry."


def test_an_unchanged_edit_is_a_plain_approval(people):
    proposal = propose(people.triage_bot, "Builds run on ci-02.")
    signed_in(people.ada).post(f"/reviews/{proposal.pk}/approve/", {"content": "Builds run on ci-02.\n"})
    proposal.refresh_from_db()
    assert proposal.state == Proposal.State.APPROVED and proposal.edited_content == ""


def test_an_emptied_edit_is_refused(people):
    proposal = propose(people.triage_bot, "Builds run on ci-02.")
    response = signed_in(people.ada).post(f"/reviews/{proposal.pk}/approve/", {"content": "   "}, follow=True)
    assert b"cannot be empty" in response.content
    assert Proposal.objects.get(pk=proposal.pk).state == Proposal.State.PENDING


def test_it_returns_to_the_filtered_page(people):
    proposal = propose(people.triage_bot, "Builds run on ci-02.")
    response = signed_in(people.ada).post(f"/reviews/{proposal.pk}/approve/", {"next": "/reviews/?agent=triage-bot"})
    assert response["Location"] == "/reviews/?agent=triage-bot"
    other = propose(people.triage_bot, "Builds run on ci-03.")
    response = signed_in(people.ada).post(f"/reviews/{other.pk}/approve/", {"next": "https://evil.test/"})
    assert response["Location"] == "/reviews/"


def test_approving_twice_says_it_was_decided(people):
    proposal = propose(people.triage_bot, "Builds run on ci-02.")
    client = signed_in(people.ada)
    client.post(f"/reviews/{proposal.pk}/approve/")
    response = client.post(f"/reviews/{proposal.pk}/approve/", follow=True)
    assert b"already approved" in response.content
    assert Fragment.objects.filter(owner_agent=people.triage_bot.agent).count() == 1


def test_it_validates_ownership(people):
    proposal = propose(people.triage_bot, "Builds run on ci-02.")
    assert signed_in(people.olga).post(f"/reviews/{proposal.pk}/approve/").status_code == 404
    assert signed_in(people.cleo).post(f"/reviews/{proposal.pk}/approve/").status_code == 403
    assert signed_in(people.bruno).post(f"/reviews/{proposal.pk}/approve/").status_code == 403
    assert signed_in(people.nomad).post(f"/reviews/{proposal.pk}/approve/").status_code == 403
    assert Client().post(f"/reviews/{proposal.pk}/approve/").status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).state == Proposal.State.PENDING


def test_it_needs_post_and_csrf(people):
    proposal = propose(people.triage_bot, "Builds run on ci-02.")
    assert signed_in(people.ada).get(f"/reviews/{proposal.pk}/approve/").status_code == 405
    client = Client(enforce_csrf_checks=True)
    client.force_login(people.ada)
    assert client.post(f"/reviews/{proposal.pk}/approve/").status_code == 403
    assert Proposal.objects.get(pk=proposal.pk).state == Proposal.State.PENDING
