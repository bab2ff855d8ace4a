"""The read pool against a real streaming replica of the test database's
PostgreSQL (tests/support/replica.py): reads served by the replica, shown by
pg_is_in_recovery() on the connection they ran on; read-your-writes with the
replica held behind on purpose; lag; the replica stopped mid-run; the
replica promoted away; and whoami's probe through each of these."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from memoryhub.database import replicas
from memoryhub.models import Fragment
from memoryhub.observability import READ_POOL_READS
from memoryhub.services import access_rules, fragments, health, receipts
from memoryhub.services.search import fragments_search
from tests.conftest import People, free_port, poll
from tests.memory.conftest import private_fragment
from tests.support.replica import Replica, register, unregister

pytestmark = [pytest.mark.slow]


ALIAS = "replica1"
# The tests' case must know the replica's alias (a mirror of the default: nothing is flushed there).
on_replica = pytest.mark.django_db(transaction=True, databases=[DEFAULT_DB_ALIAS, ALIAS])


@pytest.fixture(scope="module")
def standby(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, Replica]]:
    """A hot standby of the tests' PostgreSQL for this module, as database
    alias ALIAS; made again after a test promoted it away."""
    with django_db_blocker.unblock():
        held = {"replica": Replica(primary=dict(connections[DEFAULT_DB_ALIAS].settings_dict)).create()}
    register(held["replica"], ALIAS)
    try:
        yield held
    finally:
        unregister(ALIAS)
        held["replica"].remove()
        shared = replicas._shared_state()
        with contextlib.suppress(Exception):
            shared.redis.delete(shared.key())


@pytest.fixture
def replica(standby: dict[str, Replica]) -> Iterator[Replica]:
    """The module's standby, streaming and up to date; left as each test needs it."""
    current = standby["replica"]
    yield current
    for alias in connections:  # this thread's connections to it, before it may go
        if alias == ALIAS:
            connections[alias].close()
    if current.promoted:
        unregister(ALIAS)
        current.remove()
        standby["replica"] = Replica(primary=current.primary).create()
        register(standby["replica"], ALIAS)
        return
    if not current.running():
        current.start()
    current.resume()
    current.catch_up()


@pytest.fixture
def pool(replica: Replica, settings: Any) -> Iterator[str]:
    """The standby as this process's read replica, each state read afresh."""
    settings.MEMORYHUB_READ_REPLICA_CHECK_SECONDS = 0.0
    settings.MEMORYHUB_READ_REPLICA_RETRY_SECONDS = 0.0
    settings.MEMORYHUB_READ_REPLICAS = (ALIAS,)
    yield ALIAS


def in_recovery(alias: str) -> bool:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_is_in_recovery()")
        return bool(cursor.fetchone()[0])


def served_count(where: str, why: str | None = None) -> float:
    """Reads served `where`, for the reason `why` (any, unless named)."""
    return sum(sample.value for metric in READ_POOL_READS.collect() for sample in metric.samples
               if sample.name.endswith("_total") and sample.labels["served_by"] == where
               and why in (None, sample.labels["why"]))


def search_on(alias: str | None, caller: Any, query: str, **arguments: Any) -> tuple[list[str], list[str], list[str]]:
    """(the values served, the statements `alias` ran, the statements the
    primary ran). `alias` None: a replica that is down, not watched."""
    with contextlib.ExitStack() as stack:
        on_alias = stack.enter_context(CaptureQueriesContext(connections[alias])) if alias else []
        on_primary = stack.enter_context(CaptureQueriesContext(connection))
        result = fragments_search(caller=caller, query=query, **arguments)
    return [hit.fragment.value for hit in result.hits], [q["sql"] for q in on_alias], [q["sql"] for q in on_primary]


# --------------------------------------------------------------------------- served by the replica


