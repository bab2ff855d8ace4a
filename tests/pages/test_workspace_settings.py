"""Workspace settings: judgment plane, relevance floor, write policy."""

from __future__ import annotations

from memoryhub.models import Tenant
from tests.conftest import signed_in
from tests.pages.helpers import remember


def _post(client, **overrides):
    data = {"relevance_floor": "0.2", "write_policy": "open", "blocked_terms": ""}
    data.update(overrides)
    return client.post("/workspace/settings/", data)


def test_it_saves_the_settings(people):
    response = _post(signed_in(people.ada), judgment_plane="on", relevance_floor="0.35", write_policy="blocklist",
                     blocked_terms="Project Falcon\n  \nbluebird\nbluebird")
    assert response.status_code == 302
    acme = Tenant.objects.get(pk=people.acme.pk)
    assert (acme.judgment_plane, acme.relevance_floor, acme.write_policy) == (True, 0.35, "blocklist")
    assert acme.blocked_terms == ["Project Falcon", "bluebird"]


def test_the_write_policy_applies_to_the_next_write(people):
    _post(signed_in(people.ada), write_policy="blocklist", blocked_terms="Project Falcon")
    out = remember(people.bruno, "Project Falcon launches in May.")
    assert out.results[0].operation == "dropped" and out.results[0].reason == "policy_drop"


def test_it_validates_the_floor_and_the_blocklist(people):
    client = signed_in(people.ada)
    assert _post(client, relevance_floor="1.5").status_code == 400
    assert _post(client, write_policy="blocklist", blocked_terms="").status_code == 400
    assert Tenant.objects.get(pk=people.acme.pk).relevance_floor == 0.0


def test_it_validates_ownership(people):
    assert _post(signed_in(people.bruno), relevance_floor="0.9").status_code == 403
    _post(signed_in(people.olga), relevance_floor="0.9")
    assert Tenant.objects.get(pk=people.acme.pk).relevance_floor == 0.0
    assert Tenant.objects.get(pk=people.globex.pk).relevance_floor == 0.9


def test_the_settings_say_what_the_judgment_plane_and_the_relevance_floor_do(people):
    text = signed_in(people.ada).get("/workspace/settings/").content.decode().replace("&#x27;", "'")
    assert "Judgment plane" in text and "Relevance floor" in text  # the contract's terms stay
    assert "It only changes the order: it never shows anyone a fact they could not already see" in text
    assert "Each result's score says how closely it matched" in text
