"""Rejecting a proposal, with a reason: nothing becomes memory."""

from __future__ import annotations

from memoryhub.models import Fragment, Proposal
from tests.conftest import signed_in
from tests.pages.helpers import propose


def test_it_rejects_with_a_reason(people):
    proposal = propose(people.triage_bot, "The CEO's home address is 1 Main St.")
    response = signed_in(people.ada).post(f"/reviews/{proposal.pk}/reject/", {"reason": "Personal data."},
                                          follow=True)
    assert b"Rejected triage-bot" in response.content
    proposal.refresh_from_db()
    assert (proposal.state, proposal.decision_reason, proposal.decided_by) == ("rejected", "Personal data.", people.ada)
    assert not Fragment.objects.exists()


def test_it_requires_a_reason(people):
    proposal = propose(people.triage_bot, "Some fact.")
    response = signed_in(people.ada).post(f"/reviews/{proposal.pk}/reject/", {"reason": ""}, follow=True)
    assert b"Say why you reject it" in response.content
    assert Proposal.objects.get(pk=proposal.pk).state == Proposal.State.PENDING


def test_it_validates_ownership(people):
    proposal = propose(people.triage_bot, "Some fact.")
    assert signed_in(people.olga).post(f"/reviews/{proposal.pk}/reject/", {"reason": "x"}).status_code == 404
    assert signed_in(people.bruno).post(f"/reviews/{proposal.pk}/reject/", {"reason": "x"}).status_code == 403
    assert Proposal.objects.get(pk=proposal.pk).state == Proposal.State.PENDING


def test_a_decided_proposal_cannot_be_rejected(people):
    proposal = propose(people.triage_bot, "Some fact.")
    client = signed_in(people.ada)
    client.post(f"/reviews/{proposal.pk}/approve/")
    response = client.post(f"/reviews/{proposal.pk}/reject/", {"reason": "Changed my mind."}, follow=True)
    assert b"already approved" in response.content
    assert Proposal.objects.get(pk=proposal.pk).state == Proposal.State.APPROVED