@on_replica
def test_a_search_is_served_by_the_replica_and_its_receipt_written_on_the_primary(
    live_people: People, replica: Replica, pool: str
) -> None:
    bruno = live_people.caller(live_people.bruno)
    private_fragment(bruno, "The Frankfurt staging cluster is rebuilt every Sunday.")
    replica.catch_up()

    served, on_replica, on_primary = search_on(pool, bruno, "When is the staging cluster rebuilt?")

    assert served == ["The Frankfurt staging cluster is rebuilt every Sunday."]
    assert in_recovery(pool) and not in_recovery(DEFAULT_DB_ALIAS)
    # The read's statements ran on the standby (its state, the prologue, the index
    # statement, the row check); the primary ran the receipt, and, for the standby's
    # lag, told its own position (each state reading does here).
    assert len(on_replica) == 4 and "pg_is_in_recovery" in on_replica[0], on_replica
    assert len(on_primary) == 2 and "pg_current_wal_insert_lsn" in on_primary[0], on_primary
    assert on_primary[1].startswith("WITH link AS"), on_primary
    assert Fragment.objects.count() >= 1  # the primary answers as before


def test_a_standby_left_running_is_a_leftover_of_its_data_folder(standby: dict[str, Replica]) -> None:
    """./dev test's last check would find one a killed run left behind."""
    from memoryhub.runtime import embedded
    from memoryhub.runtime.leaks import leftover_processes

    found = leftover_processes(embedded.data_dir())
    assert any(str(standby["replica"].pgdata) in process for process in found), found


@on_replica
def test_the_receipt_replays_on_the_replica_and_a_persons_pages_read_there(
    live_people: People, replica: Replica, pool: str
) -> None:
    bruno = live_people.caller(live_people.bruno)
    fragment = private_fragment(bruno, "Deploys freeze an hour before the staging rebuild.")
    replica.catch_up()
    result = fragments_search(caller=bruno, query="When do deploys freeze?")
    replica.catch_up()

    with CaptureQueriesContext(connections[pool]) as on_replica:
        replay = receipts.receipt_replay(caller=bruno, receipt_id=result.receipt_id)
    assert replay.replayed and replay.served_now == replay.served_then == [str(fragment.pk)]
    assert any("memoryhub_fragment" in query["sql"] for query in on_replica)

    with CaptureQueriesContext(connections[pool]) as on_replica, CaptureQueriesContext(connection) as on_primary:
        page = fragments.fragments_browse(caller=bruno)
        view = fragments.fragment_get(caller=bruno, fragment_id=fragment.pk)
    assert [item.fragment.pk for item in page.items] == [fragment.pk] and view.fragment.pk == fragment.pk
    assert any("memoryhub_fragment" in query["sql"] for query in on_replica)
    assert not any("memoryhub_fragment" in query["sql"] for query in on_primary)


def test_with_no_replica_configured_nothing_changes(live_people: People, settings: Any) -> None:
    """No replica: every read on the primary, no write's position read or recorded, no state read."""
    settings.MEMORYHUB_READ_REPLICAS = ()
    bruno = live_people.caller(live_people.bruno)
    shared = replicas._shared_state()
    shared.redis.delete(shared.key())
    with CaptureQueriesContext(connection) as on_primary:
        private_fragment(bruno, "The staging cluster is rebuilt on Sundays.")
        fragments.fragment_write(caller=bruno, content="The canteen opens at half past eleven.")
        assert replicas.choose() == replicas.Choice(DEFAULT_DB_ALIAS)
        assert [hit.fragment.value for hit in fragments_search(caller=bruno, query="staging rebuild").hits] == [
            "The staging cluster is rebuilt on Sundays."]
        assert health.read_probe(caller=bruno) == "ready"
    assert not any("pg_current_wal" in q["sql"] or "pg_is_in_recovery" in q["sql"] for q in on_primary)
    assert shared.redis.exists(shared.key()) == 0


# --------------------------------------------------------------------------- read-your-writes

