"""Bulk decisions on the selected proposals."""

from __future__ import annotations

from memoryhub.models import Proposal
from tests.conftest import signed_in
from tests.pages.helpers import propose


def test_it_approves_the_selected(people):
    chosen = [propose(people.triage_bot, f"Bulk fact {n}.") for n in range(3)]
    left = propose(people.triage_bot, "Not selected.")
    response = signed_in(people.ada).post("/reviews/bulk/", {"action": "approve",
                                                             "proposals": [str(p.pk) for p in chosen]}, follow=True)
    assert b"Approved 3 proposals." in response.content
    assert set(Proposal.objects.filter(state="approved").values_list("pk", flat=True)) == {p.pk for p in chosen}
    assert Proposal.objects.get(pk=left.pk).state == "pending"


def test_it_rejects_the_selected_with_a_reason(people):
    chosen = [propose(people.triage_bot, f"Bulk fact {n}.") for n in range(2)]
    signed_in(people.ada).post("/reviews/bulk/", {"action": "reject", "reason": "Noise.",
                                                  "proposals": [str(p.pk) for p in chosen]})
    assert set(Proposal.objects.values_list("state", "decision_reason")) == {("rejected", "Noise.")}


def test_rejecting_needs_a_reason(people):
    chosen = propose(people.triage_bot, "Bulk fact.")
    response = signed_in(people.ada).post("/reviews/bulk/", {"action": "reject", "proposals": [str(chosen.pk)]},
                                          follow=True)
    assert b"Say why you reject them" in response.content
    assert Proposal.objects.get(pk=chosen.pk).state == "pending"


def test_it_validates_ownership(people):
    mine = propose(people.triage_bot, "Acme fact.")
    theirs = propose(people.globex_bot, "Globex fact.")
    response = signed_in(people.ada).post("/reviews/bulk/", {"action": "approve",
                                                             "proposals": [str(mine.pk), str(theirs.pk)]}, follow=True)
    assert b"Approved 1 proposal." in response.content
    assert b"Skipped: No such proposal in this workspace." in response.content
    assert Proposal.objects.get(pk=theirs.pk).state == "pending"
    assert signed_in(people.bruno).post("/reviews/bulk/", {"action": "approve",
                                                           "proposals": [str(mine.pk)]}).status_code == 403


def test_it_refuses_garbage_ids(people):
    response = signed_in(people.ada).post("/reviews/bulk/", {"action": "approve", "proposals": ["1; drop"]},
                                          follow=True)
    assert b"Not a proposal id." in response.content
