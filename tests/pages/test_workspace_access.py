"""Access rules and the two checks beside them."""

from __future__ import annotations

from memoryhub.models import AccessRule, Collection, Role
from tests.pages.personas import search, share, signed_in


def _ids(people):
    role = Role.objects.get(tenant=people.acme, name="engineering")
    accounts = Collection.objects.get(tenant=people.acme, name="accounts")
    return role, accounts


def test_granting_opens_the_collection_from_the_next_read(people):
    share(people, "The Initech renewal is due in June.", collection="accounts")
    assert search(people.bruno, "Initech renewal")["fragments"] == []
    role, accounts = _ids(people)
    response = signed_in(people.ada).post("/workspace/access/grant/", {"role": role.pk, "collection": accounts.pk})
    assert response.status_code == 302
    assert [f["value"] for f in search(people.bruno, "Initech renewal")["fragments"]] == [
        "The Initech renewal is due in June."]


def test_revoking_closes_it(people):
    share(people, "Restart the queue with make restart.")
    rule = AccessRule.objects.get(tenant=people.acme, collection__name="runbooks")
    signed_in(people.ada).post(f"/workspace/access/{rule.pk}/revoke/")
    assert search(people.bruno, "restart the queue")["fragments"] == []


def test_who_can_read_this_collection(people):
    runbooks = Collection.objects.get(tenant=people.acme, name="runbooks")
    response = signed_in(people.ada).get("/workspace/access/", {"collection": runbooks.pk})
    readers = {(reader.kind, reader.name) for reader in response.context["readers"]}
    assert readers == {("person", "ada"), ("person", "bruno"), ("agent", "triage-bot")}


def test_what_can_this_person_read(people):
    response = signed_in(people.ada).get("/workspace/access/", {"person": people.carol.pk})
    assert [c.name for c in response.context["reach"]] == ["accounts"]


def test_the_checks_agree_with_search(people):
    share(people, "Runbook: rotate the TLS certificates quarterly.")
    share(people, "Account: Globodyne pays net 60.", collection="accounts")
    home = {"Runbook": "runbooks", "Account": "accounts"}
    client = signed_in(people.ada)
    for person in (people.ada, people.bruno, people.carol):
        reach = {c.name for c in client.get("/workspace/access/", {"person": person.pk}).context["reach"]}
        served = search(person, "rotate certificates Globodyne")["fragments"]
        assert {home[f["value"].split(":")[0]] for f in served} == reach


def test_a_duplicate_rule_is_refused(people):
    role = Role.objects.get(tenant=people.acme, name="engineering")
    runbooks = Collection.objects.get(tenant=people.acme, name="runbooks")
    response = signed_in(people.ada).post("/workspace/access/grant/", {"role": role.pk, "collection": runbooks.pk})
    assert response.status_code == 400 and b"may already read" in response.content


def test_it_validates_ownership(people):
    role, accounts = _ids(people)
    olga = signed_in(people.olga)
    assert olga.post("/workspace/access/grant/", {"role": role.pk, "collection": accounts.pk}).status_code == 400
    rule = AccessRule.objects.get(tenant=people.acme, collection__name="runbooks")
    assert olga.post(f"/workspace/access/{rule.pk}/revoke/").status_code == 404
    assert olga.get("/workspace/access/", {"collection": accounts.pk}).status_code == 404
    assert olga.get("/workspace/access/", {"person": people.bruno.pk}).status_code == 404
    assert signed_in(people.bruno).get("/workspace/access/").status_code == 403
    assert AccessRule.objects.filter(pk=rule.pk).exists()
    assert not AccessRule.objects.filter(role=role, collection=accounts).exists()
