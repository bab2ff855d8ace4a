"""The home page: the way into everything a person may use."""

from __future__ import annotations

from django.test import Client

from tests.conftest import PASSWORD, signed_in


def test_it_sends_strangers_to_sign_in():
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_it_shows_a_member_their_pages(people):
    text = signed_in(people.bruno).get("/").content.decode()
    assert "My memory" in text and "Receipts" in text and "Connected apps" in text
    assert "Review queue" not in text and "/workspace/" not in text


def test_it_shows_an_admin_the_console(people):
    text = signed_in(people.ada).get("/").content.decode()
    assert "Review queue" in text and "/workspace/" in text
    assert "No agent proposal is waiting." in text


def test_it_tells_a_person_of_no_workspace_why_there_is_nothing(people):
    response = signed_in(people.nomad).get("/")
    assert response.status_code == 200
    assert b"not part of a workspace" in response.content
    assert b"/memory/" not in response.content


def test_signing_in_lands_on_home(people):
    response = Client().post("/accounts/login/", {"workspace": "acme", "username": "bruno", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_signing_in_needs_the_workspace(people):
    # Login names are unique per workspace: without it (or with another one) bruno is nobody.
    for workspace in ("", "globex"):
        response = Client().post("/accounts/login/", {"workspace": workspace, "username": "bruno",
                                                      "password": PASSWORD})
        assert response.status_code == 200
        assert b"That workspace, username and password do not match." in response.content