# Facts unlike one another (the write pipeline takes a fact close enough to
# an earlier one as superseding it).
CITIES = [
    "Oslo", "Lisbon", "Nairobi", "Quito", "Hanoi", "Tbilisi", "Perth", "Dakar", "Bergen", "Cusco", "Osaka",
    "Tunis", "Porto", "Zagreb", "Accra", "Hobart", "Lhasa", "Oaxaca", "Riga", "Kigali", "Malmo", "Galway",
    "Arequipa", "Luxor", "Tromso", "Bruges", "Darwin", "Nantes", "Kochi", "Valdivia", "Ghent", "Sapporo",
    "Bilbao", "Mombasa", "Tartu", "Izmir", "Salta", "Cairns", "Krakow", "Fes"
]
THINGS = [
    "kayaks", "telescopes", "violins", "kites", "accordions", "lanterns", "typewriters", "metronomes", "skis",
    "surfboards", "harps", "microscopes", "canoes", "looms", "anvils", "sextants", "hammocks", "easels",
    "barometers", "tents", "trumpets", "saddles", "globes", "crossbows", "gramophones", "tubas", "snowshoes",
    "compasses", "banjos", "hourglasses", "periscopes", "bagpipes", "unicycles", "xylophones", "quills",
    "sundials", "trombones", "abacuses", "marimbas", "tricycles"
]
FACTS = [f"The {city} office stores its {thing} in the basement." for city, thing in zip(CITIES, THINGS, strict=True)]
QUESTIONS = [f"Where does the {city} office store its {thing}?" for city, thing in zip(CITIES, THINGS, strict=True)]


@on_replica
def test_each_write_is_seen_by_the_writers_next_search_with_the_replica_held_behind(
    live_people: People, replica: Replica, pool: str, settings: Any
) -> None:
    settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS = 600.0  # behind, never lagging, however slow the run
    bruno = live_people.caller(live_people.bruno)
    replica.catch_up()
    replica.pause()
    primary_before = served_count("primary", "behind")
    for number in range(25):
        fact = FACTS[number]
        written = fragments.fragment_write(caller=bruno, content=fact)
        assert [result.operation for result in written.results] == ["stored"], written
        served, on_replica, _ = search_on(pool, bruno, QUESTIONS[number], limit=3)
        assert fact in served, (number, served)
        # Served by the primary: the standby, held behind, ran only the reading of its state.
        assert all("pg_is_in_recovery" in sql for sql in on_replica), on_replica
    assert served_count("primary", "behind") - primary_before == 25
    assert in_recovery(pool)

    # Let it replay: the same reads are served by the standby again, and see every write.
    replica.resume()
    replica.catch_up()
    replica_before = served_count("replica")
    served, on_replica, _ = search_on(pool, bruno, QUESTIONS[24], limit=3)
    assert FACTS[24] in served
    assert served_count("replica") - replica_before == 1 and len(on_replica) >= 4


@on_replica
def test_a_revoked_right_is_never_read_from_a_replica_behind_it(
    live_people: People, replica: Replica, pool: str, settings: Any
) -> None:
    """An admin's change of access rules is a write like any other: a search
    after it is not served by a standby that has not replayed it."""
    from memoryhub.services.ingest import fragment_ingest

    settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS = 600.0
    runbooks = live_people.collection("runbooks")
    fragment_ingest(source=live_people.wiki, value="Restart the ingress controller before the canary.",
                    collection=runbooks)
    cleo = live_people.caller(live_people.cleo)
    replica.catch_up()
    served, on_replica, _ = search_on(pool, cleo, "ingress controller canary")
    assert served == ["Restart the ingress controller before the canary."] and len(on_replica) >= 4

    replica.pause()
    access_rules.access_rule_revoke(caller=live_people.caller(live_people.ada), role="engineering",
                                    collection="runbooks")
    assert replicas.choose().refused == ((pool, replicas.BEHIND),)
    served, _, _ = search_on(pool, cleo, "ingress controller canary")
    assert served == []
    # The standby itself, still behind, would have served it.
    behind = replicas.served(lambda: fragments_search(caller=cleo, query="ingress controller canary"),
                             choice=replicas.Choice(pool))
    assert [hit.fragment.value for hit in behind.value.hits] == ["Restart the ingress controller before the canary."]


