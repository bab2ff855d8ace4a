"""Members and roles."""

from __future__ import annotations

from django.test import Client

from memoryhub.models import Membership, Role, User
from tests.conftest import PASSWORD, signed_in
from tests.pages.helpers import sign_in_form


def test_it_lists_the_members_of_my_workspace_only(people):
    text = signed_in(people.ada).get("/workspace/members/").content.decode()
    assert "bruno" in text and "cleo" in text and "carol" in text
    assert "olga" not in text and "nomad" not in text


def test_it_adds_a_person_who_can_sign_in(people):
    response = signed_in(people.ada).post("/workspace/members/add/", {
        "username": "dana", "email": "dana@acme.test", "password": PASSWORD, "roles": ["sales"],
    })
    assert response.status_code == 302
    dana = User.objects.get(username="dana")
    assert dana.tenant == people.acme
    assert [role.name for role in dana.membership.roles.all()] == ["sales"]
    assert not dana.membership.is_admin
    signed = sign_in_form(Client(), dana)
    assert signed.status_code == 302 and signed["Location"] == "/"


def test_it_refuses_a_taken_name_or_a_weak_password(people):
    client = signed_in(people.ada)
    # Login names are unique within the workspace, case-insensitively.
    taken = client.post("/workspace/members/add/", {"username": "Bruno", "password": PASSWORD})
    assert taken.status_code == 400 and b"already a member of this workspace" in taken.content
    weak = client.post("/workspace/members/add/", {"username": "erin", "password": "short"})
    assert weak.status_code == 400 and b"too short" in weak.content
    assert not User.objects.filter(username="erin").exists()
    assert list(User.objects.filter(username__iexact="bruno")) == [people.bruno]


def test_it_refuses_a_login_name_that_passes_for_another(people):
    """"\u0430da" with a Cyrillic "а" reads as "ada" on every page that names people."""
    client = signed_in(people.ada)
    response = client.post("/workspace/members/add/", {"username": "\u0430da", "password": PASSWORD})
    assert response.status_code == 400 and b"mixes Latin and Cyrillic letters" in response.content
    assert not User.objects.filter(username="\u0430da").exists()
    for look_alike in ("\uff41da", "\u2170van", "\u3164ada"):  # fullwidth, a Roman numeral, a blank filler
        refused = client.post("/workspace/members/add/", {"username": look_alike, "password": PASSWORD})
        assert refused.status_code == 400 and b"could pass for another name" in refused.content, look_alike
        assert not User.objects.filter(username=look_alike).exists()
    # All Cyrillic, yet it reads as a member's name.
    reads_as_ada = client.post("/workspace/members/add/", {"username": "\u0430\u0501\u0430", "password": PASSWORD})
    assert reads_as_ada.status_code == 400 and b"reads as &#x27;ada&#x27;" in reads_as_ada.content
    assert not User.objects.filter(username="\u0430\u0501\u0430").exists()
    # A decomposed accent is the same name, stored composed.
    composed = client.post("/workspace/members/add/", {"username": "jose\u0301", "password": PASSWORD})
    assert composed.status_code == 302 and User.objects.filter(username="jos\u00e9").exists()
    # One script alone is a name like any other.
    one_script = client.post("/workspace/members/add/", {"username": "\u0430\u043d\u044f", "password": PASSWORD})
    assert one_script.status_code == 302


def test_a_name_taken_in_another_workspace_is_free_here(people):
    # Another workspace's people are none of this admin's business: the name is simply free.
    response = signed_in(people.ada).post("/workspace/members/add/", {"username": "olga", "password": PASSWORD})
    assert response.status_code == 302
    assert sorted(user.tenant.slug for user in User.objects.filter(username="olga")) == ["acme", "globex"]
    assert User.objects.get(pk=people.olga.pk).tenant == people.globex
    assert Membership.objects.get(user=people.olga).is_admin


def test_it_sets_roles_and_the_admin_flag(people):
    prefix = f"m{people.bruno.pk}"
    signed_in(people.ada).post(f"/workspace/members/{people.bruno.pk}/", {
        f"{prefix}-roles": ["sales", "leads"], f"{prefix}-is_admin": "on",
    })
    membership = Membership.objects.get(user=people.bruno)
    assert sorted(role.name for role in membership.roles.all()) == ["leads", "sales"]
    assert membership.is_admin


def test_the_last_admin_stays_an_admin(people):
    response = signed_in(people.ada).post(f"/workspace/members/{people.ada.pk}/", {
        f"m{people.ada.pk}-roles": ["engineering"],
    }, follow=True)
    assert b"at least one admin" in response.content
    assert Membership.objects.get(user=people.ada).is_admin


def test_it_adds_and_removes_roles(people):
    client = signed_in(people.ada)
    client.post("/workspace/roles/add/", {"name": "support", "description": "Front line"})
    role = Role.objects.get(tenant=people.acme, name="support")
    duplicate = client.post("/workspace/roles/add/", {"name": "support"})
    assert duplicate.status_code == 400
    client.post(f"/workspace/roles/{role.pk}/delete/")
    assert not Role.objects.filter(pk=role.pk).exists()


def test_it_validates_ownership(people):
    olga = signed_in(people.olga)
    promote = {f"m{people.bruno.pk}-is_admin": "on"}
    assert olga.post(f"/workspace/members/{people.bruno.pk}/", promote).status_code == 404
    acme_role = Role.objects.get(tenant=people.acme, name="sales")
    assert olga.post(f"/workspace/roles/{acme_role.pk}/delete/").status_code == 404
    assert signed_in(people.bruno).get("/workspace/members/").status_code == 403
    bruno = signed_in(people.bruno)
    assert bruno.post("/workspace/members/add/", {"username": "x", "password": PASSWORD}).status_code == 403
    assert not Membership.objects.get(user=people.bruno).is_admin
    assert Role.objects.filter(pk=acme_role.pk).exists()
    assert not User.objects.filter(username="x").exists()
