"""The row check's statement is written from the models' names, not compiled
by the ORM on every search: what it reads must be what the ORM reads, value
for value, and a served row must render without a statement."""

from __future__ import annotations

import datetime as dt
import uuid
from zoneinfo import ZoneInfo

import pytest
from django.db import connection, transaction
from django.db.models import DateTimeField, F
from django.utils import timezone
from pgvector.django import CosineDistance

from memoryhub import access
from memoryhub.embeddings import get_embedder
from memoryhub.models import Fragment
from memoryhub.services import ingest, search
from tests.memory.conftest import private_fragment
from tests.support.rows import field_values


def _candidates(pks) -> dict[uuid.UUID, search.Candidate]:  # type: ignore[no-untyped-def]
    return {pk: search.Candidate() for pk in pks}


LINKED = ("facts_agents", "facts_resources")


def _orm_values(pks, names, vector):  # type: ignore[no-untyped-def]
    """The same columns as the ORM reads them, by id (the linked rows apart)."""
    read = [name for name in names if name not in LINKED]
    queryset = (Fragment.objects.filter(pk__in=pks)
                .annotate(facts_source_agent_id=F("source__agent_id"), shown_collection_name=F("collection__name"),
                          shown_source_agent_name=F("source__agent__name"),
                          distance=CosineDistance("embedding", vector)))
    return {values[0]: dict(zip(["id", *read], values, strict=True))
            for values in queryset.values_list("id", *read)}


def _linked(rows) -> list[tuple] | None:  # type: ignore[no-untyped-def]
    """Linked JSON rows as what the check and fusion read of them."""
    return None if rows is None else [(row["id"], row.get("kind"), row.get("external_id"), row.get("source_id"))
                                      for row in rows]


def _orm_linked(fragment: Fragment) -> dict[str, list[tuple] | None]:
    agents = [(agent.pk, agent.kind, None, None) for agent in fragment.agents.order_by("pk")]
    resources = [(resource.pk, None, resource.external_id, resource.source_id)
                 for resource in fragment.resources.order_by("pk")]
    return {"facts_agents": agents or None, "facts_resources": resources or None}


