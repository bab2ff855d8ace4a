"""Login names are unique within a workspace, not across workspaces: an admin
adding a member learns nothing about other workspaces (before, adding "olga" to
acme answered "The username 'olga' is taken" because globex has an olga)."""

from __future__ import annotations

import pytest
from django.test import Client

from memoryhub.errors import Conflict
from memoryhub.models import User
from memoryhub.services.members import member_add
from tests.conftest import PASSWORD, signed_in


def test_adding_a_name_used_in_another_workspace_is_an_ordinary_add(people):
    user = member_add(caller=people.caller(people.ada), username="olga", password=PASSWORD, roles=["sales"])
    assert user.tenant == people.acme and user.pk != people.olga.pk
    assert User.objects.filter(username="olga").count() == 2


def test_a_name_taken_in_the_same_workspace_is_refused_whatever_its_case(people):
    for name in ("bruno", "BRUNO", "Bruno"):
        with pytest.raises(Conflict) as refused:
            member_add(caller=people.caller(people.ada), username=name, password=PASSWORD)
        assert refused.value.message == f"{name!r} is already a member of this workspace."
        assert refused.value.field == "username"


def test_the_members_page_adds_a_name_another_workspace_uses(people):
    client = signed_in(people.ada)
    response = client.post("/workspace/members/add/", {"username": "olga", "password": PASSWORD,
                                                       "roles": ["sales"]})
    assert response.status_code == 302
    refused = client.post("/workspace/members/add/", {"username": "carol", "password": PASSWORD})
    assert refused.status_code == 400
    assert "already a member of this workspace" in refused.content.decode()
    assert "globex" not in refused.content.decode().lower()


def test_two_people_of_one_name_sign_in_to_their_own_workspace(people):
    acme_olga = member_add(caller=people.caller(people.ada), username="olga", password="another long passphrase")
    for workspace, password, expected in (("globex", PASSWORD, people.olga), ("acme", "another long passphrase",
                                                                             acme_olga)):
        client = Client()
        response = client.post("/accounts/login/", {"workspace": workspace, "username": "olga",
                                                    "password": password})
        assert response.status_code == 302, response.content[:300]
        assert int(client.session["_auth_user_id"]) == expected.pk
    wrong = Client().post("/accounts/login/", {"workspace": "acme", "username": "olga", "password": PASSWORD})
    assert wrong.status_code == 200 and "do not match" in wrong.content.decode()
