"""The tallies of live fragments per home (models.FragmentTally): kept by
PostgreSQL's triggers through every change, folded without losing a change,
and read by BM25 for a person's read with exactly the figures counting the
reader's visible rows gives."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import io
import threading
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.models import Count, Sum
from django.db.models.functions import Coalesce
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryhub import access
from memoryhub.access import And, Eq, IsNull, Labelled, Or
from memoryhub.errors import PermissionDenied
from memoryhub.models import TALLY_HOME, Fragment, FragmentTally
from memoryhub.services import ingest, search, tallies
from memoryhub.services.fragments import fragment_forget, fragment_write
from memoryhub.services.portability import memory_erase
from tests.memory.conftest import private_fragment
from tests.support.concurrency import in_thread, one_held_open_then_another


def counted() -> dict[tuple, tuple[int, int, int]]:
    """Each home's live fragments, counted from the fragment table."""
    rows = (Fragment.objects.filter(retired_at__isnull=True).values(*TALLY_HOME)
            .annotate(n=Count("pk"), words=Coalesce(Sum("search_length"), 0), measured=Count("search_length")))
    return {tuple(row[name] for name in TALLY_HOME): (row["n"], row["words"], row["measured"]) for row in rows}


def tallied() -> dict[tuple, tuple[int, int, int]]:
    """Each home's figures, summed from its tally rows (homes that sum to nothing left out)."""
    rows = FragmentTally.objects.values(*TALLY_HOME).annotate(n=Sum("fragments"), words=Sum("words"),
                                                         measured=Sum("measured"))
    sums = {tuple(row[name] for name in TALLY_HOME): (row["n"], row["words"], row["measured"]) for row in rows}
    return {home: figures for home, figures in sums.items() if figures != (0, 0, 0)}


def assert_tallies_hold() -> None:
    assert tallied() == counted()


def test_the_tallies_follow_every_change_to_a_fragment(people, shared_fragment):
    bruno, cleo = people.caller(people.bruno), people.caller(people.cleo)
    assert_tallies_hold()
    shared_fragment("Deploy the billing service on Tuesdays after the change review.")
    shared_fragment("Rotate the VPN keys every month.", "incidents", source=people.tickets)
    written = fragment_write(caller=bruno, content="My favourite editor is Vim. The standup is at 10am.")
    assert written.counts["stored"] == 2
    mine = private_fragment(cleo, "Cleo's pager rota starts on Monday.", embed=False)
    agents_own = private_fragment(people.caller(people.triage_bot), "Triage queue is empty at night.", embed=False)
    assert_tallies_hold()
    assert FragmentTally.objects.filter(owner_agent_id=people.triage_bot.agent.pk).exists()

    # A newer fact supersedes the older one: one retired, one added.
    assert fragment_write(caller=bruno, content="My favourite editor is Emacs.").counts["superseded"] == 1
    assert_tallies_hold()
    fragment_forget(caller=cleo, fragment_id=mine.pk)
    assert_tallies_hold()
    # A value rewritten changes its length; an embedding written changes nothing.
    Fragment.objects.filter(pk=agents_own.pk).update(value="Triage queue is empty at night and on weekends too.")
    before = FragmentTally.objects.count()
    Fragment.objects.filter(pk=agents_own.pk).update(embedded_at=timezone.now())
    assert FragmentTally.objects.count() == before
    assert_tallies_hold()
    # A fragment moved from one collection to another, in bulk.
    incidents = people.collection("incidents", people.acme)
    Fragment.objects.filter(collection__name="runbooks").update(collection=incidents)
    assert_tallies_hold()
    # Retired ones leave, and come back when un-retired (a restore).
    Fragment.objects.filter(pk=agents_own.pk).update(retired_at=timezone.now(), retired_reason="forgotten")
    assert_tallies_hold()
    Fragment.objects.filter(pk=agents_own.pk).update(retired_at=None, retired_reason="")
    assert_tallies_hold()
    # Erasure rewrites the values of a person's memory; deletion removes rows.
    memory_erase(caller=people.caller(people.ada), user_id=people.bruno.pk, confirm="bruno")
    assert_tallies_hold()
    Fragment.objects.filter(owner_agent=people.triage_bot.agent).delete()
    assert_tallies_hold()
    assert not any(home[3] == people.triage_bot.agent.pk for home in tallied())


def _chat(people, turns: list[str]) -> None:  # type: ignore[no-untyped-def]
    """The wiki sends a conversation: its turns are bulk-created, then their contexts bulk-updated."""
    ingest.document_upsert(source=people.wiki, document=ingest.document_validated(
        resource_id="chat/standup", title="Standup", turns=[{"speaker": "A", "text": text} for text in turns]))


