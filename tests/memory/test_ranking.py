"""The ranking: BM25 with the reader's own statistics, fused with cosine
similarity, and helped by a fragment's neighbours in its document. What a
reader cannot read never moves their scores or their order."""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memoryhub import access
from memoryhub.services import ingest, search
from memoryhub.services.search import Candidate, fragments_search, fuse_scores

QUERY = "billing deploy"


def _ranking(result) -> list[tuple[str, float]]:  # type: ignore[no-untyped-def]
    return [(str(hit.fragment.pk), hit.score) for hit in result.hits]


def test_a_readers_scores_depend_only_on_what_they_may_read(people, shared_fragment):
    shared_fragment("Deploy the billing service on Tuesdays after the change review.")
    shared_fragment("The billing dashboard shows failed payments per region.")
    shared_fragment("Rotate the VPN keys every month.")
    bruno = people.caller(people.bruno)
    before = _ranking(fragments_search(caller=bruno, query=QUERY))
    assert len(before) == 2

    # Carol's accounts collection and Cleo's private memory fill up with the
    # query's words; Bruno can read neither.
    for n in range(30):
        shared_fragment(f"Account {n}: billing contact changed, deploy of invoice run {n} pending.", "accounts")
    from tests.memory.conftest import private_fragment
    for n in range(10):
        private_fragment(people.caller(people.cleo), f"billing note {n}", embed=False)
    after = _ranking(fragments_search(caller=bruno, query=QUERY))
    assert after == before

    # The hidden rows would have moved the scores had they been counted:
    # statistics over the whole workspace give other numbers.
    read_query = search.read_query_for(QUERY, None, search.RANKING)
    with transaction.atomic():
        _, workspace_wide = search.lexical_scored(Q(tenant=people.acme, retired_at__isnull=True), read_query, 10,
                                                  search.RANKING)
        policy = access.read_policy(caller=bruno, as_of=timezone.now())
        _, own = search.lexical_scored(policy.queryset_filter(), read_query, 10, search.RANKING)
    first = uuid.UUID(before[0][0])
    assert own[first] != workspace_wide[first]


def test_a_rare_word_outweighs_a_common_one(people, shared_fragment):
    for n in range(12):
        shared_fragment(f"Deploy number {n} finished without errors.")
    common = shared_fragment("Deploy, deploy and deploy again: the deploy train never stops.")
    rare = shared_fragment("Zanzibar is the code name of the new region.")
    result = fragments_search(caller=people.caller(people.bruno), query="zanzibar deploy")
    ids = [hit.fragment.pk for hit in result.hits]
    # (ts_rank, with no inverse document frequency, puts the fragment full of "deploy" first)
    assert ids[0] == rare.pk
    assert common.pk not in ids[:1]


def _candidate(lexical: float, document: int | None = None, position: int | None = None) -> Candidate:
    return Candidate(vector_similarity=0.0, lexical_score=lexical, document=document, position=position)


def test_a_fragment_is_helped_by_its_neighbours_in_its_own_document_only():
    strong, reply, far, other, alone = (uuid.uuid4() for _ in range(5))
    candidates = {
        strong: _candidate(0.9, document=1, position=4),
        reply: _candidate(0.1, document=1, position=5),
        far: _candidate(0.1, document=1, position=40),
        other: _candidate(0.1, document=2, position=5),
        alone: _candidate(0.2),
    }
    scores = fuse_scores(candidates)
    assert scores[reply] > scores[far] > scores[other]
    assert scores[reply] > scores[alone]
    assert all(0.0 <= score <= 1.0 for score in scores.values())
    # Without the strong turn (say, its row failed the check) the reply is on its own again.
    del candidates[strong]
    weights = search.RANKING
    own = weights.lexical_weight * 0.1  # cosine 0
    total = 1 + weights.neighbour_weight + weights.document_weight
    assert fuse_scores(candidates)[reply] == pytest.approx((own + weights.document_weight * own) / total)  # `far`


def test_a_neighbour_that_fails_the_row_check_helps_nobody(people, monkeypatch):
    document = ingest.document_validated(resource_id="chat/1", title="Chat", turns=[
        {"speaker": "Caroline", "text": "The zanzibar festival tickets are sold out."},
        {"speaker": "Melanie", "text": "Oh no."},
        {"speaker": "Caroline", "text": "Maybe next year."},
    ])
    ingest.document_upsert(source=people.wiki, document=document)
    bruno = people.caller(people.bruno)
    seen = {hit.fragment.value: hit.score for hit in fragments_search(caller=bruno, query="zanzibar festival").hits}
    assert "Melanie: Oh no." in seen  # found by its context, helped by the turn before it

    refused = next(v for v in seen if "zanzibar" in v)

    def refusal(policy, fragment):  # type: ignore[no-untyped-def]
        return "test: refused" if fragment.value == refused else None

    monkeypatch.setattr(search, "row_refusal", refusal)
    again = {hit.fragment.value: hit.score for hit in fragments_search(caller=bruno, query="zanzibar festival").hits}
    assert refused not in again
    assert again["Melanie: Oh no."] < seen["Melanie: Oh no."]