@pytest.mark.parametrize("load_embeddings", [False, True])
def test_the_row_checks_statement_reads_what_the_orm_reads(people, shared_fragment, django_assert_num_queries,
                                                          load_embeddings):
    document = ingest.document_validated(resource_id="chat/row-check", title="Row check", turns=[
        {"speaker": "Ana", "text": "Where is the gateway log kept?"},
        {"speaker": "Ben", "text": "In the ops bucket, rotated weekly."}])
    ingest.document_upsert(source=people.wiki, document=document)
    turns = list(Fragment.objects.filter(source=people.wiki, position__isnull=False))
    shared = shared_fragment("The gateway log is kept for ninety days.")
    bot = people.caller(people.triage_bot)
    agents = private_fragment(bot, "The bot's own note on the gateway log.",
                              created_at=timezone.now() - dt.timedelta(days=3))
    mine = private_fragment(people.caller(people.bruno), "My gateway log note", embed=False)
    # Ada's own memory: no collection, no source, no linked row.
    own = private_fragment(people.caller(people.ada), "Ada's gateway log reminder.", embed=False)
    pks = [*(turn.pk for turn in turns), shared.pk, agents.pk, mine.pk, own.pk]
    vector, embedding = get_embedder().embed(["gateway log", shared.value])
    Fragment.objects.filter(pk=shared.pk).update(embedding=embedding, embedded_at=timezone.now())
    read_query = search.ReadQuery(text="gateway log", vector=search.QueryVector(vector), tsquery=None)

    policy = access.read_policy(caller=people.caller(people.ada), as_of=timezone.now())
    with transaction.atomic(), search.index_settings():
        rows, alarms = search._checked_rows(policy=policy, candidates=_candidates(pks), read_query=read_query,
                                            load_embeddings=load_embeddings)
        # Ada may not read the bot's or Bruno's private memory: refused by the check, with an alarm each.
        assert set(alarms) == {str(agents.pk), str(mine.pk)}
        assert set(rows) == {*(turn.pk for turn in turns), shared.pk, own.pk}

        # Every column of the fragment but those the index queries used (and
        # the embedding unless asked for), and what the check and rendering read.
        names = [name for name in rows[shared.pk].converted() if name != "pk"]
        columns = [item.attname for item in Fragment._meta.concrete_fields
                   if item.attname not in search.ROW_CHECK_DEFERRED
                   and (load_embeddings or item.attname != "embedding")]
        assert names == [*columns, "facts_source_agent_id", "facts_agents", "facts_resources",
                         "shown_collection_name", "shown_source_agent_name", "distance"]
        expected = _orm_values(list(rows), [name for name in names if name != "id"], vector)
        for pk, row in rows.items():
            assert {name: _linked(getattr(row, name)) for name in LINKED} == _orm_linked(Fragment.objects.get(pk=pk))
            for name in names:
                if name in LINKED:
                    continue
                got, want = getattr(row, name), expected[pk][name]
                if name == "embedding" and want is not None:
                    assert list(got) == list(want)
                else:
                    assert got == want, name
                    assert type(got) is type(want), name
                    if isinstance(want, dt.datetime):  # the instant and the zone it is told in
                        assert got.tzinfo is want.tzinfo, name
        assert (rows[shared.pk].distance is not None) and (rows[turns[0].pk].distance is None)
        if load_embeddings:
            assert list(rows[shared.pk].embedding) == pytest.approx(embedding, abs=1e-6)
        turn = rows[turns[0].pk]
        assert turn.facts_resources and turn.facts_resources[0]["external_id"] == "chat/row-check"
        assert turn.recorded_at.tzinfo is not None

        # A served row renders from what was read: its collection, its source's
        # agent, its agents and documents, without a statement.
        with django_assert_num_queries(0):
            fragment = search._served(turn, search._Building())
            rendered = (fragment.collection.name, fragment.source.agent.name,
                        [agent.name for agent in fragment.agents.all()],
                        [resource.external_id for resource in fragment.resources.all()])
        stored = Fragment.objects.get(pk=turn.pk)
        assert rendered == (stored.collection.name, stored.source.agent.name,
                            [agent.name for agent in stored.agents.order_by("pk")],
                            [resource.external_id for resource in stored.resources.order_by("pk")])
        assert fragment.value == stored.value and fragment.created_at == stored.created_at
        # Every field of every linked row a served fragment carries is the ORM's.
        linked = 0
        for pk, row in rows.items():
            served, stored = search._served(row, search._Building()), Fragment.objects.get(pk=pk)
            for name in ("agents", "resources"):
                got = [field_values(item) for item in getattr(served, name).all()]
                assert got == [field_values(item) for item in getattr(stored, name).order_by("pk")], name
                linked += len(got)
        assert linked >= 3
        with django_assert_num_queries(0):
            alone = search._served(rows[own.pk], search._Building())
            assert (alone.collection, alone.source, list(alone.agents.all()), list(alone.resources.all())) == (
                None, None, [], [])
        assert rows[own.pk].facts_agents is None and rows[own.pk].shown_collection_name is None


def test_a_ts_rank_ranking_reads_its_score_in_the_row_check(people, shared_fragment):
    """A ranking that is not BM25 scores each candidate's words in the row
    check's statement: the same score the ORM gives."""
    from dataclasses import replace

    texts = ["Rotate the gateway log weekly.", "The gateway is in rack four.", "Nothing about it."]
    pks = [shared_fragment(text).pk for text in texts]
    ranking = replace(search.RANKING, lexical_ranker="ts_rank")
    read_query = search.read_query_for("gateway log", None, ranking)
    policy = access.read_policy(caller=people.caller(people.bruno), as_of=timezone.now())
    rows, _ = search._checked_rows(policy=policy, candidates=_candidates(pks), read_query=read_query,
                                   load_embeddings=False, ranking=ranking)
    expected = dict(Fragment.objects.filter(pk__in=pks).annotate(
        lexical=search._lexical_rank(read_query.tsquery, ranking)).values_list("pk", "lexical"))
    assert {pk: row.lexical for pk, row in rows.items()} == expected
    assert expected[pks[0]] > expected[pks[1]] > 0.01 > expected[pks[2]]  # both words, one, none
    assert all(not hasattr(row, "distance") for row in rows.values())


