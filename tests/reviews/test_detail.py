"""One proposal: edit it and preview what approving the edit would do."""

from __future__ import annotations

from memoryhub.models import Fragment, Proposal
from tests.conftest import signed_in
from tests.pages.helpers import propose


def test_it_shows_the_proposal_and_its_preview(people):
    proposal = propose(people.triage_bot, "The release train leaves every Tuesday.", session_id="s-1")
    response = signed_in(people.ada).get(f"/reviews/{proposal.pk}/")
    assert response.status_code == 200
    text = response.content.decode()
    assert "The release train leaves every Tuesday." in text and "s-1" in text and "Stored 1 new fact." in text


def test_it_previews_an_edit_without_deciding(people):
    proposal = propose(people.triage_bot, "The release train leaves every Tuesday.")
    edited = "The release train leaves every Wednesday. My password is hunter2hunter2."
    response = signed_in(people.ada).post(f"/reviews/{proposal.pk}/", {"content": edited})
    assert response.status_code == 200
    text = response.content.decode()
    assert "Approve as edited" in text
    assert "privacy_drop" in text
    assert Proposal.objects.get(pk=proposal.pk).state == Proposal.State.PENDING
    assert not Fragment.objects.exists()


def test_it_refuses_an_empty_edit(people):
    proposal = propose(people.triage_bot, "The release train leaves every Tuesday.")
    response = signed_in(people.ada).post(f"/reviews/{proposal.pk}/", {"content": " "})
    assert response.status_code == 400


def test_it_shows_a_decided_proposal_without_forms(people):
    proposal = propose(people.triage_bot, "The release train leaves every Tuesday.")
    client = signed_in(people.ada)
    client.post(f"/reviews/{proposal.pk}/reject/", {"reason": "Out of date."})
    text = client.get(f"/reviews/{proposal.pk}/").content.decode()
    assert "Rejected" in text and "Out of date." in text and "by ada" in text
    assert 'id="edit-form"' not in text


def test_it_validates_ownership(people):
    proposal = propose(people.triage_bot, "Some fact.")
    assert signed_in(people.olga).get(f"/reviews/{proposal.pk}/").status_code == 404
    assert signed_in(people.bruno).get(f"/reviews/{proposal.pk}/").status_code == 403
    assert signed_in(people.ada).get("/reviews/00000000-0000-0000-0000-000000000000/").status_code == 404
