"""Decided proposals, with who decided and when."""

from __future__ import annotations

from tests.conftest import signed_in
from tests.pages.helpers import propose


def test_it_lists_decisions_with_who_and_when(people):
    approved = propose(people.triage_bot, "Approved fact.")
    rejected = propose(people.triage_bot, "Rejected fact.")
    propose(people.triage_bot, "Still pending.")
    client = signed_in(people.ada)
    client.post(f"/reviews/{approved.pk}/approve/")
    client.post(f"/reviews/{rejected.pk}/reject/", {"reason": "Wrong."})
    text = client.get("/reviews/history/").content.decode()
    assert "Approved fact." in text and "Rejected fact." in text and "Still pending." not in text
    assert text.index("Rejected fact.") < text.index("Approved fact.")
    assert "by ada" in text and "Wrong." in text and "Stored 1 new fact." in text


def test_it_filters_by_decision(people):
    approved = propose(people.triage_bot, "Approved fact.")
    rejected = propose(people.triage_bot, "Rejected fact.")
    client = signed_in(people.ada)
    client.post(f"/reviews/{approved.pk}/approve/")
    client.post(f"/reviews/{rejected.pk}/reject/", {"reason": "Wrong."})
    text = client.get("/reviews/history/", {"state": "rejected"}).content.decode()
    assert "Rejected fact." in text and "Approved fact." not in text


def test_it_validates_ownership(people):
    theirs = propose(people.globex_bot, "Globex fact.")
    signed_in(people.olga).post(f"/reviews/{theirs.pk}/approve/")
    assert "Globex fact." not in signed_in(people.ada).get("/reviews/history/").content.decode()
    assert signed_in(people.bruno).get("/reviews/history/").status_code == 403