def test_the_row_check_is_one_statement_whatever_the_number_of_candidates_and_none_for_none(people, shared_fragment,
                                                                          django_assert_num_queries):
    pks = [shared_fragment(f"Gateway log rotation note {n}.").pk for n in range(12)]
    read_query = search.ReadQuery(text="gateway", vector=search.QueryVector(get_embedder().embed(["gateway"])[0]),
                                   tsquery=None)
    policy = access.read_policy(caller=people.caller(people.bruno), as_of=timezone.now())
    for count in (0, 1, 12):
        with django_assert_num_queries(1 if count else 0):
            rows, _ = search._checked_rows(policy=policy, candidates=_candidates(pks[:count]), read_query=read_query,
                                           load_embeddings=False)
        assert set(rows) == set(pks[:count])


def test_timestamps_are_read_as_utc_wall_time_only_when_the_connection_reads_them_in_utc():
    """In UTC every instant has one wall time, so the statement reads it as a
    plain timestamp and gives it the connection's tzinfo. In any other zone a
    wall time can stand for two instants (the hour a clock goes back), so
    Django's own loader reads the timestamptz."""
    timestamps = [item.attname for item in Fragment._meta.concrete_fields if isinstance(item, DateTimeField)]
    utc = search.row_check_statement(False, "UTC", dt.UTC)
    assert [utc.names[index] for index in utc.zoned] == timestamps
    assert sum("AT TIME ZONE 'UTC'" in column for column in utc.select) == len(timestamps)
    assert [index for index, *_ in utc.converters[:len(timestamps)]] == list(utc.zoned)  # first, per column

    elsewhere = search.row_check_statement(False, "Europe/Paris", ZoneInfo("Europe/Paris"))
    assert elsewhere.zoned == () and not any("AT TIME ZONE" in column for column in elsewhere.select)
    assert elsewhere.names == utc.names


def test_a_rows_json_is_parsed_when_first_read_and_only_a_check_that_reads_links_builds_their_facts(
        people, shared_fragment):
    """Most rows the check reads are refused or not served: their linked rows
    and grounded versions, JSON, stay as the database sent them until read,
    and a rule that reads no link builds no link facts. A rule that reads
    links is given them; one given none raises rather than pass a row."""
    pks = [shared_fragment(f"Gateway log rotation note {n}.", resources=[
        {"id": f"wiki/page-{n}", "title": f"Page {n}", "uri": f"https://wiki.example/{n}"}]).pk for n in range(3)]
    read_query = search.ReadQuery(text="gateway", vector=None, tsquery=None)
    lazy = ("facts_agents", "facts_resources", "grounded_versions")

    def checked(policy: access.ReadPolicy) -> dict:  # type: ignore[type-arg]
        rows, alarms = search._checked_rows(policy=policy, candidates=_candidates(pks), read_query=read_query,
                                            load_embeddings=False)
        assert not alarms and set(rows) == set(pks)
        return rows

    plain = access.read_policy(caller=people.caller(people.bruno), as_of=timezone.now())
    assert not plain.reads_links
    rows = checked(plain)
    for pk, row in rows.items():
        assert not set(lazy) & set(vars(row)), vars(row)
        assert _linked(row.facts_resources) == _orm_linked(Fragment.objects.get(pk=pk))["facts_resources"]
        assert "facts_resources" in vars(row) and "facts_agents" not in vars(row)
        values = row.converted()
        assert [name for name in values if name in lazy] == ["grounded_versions", "facts_agents", "facts_resources"]
        assert not set(lazy) - set(vars(row))

    narrowed = access.read_policy(caller=people.caller(people.bruno), as_of=timezone.now(),
                                  resource_ids=[f"wiki/page-{n}" for n in range(3)])
    assert narrowed.reads_links
    for row in checked(narrowed).values():
        assert {"facts_agents", "facts_resources"} <= set(vars(row)) and "grounded_versions" not in vars(row)
    assert access.read_policy(caller=people.caller(people.triage_bot), as_of=timezone.now()).reads_links

    row = next(iter(checked(plain).values()))
    with pytest.raises(KeyError, match="resource_links"):
        narrowed.rule.first_failure(access.fragment_facts(row, links=False))


