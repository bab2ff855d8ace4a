"""An admin's changes made twice at the same moment (two tabs, a script retried
in parallel): each gets the answer it would get one after the other, never a
500, and nothing is left half made.

Before: 12 parallel creates of one name gave 201 once and 500 for most of the
rest (the unique index decided after both checks had passed); parallel
revokes of one agent gave 500s; parallel deletes of one role told several
callers they had deleted it. The creates here are held at a barrier just
before they write, after each has checked that the name is free, and the
deletes just before they delete, after each has read the row, so those races
are run every time, not by chance (the revoke's depends on when the losing
request reads the client it ends).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection
from oauth2_provider.models import Application

from memoryhub.errors import Conflict, MemoryhubError, NotFound
from memoryhub.models import AccessRule, Agent, Collection, Role
from memoryhub.services import agents
from memoryhub.services.access_rules import access_rule_grant, access_rule_revoke
from memoryhub.services.agents import agent_register, agent_revoke
from memoryhub.services.collections import collection_create
from memoryhub.services.roles import role_create, role_delete
from memoryhub.services.sources import source_register

PARALLEL = 4


def at_once(work: Callable[[], Any]) -> list[Any]:
    """`work` in PARALLEL threads (each with its own database connection) released
    together; each one's result or the MemoryhubError it raised."""
    start = threading.Barrier(PARALLEL)

    def one(_: int) -> Any:
        try:
            start.wait(timeout=30)
            return work()
        except MemoryhubError as exc:
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(one, range(PARALLEL)))


def held_before_writing(monkeypatch, manager) -> None:  # type: ignore[no-untyped-def]
    """Every `manager.create` waits until all PARALLEL callers have reached it:
    each has checked that its name is free before any has written."""
    create = manager.create
    barrier = threading.Barrier(PARALLEL)

    def waiting_create(**fields: Any) -> Any:
        barrier.wait(timeout=30)
        return create(**fields)

    monkeypatch.setattr(manager, "create", waiting_create)


def meeting_before(monkeypatch, owner: Any, name: str) -> None:  # type: ignore[no-untyped-def]
    """`owner.name` waits (at most 2 s) until all PARALLEL callers have reached
    it: without a lock, every caller has read the row before any changes it;
    with one, the others wait for the lock instead and the first goes on alone."""
    original = getattr(owner, name)
    barrier = threading.Barrier(PARALLEL)

    def waiting(*args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=2)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, waiting)


def one_made_the_rest_refused(results: list[Any], conflict_words: str) -> Any:
    made = [result for result in results if not isinstance(result, Exception)]
    refused = [result for result in results if isinstance(result, Exception)]
    assert len(made) == 1, results
    assert all(isinstance(result, Conflict) and conflict_words in result.message for result in refused), refused
    return made[0]


@pytest.fixture
def ada(live_people):  # type: ignore[no-untyped-def]
    return live_people.caller(live_people.ada)


def test_a_role_created_twice_at_once_is_made_once(ada, monkeypatch):
    held_before_writing(monkeypatch, Role.objects)
    one_made_the_rest_refused(at_once(lambda: role_create(caller=ada, name="support")), "already exists")
    assert Role.objects.filter(tenant=ada.tenant, name="support").count() == 1


def test_a_role_asked_for_if_missing_twice_at_once_is_the_same_role(ada, monkeypatch):
    held_before_writing(monkeypatch, Role.objects)
    results = at_once(lambda: role_create(caller=ada, name="support", exist_ok=True))
    assert len({result.pk for result in results}) == 1, results


def test_a_collection_created_twice_at_once_is_made_once(ada, monkeypatch):
    held_before_writing(monkeypatch, Collection.objects)
    one_made_the_rest_refused(at_once(lambda: collection_create(caller=ada, name="design")), "already exists")
    assert Collection.objects.filter(tenant=ada.tenant, name="design").count() == 1


def test_an_access_rule_granted_twice_at_once_is_made_once(ada, monkeypatch):
    role_create(caller=ada, name="support")
    collection_create(caller=ada, name="design")
    held_before_writing(monkeypatch, AccessRule.objects)
    one_made_the_rest_refused(at_once(lambda: access_rule_grant(caller=ada, role="support", collection="design")),
                              "may already read")
    assert AccessRule.objects.filter(tenant=ada.tenant, role__name="support").count() == 1


@pytest.mark.parametrize("register", [
    lambda ada: agent_register(caller=ada, name="digest-bot", scopes=["memory.read"]),
    lambda ada: source_register(caller=ada, name="digest-bot", kind="chat"),
], ids=["agent", "source"])
def test_an_agent_or_source_registered_twice_at_once_is_made_once_with_one_client(ada, monkeypatch, register):
    clients_before = Application.objects.count()
    held_before_writing(monkeypatch, Agent.objects)
    one_made_the_rest_refused(at_once(lambda: register(ada)), "already exists")
    assert Agent.objects.filter(tenant=ada.tenant, name="digest-bot").count() == 1
    # The losers' OAuth clients were rolled back with them: one client, the winner's.
    assert Application.objects.count() == clients_before + 1


def test_a_role_deleted_twice_at_once_is_deleted_once(ada, monkeypatch):
    role = role_create(caller=ada, name="support")
    meeting_before(monkeypatch, Role, "delete")
    results = at_once(lambda: role_delete(caller=ada, role_id=role.pk))
    assert sum(not isinstance(result, Exception) for result in results) == 1, results
    assert all(isinstance(result, NotFound) for result in results if isinstance(result, Exception)), results


def test_an_access_rule_revoked_twice_at_once_is_revoked_once(ada, monkeypatch):
    role_create(caller=ada, name="support")
    collection_create(caller=ada, name="design")
    rule = access_rule_grant(caller=ada, role="support", collection="design")
    meeting_before(monkeypatch, AccessRule, "delete")
    results = at_once(lambda: access_rule_revoke(caller=ada, rule_id=rule.pk))
    assert sum(not isinstance(result, Exception) for result in results) == 1, results
    assert all(isinstance(result, NotFound) for result in results if isinstance(result, Exception)), results


def test_an_agent_revoked_twice_at_once_ends_once_and_every_answer_says_revoked(ada, monkeypatch):
    credentials = agent_register(caller=ada, name="digest-bot", scopes=["memory.read"])
    meeting_before(monkeypatch, agents, "credentials_end")
    results = at_once(lambda: agent_revoke(caller=ada, name="digest-bot"))
    # Revoking a revoked agent is no error (one after the other, too): every caller is told it is revoked.
    assert all(not isinstance(result, Exception) and result.revoked_at is not None for result in results), results
    assert not Application.objects.filter(client_id=credentials.client_id).exists()
    assert Agent.objects.get(pk=credentials.agent.pk).application_id is None
