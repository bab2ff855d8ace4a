"""Access rules and the two checks beside them."""

from __future__ import annotations

from memoryhub.models import AccessRule, Collection, Role
from tests.conftest import signed_in
from tests.pages.helpers import search, share, values


def _ids(people):
    role = Role.objects.get(tenant=people.acme, name="engineering")
    accounts = Collection.objects.get(tenant=people.acme, name="accounts")
    return role, accounts


def test_granting_opens_the_collection_from_the_next_read(people):
    share(people, "The Initech renewal is due in June.", collection="accounts")
    assert search(people.bruno, "Initech renewal").hits == []
    role, accounts = _ids(people)
    # The form names the role and the collection (their names are unique in a workspace).
    response = signed_in(people.ada).post("/workspace/access/grant/", {"role": role.name,
                                                                       "collection": accounts.name})
    assert response.status_code == 302
    assert response["Location"] == f"/workspace/access/?collection={accounts.pk}"
    assert values(search(people.bruno, "Initech renewal")) == ["The Initech renewal is due in June."]


def test_revoking_closes_it(people):
    share(people, "Restart the queue with make restart.")
    assert values(search(people.bruno, "restart the queue")) == ["Restart the queue with make restart."]
    rule = AccessRule.objects.get(tenant=people.acme, collection__name="runbooks")
    signed_in(people.ada).post(f"/workspace/access/{rule.pk}/revoke/")
    assert search(people.bruno, "restart the queue").hits == []


def test_who_can_read_this_collection(people):
    runbooks = Collection.objects.get(tenant=people.acme, name="runbooks")
    response = signed_in(people.ada).get("/workspace/access/", {"collection": runbooks.pk})
    readers = {(reader.kind, reader.name) for reader in response.context["readers"]}
    assert readers == {("person", "ada"), ("person", "bruno"), ("person", "cleo"), ("agent", "triage-bot")}


def test_what_can_this_person_read(people):
    client = signed_in(people.ada)
    assert [c.name for c in client.get("/workspace/access/", {"person": people.carol.pk}).context["reach"]] == [
        "accounts"]
    assert [c.name for c in client.get("/workspace/access/", {"person": people.bruno.pk}).context["reach"]] == [
        "incidents", "runbooks"]


def test_the_checks_agree_with_search(people):
    share(people, "Runbook: rotate the TLS certificates quarterly.")
    share(people, "Incident: Globodyne certificates expired during the rotation.", collection="incidents")
    share(people, "Account: Globodyne pays net 60.", collection="accounts")
    home = {"Runbook": "runbooks", "Incident": "incidents", "Account": "accounts"}
    client = signed_in(people.ada)
    reaches = set()
    for person in (people.ada, people.bruno, people.cleo, people.carol):
        reach = {c.name for c in client.get("/workspace/access/", {"person": person.pk}).context["reach"]}
        served = values(search(person, "rotate certificates Globodyne"))
        assert {home[value.split(":")[0]] for value in served} == reach, person.username
        reaches.add(frozenset(reach))
    # The people differ: ada reads all three, bruno and cleo runbooks and incidents, carol accounts.
    assert len(reaches) == 3


def test_a_duplicate_rule_is_refused(people):
    response = signed_in(people.ada).post("/workspace/access/grant/", {"role": "engineering",
                                                                       "collection": "runbooks"})
    assert response.status_code == 400 and b"may already read" in response.content


def test_it_validates_ownership(people):
    role, accounts = _ids(people)
    olga = signed_in(people.olga)
    # Acme's accounts is no collection of globex's: not a valid choice on her form.
    assert olga.post("/workspace/access/grant/", {"role": role.name, "collection": accounts.name}).status_code == 400
    rule = AccessRule.objects.get(tenant=people.acme, collection__name="runbooks")
    assert olga.post(f"/workspace/access/{rule.pk}/revoke/").status_code == 404
    assert olga.get("/workspace/access/", {"collection": accounts.pk}).status_code == 404
    assert olga.get("/workspace/access/", {"person": people.bruno.pk}).status_code == 404
    assert signed_in(people.bruno).get("/workspace/access/").status_code == 403
    assert signed_in(people.bruno).post("/workspace/access/grant/", {"role": role.name,
                                                                      "collection": accounts.name}).status_code == 403
    assert AccessRule.objects.filter(pk=rule.pk).exists()
    assert not AccessRule.objects.filter(role=role, collection=accounts).exists()
    assert not AccessRule.objects.filter(tenant=people.globex, collection__name="accounts").exists()


def test_the_grid_shows_every_role_against_every_collection(people):
    import re

    page = signed_in(people.ada).get("/workspace/access/").content.decode()
    grid = page[page.index('id="rule-grid"'):page.index("</table>", page.index('id="rule-grid"'))]
    header = re.findall(r'<th scope="col">([\w-]+)</th>', grid)
    rows = {role: ["✓" in cell for cell in re.findall(r"<td>(.*?)</td>", cells)]
            for role, cells in re.findall(r'<th scope="row">([\w-]+)</th>(.*?)</tr>', grid, re.S)}
    expected = {role.name: [AccessRule.objects.filter(role=role, collection__name=name).exists()
                            for name in header[1:]]
                for role in people.acme.roles.all()}
    assert header[0] == "Role" and rows == expected and any(any(cells) for cells in rows.values())