def test_a_served_fragment_is_built_as_the_database_would_hand_it_and_its_relations_answer_only_what_was_read(
        people, shared_fragment, django_assert_num_queries, monkeypatch):
    """Serving builds a hit without Model.__init__ where nothing would miss
    it (no receiver of the model's init signals, no __init__ or from_db of
    its own), and gives it what from_db gives; its linked rows answer from
    what the check read, and any further query of them raises."""
    import copy

    from django.db.models import signals

    from memoryhub.models import Collection

    shared = shared_fragment("Gateway log rotation is weekly.", resources=[
        {"id": "wiki/rotation", "title": "Rotation", "uri": "https://wiki.example/rotation"}])
    policy = access.read_policy(caller=people.caller(people.bruno), as_of=timezone.now())
    rows, _ = search._checked_rows(policy=policy, candidates=_candidates([shared.pk]),
                                   read_query=search.ReadQuery(text="gateway", vector=None, tsquery=None),
                                   load_embeddings=False)
    read = rows[shared.pk].converted()
    names = [item.attname for item in Fragment._meta.concrete_fields if item.attname in read]
    assert len(names) == len(Fragment._meta.concrete_fields) - len(search.ROW_CHECK_DEFERRED) - 1  # and embedding

    def alike(built, model, loaded):  # type: ignore[no-untyped-def]
        given = model.from_db("default", loaded, [read_values[name] for name in loaded])
        kept = {"_state", "_prefetched_objects_cache"}  # what serving adds: its linked rows
        assert type(built) is model and vars(built).keys() - kept == vars(given).keys() - kept
        assert all(getattr(built, name) == getattr(given, name) for name in loaded)
        assert (built._state.db, built._state.adding) == (given._state.db, given._state.adding) == ("default", False)
        assert built.get_deferred_fields() == given.get_deferred_fields()

    read_values = read
    with django_assert_num_queries(0):
        served = search._served(rows[shared.pk], search._Building())
    alike(served, Fragment, names)
    assert {"search_vector", "context", "embedding"} <= served.get_deferred_fields()
    read_values = {"id": shared.collection_id, "name": "ops", "not-a-field": 1}
    alike(search._partial(Collection, read_values, search._Building()), Collection, ["id", "name"])

    # Where something would miss Model.__init__, from_db builds it.
    heard = []

    def receiver(sender, instance, **kwargs):  # type: ignore[no-untyped-def]
        heard.append(instance)

    signals.post_init.connect(receiver, sender=Collection)
    try:
        built = search._partial(Collection, read_values, search._Building())
    finally:
        signals.post_init.disconnect(receiver, sender=Collection)
    assert heard == [built] and built.name == "ops"

    made = []
    django_init = Collection.__init__

    def own_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(self)
        django_init(self, *args, **kwargs)

    search._plainly_built.cache_clear()
    monkeypatch.setattr(Collection, "__init__", own_init)
    try:
        built = search._partial(Collection, read_values, search._Building())
    finally:
        monkeypatch.undo()
        search._plainly_built.cache_clear()
    assert made == [built] and built.name == "ops"

    # The linked rows answer what the check read, and nothing else.
    agents = [agent.name for agent in Fragment.objects.get(pk=shared.pk).agents.order_by("pk")]
    with django_assert_num_queries(0):
        resources = served.resources.all()
        assert [resource.external_id for resource in resources] == ["wiki/rotation"]
        assert len(resources) == resources.count() == 1 and resources.exists() and resources[0].title == "Rotation"
        assert [agent.name for agent in served.agents.all()] == agents == ["wiki"] and served.agents.exists()
        assert served.agents.first().name == "wiki"  # ordered by name: the first of what was read
        assert served.grounded_versions == shared.grounded_versions
        for further in (lambda: served.resources.filter(external_id="wiki/rotation"),
                        lambda: served.resources.all().exclude(pk=0), lambda: served.resources.order_by("pk"),
                        lambda: served.resources.get(external_id="wiki/rotation"),
                        lambda: list(served.resources.all().iterator()), lambda: served.agents.last(),
                        lambda: served.resources.all() | served.resources.all(),
                        lambda: list(copy.deepcopy(served.resources.all()))):
            with pytest.raises(TypeError, match="rows a search served with a fragment are what it read"):
                further()
    served.refresh_from_db(fields=["context"])  # a field the check left in the database is read when asked for
    assert served.context == Fragment.objects.get(pk=shared.pk).context


