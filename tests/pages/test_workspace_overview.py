"""The workspace overview."""

from __future__ import annotations

from tests.pages.personas import propose, signed_in


def test_it_summarises_my_workspace(people):
    propose(people.triage_bot, "A fact to review.")
    text = signed_in(people.ada).get("/workspace/").content.decode()
    assert "Acme Inc." in text and "3 members" in text and "1 proposal pending" in text
    assert "/workspace/agents/" in text


def test_it_validates_ownership(people):
    assert signed_in(people.bruno).get("/workspace/").status_code == 403
    assert "Acme" not in signed_in(people.olga).get("/workspace/").content.decode().split("<main")[1]