def test_the_tallies_follow_bulk_writes_copies_moves_and_cascades(people):
    _chat(people, ["The deploy is at noon.", "Who owns the rollback?", "Bruno owns the rollback plan."])
    assert Fragment.objects.filter(resources__external_id="chat/standup").count() == 3
    assert_tallies_hold()
    # The document again, changed: one turn rewritten, one gone.
    _chat(people, ["The deploy is at noon.", "Who owns the rollback, and the pager?"])
    assert_tallies_hold()

    # Rows copied in with COPY, as a bulk load does.
    now = timezone.now()
    with connection.cursor() as cursor, cursor.cursor.copy(
            "COPY memoryhub_fragment (id, tenant_id, owner_user_id, value, created_at, recorded_at, retired_reason, "
            "subject_key, confidence, grounding_status, session_id, client_id, resource_ref, content_hash) "
            "FROM STDIN") as copy:
        for n in range(3):
            copy.write_row((uuid.uuid4(), people.acme.pk, people.cleo.pk, f"Copied note number {n} about pagers.",
                            now, now, "", "", 1.0, "stated", "", "", "", f"copied-{n}"))
    assert Fragment.objects.filter(owner_user=people.cleo).count() == 3
    assert_tallies_hold()

    # A private fragment moved into a collection, and one moved to another person.
    mine = private_fragment(people.caller(people.bruno), "Bruno's note, shared later.", embed=False)
    Fragment.objects.filter(pk=mine.pk).update(owner_user=None, collection=people.collection("incidents",
                                                                                                 people.acme))
    assert_tallies_hold()
    Fragment.objects.filter(owner_user=people.cleo, content_hash="copied-0").update(owner_user=people.bruno)
    assert_tallies_hold()

    # A person deleted: their private fragments go with them (the ORM's cascade).
    cleo = people.cleo.pk
    assert Fragment.objects.filter(owner_user_id=cleo).exists()
    people.cleo.delete()
    assert not Fragment.objects.filter(owner_user_id=cleo).exists()
    assert_tallies_hold()


def test_folding_keeps_every_homes_sums_in_one_row(people, shared_fragment):
    for n in range(4):
        shared_fragment(f"Runbook step {n}: check the billing queue.")
    bruno = people.caller(people.bruno)
    doomed = private_fragment(bruno, "A note that goes away.", embed=False)
    private_fragment(bruno, "A note that stays.", embed=False)
    Fragment.objects.filter(pk=doomed.pk).delete()
    rows = FragmentTally.objects.count()
    assert rows > len(counted())
    folded = tallies.fold_tallies()
    assert folded == rows - len(counted())
    assert FragmentTally.objects.count() == len(counted())
    assert_tallies_hold()
    assert tallies.fold_tallies() == 0
    # A home whose rows sum to nothing leaves no row behind.
    Fragment.objects.filter(owner_user=people.bruno).delete()
    assert tallies.fold_tallies() == 2
    assert not FragmentTally.objects.filter(owner_user_id=people.bruno.pk).exists()
    assert_tallies_hold()


def test_the_migration_tallies_the_fragments_already_stored(people, shared_fragment):
    shared_fragment("Deploy the billing service on Tuesdays.")
    private_fragment(people.caller(people.bruno), "Bruno's own note.", embed=False)
    retired = private_fragment(people.caller(people.cleo), "Cleo's retired note.", embed=False)
    Fragment.objects.filter(pk=retired.pk).update(retired_at=timezone.now(), retired_reason="forgotten")
    expected = counted()
    FragmentTally.objects.all().delete()
    migration = importlib.import_module("memoryhub.migrations.0015_fragment_tally")
    with connection.cursor() as cursor:
        cursor.execute(migration.TALLY_STORED)
    assert tallied() == expected


def _figures(sql: str, params) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        n, avgdl = cursor.fetchone()
    return n, avgdl


def _counted_figures(policy: access.ReadPolicy) -> tuple[float, float]:
    sql, params = search._sql(Fragment.objects.filter(policy.queryset_filter()).order_by().values("search_length"))
    return _figures(f"SELECT count(*)::float8, coalesce(avg(v.l), 0)::float8 FROM ({sql}) AS v(l)", params)


def _tallied_figures(policy: access.ReadPolicy) -> tuple[float, float]:
    rule = policy.tallied()
    assert rule is not None
    sql, params = search.reader_totals_sql(search.Tallied(homes=rule.q(), as_of=policy.as_of))
    return _figures(sql, params)


