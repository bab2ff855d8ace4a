"""The caller's audience (roles and the collections their access rules open)
reads the same whether access.py runs its own statement or hands its SQL to a
statement that reads more (a search's first)."""

from __future__ import annotations

from django.db import connection

from memoryhub import access
from memoryhub.services import members, roles


def _through_sql(caller) -> access.Audience:  # type: ignore[no-untyped-def]
    sql, params = access.role_audience_sql(caller)
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + sql, params)
        return access.audience_of(cursor.fetchone()[0])


def test_the_audience_reads_the_same_from_its_sql(people):
    system = access.system_caller(tenant=people.acme)
    roles.role_create(caller=system, name="observers")  # a role that opens nothing
    members.member_role_add(caller=system, role="observers", username="carol")
    callers = {
        "ada (two roles)": access.caller_for_user(user=people.ada),
        "bruno (one role)": access.caller_for_user(user=people.bruno),
        "carol": access.caller_for_user(user=people.carol),
        "an agent": access.caller_for_agent(agent=people.triage_bot.agent),
        "olga (another workspace)": access.caller_for_user(user=people.olga),
    }
    for name, caller in callers.items():
        assert _through_sql(caller) == access.role_audience(caller), name
    ada = _through_sql(callers["ada (two roles)"])
    assert ada.role_names == ("engineering", "leads") and len(ada.collection_ids) == 3
    assert _through_sql(callers["carol"]).role_names == ("observers", "sales")


def test_a_caller_holding_no_role_has_an_empty_audience_either_way(people):
    system = access.system_caller(tenant=people.acme)
    loner = members.member_add(caller=system, username="loner", password=None, roles=[])
    caller = access.caller_for_user(user=loner)
    assert _through_sql(caller) == access.role_audience(caller) == access.Audience((), frozenset())
    assert access.role_audience_sql(system) is None
