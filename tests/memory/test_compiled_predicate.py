"""search.compiled_predicate: the predicate BM25's statement reads a reader's
fragments through is compiled once per rule of their read, at a marker
instant, and each read puts its own instant in the places that one left. What
it gives is what compiling index_filter's predicate at the read's own instant
gives, for every kind of read; a filter's value equal to the marker stays as
given; a predicate that changed the instant on its way is refused."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models import Q
from django.utils import timezone

from memoryhub import access
from memoryhub.services import search

POOL = search.candidate_pool(10)


def _fresh(policy: access.ReadPolicy) -> search.CompiledPredicate:
    return search._compile_predicate(search.index_filter(policy), POOL, nearest=True)


def _plain(compiled: search.CompiledPredicate) -> tuple:
    """A compiled predicate with its query vector's marker (each compiling's
    own) written as the same word."""
    assert compiled.nearest is not None and compiled.slot is not None
    sql, params = compiled.nearest
    return compiled.visible, (sql, tuple("<the query vector>" if value is compiled.slot.marker else value
                                         for value in params)), compiled.k


def _reads(people) -> list[tuple[object, dict]]:  # type: ignore[no-untyped-def]
    before = timezone.now() + dt.timedelta(days=1)
    return [
        (people.caller(people.bruno), {}),
        (people.caller(people.ada), {}),
        (people.caller(people.bruno), {"agents": ["triage-bot"], "resource_ids": ["wiki/page-1"],
                                       "created_after": before - dt.timedelta(days=30), "created_before": before}),
        (people.caller(people.triage_bot), {}),
        (people.caller(people.triage_bot), {"agents": ["triage-bot"]}),
    ]


def test_a_compiled_predicate_is_what_compiling_it_at_the_reads_instant_gives(people):
    search._predicate_at_marker.cache_clear()
    reads = _reads(people)
    now = timezone.now()
    # Now, the past, a microsecond ago, and the far past (a replay of the first instant there is).
    instants = (now, now - dt.timedelta(days=3), now - dt.timedelta(microseconds=1),
                dt.datetime(1, 1, 1, tzinfo=dt.UTC))
    for caller, filters in reads:
        for instant in instants:
            policy = access.read_policy(caller=caller, as_of=instant, **filters)
            compiled = search.compiled_predicate(policy, POOL)
            assert _plain(compiled) == _plain(_fresh(policy))
            # The read's instant is among the parameters; the markers are not.
            assert instant in compiled.visible[1]
            assert search._AN_INSTANT not in compiled.visible[1] and search._ANOTHER_INSTANT not in compiled.visible[1]
    # Compiled once per read's rule, whatever its instant; five readers' rules are five.
    info = search._predicate_at_marker.cache_info()
    assert (info.misses, info.hits) == (len(reads), (len(instants) - 1) * len(reads))
    # Another pool is another statement (its LIMIT), compiled on its own.
    policy = access.read_policy(caller=reads[0][0], as_of=now)
    larger = search.compiled_predicate(policy, POOL * 2)
    assert larger.k == POOL * 2
    assert _plain(larger) == _plain(search._compile_predicate(search.index_filter(policy), POOL * 2, nearest=True))
    assert search._predicate_at_marker.cache_info().misses == len(reads) + 1


def test_a_filter_equal_to_the_marker_instant_stays_as_given(people):
    # search._AN_INSTANT's value, as a request could send it: another object.
    marker = dt.datetime.fromisoformat("0001-01-01T00:00:00.000001+00:00")
    assert marker == search._AN_INSTANT and marker is not search._AN_INSTANT
    policy = access.read_policy(caller=people.caller(people.bruno), as_of=timezone.now(), created_after=marker)
    compiled = search.compiled_predicate(policy, POOL)
    assert _plain(compiled) == _plain(_fresh(policy))
    assert marker in compiled.visible[1] and policy.as_of in compiled.visible[1]


def test_a_predicate_that_reads_no_instant_is_kept_as_it_is(people, monkeypatch):
    """The seam tests replace (search.index_filter) may give a predicate that
    reads no instant: it is compiled and kept as it is."""
    monkeypatch.setattr(search, "index_filter", lambda policy: Q(tenant=people.acme))
    policy = access.read_policy(caller=people.caller(people.bruno), as_of=timezone.now())
    compiled = search.compiled_predicate(policy, POOL)
    assert _plain(compiled) == _plain(search._compile_predicate(Q(tenant=people.acme), POOL, nearest=True))


@pytest.mark.parametrize("changed", [
    lambda instant: Q(recorded_at__lte=instant.replace()),  # a copy
    lambda instant: Q(recorded_at__lte=instant.replace(microsecond=0)),  # to the second
    lambda instant: Q(recorded_at__date__lte=instant.date()),  # to its date
], ids=["copied", "to-the-second", "to-its-date"])
def test_a_predicate_that_changed_its_instant_on_its_way_is_refused(people, monkeypatch, changed):
    """Were the instant handed to the statement as another object (a copy,
    or converted), a read would be compiled at the marker: refused instead."""
    monkeypatch.setattr(search, "index_filter", lambda policy: policy.queryset_filter() & changed(policy.as_of))
    policy = access.read_policy(caller=people.caller(people.bruno), as_of=timezone.now())
    with pytest.raises(RuntimeError, match="no longer takes its instant"):
        search.compiled_predicate(policy, POOL)


def test_a_policy_at_another_instant_changes_its_time_clause_only(people):
    now = timezone.now()
    policy = access.read_policy(caller=people.caller(people.triage_bot), as_of=now, agents=["triage-bot"])
    earlier = policy.at(now - dt.timedelta(hours=2))
    assert earlier is not None
    again = access.read_policy(caller=people.caller(people.triage_bot), as_of=now - dt.timedelta(hours=2),
                               agents=["triage-bot"])
    assert earlier == again and earlier.rule == again.rule
    # A read that reads no memory has no time clause to move.
    nothing = access.ReadPolicy(caller=policy.caller, audience=policy.audience, as_of=now,
                                visibility=access.Nothing(), narrowing=access.And(()))
    assert nothing.at(now) is None