def test_a_readers_totals_from_the_tallies_are_exactly_the_counted_ones_at_any_instant(people, shared_fragment):
    now = timezone.now()
    hour = dt.timedelta(hours=1)
    bruno, carol = people.caller(people.bruno), people.caller(people.carol)
    for n in range(3):
        shared_fragment(f"Runbook step {n}: drain the billing queue before the deploy window opens.")
    shared_fragment("Account Initech renews in March.", "accounts")
    private_fragment(bruno, "Bruno's note from last week.", embed=False, recorded_at=now - 7 * 24 * hour)
    late = private_fragment(bruno, "Bruno's note from a minute ago, much longer than the others are.", embed=False)
    retired = private_fragment(bruno, "Bruno's note retired an hour ago.", embed=False, recorded_at=now - 5 * hour)
    Fragment.objects.filter(pk=retired.pk).update(retired_at=now - hour, retired_reason="forgotten")
    private_fragment(carol, "Carol's own note, which Bruno never counts.", embed=False)
    Fragment.objects.filter(pk=late.pk).update(recorded_at=now + dt.timedelta(minutes=1))

    instants = [now + 2 * hour, now, now - 30 * dt.timedelta(minutes=1), now - 2 * hour, now - 6 * hour,
                now - 30 * 24 * hour]
    seen = set()
    for caller in (bruno, carol, people.caller(people.ada), people.caller(people.cleo)):
        for instant in instants:
            policy = access.read_policy(caller=caller, as_of=instant)
            figures = _counted_figures(policy)
            assert _tallied_figures(policy) == figures, (caller.user, instant)
            seen.add(figures)
    # The instants and readers above see different things, so the comparison means something.
    assert len(seen) >= 6
    # Folded, the same.
    tallies.fold_tallies()
    policy = access.read_policy(caller=bruno, as_of=now - 2 * hour)
    assert _tallied_figures(policy) == _counted_figures(policy)


def test_only_a_persons_read_that_is_not_narrowed_is_tallied(people):
    now = timezone.now()
    bruno = people.caller(people.bruno)
    assert access.read_policy(caller=bruno, as_of=now).tallied() is not None
    assert access.read_policy(caller=people.caller(people.triage_bot), as_of=now).tallied() is None
    assert access.read_policy(caller=bruno, as_of=now, created_after=now - dt.timedelta(days=1)).tallied() is None
    assert access.read_policy(caller=bruno, as_of=now, resource_ids=["wiki/a"]).tallied() is None
    # An old instant (a replay of an old receipt) counts instead: the correction would read more than the count.
    old = access.read_policy(caller=bruno, as_of=now - search.TALLIED_WITHIN - dt.timedelta(minutes=1))
    assert old.tallied() is not None and search.tallied_statistics(old) is None
    assert search.tallied_statistics(access.read_policy(caller=bruno, as_of=now)) is not None


def test_a_read_whose_visibility_reads_more_than_homes_is_not_tallied(people):
    """tallied() is derived from the visibility rule: a clause that reads
    anything but a fragment's home (here, its source) makes the read counted."""
    now = timezone.now()
    policy = access.read_policy(caller=people.caller(people.bruno), as_of=now)
    assert isinstance(policy.visibility, And)
    tallied = policy.tallied()
    assert tallied is not None and tallied.facts_read() == {"tenant_id", "owner_user_id", "collection_id"}
    stricter = access.ReadPolicy(caller=policy.caller, audience=policy.audience, as_of=now,
                                 visibility=And((*policy.visibility.rules, Labelled("sourced", IsNull("source_id")))),
                                 narrowing=policy.narrowing)
    assert stricter.tallied() is None
    # Without the time clause the read is not the one the corrections assume.
    timeless = access.ReadPolicy(caller=policy.caller, audience=policy.audience, as_of=now,
                                 visibility=And(tuple(rule for rule in policy.visibility.rules
                                                      if rule != access.as_of_rule(now))),
                                 narrowing=policy.narrowing)
    assert timeless.tallied() is None
    assert Or((Eq("owner_user_id", 1), IsNull("source_id"))).facts_read() == {"owner_user_id", "source_id"}


