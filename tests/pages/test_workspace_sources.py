"""Connected sources: listed, and registered with credentials shown once."""

from __future__ import annotations

import re

from oauth2_provider.models import Application

from memoryhub.models import Collection, Source
from tests.conftest import signed_in


def _listed(client) -> list[tuple[str, str]]:
    response = client.get("/workspace/sources/")
    assert response.status_code == 200
    return sorted((health.source.agent.name, health.source.default_collection.name)
                  for health in response.context["sources"])


def test_it_lists_the_sources_of_my_workspace(people):
    client = signed_in(people.ada)
    text = client.get("/workspace/sources/").content.decode()
    assert "wiki" in text and "runbooks" in text and "tickets" in text and "incidents" in text
    assert _listed(client) == [("tickets", "incidents"), ("wiki", "runbooks")]


def test_registering_shows_the_secret_once(people):
    runbooks = Collection.objects.get(tenant=people.acme, name="runbooks")
    client = signed_in(people.ada)
    response = client.post("/workspace/sources/add/", {"name": "helpdesk", "kind": "tickets",
                                                       "collection": "runbooks"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    text = response.content.decode()
    client_id = re.search(r'id="client-id">([^<]+)<', text).group(1)
    secret = re.search(r'id="client-secret">([^<]+)<', text).group(1)
    source = Source.objects.get(agent__name="helpdesk")
    assert (source.tenant, source.kind, source.default_collection) == (people.acme, "tickets", runbooks)
    assert source.agent.application.client_id == client_id
    assert secret not in Application.objects.get(client_id=client_id).client_secret
    assert secret not in client.get("/workspace/sources/").content.decode()


def test_a_taken_name_is_refused(people):
    client = signed_in(people.ada)
    for taken in ("triage-bot", "wiki"):
        response = client.post("/workspace/sources/add/", {"name": taken, "kind": "documents"})
        assert response.status_code == 400 and b"already exists" in response.content


def test_it_validates_ownership(people):
    olga = signed_in(people.olga)
    # Her page lists globex's own source and nothing of acme's.
    assert _listed(olga) == [("globex-wiki", "runbooks")]
    # Acme's accounts collection is no choice of hers.
    assert olga.post("/workspace/sources/add/", {"name": "x", "kind": "documents",
                                                 "collection": "accounts"}).status_code == 400
    bruno = signed_in(people.bruno)
    assert bruno.post("/workspace/sources/add/", {"name": "y", "kind": "documents"}).status_code == 403
    assert not Source.objects.filter(agent__name__in=["x", "y"]).exists()