@pytest.mark.django_db(transaction=True)
def test_a_search_builds_its_hits_as_django_does_while_anything_listens_to_their_models(people, shared_fragment):
    """Whether a model's instances may be built without Model.__init__ is
    decided for each model a search serves, at that search: receivers
    connected to Fragment's post_init and to Agent's pre_init, after a search
    that had none, hear every served fragment (the very instances served) and
    every agent it carries, and the answer is the same; a receiver of one
    model's alone hears that model's."""
    from django.db.models import signals

    from memoryhub.mcp_adapter.render import search_output
    from memoryhub.models import Agent

    shared_fragment("Deploy the billing service on Tuesdays.")
    bruno = people.caller(people.bruno)
    plain = search_output(search.fragments_search(caller=bruno, query="billing deploy"))
    fragments: list[object] = []
    agents: list[object] = []

    def heard_fragment(sender, instance, **kwargs):  # type: ignore[no-untyped-def]
        fragments.append(instance)

    def heard_agent(sender, args, kwargs, **rest):  # type: ignore[no-untyped-def]
        agents.append(sender)

    signals.post_init.connect(heard_fragment, sender=Fragment)
    signals.pre_init.connect(heard_agent, sender=Agent)
    try:
        result = search.fragments_search(caller=bruno, query="billing deploy")
    finally:
        signals.post_init.disconnect(heard_fragment, sender=Fragment)
        signals.pre_init.disconnect(heard_agent, sender=Agent)
    served = [hit.fragment for hit in result.hits]
    assert served and len(fragments) == len(served) and all(a is b for a, b in zip(fragments, served, strict=True))
    # Its agents, and its source's agent.
    carried = [agent for fragment in served for agent in fragment.agents.all()] + [
        fragment.source.agent for fragment in served if fragment.source is not None]
    assert carried and len(agents) == len(carried)
    assert all(not fragment._state.adding and fragment._state.db == "default" for fragment in served)
    assert search_output(result)["fragments"] == plain["fragments"]

    # Each model on its own: with a receiver of Agent's alone, the fragments are built plainly and the agents not.
    agents.clear()
    signals.pre_init.connect(heard_agent, sender=Agent)
    try:
        again = search.fragments_search(caller=bruno, query="billing deploy")
    finally:
        signals.pre_init.disconnect(heard_agent, sender=Agent)
    assert len(agents) == len(carried)
    assert search_output(again)["fragments"] == plain["fragments"]