def test_the_corrections_turn_live_now_into_live_at_any_instant(people):
    """Row by row, in Python and in SQL: live at `as_of` (as_of_rule) is exactly
    counted-and-not-the-first-correction, or the second; the two never overlap."""
    as_of = timezone.now() - dt.timedelta(hours=1)
    minute = dt.timedelta(minutes=1)
    instants = [as_of - 2 * minute, as_of - minute, as_of, as_of + minute, as_of + 2 * minute]
    counted_not_live, live_not_counted = access.tally_corrections(as_of)
    live_at = access.as_of_rule(as_of)
    bruno = people.caller(people.bruno)
    checked = 0
    for recorded in instants:
        for retired in [None, *instants]:
            facts = {"recorded_at": recorded, "retired_at": retired}
            counted = retired is None
            first, second = counted_not_live.holds(facts), live_not_counted.holds(facts)
            assert not (first and second)
            assert live_at.holds(facts) == ((counted and not first) or second), facts
            # The same row in the table, read through each rule's SQL.
            row = private_fragment(bruno, f"Row {checked}.", embed=False, recorded_at=recorded)
            Fragment.objects.filter(pk=row.pk).update(retired_at=retired, retired_reason="forgotten" if retired else "")
            for rule, expected in ((counted_not_live, first), (live_not_counted, second),
                                   (live_at, live_at.holds(facts))):
                assert Fragment.objects.filter(rule.q(), pk=row.pk).exists() == expected, (rule, facts)
            checked += 1
    assert checked == 30


def test_every_kind_of_rule_says_what_it_reads():
    """facts_read() for each kind of rule; a kind it does not know reads a
    fact of its own (never nothing), so tallied() would count that read."""
    now = timezone.now()
    assert Eq("tenant_id", 1).facts_read() == {"tenant_id"}
    assert access.In("collection_id", frozenset({1})).facts_read() == {"collection_id"}
    assert access.NotIn("agent_id", frozenset({1})).facts_read() == {"agent_id"}
    assert IsNull("source_id").facts_read() == {"source_id"}
    assert access.Compare("recorded_at", "lte", now).facts_read() == {"recorded_at"}
    assert access.Some("agent_links", Eq("agent_id", 1)).facts_read() == {"agent_links", "agent_id"}
    assert access.NoneOf("resource_links", Eq("resource__external_id", "x")).facts_read() == {
        "resource_links", "resource__external_id"}
    assert access.Nothing().facts_read() == frozenset()
    assert And((Eq("tenant_id", 1), Labelled("why", Or((IsNull("source_id"),))))).facts_read() == {
        "tenant_id", "source_id"}
    known = {Eq, access.In, access.NotIn, IsNull, access.Compare, access.Some, access.NoneOf, access.Nothing, And,
             Or, Labelled}
    # A new kind of rule in access.py gets a line above (tests define kinds of their own).
    assert {kind for kind in access.Rule.__subclasses__() if kind.__module__ == access.__name__} == known

    @dataclasses.dataclass(frozen=True)
    class Flagged(access.Rule):
        flag: str

    assert Flagged("hidden").facts_read() == {"Flagged.flag"}


def test_the_tallies_command_finds_a_drift_and_recounts(people, shared_fragment):
    shared_fragment("Deploy the billing service on Tuesdays.")
    private_fragment(people.caller(people.bruno), "Bruno's own note.", embed=False)
    out = io.StringIO()
    call_command("tallies", stdout=out)
    assert "agree" in out.getvalue()
    # What no trigger sees: a home's tallies lost, and a home whose fragments went by TRUNCATE.
    FragmentTally.objects.filter(owner_user_id=people.bruno.pk).delete()
    FragmentTally.objects.create(tenant_id=people.globex.pk, collection_id=999_999, fragments=4, words=40,
                                 measured=4)
    # A home whose rows sum to nothing, with no fragments, agrees.
    for sign in (1, -1):
        FragmentTally.objects.create(tenant_id=people.globex.pk, owner_agent_id=999_998, fragments=sign,
                                     words=sign * 7, measured=sign)
    out = io.StringIO()
    with pytest.raises(CommandError, match="2 homes' tallies disagree"):
        call_command("tallies", stdout=out)
    assert f"person {people.bruno.pk}: live fragments, words, measured: counted (1, " in out.getvalue()
    assert "collection 999999: live fragments, words, measured: counted (0, 0, 0), tallied (4, 40, 4)" in out.getvalue()
    out = io.StringIO()
    call_command("tallies", recount=True, stdout=out)
    assert out.getvalue().strip() == f"Recounted: {len(counted())} homes hold live fragments."
    assert_tallies_hold()
    assert FragmentTally.objects.count() == len(counted())
    call_command("tallies", stdout=io.StringIO())
    with pytest.raises(PermissionDenied):
        tallies.tallies_drift(caller=access.system_caller(tenant=people.acme))  # type: ignore[arg-type]
    with pytest.raises(PermissionDenied):
        tallies.tallies_recount(caller=access.system_caller(tenant=people.acme))  # type: ignore[arg-type]


