"""The row check's statement is written from the models' names, not compiled
by the ORM on every search: what it reads must be what the ORM reads, value
for value, and a served row must render without a statement."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from pgvector.django import CosineDistance

from memoryhub import access
from memoryhub.embeddings import get_embedder
from memoryhub.models import Fragment
from memoryhub.services import ingest, search
from tests.memory.conftest import private_fragment


def _candidates(pks) -> dict[uuid.UUID, search.Candidate]:  # type: ignore[no-untyped-def]
    return {pk: search.Candidate() for pk in pks}


def _orm_values(pks, names, vector):  # type: ignore[no-untyped-def]
    """The same columns as the ORM reads them, by id."""
    queryset = (access.with_access_facts(Fragment.objects.filter(pk__in=pks), prefetch=False)
                .annotate(shown_collection_name=F("collection__name"),
                          shown_source_agent_name=F("source__agent__name"),
                          distance=CosineDistance("embedding", vector)))
    return {values[0]: dict(zip(["id", *names], values, strict=True))
            for values in queryset.values_list("id", *names)}


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
    pks = [*(turn.pk for turn in turns), shared.pk, agents.pk, mine.pk]
    vector, embedding = get_embedder().embed(["gateway log", shared.value])
    Fragment.objects.filter(pk=shared.pk).update(embedding=embedding, embedded_at=timezone.now())
    read_query = search.ReadQuery(text="gateway log", vector=vector, tsquery=None)

    policy = access.read_policy(caller=people.caller(people.ada), as_of=timezone.now())
    with transaction.atomic(), search.index_settings():
        rows, alarms = search._checked_rows(policy=policy, candidates=_candidates(pks), read_query=read_query,
                                            load_embeddings=load_embeddings)
        # Ada may not read the bot's or Bruno's private memory: refused by the check, with an alarm each.
        assert set(alarms) == {str(agents.pk), str(mine.pk)}
        assert set(rows) == {*(turn.pk for turn in turns), shared.pk}

        names = [name for name in vars(rows[shared.pk]) if name != "pk"]
        assert ("embedding" in names) is load_embeddings
        assert {"facts_agents", "facts_resources", "facts_source_agent_id", "distance", "value",
                "grounded_versions", "recorded_at"} <= set(names)
        expected = _orm_values(list(rows), [name for name in names if name != "id"], vector)
        for pk, row in rows.items():
            for name in names:
                got, want = getattr(row, name), expected[pk][name]
                if name == "embedding" and want is not None:
                    assert list(got) == list(want)
                else:
                    assert got == want, name
                    assert type(got) is type(want), name
        assert (rows[shared.pk].distance is not None) and (rows[turns[0].pk].distance is None)
        if load_embeddings:
            assert list(rows[shared.pk].embedding) == pytest.approx(embedding, abs=1e-6)
        turn = rows[turns[0].pk]
        assert turn.facts_resources and turn.facts_resources[0]["external_id"] == "chat/row-check"
        assert turn.recorded_at.tzinfo is not None

        # A served row renders from what was read: its collection, its source's
        # agent, its agents and documents, without a statement.
        with django_assert_num_queries(0):
            fragment = search._served(turn)
            rendered = (fragment.collection.name, fragment.source.agent.name,
                        [agent.name for agent in fragment.agents.all()],
                        [resource.external_id for resource in fragment.resources.all()])
        stored = Fragment.objects.get(pk=turn.pk)
        assert rendered == (stored.collection.name, stored.source.agent.name,
                            [agent.name for agent in stored.agents.order_by("pk")],
                            [resource.external_id for resource in stored.resources.order_by("pk")])
        assert fragment.value == stored.value and fragment.created_at == stored.created_at


def test_the_row_check_is_one_statement_whatever_the_number_of_candidates_and_none_for_none(people, shared_fragment,
                                                                          django_assert_num_queries):
    pks = [shared_fragment(f"Gateway log rotation note {n}.").pk for n in range(12)]
    read_query = search.ReadQuery(text="gateway", vector=get_embedder().embed(["gateway"])[0], tsquery=None)
    policy = access.read_policy(caller=people.caller(people.bruno), as_of=timezone.now())
    for count in (0, 1, 12):
        with django_assert_num_queries(1 if count else 0):
            rows, _ = search._checked_rows(policy=policy, candidates=_candidates(pks[:count]), read_query=read_query,
                                           load_embeddings=False)
        assert set(rows) == set(pks[:count])