def test_a_row_read_by_position_is_the_row_read_from_its_values():
    """FragmentValues.of_row, as the row check builds its rows, gives what
    FragmentValues gives from the same values by name: the same attributes
    and pk, the same values left as the database sent them and converted once
    when first read, the same converted() in the same order; and refuses
    values that do not match the names."""
    converted: list[str] = []

    def convert(name: str, value: object) -> object:
        converted.append(name)
        return f"parsed {value}"

    pk = uuid.uuid4()
    names = ("id", "value", "facts_agents", "tenant_id")
    values = [pk, "text", "[raw]", 7]
    by_name = access.FragmentValues(dict(zip(names, values, strict=True)), later=("facts_agents",), convert=convert)
    by_position = access.FragmentValues.of_row(names, values, later=("facts_agents",), convert=convert)
    for row in (by_name, by_position):
        assert (row.pk, row.value, row.tenant_id) == (pk, "text", 7)
        assert "facts_agents" not in vars(row)
        assert row.facts_agents == "parsed [raw]" and row.facts_agents == "parsed [raw]"
        with pytest.raises(AttributeError):
            row.embedding  # noqa: B018
    assert converted == ["facts_agents", "facts_agents"]  # once for each row
    assert list(by_position.converted().items()) == list(by_name.converted().items()) == [
        ("id", pk), ("value", "text"), ("facts_agents", "parsed [raw]"), ("tenant_id", 7)]
    eager = access.FragmentValues.of_row(names, values)
    assert eager.converted() == access.FragmentValues(dict(zip(names, values, strict=True))).converted()
    assert eager.facts_agents == "[raw]"
    with pytest.raises(ValueError):
        access.FragmentValues.of_row(names, values[:-1])


