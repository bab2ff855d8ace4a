"""Collections."""

from __future__ import annotations

from memoryhub.models import Collection
from tests.conftest import signed_in


def test_it_lists_collections_with_their_readers(people):
    text = signed_in(people.ada).get("/workspace/collections/").content.decode()
    assert "runbooks" in text and "incidents" in text and "accounts" in text and "engineering" in text


def test_it_adds_a_collection(people):
    client = signed_in(people.ada)
    added = client.post("/workspace/collections/add/", {"name": "postmortems", "description": "Postmortems"})
    assert added.status_code == 302
    assert Collection.objects.get(tenant=people.acme, name="postmortems").description == "Postmortems"
    assert client.post("/workspace/collections/add/", {"name": "postmortems"}).status_code == 400


def test_it_validates_ownership(people):
    signed_in(people.olga).post("/workspace/collections/add/", {"name": "globex-notes"})
    assert Collection.objects.get(name="globex-notes").tenant == people.globex
    assert "globex-notes" not in signed_in(people.ada).get("/workspace/collections/").content.decode()
    assert signed_in(people.bruno).post("/workspace/collections/add/", {"name": "x"}).status_code == 403
    assert not Collection.objects.filter(name="x").exists()