@on_replica
def test_a_receipt_is_not_a_write_reads_wait_for(live_people: People, replica: Replica, pool: str) -> None:
    bruno = live_people.caller(live_people.bruno)
    private_fragment(bruno, "The on-call phone is in the top drawer.")
    replica.catch_up()
    before = replicas.written()
    for _ in range(3):
        search_on(pool, bruno, "Where is the on-call phone?")
    assert replicas.written() == before


@on_replica
def test_a_caller_s_own_transaction_reads_on_the_primary(live_people: People, replica: Replica, pool: str) -> None:
    bruno = live_people.caller(live_people.bruno)
    replica.catch_up()
    with transaction.atomic():
        private_fragment(bruno, "The espresso machine is descaled on Fridays.")
        served, on_replica, _ = search_on(pool, bruno, "When is the espresso machine descaled?")
    assert served == ["The espresso machine is descaled on Fridays."] and on_replica == []


# --------------------------------------------------------------------------- lag, loss, promotion


@on_replica
def test_lag_beyond_the_bound_reads_degraded_and_reads_go_to_the_primary(
    live_people: People, replica: Replica, pool: str, settings: Any
) -> None:
    """Lag is how long ago the primary had written what the standby has not
    replayed, read against the primary's own position: a standby held still
    while the primary writes on lags more and more, whoever wrote last."""
    bruno = live_people.caller(live_people.bruno)
    replica.catch_up()
    settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS = 600.0
    assert health.read_probe(caller=bruno) == "ready"  # caught up: the primary's position replayed

    replica.pause()
    private_fragment(bruno, "The loading dock closes at six.")
    # Behind by a write of moments ago: normal, the primary serves, the pool is ready.
    assert replicas.choose().refused == ((pool, replicas.BEHIND),)
    assert health.read_probe(caller=bruno) == "ready"
    settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS = 1.0
    time.sleep(1.2)
    # A write now, or none: what it has not replayed was written over a second ago.
    assert replicas.choose().refused == ((pool, replicas.LAGGING),)
    assert health.read_probe(caller=bruno) == "degraded"
    served, _, _ = search_on(pool, bruno, "When does the loading dock close?")
    assert served == ["The loading dock closes at six."]

    replica.resume()
    replica.catch_up()
    assert replicas.choose().alias == pool
    assert health.read_probe(caller=bruno) == "ready"


@on_replica
def test_searches_go_on_when_the_replica_stops_mid_run(
    live_people: People, replica: Replica, pool: str, settings: Any
) -> None:
    bruno = live_people.caller(live_people.bruno)
    private_fragment(bruno, "The fire exit on floor three is behind the kitchen.")
    replica.catch_up()
    # Its state is trusted for a minute: the next read is sent to it on what was last read.
    settings.MEMORYHUB_READ_REPLICA_CHECK_SECONDS = 60.0
    settings.MEMORYHUB_READ_REPLICA_RETRY_SECONDS = 60.0
    served, on_replica, _ = search_on(pool, bruno, "Where is the fire exit on floor three?")
    assert served and len(on_replica) >= 3

    ready = health.readiness()["read_pool"]
    assert (ready["ok"], ready["detail"], "degraded" in ready) == (True, f"{pool} serving", False)

    replica.stop("immediate")
    lost_before, primary_before = served_count("primary_after_loss"), served_count("primary", "not_answering")
    for _ in range(5):
        served, _, _ = search_on(None, bruno, "Where is the fire exit on floor three?")
        assert served == ["The fire exit on floor three is behind the kitchen."]
    # The first lost the standby under it and ran again on the primary; the others were sent there.
    assert served_count("primary_after_loss") - lost_before == 1
    assert served_count("primary", "not_answering") - primary_before == 4
    assert replicas.choose().refused == ((pool, replicas.DOWN),)
    assert health.read_probe(caller=bruno) == "degraded"
    ready = health.readiness()["read_pool"]
    assert ready["ok"] and ready["degraded"] and ready["detail"] == (
        f"reads a replica would serve go to the primary: {pool} not answering")

    # Back: asked again once its retry time has passed, it serves again.
    replica.start()
    settings.MEMORYHUB_READ_REPLICA_RETRY_SECONDS = 0.0
    replica.catch_up()
    poll(lambda: replicas.choose().alias == pool, timeout=60, what="the replica to serve again")
    assert health.read_probe(caller=bruno) == "ready"