def _index_statement(caller, **filters) -> str:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as queries:
        search.fragments_search(caller=caller, query="billing deploy queue", **filters)
    statements = [query["sql"] for query in queries.captured_queries if "terms AS" in query["sql"]]
    assert len(statements) == 1
    return statements[0]


def test_a_persons_search_sums_the_tallies_and_scores_as_counting_would(people, shared_fragment):
    for n in range(6):
        shared_fragment(f"Runbook step {n}: drain the billing queue before the deploy.")
    bruno = people.caller(people.bruno)
    private_fragment(bruno, "My billing deploy checklist has five steps.", embed=False)
    assert FragmentTally._meta.db_table in _index_statement(bruno)
    assert FragmentTally._meta.db_table not in _index_statement(
        bruno, created_after=(timezone.now() - dt.timedelta(days=1)).isoformat())
    assert FragmentTally._meta.db_table not in _index_statement(people.caller(people.triage_bot))

    policy = access.read_policy(caller=bruno, as_of=timezone.now())
    read_query = search.read_query_for("billing deploy queue", None, search.RANKING)
    with transaction.atomic():
        kept = search.lexical_scored(policy.queryset_filter(), read_query, 10, search.RANKING,
                                     tallied=search.tallied_statistics(policy))
        counted_ = search.lexical_scored(policy.queryset_filter(), read_query, 10, search.RANKING)
    assert len(kept.scores) == 7
    assert kept == counted_  # the same ranks and, to the last bit, the same scores


@pytest.fixture
def three_notes(live_people):  # type: ignore[no-untyped-def]
    """Bruno's three private notes, committed, each with its own tally row."""
    for n in range(3):
        private_fragment(live_people.caller(live_people.bruno), f"Bruno's note {n}.", embed=False)
    return live_people


@pytest.mark.django_db(transaction=True)
def test_a_fold_loses_no_change_made_while_it_runs_and_two_folds_fold_once(three_notes):
    people = three_notes
    bruno = people.caller(people.bruno)
    # A write still open while the fold runs: its change is not in the fold's
    # snapshot, and stays for the next one.
    written = threading.Event()
    go_on = threading.Event()

    def open_write() -> None:
        with transaction.atomic():
            private_fragment(bruno, "A note committed after the fold.", embed=False)
            written.set()
            assert go_on.wait(30)

    writer, writer_outcome = in_thread(open_write)
    assert written.wait(30)
    assert tallies.fold_tallies() == 2
    go_on.set()
    writer.join(30)
    assert writer_outcome == [None]
    assert_tallies_hold()
    assert FragmentTally.objects.filter(owner_user_id=people.bruno.pk).count() == 2

    # Two folds at once: the second waits for the first's rows, then skips them.
    first_outcome, second_outcome = one_held_open_then_another(tallies.fold_tallies, tallies.fold_tallies)
    assert first_outcome == [1] and second_outcome == [0]
    assert FragmentTally.objects.count() == len(counted())
    assert_tallies_hold()


@pytest.mark.django_db(transaction=True)
def test_a_recount_waits_for_a_fold_in_flight_and_counts_each_home_once(three_notes):
    fold_outcome, recount_outcome = one_held_open_then_another(
        tallies.fold_tallies, lambda: tallies.tallies_recount(caller=access.OPERATOR))
    assert fold_outcome == [2] and recount_outcome == [len(counted())]
    assert_tallies_hold()
    assert FragmentTally.objects.count() == len(counted())


def test_the_beat_folds_the_tallies_every_sweep_interval(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["fold-fragment-tallies"]
    assert entry["task"] == tallies.FOLD_TASK
    assert entry["schedule"] == settings.MEMORYHUB_SWEEP_SECONDS
    from memoryhub import tasks

    assert tasks.fold_tallies.name == tallies.FOLD_TASK


def test_a_readers_totals_statement_is_compiled_once_and_given_each_reads_instant(people):
    now = timezone.now()
    bruno, carol = people.caller(people.bruno), people.caller(people.carol)
    homes = {caller: access.read_policy(caller=caller, as_of=now).tallied().q() for caller in (bruno, carol)}
    assert homes[bruno] != homes[carol]
    search._reader_totals_statement.cache_clear()
    for instant in (now, now - dt.timedelta(minutes=5), now + dt.timedelta(seconds=1)):
        for caller in (bruno, carol):
            # What compiling it anew for this instant gives, to the parameter.
            assert search.reader_totals_sql(search.Tallied(homes=homes[caller], as_of=instant)) == (
                search._reader_totals_compiled(homes[caller], instant))
    info = search._reader_totals_statement.cache_info()
    assert (info.misses, info.hits) == (2, 4)
