"""The ranking: BM25 with the reader's own statistics, fused with cosine
similarity, and helped by a fragment's neighbours in its document. What a
reader cannot read never moves their scores or their order."""

from __future__ import annotations

import datetime as dt
import math
import uuid

import pytest
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from memoryhub import access
from memoryhub.models import Fragment
from memoryhub.services import ingest, search
from memoryhub.services.indexing import fragment_context
from memoryhub.services.portability import memory_erase
from memoryhub.services.search import Candidate, fragments_search, fuse_scores
from tests.memory.conftest import private_fragment

QUERY = "billing deploy"


def conversation(people, resource_id: str, turns: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    """The wiki source sends a conversation document."""
    document = ingest.document_validated(resource_id=resource_id, title="Chat", turns=[
        {"speaker": speaker, "text": text} for speaker, text in turns])
    ingest.document_upsert(source=people.wiki, document=document)


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
    for n in range(10):
        private_fragment(people.caller(people.cleo), f"billing note {n}", embed=False)
    after = _ranking(fragments_search(caller=bruno, query=QUERY))
    assert after == before

    # The hidden rows would have moved the scores had they been counted:
    # statistics over the whole workspace give other numbers.
    read_query = search.read_query_for(QUERY, None, search.RANKING)
    with transaction.atomic():
        workspace_wide = search.lexical_scored(Q(tenant=people.acme, retired_at__isnull=True), read_query, 10,
                                               search.RANKING).scores
        policy = access.read_policy(caller=bruno, as_of=timezone.now())
        own = search.lexical_scored(policy.queryset_filter(), read_query, 10, search.RANKING).scores
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
    weights = search.RANKING
    own = weights.lexical_weight * 0.1  # cosine 0
    # Neighbours only ever raise: a fragment with no document (a person's
    # memory) is on the same scale as a turn, and a turn with weak company keeps its own score.
    assert scores[alone] == pytest.approx(weights.lexical_weight * 0.2)
    assert scores[other] == pytest.approx(own)
    # Without the strong turn (say, its row failed the check) the reply is on its own again.
    del candidates[strong]
    assert fuse_scores(candidates)[reply] == pytest.approx(own)


def test_a_precise_memory_outranks_a_conversation_it_only_resembles(people, shared_fragment):
    conversation(people, "chat/lunch", [("A", "Zanzibar gateway?"), ("B", "Unrelated chatter about lunch."),
                                        ("C", "More chatter about the timeout of the lunch queue.")])
    precise = shared_fragment("The zanzibar gateway timeout is thirty seconds.")
    result = fragments_search(caller=people.caller(people.bruno), query="zanzibar gateway timeout")
    assert result.hits[0].fragment.pk == precise.pk


def test_a_date_word_alone_is_no_match(people):
    may_8 = dt.datetime(2023, 5, 8, 12, 0, tzinfo=dt.UTC)
    bruno = people.caller(people.bruno)
    for n in range(8):
        fragment = private_fragment(bruno, f"Lunch option {n}: the noodle bar.", embed=False, created_at=may_8)
        fragment.context = fragment_context(created_at=may_8)
        fragment.save(update_fields=["context"])
    result = fragments_search(caller=bruno, query="What did Bruno say about the zanzibar budget in May 2023?")
    assert result.hits == [] and result.notice == search.NOTICE_NOTHING_MATCHED


def test_every_vector_candidate_gets_its_bm25_score_beyond_the_match_cap(people, shared_fragment):
    old = shared_fragment("Billing deploy runbook: roll forward, never back.")
    for n in range(5):
        shared_fragment(f"Billing note {n}.")
    bruno = people.caller(people.bruno)
    read_query = search.read_query_for("billing deploy", None, search.RANKING)
    with transaction.atomic():
        predicate = access.read_policy(caller=bruno, as_of=timezone.now()).queryset_filter()
        alone = search.lexical_scored(predicate, read_query, 10, search.RANKING, cap=3).scores
        capped = search.lexical_scored(predicate, read_query, 10, search.RANKING, also=[old.pk], cap=3).scores
        uncapped = search.lexical_scored(predicate, read_query, 10, search.RANKING).scores
    assert old.pk not in alone  # not among the newest three matches
    assert capped[old.pk] == pytest.approx(uncapped[old.pk]) and capped[old.pk] > 0


def test_a_hyphenated_word_is_counted_like_any_other(people, shared_fragment):
    for n in range(6):
        shared_fragment(f"Our state-of-the-art pipeline number {n}.")
    design = shared_fragment("The design review is on Thursday.")
    result = fragments_search(caller=people.caller(people.bruno), query="state-of-the-art design")
    # "state-of-the-art" is in every fragment but one: it is the common word, "design" the rare one.
    assert result.hits[0].fragment.pk == design.pk


def test_a_neighbour_that_fails_the_row_check_helps_nobody(people, monkeypatch):
    conversation(people, "chat/1", [("Caroline", "The zanzibar festival tickets are sold out."),
                                    ("Melanie", "Oh no."), ("Caroline", "Maybe next year.")])
    bruno = people.caller(people.bruno)
    seen = {hit.fragment.value: hit.score for hit in fragments_search(caller=bruno, query="zanzibar festival").hits}
    assert "Melanie: Oh no." in seen  # found by its context, helped by the turn before it

    refused = next(v for v in seen if "zanzibar" in v)

    def row_check(policy, names, **read):  # type: ignore[no-untyped-def]
        value = names.index("value")
        return lambda values: "test: refused" if values[value] == refused else None

    monkeypatch.setattr(search, "row_check", row_check)
    again = {hit.fragment.value: hit.score for hit in fragments_search(caller=bruno, query="zanzibar festival").hits}
    assert refused not in again
    assert again["Melanie: Oh no."] < seen["Melanie: Oh no."]


@pytest.mark.parametrize(("text", "share"), [
    ("What pet do you have?", 1.0),
    ("Caroline: Wow! What got you into running?", 0.5),
    ("Nice! So fun. Where was it?", 1 / 3),
    ("Melanie: We got another cat named Bailey.", 0.0),
    ("Is it? [shares an image: a cat on a sofa]", 0.5),
    ("", 0.0),
    ("   ", 0.0),
    ("??", 0.0),  # no word in it: no sentence
    ("What?!", 1.0),
    ('He asked "Is it?"', 1.0),
    ("(did you see it?)", 1.0),
    ("What pet? :)", 1.0),
    ("Where was it? :-) ;'-)", 1.0),  # a hyphen or an apostrophe is no word either
    ("你好。你有宠物吗？", 0.5),
    ("ما اسمك؟", 1.0),
    ("I love it… Do you?", 0.5),
    ("Really?!!!!! Okay.", 0.5),
])
def test_the_asking_share_of_a_fragment_is_the_share_of_its_sentences_that_are_questions(text, share):
    assert search.asking_share(text) == pytest.approx(share)


def test_a_fragment_that_only_asks_is_lowered_and_still_helps_the_answer_after_it():
    from dataclasses import replace

    ranking = replace(search.RANKING, asking_weight=0.4)
    question, answer, statement, memory = (uuid.uuid4() for _ in range(4))
    candidates = {
        question: Candidate(vector_similarity=0.0, lexical_score=0.8, document=1, position=0, asking=1.0),
        answer: Candidate(vector_similarity=0.0, lexical_score=0.3, document=1, position=1),
        statement: Candidate(vector_similarity=0.0, lexical_score=0.8, document=2, position=0, asking=0.0),
        # A memory of its own that asks has no answer beside it to hand over to: not lowered.
        memory: Candidate(vector_similarity=0.0, lexical_score=0.8, asking=1.0),
    }
    scores = fuse_scores(candidates, ranking)
    unlowered = fuse_scores(candidates, replace(ranking, asking_weight=0.0))
    assert scores[statement] == pytest.approx(unlowered[statement])
    assert scores[memory] == pytest.approx(unlowered[memory]) == pytest.approx(ranking.lexical_weight * 0.8)
    assert scores[question] == pytest.approx(unlowered[question] * 0.6)
    assert scores[question] < scores[statement]
    # The answer is helped by the question's full score, as before.
    assert scores[answer] == pytest.approx(unlowered[answer]) and scores[answer] > ranking.lexical_weight * 0.3
    half = fuse_scores({question: replace(candidates[question], asking=0.5)}, ranking)[question]
    assert half == pytest.approx(ranking.lexical_weight * 0.8 * 0.8)
    # Any weight keeps a score in [0, 1].
    assert fuse_scores(candidates, replace(ranking, asking_weight=1.5))[question] == 0.0
    # Other fusions are left as they are.
    lexical = replace(ranking, fusion="lexical")
    assert fuse_scores(candidates, lexical)[question] == pytest.approx(0.8)


def test_the_row_check_gives_each_turn_its_asking_share(people, shared_fragment):
    conversation(people, "chat/log", [("Ana", "Where is the zanzibar gateway log kept?"),
                                      ("Ben", "The zanzibar gateway log is kept in the ops bucket.")])
    # A memory of its own is never lowered, so its share is not read (it may be 4 KiB of text).
    alone = shared_fragment("Is the zanzibar gateway log rotated?")
    bruno = people.caller(people.bruno)
    with transaction.atomic(), search.index_settings():
        policy = access.read_policy(caller=bruno, as_of=timezone.now())
        candidates, rows, _ = search.scored_candidates(policy=policy, query="zanzibar gateway log", query_vector=None,
                                                       limit=10, deadline=search.Deadline(30), ranking=search.RANKING)
    asking = {rows[pk].value: candidate.asking for pk, candidate in candidates.items()}
    assert asking["Ana: Where is the zanzibar gateway log kept?"] == 1.0
    assert asking["Ben: The zanzibar gateway log is kept in the ops bucket."] == 0.0
    assert candidates[alone.pk].asking == 0.0


def test_in_a_conversation_the_answer_outranks_the_question_it_shares_words_with(people):
    conversation(people, "chat/pets", [("Caroline", "Zanzibar pets? What pet do you have, Melanie?"),
                                       ("Melanie", "A cat named Bailey, since last spring."),
                                       ("Caroline", "Lovely. The weather here is grim.")])
    bruno = people.caller(people.bruno)
    values = [hit.fragment.value for hit in fragments_search(caller=bruno, query="zanzibar pets").hits]
    assert values[0] == "Melanie: A cat named Bailey, since last spring."
    assert "Caroline: Zanzibar pets? What pet do you have, Melanie?" in values


@pytest.mark.django_db
@pytest.mark.parametrize(("query", "lexemes"), [
    ("Would Melanie likely enjoy the song by Vivaldi?", {"melani", "enjoy", "song", "vivaldi"}),
    ("What could Nate probably cook, or possibly bake, that he might like?", {"nate", "cook", "bake", "like"}),
    ("What does Caroline like?", {"carolin", "like"}),
    ("What did Caroline do in May 2023?", {"carolin", "may", "2023"}),
    ("Wouldn't Bruno like it? Would've he?", {"bruno", "like"}),
    ("Would you?", set()),  # nothing but its form: its embedding alone answers
    ("Would it likely?", set()),
])
def test_the_words_that_only_give_a_question_its_form_are_not_searched(query, lexemes):
    assert set(search.query_lexemes(query)) == lexemes


def test_a_question_with_likely_does_not_match_everything_that_says_like(people, shared_fragment):
    shared_fragment("Looks like rain again, like every Tuesday.")
    vivaldi = shared_fragment("Bruno plays Vivaldi's Four Seasons every morning.")
    result = fragments_search(caller=people.caller(people.bruno), query="Would Bruno likely enjoy Vivaldi?")
    assert [hit.fragment.pk for hit in result.hits] == [vivaldi.pk]


@pytest.mark.parametrize("mode", ["websearch", "plain"])
def test_the_all_words_modes_leave_the_form_words_out_too(people, shared_fragment, monkeypatch, mode):
    from dataclasses import replace

    # These modes want every word of the query: "likely" (stemmed "like") would rule the answer out.
    vivaldi = shared_fragment("Bruno enjoys Vivaldi's Four Seasons every morning.")
    monkeypatch.setattr(search, "RANKING", replace(search.RANKING, fusion="lexical", lexical_ranker="ts_rank",
                                                   lexical_query=mode))
    result = fragments_search(caller=people.caller(people.bruno), query="Would Bruno likely enjoy Vivaldi?")
    assert [hit.fragment.pk for hit in result.hits] == [vivaldi.pk]


@pytest.mark.parametrize(("query", "hedged"), [
    ("Would Melanie likely enjoy the song by Vivaldi?", True),
    ("What might John's degree be in?", True),
    ("Wouldn't Bruno like it?", True),
    ("COULD it rain?", True),
    ("What does Caroline like?", False),
    ("When did Melanie paint a sunrise?", False),
    ("Mighty ducks likelihood", False),  # a word that only starts like one
])
def test_a_question_in_a_hypothetical_form_is_hedged(query, hedged):
    assert search.is_hedged(query) is hedged


def test_a_hedged_question_weighs_the_cosine_by_its_own_weight():
    from dataclasses import replace

    ranking = replace(search.RANKING, vector_weight=0.3, lexical_weight=0.7, hedged_vector_weight=0.6,
                      neighbour_weight=0.0, document_weight=0.0, asking_weight=0.0)
    worded, meant = uuid.uuid4(), uuid.uuid4()
    candidates = {worded: Candidate(vector_similarity=0.2, lexical_score=0.6),
                  meant: Candidate(vector_similarity=0.7, lexical_score=0.1)}
    plain = fuse_scores(candidates, ranking)
    assert plain[worded] == pytest.approx(0.3 * 0.2 + 0.7 * 0.6)
    assert plain[meant] == pytest.approx(0.3 * 0.7 + 0.7 * 0.1)
    assert plain[worded] > plain[meant]
    hedged = fuse_scores(candidates, ranking, hedged=True)
    assert hedged[worded] == pytest.approx(0.6 * 0.2 + 0.4 * 0.6)
    assert hedged[meant] == pytest.approx(0.6 * 0.7 + 0.4 * 0.1)
    assert hedged[meant] > hedged[worded]
    # A share past 1 is the cosine alone; other fusions do not read it.
    assert fuse_scores(candidates, replace(ranking, hedged_vector_weight=3.0), hedged=True)[meant] == pytest.approx(0.7)
    lexical = replace(ranking, fusion="lexical")
    assert fuse_scores(candidates, lexical, hedged=True) == fuse_scores(candidates, lexical)


def test_a_hedged_question_is_ordered_by_its_weight_and_matched_and_scored_by_the_ordinary_ones(
        people, shared_fragment, monkeypatch):
    from dataclasses import replace

    from memoryhub.services.enrichment import fragments_embed_pending

    written = [shared_fragment("Bruno's cat is called Vivaldi, after the composer."),
               shared_fragment("Bruno spends his evenings listening to baroque violin concertos."),
               shared_fragment("Bruno enjoys hiking in the Alps every summer."),
               shared_fragment("Looks like rain again over the harbour.")]
    fragments_embed_pending(fragment_ids=[str(fragment.pk) for fragment in written])
    bruno = people.caller(people.bruno)
    alone = replace(search.RANKING, neighbour_weight=0.0, document_weight=0.0, asking_weight=0.0)

    def served(ranking, query):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(search, "RANKING", ranking)
        return [(str(hit.fragment.pk), round(hit.score, 6)) for hit in fragments_search(caller=bruno, query=query).hits]

    hedged, plain = "Would Bruno likely enjoy Vivaldi?", "Does Bruno enjoy Vivaldi?"
    ordinary = served(replace(alone, hedged_vector_weight=0.3), hedged)
    by_cosine = [pk for pk, _ in served(replace(alone, fusion="vector"), hedged)]
    reordered = served(replace(alone, hedged_vector_weight=1.0), hedged)
    # Ordered by the cosine alone, but the same fragments with the same scores: the form only reorders.
    assert [pk for pk, _ in reordered] == [pk for pk in by_cosine if pk in dict(ordinary)]
    assert dict(reordered) == dict(ordinary) and reordered != ordinary
    # A question without the hedged form keeps the ordinary weights.
    assert served(replace(alone, hedged_vector_weight=1.0), plain) == served(alone, plain)


def test_the_judgment_plane_arranges_a_hedged_question_from_the_order_it_was_given():
    from dataclasses import replace
    from types import SimpleNamespace

    from memoryhub.services.search import Hit

    # Relevance 0.5 but placed first by the hedged question's weights, against relevance 0.6 placed second.
    first = Hit(fragment=SimpleNamespace(pk=uuid.UUID(int=2)), score=0.5, ordering=0.9)  # type: ignore[arg-type]
    second = Hit(fragment=SimpleNamespace(pk=uuid.UUID(int=1)), score=0.6, ordering=0.4)  # type: ignore[arg-type]
    assert search._arrange([second, first], task_vector=None, task_tags=[]) == [first, second]
    # A hit without an ordering of its own is placed by its score.
    unplaced = [replace(first, ordering=None), replace(second, ordering=None)]
    assert search._arrange(unplaced, task_vector=None, task_tags=[]) == [unplaced[1], unplaced[0]]


def _vector_counts(pk: uuid.UUID) -> dict[str, list[int] | None]:
    """A fragment's term counts worked out here from its search vector: per
    lexeme, how many of its positions weigh A (its own words) and how many
    weigh anything else (its context)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT u.lexeme, u.weights::text[] FROM memoryhub_fragment AS f, unnest(f.search_vector) AS u "
                       "WHERE f.id = %s", [pk])
        rows = cursor.fetchall()
    return {lexeme: ([weights.count("A"), len(weights) - weights.count("A")] if weights else None)
            for lexeme, weights in rows}


def _stored_counts(pk: uuid.UUID) -> dict[str, list[int] | None]:
    return Fragment.objects.values_list("search_counts", flat=True).get(pk=pk)


def test_a_fragments_term_counts_are_those_of_its_search_vector_as_it_changes(people, shared_fragment):
    plain = shared_fragment("Deploy the billing service, then deploy the invoice service.")
    placed = shared_fragment("The festival tickets are sold out.")
    placed.context = "8 May 2023\nFestival chat: tickets, tickets and the festival lineup"
    placed.save(update_fields=["context"])
    long = private_fragment(people.caller(people.bruno), " ".join(f"word{n % 300} deploy" for n in range(3000)),
                            embed=False)
    for fragment in (plain, placed, long):
        assert _stored_counts(fragment.pk) == _vector_counts(fragment.pk) != {}
    assert _stored_counts(plain.pk)["deploy"] == [2, 0]
    # A word of its own and of its context; a word of its context only.
    assert _stored_counts(placed.pk)["festiv"] == [1, 2] and _stored_counts(placed.pk)["lineup"] == [0, 1]
    # The counts are the vector's: to_tsvector keeps 255 positions of a lexeme at most.
    assert _stored_counts(long.pk)["deploy"] == [255, 0]

    plain.value = "Roll the billing service back."
    plain.save(update_fields=["value"])
    assert _stored_counts(plain.pk) == _vector_counts(plain.pk) and "deploy" not in _stored_counts(plain.pk)
    # Fragments loaded through Fragment.objects leave the counts in the database; values() reads them.
    assert "search_counts" in Fragment.objects.get(pk=plain.pk).get_deferred_fields()


def test_an_erased_fragment_keeps_no_count_of_its_words(people):
    secret = private_fragment(people.caller(people.bruno), "The zanzibar merger closes on Friday.", embed=False)
    assert "zanzibar" in _stored_counts(secret.pk)
    memory_erase(caller=people.caller(people.ada), user_id=people.bruno.pk, confirm="bruno")
    assert _stored_counts(secret.pk) == {} == _vector_counts(secret.pk)


@pytest.mark.parametrize("tallied", [False, True])
def test_bm25_is_okapi_bm25_over_what_the_reader_may_read(people, shared_fragment, tallied):
    """The statement's scores against Okapi BM25 worked out here, from each
    visible fragment's search vector: N, the mean length and each lexeme's
    document frequency over what the reader may read, a fragment's own words
    counting own_words_weight times its context's, and the query's ideal score
    as the scale."""
    bruno = people.caller(people.bruno)
    shared_fragment("Deploy the billing service on Tuesdays; deploy twice when billing is late.")
    shared_fragment("The billing dashboard shows failed payments per region.")
    shared_fragment("Rotate the VPN keys every month.")
    in_context = shared_fragment("Billing lunch is at noon.")
    in_context.context = "Billing team chat: deploy day"
    in_context.save(update_fields=["context"])
    private_fragment(bruno, "My own billing deploy checklist.", embed=False)
    for n in range(4):  # in a collection Bruno cannot read: counts for nobody's statistics but Carol's
        shared_fragment(f"Account {n}: billing deploy pending.", "accounts")
    private_fragment(people.caller(people.cleo), "Cleo's billing deploy notes.", embed=False)

    ranking = search.RANKING
    read_query = search.read_query_for("billing deploy", None, ranking)
    policy = access.read_policy(caller=bruno, as_of=timezone.now())
    assert search.tallied_statistics(policy) is not None
    with transaction.atomic():
        _, ranked, scores = search.lexical_scored(
            policy.queryset_filter(), read_query, 10, ranking,
            tallied=search.tallied_statistics(policy) if tallied else None)

    visible = list(Fragment.objects.filter(policy.queryset_filter()).values_list("pk", "search_length"))
    n = len(visible)
    mean = sum(length for _, length in visible) / n
    counts = {pk: _vector_counts(pk) for pk, _ in visible}
    lexemes = list(read_query.lexemes)
    idf = {lexeme: math.log(1 + (n - df + 0.5) / (df + 0.5))
           for lexeme in lexemes for df in [sum(lexeme in held for held in counts.values())]}
    k1, b, own = ranking.bm25_k1, ranking.bm25_b, ranking.own_words_weight
    expected = {}
    for pk, length in visible:
        held = [lexeme for lexeme in lexemes if lexeme in counts[pk]]
        if not held:
            continue
        total = 0.0
        for lexeme in held:
            mine, context = counts[pk][lexeme]  # type: ignore[misc]
            tf = own * mine + context
            total += idf[lexeme] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / max(mean, 1)))
        expected[pk] = min(1.0, total / (sum(idf.values()) * (k1 + 1)))
    assert len(expected) == 4
    assert scores == pytest.approx(expected, rel=1e-9)
    assert ranked == sorted(expected, key=lambda pk: (-expected[pk], str(pk)))