@on_replica
def test_reads_that_arrive_together_wait_for_the_first_reading_of_the_replica(
    live_people: People, replica: Replica, pool: str, settings: Any
) -> None:
    """A process's first reads at once: one reads the standby's state, the
    others wait for it rather than take a standby not yet read for one that
    does not answer."""
    import threading

    replica.catch_up()
    settings.MEMORYHUB_READ_REPLICA_CHECK_SECONDS = 60.0
    settings.MEMORYHUB_READ_REPLICAS = ()
    settings.MEMORYHUB_READ_REPLICAS = (pool,)  # a new pool: nothing read yet
    replicas.written()  # the position recorded beforehand
    barrier = threading.Barrier(8)
    chosen: list[replicas.Choice] = []

    def first_read() -> None:
        try:
            barrier.wait()
            chosen.append(replicas.choose())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first_read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert chosen == [replicas.Choice(pool)] * 8


@on_replica
def test_a_replica_promoted_away_serves_nothing(live_people: People, replica: Replica, pool: str) -> None:
    bruno = live_people.caller(live_people.bruno)
    replica.catch_up()
    assert replicas.choose().alias == pool
    replica.promote()
    poll(lambda: not in_recovery(pool), timeout=60, what="the promotion")

    private_fragment(bruno, "The badge printer is in room 4.12.")
    served, on_replica, _ = search_on(pool, bruno, "Where is the badge printer?")
    assert served == ["The badge printer is in room 4.12."]
    assert all("pg_is_in_recovery" in sql for sql in on_replica)
    assert replicas.choose().refused == ((pool, replicas.PROMOTED),)
    assert health.read_probe(caller=bruno) == "degraded"


@pytest.mark.parametrize(("sql", "changes"), [
    ("SELECT 1", False), ("  select pg_is_in_recovery()", False), ("SAVEPOINT s1", False),
    ("RELEASE SAVEPOINT s1", False),
    ("SET LOCAL statement_timeout = 1", False), ("WITH a AS (SELECT 1) SELECT * FROM a", False),
    ('SELECT "memoryhub_fragment"."deleted_at", "updated_at" FROM t', False),
    ("INSERT INTO t VALUES (1)", True), ("update t set a = 1", True), ("DELETE FROM t", True),
    ("WITH link AS (SELECT 1) INSERT INTO t SELECT * FROM link", True), ("LOCK TABLE t", True),
    ("TRUNCATE t", True), ("VACUUM t", True), ("CREATE INDEX i ON t (a)", True), (b"SELECT 1", True),
])
def test_what_counts_as_a_write(sql: Any, changes: bool) -> None:
    assert replicas.changes_data(sql) is changes


@on_replica
def test_a_write_whose_position_redis_did_not_take_is_shared_before_the_next_read(
    live_people: People, replica: Replica, pool: str, settings: Any
) -> None:
    bruno = live_people.caller(live_people.bruno)
    replica.catch_up()
    assert replicas.choose().alias == pool
    replica.pause()
    redis_url = settings.REDIS_URL
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    private_fragment(bruno, "The visitor wifi password changes monthly.")  # committed; its position kept here
    assert replicas.choose().refused == ((pool, replicas.UNKNOWN),)  # Redis does not answer: the primary
    settings.REDIS_URL = redis_url
    before = replica.replayed()
    # Redis answers again: the kept position is recorded, and the standby, held behind it, serves nothing.
    assert replicas.choose().refused == ((pool, replicas.BEHIND),)
    assert replicas.written() > before
    served, _, _ = search_on(pool, bruno, "visitor wifi password")
    assert served == ["The visitor wifi password changes monthly."]