def test_a_rule_of_a_kind_the_check_does_not_know_is_given_the_linked_rows_and_one_without_them_fails():
    """reads_links takes a kind of rule facts_read does not know to read the
    linked rows; facts built without them refuse them to a rule that asks,
    however it asks."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Flagged(access.Rule):
        flag: str

        def holds(self, facts):  # type: ignore[no-untyped-def]
            return facts.get("agent_links") is None

    @dataclasses.dataclass(frozen=True)
    class Asking(access.Rule):
        def holds(self, facts):  # type: ignore[no-untyped-def]
            return "resource_links" not in facts

    policy = access.ReadPolicy(caller=access.Caller(tenant=None, kind="system"), audience=None,  # type: ignore[arg-type]
                               as_of=timezone.now(), visibility=Flagged("x"), narrowing=access.And(()))
    assert policy.reads_links
    row = access.FragmentValues({
        "id": uuid.uuid4(), "tenant_id": 1, "owner_user_id": None, "owner_agent_id": None, "collection_id": 1,
        "source_id": None, "facts_source_agent_id": None, "recorded_at": timezone.now(), "retired_at": None,
        "created_at": timezone.now(), "facts_agents": [{"id": 3, "kind": "assistant"}], "facts_resources": None})
    assert policy.refusal(row) is not None  # given the links, it sees them
    facts = access.fragment_facts(row, links=False)
    for rule in (Flagged("x"), Asking()):
        with pytest.raises(KeyError, match="built without its linked rows"):
            rule.holds(facts)
    with pytest.raises(KeyError, match="built without its linked rows"):
        facts["agent_links"]  # noqa: B018
    assert facts.get("collection_id") == 1 and "tenant_id" in facts and facts.get("nothing") is None


def test_a_candidate_keeps_the_distance_its_index_query_computed_and_the_row_check_computes_only_the_others(
        people, monkeypatch):
    """BM25's statement computes the vector pool's distances to order it, and
    a search keeps them: the row check computes a distance only for a
    candidate found by its words alone. Either way a candidate's similarity
    is the one the ORM gives its row, to the last bit."""
    monkeypatch.setattr(search, "CANDIDATES_MIN", 3)
    monkeypatch.setattr(search, "CANDIDATES_PER_RESULT", 1)
    # The nearest three share few of the query's words; the others have them all, and say other things.
    for text in ("The proxy's access records are cycled every week.", "Edge journal files get archived weekly.",
                 "Request records from the proxy are rolled over on Mondays.",
                 "Giraffes graze by the old stone gateway of the zoo.",
                 "The captain's log mentions whales near the coast.",
                 "Tulip bulbs are rotated between fields each spring."):
        private_fragment(people.caller(people.bruno), text)
    # Found by its words alone, as a fragment not embedded yet is: it has no distance at all.
    unembedded = private_fragment(people.caller(people.bruno), "gateway log, unembedded", embed=False)
    query = "Where are the gateway log files rotated?"
    (vector,) = get_embedder().embed([query])
    policy = access.read_policy(caller=people.caller(people.bruno), as_of=timezone.now())
    with transaction.atomic(), search.index_settings():
        candidates, rows, _ = search.scored_candidates(
            policy=policy, query=query, query_vector=vector, limit=3, deadline=search.Deadline(30),
            ranking=search.RANKING)
    pool = {pk for pk, candidate in candidates.items() if candidate.vector_rank is not None}
    by_words = set(candidates) - pool
    assert len(pool) == 3 and unembedded.pk in by_words and by_words - {unembedded.pk}, candidates

    # The row check read a distance for the candidates found by their words, and none for the pool's.
    assert {pk for pk, row in rows.items() if row.distance is not None} == by_words - {unembedded.pk}
    expected = dict(Fragment.objects.filter(pk__in=list(candidates)).annotate(
        distance=CosineDistance("embedding", vector)).values_list("pk", "distance"))
    assert {pk: candidate.vector_similarity for pk, candidate in candidates.items()} == {
        pk: None if distance is None else 1.0 - distance for pk, distance in expected.items()}

    # With every candidate's distance known, none is computed, by the same prepared statement.
    pool_only = {pk: search.Candidate(vector_rank=0, vector_similarity=0.5) for pk in pool}
    with transaction.atomic():
        rows, _ = search._checked_rows(policy=policy, candidates=pool_only,
                                       read_query=search.read_query_for(query, vector, search.RANKING),
                                       load_embeddings=False)
        assert set(rows) == pool and all(row.distance is None for row in rows.values())
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                           ["%THEN (\"memoryhub_fragment\".\"embedding\" <=> $%"])
            assert cursor.fetchone()[0] == 1
    assert {pk: candidate.vector_similarity for pk, candidate in pool_only.items()} == dict.fromkeys(pool, 0.5)


def test_a_row_is_built_into_values_when_looked_up_or_when_an_interpreted_rule_reads_it(
        people, shared_fragment, monkeypatch):
    """A person's rule is compiled and reads each candidate where it lies in
    the row: no candidate is built into values until it is looked up (fusion
    looks up a document's, serving what it serves), and then once. An
    agent's rule reads the linked rows, so it is interpreted on each row
    built once, and the row it passes is the one looked up."""
    pks = [shared_fragment(f"Gateway log rotation note {n}.").pk for n in range(4)]
    read_query = search.ReadQuery(text="gateway", vector=None, tsquery=None)
    built: list[object] = []
    of_row = access.FragmentValues.of_row

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        row = of_row(*args, **kwargs)
        built.append(row)
        return row

    monkeypatch.setattr(access.FragmentValues, "of_row", counted)
    person = access.read_policy(caller=people.caller(people.bruno), as_of=timezone.now())
    rows, alarms = search._checked_rows(policy=person, candidates=_candidates(pks), read_query=read_query,
                                        load_embeddings=False)
    assert not alarms and set(rows) == set(pks) and len(rows) == 4 and pks[0] in rows
    assert built == []
    first = rows[pks[0]]
    assert rows[pks[0]] is first and built == [first] and first.value == "Gateway log rotation note 0."

    built.clear()
    bot = people.caller(people.triage_bot)
    own = [private_fragment(bot, f"Gateway restart note {n}.", embed=False).pk for n in range(2)]
    agent = access.read_policy(caller=bot, as_of=timezone.now())
    assert access.compiled_check(agent.rule, search.row_check_statement(
        False, connection.timezone_name, connection.timezone).names) is None
    rows, alarms = search._checked_rows(policy=agent, candidates=_candidates([*pks, *own]), read_query=read_query,
                                        load_embeddings=False)
    assert len(built) == 6 and len(alarms) == 4  # the wiki's, which it does not name
    assert set(rows) == set(own) and all(any(rows[pk] is row for row in built) for pk in own)
    for refused in pks:  # built to be checked, but not a row the check passed
        assert refused not in rows and rows.get(refused) is None
        with pytest.raises(KeyError):
            rows[refused]
