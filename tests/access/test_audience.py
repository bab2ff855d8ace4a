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


def test_the_audience_statement_is_compiled_once_per_caller_and_read_afresh_each_time(people):
    """Its SQL is kept per caller (ids only); the roles it finds are the ones held when it runs."""
    system = access.system_caller(tenant=people.acme)
    carol = access.caller_for_user(user=people.carol)
    agent = access.caller_for_agent(agent=people.triage_bot.agent)
    assert _through_sql(agent).role_names == ("engineering",) == access.role_audience(agent).role_names
    misses = access._held_roles_sql.cache_info().misses
    assert _through_sql(carol).role_names == ("sales",)  # compiled
    hits = access._held_roles_sql.cache_info().hits
    assert _through_sql(carol).role_names == ("sales",)  # kept
    assert access._held_roles_sql.cache_info().hits == hits + 1

    roles.role_create(caller=system, name="observers")
    members.member_role_add(caller=system, role="observers", username="carol")
    assert _through_sql(access.caller_for_user(user=people.carol)).role_names == ("observers", "sales")
    members.member_role_remove(caller=system, role="sales", username="carol")
    after = _through_sql(access.caller_for_user(user=people.carol))
    assert after.role_names == ("observers",) and not after.collection_ids
    assert access._held_roles_sql.cache_info().hits == hits + 3
    assert access._held_roles_sql.cache_info().misses == misses + 1