@on_replica
def test_with_no_position_recorded_the_primary_s_position_now_is_needed(
    live_people: People, replica: Replica, pool: str
) -> None:
    """A new or flushed Redis holds no position: a standby behind must not serve."""
    bruno = live_people.caller(live_people.bruno)
    replica.catch_up()
    replica.pause()
    private_fragment(bruno, "The tram stop moved to the east gate.")
    shared = replicas._shared_state()
    shared.redis.delete(shared.key())
    served, on_replica, _ = search_on(pool, bruno, "Where is the tram stop?")
    assert served == ["The tram stop moved to the east gate."]
    assert all("pg_is_in_recovery" in sql for sql in on_replica)
    assert replicas.written() > replica.replayed()


@on_replica
@pytest.mark.parametrize("inner_atomic", [False, True])
def test_a_transaction_managed_by_hand_reads_on_the_primary_and_records_its_write_when_it_commits(
    live_people: People, replica: Replica, pool: str, inner_atomic: bool, settings: Any
) -> None:
    settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS = 600.0
    bruno = live_people.caller(live_people.bruno)
    replica.catch_up()
    replica.pause()  # it never replays the write below during the test
    before = replicas.written()
    connection.set_autocommit(False)
    try:
        if inner_atomic:
            with transaction.atomic():
                private_fragment(bruno, "The roof is closed in high wind.")
        else:
            private_fragment(bruno, "The roof is closed in high wind.")
        assert replicas.written() == before
        assert replicas.choose() == replicas.Choice(DEFAULT_DB_ALIAS)  # it may hold writes no one else sees
        connection.commit()
    finally:
        connection.set_autocommit(True)
    assert replicas.written() > (before or 0)
    assert replicas.choose().refused == ((pool, replicas.BEHIND),)
    served, _, _ = search_on(pool, bruno, "When is the roof closed?")
    assert served == ["The roof is closed in high wind."]


class _Answers:
    """A connection whose every statement answers `row`."""

    def __init__(self, row: tuple) -> None:
        self.row = row

    def cursor(self) -> Any:
        answers = self

        class Cursor:
            def __enter__(self) -> Cursor:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

            def execute(self, sql: str) -> None:
                assert "pg_current_wal_insert_lsn" in sql

            def fetchone(self) -> tuple:
                return answers.row

        return Cursor()


@pytest.mark.parametrize(("inserting_at", "position"), [
    (8192 * 5 + 24, 8192 * 5),  # just past a page's header: the previous record ended the page
    (16 * 2**20 * 3 + 40, 16 * 2**20 * 3),  # past a segment's first, longer header
    (8192 * 5 + 100, 8192 * 5 + 100), (8192 * 5, 8192 * 5),
])
def test_the_primary_s_position_stops_where_a_replica_s_replay_can(inserting_at: int, position: int) -> None:
    assert replicas._position(_Answers((inserting_at, 8192))) == position


@on_replica
def test_a_recorded_position_beyond_the_primary_s_own_is_replaced(
    live_people: People, replica: Replica, pool: str
) -> None:
    """A record no position of this primary reaches (Redis restored from another
    time, the database rebuilt under its name) must not hold every read back."""
    replica.catch_up()
    shared = replicas._shared_state()
    shared.record(2**62)
    assert replicas.choose() == replicas.Choice(pool)
    assert replicas.written() < 2**62


@on_replica
def test_a_failing_commit_hook_does_not_skip_recording_the_write(
    live_people: People, replica: Replica, pool: str, settings: Any
) -> None:
    settings.MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS = 600.0
    bruno = live_people.caller(live_people.bruno)
    replica.catch_up()
    replica.pause()
    before = replicas.written() or 0

    def fails() -> None:
        raise RuntimeError("a hook registered before the write fails")

    with pytest.raises(RuntimeError, match="registered before"), transaction.atomic():
        transaction.on_commit(fails)
        private_fragment(bruno, "The bike shed is unlocked at seven.")
    assert replicas.written() > before
    served, on_replica, _ = search_on(pool, bruno, "When is the bike shed unlocked?")
    assert served == ["The bike shed is unlocked at seven."]
    assert all("pg_is_in_recovery" in sql for sql in on_replica)


# --------------------------------------------------------------------------- a real server process


@on_replica
def test_a_server_configured_with_a_replica_serves_mcp_reads_from_it(
    live_people: People, replica: Replica, tmp_path: Any
) -> None:
    """`python -m mcpapi.serving memoryhub.asgi:application` with DATABASE_READ_URLS
    naming the standby, over MCP with the official client: a write is seen
    by the next search, reads are served by the standby once it has replayed
    (the server's own metrics), whoami reports the pool, and searches go on
    when the standby stops."""
    import asyncio

    from tests.support.mcp_client import REVISIONS, call, connect
    from tests.support.processes import forget_redis_keys, service_environment, spawn_uvicorn, wait_healthy
    from tests.support.tokens import person_mcp_token
    from tests.test_observability import scrape

    replica.catch_up()  # the personas, written by this process (another key prefix than the server's)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    key_prefix, queue = f"read-pool-{port}", f"read-pool-tasks-{port}"
    env = service_environment(connections[DEFAULT_DB_ALIAS].settings_dict, base_url=url, key_prefix=key_prefix,
                              task_queue=queue, extra={"DATABASE_READ_URLS": replica.url(),
                                                       "MEMORYHUB_READ_REPLICA_CHECK_SECONDS": "0",
                                                       "MEMORYHUB_READ_REPLICA_RETRY_SECONDS": "60",
                                                       "MEMORYHUB_RATE_BURST": "100",
                                                       "MEMORYHUB_RATE_PER_MINUTE": "6000"})
    token, _ = person_mcp_token(live_people.bruno, base_url=url)
    server = spawn_uvicorn("memoryhub", "memoryhub.asgi:application", port, env, tmp_path)
    revision = REVISIONS[0]

    def reads(where: str) -> float:
        return sum(count for key, count in scrape(url).items()
                   if key.startswith(f'memoryhub_read_pool_reads_total{{served_by="{where}",'))

    async def tools(*calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
        async with connect(f"{url}/mcp", token, revision) as client:
            return [await call(client, name, arguments) for name, arguments in calls]

    try:
        wait_healthy(server, url)
        for number in range(5):
            written, found = asyncio.run(tools(("memory_write", {"content": FACTS[number]}),
                                               ("memory_search", {"query": QUESTIONS[number], "limit": 3})))
            assert [result["operation"] for result in written["results"]] == ["stored"], written
            assert FACTS[number] in [fragment["value"] for fragment in found["fragments"]], found

        replica.catch_up()
        before = reads("replica")
        me, found = asyncio.run(tools(("whoami", {}), ("memory_search", {"query": QUESTIONS[4], "limit": 3})))
        assert me["read_pool_ready"] == "ready"
        assert FACTS[4] in [fragment["value"] for fragment in found["fragments"]]
        assert reads("replica") - before == 2  # the probe's read and the search

        replica.stop("immediate")
        before = reads("primary_after_loss") + reads("primary")
        me, found = asyncio.run(tools(("memory_search", {"query": QUESTIONS[3], "limit": 3}), ("whoami", {})))[::-1]
        assert FACTS[3] in [fragment["value"] for fragment in found["fragments"]]
        assert me["read_pool_ready"] == "degraded"
        assert reads("primary_after_loss") + reads("primary") - before == 2  # the search and the probe
    finally:
        server.stop()
        forget_redis_keys(key_prefix, queue)
