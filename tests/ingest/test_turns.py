"""Conversation documents: turns in, one fragment per turn, searchable with
their date, their document's title and the turn before them; the context is
never served. Every limit at its boundary and one past it."""

from __future__ import annotations

import datetime as dt
import importlib
import json

import pytest
from django.db import connection
from django.utils import timezone

from memoryhub.errors import InvalidArgument
from memoryhub.mcp_adapter.render import search_output
from memoryhub.models import Fragment
from memoryhub.services import ingest
from memoryhub.services.indexing import date_words, fragment_context
from tests.ingest import test_documents as documents
from tests.ingest.conftest import search, values

MAY_8 = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.UTC)
TURNS = [
    {"speaker": "Caroline", "text": "I went to the LGBTQ support group yesterday."},
    {"speaker": "Melanie", "text": "Wow, how did it go?"},
    {"speaker": "Caroline", "text": "It was so powerful, the stories really inspired me."},
]


def upsert(source, turns=TURNS, resource_id="chat/session-1", **fields):  # type: ignore[no-untyped-def]
    fields.setdefault("title", "Session 1")
    fields.setdefault("created_at", MAY_8)
    return documents.upsert(source, resource_id, text=None, turns=turns, **fields)


def live(source, resource_id="chat/session-1"):  # type: ignore[no-untyped-def]
    """The document's live fragments in their order."""
    return sorted(documents.live(source, resource_id), key=lambda fragment: fragment.position)


def test_every_turn_is_a_fragment_with_its_speaker_place_and_context(people):
    result = upsert(people.wiki)
    assert (result.status, result.fragments, result.added) == ("created", 3, 3)
    fragments = live(people.wiki)
    assert [f.value for f in fragments] == [
        "Caroline: I went to the LGBTQ support group yesterday.",
        "Melanie: Wow, how did it go?",
        "Caroline: It was so powerful, the stories really inspired me.",
    ]
    assert [f.position for f in fragments] == [0, 1, 2]
    assert date_words(MAY_8) == "8 May 2023"
    assert fragments[0].context == "8 May 2023\nSession 1"
    assert fragments[1].context == f"8 May 2023\nSession 1\n{fragments[0].value}"
    assert fragments[2].context == fragment_context(created_at=MAY_8, title="Session 1", before=fragments[1].value)
    assert all(f.created_at == MAY_8 for f in fragments)


def test_the_context_is_searched_but_never_served(people):
    upsert(people.wiki)
    # "support group" is only in the turn before Melanie's reply; "May 2023" only in the date.
    found = search(people, people.bruno, "Melanie support group")
    assert "Melanie: Wow, how did it go?" in values(found)
    # A session of another day: its date words find it, the turns' own words do not say it.
    june = dt.datetime(2023, 6, 20, 10, 0, tzinfo=dt.UTC)
    upsert(people.wiki, resource_id="chat/session-2", title="Session 2", created_at=june,
           turns=[{"speaker": "Melanie", "text": "We painted a sunrise together."}])
    dated = search(people, people.bruno, "what happened on 20 June 2023")
    assert values(dated)[0] == "Melanie: We painted a sunrise together."
    served = json.dumps(search_output(found))
    assert "Session 1\n" not in served and "8 May 2023" not in served
    for hit in found.hits + dated.hits:
        assert hit.fragment.value in {t["speaker"] + ": " + t["text"] for t in TURNS} | {
            "Melanie: We painted a sunrise together."}
    # What a reader receives is the value as written, nothing of its context.
    for item in search_output(found)["fragments"]:
        assert item["value"] in {t["speaker"] + ": " + t["text"] for t in TURNS}


def test_a_long_turn_is_cut_keeping_its_speaker(people):
    sentence = "We hiked the ridge trail and watched the sunrise over the lake. "
    long_text = sentence * 40  # about 2,600 characters
    upsert(people.wiki, turns=[{"speaker": "Melanie", "text": long_text}, {"speaker": "Caroline", "text": "Nice!"}])
    fragments = live(people.wiki)
    assert len(fragments) >= 4
    assert all(f.value.startswith("Melanie: ") for f in fragments[:-1])
    assert all(len(f.value) <= ingest.CHUNK_MAX_CHARS for f in fragments)
    assert fragments[-1].value == "Caroline: Nice!"
    assert [f.position for f in fragments] == list(range(len(fragments)))
    assert fragments[-1].context.endswith(fragments[-2].value)


def test_an_upsert_keeps_what_is_unchanged_and_renews_what_moved(people):
    upsert(people.wiki)
    before = {f.position: f.pk for f in live(people.wiki)}
    assert upsert(people.wiki).status == "unchanged"

    changed = [TURNS[0], {"speaker": "Melanie", "text": "Wow, how was it?"}, TURNS[2]]
    result = upsert(people.wiki, turns=changed)
    # The changed turn is new, and so is the one after it (its context holds the changed turn).
    assert (result.status, result.kept, result.added, result.retired) == ("updated", 1, 2, 2)
    after = {f.position: f.pk for f in live(people.wiki)}
    assert after[0] == before[0] and after[1] != before[1] and after[2] != before[2]

    # A new title changes no fragment, only the searchable context, in place.
    result = upsert(people.wiki, turns=changed, title="Support group chat")
    assert (result.status, result.kept, result.added, result.retired) == ("updated", 3, 0, 0)
    assert {f.position: f.pk for f in live(people.wiki)} == after
    assert all("Support group chat" in f.context for f in live(people.wiki))


def test_a_text_document_keeps_its_chunks_places_and_title_as_context(people):
    document = ingest.document_validated(resource_id="handbook.md", title="Handbook", created_at=MAY_8,
                                         text="# Deploys\n\nWe deploy on Tuesdays.\n\n# Rollbacks\n\nRevert the tag.")
    ingest.document_upsert(source=people.wiki, document=document)
    fragments = live(people.wiki, "handbook.md")
    assert [f.position for f in fragments] == [0, 1]
    assert all(f.context == "8 May 2023\nHandbook" for f in fragments)


@pytest.mark.parametrize(("fields", "field"), [
    ({"turns": TURNS, "text": "both"}, "turns"),
    ({}, "text"),
    ({"turns": []}, "turns"),
    ({"turns": "Caroline: hello"}, "turns"),
    ({"turns": ["hello"]}, "turns[0]"),
    ({"turns": [{"speaker": "Caroline"}]}, "turns[0].text"),
    ({"turns": [{"text": "hello"}]}, "turns[0].speaker"),
    ({"turns": [{"speaker": "  ", "text": "hello"}]}, "turns[0].speaker"),
    ({"turns": [TURNS[0], {"speaker": "Melanie", "text": "   "}]}, "turns[1].text"),
    ({"turns": [{"speaker": "Caroline", "text": "hi", "mood": "happy"}]}, "turns[0].mood"),
    ({"turns": [{"speaker": 7, "text": "hi"}]}, "turns[0].speaker"),
    ({"turns": [{"speaker": "Caro\x00line", "text": "hi"}]}, "turns[0].speaker"),
    ({"turns": [{"speaker": "Caroline", "text": "hi \ud800"}]}, "turns[0].text"),
])
def test_malformed_turns_are_refused_naming_the_field(fields, field):
    with pytest.raises(InvalidArgument) as caught:
        ingest.document_validated(resource_id="chat/1", **fields)
    assert caught.value.field == field


def test_turn_limits_hold_at_the_boundary_and_one_past_it(people):
    many = [{"speaker": "A", "text": "x"}] * ingest.TURNS_MAX_ITEMS
    assert len(ingest.document_validated(resource_id="chat/1", turns=many).turns) == ingest.TURNS_MAX_ITEMS
    with pytest.raises(InvalidArgument) as caught:
        ingest.document_validated(resource_id="chat/1", turns=[*many, {"speaker": "A", "text": "x"}])
    assert caught.value.field == "turns" and "5001" in caught.value.message

    speaker = "S" * ingest.SPEAKER_MAX_CHARS
    assert ingest.document_validated(resource_id="chat/1", turns=[{"speaker": speaker, "text": "x"}])
    with pytest.raises(InvalidArgument) as caught:
        ingest.document_validated(resource_id="chat/1", turns=[{"speaker": speaker + "S", "text": "x"}])
    assert caught.value.field == "turns[0].speaker"

    # Speakers and texts together: exactly the document bound, then one character more.
    half = ingest.TEXT_MAX_CHARS // 2
    at_bound = [{"speaker": "A", "text": "y" * (half - 1)}, {"speaker": "B", "text": "z" * (half - 1)}]
    document = ingest.document_validated(resource_id="chat/big", turns=at_bound)
    result = ingest.document_upsert(source=people.wiki, document=document)
    assert result.status == "created" and result.fragments > 2
    with pytest.raises(InvalidArgument) as caught:
        ingest.document_validated(resource_id="chat/1", turns=[at_bound[0], {"speaker": "B", "text": "z" * half}])
    assert caught.value.field == "turns[1]"


def test_the_backfill_writes_the_context_a_new_fragment_gets(people):
    """Migration 0007's SQL gives existing fragments the date words and title
    the services write (locale-free, UTC)."""
    migration = importlib.import_module("memoryhub.migrations.0007_fragment_context")
    document = ingest.document_validated(resource_id="handbook.md", title="Handbook", text="Deploy on Tuesdays.",
                                         created_at=dt.datetime(2026, 1, 9, 23, 30, tzinfo=dt.UTC))
    ingest.document_upsert(source=people.wiki, document=document)
    fragment = live(people.wiki, "handbook.md")[0]
    expected = fragment.context
    assert expected == "9 January 2026\nHandbook"
    Fragment.objects.filter(pk=fragment.pk).update(context="")
    with connection.cursor() as cursor:
        cursor.execute(migration.BACKFILL)
    fragment.refresh_from_db()
    assert fragment.context == expected


def test_a_document_sent_without_a_date_keeps_its_unchanged_turns_on_a_later_day(people):
    earlier = timezone.now() - dt.timedelta(days=2)
    document = ingest.document_validated(resource_id="chat/undated", turns=TURNS[:2])
    ingest.document_upsert(source=people.wiki, document=document, now=earlier)
    before = {f.position: f.pk for f in live(people.wiki, "chat/undated")}
    assert all(f.created_at == earlier for f in live(people.wiki, "chat/undated"))

    result = ingest.document_upsert(source=people.wiki,
                                    document=ingest.document_validated(resource_id="chat/undated", turns=TURNS))
    assert (result.kept, result.added, result.retired) == (2, 1, 0)
    after = live(people.wiki, "chat/undated")
    assert {f.position: f.pk for f in after[:2]} == before
    assert after[2].created_at > earlier and after[2].context.endswith(after[1].value)


def test_a_sources_single_fragment_is_searchable_with_its_documents_title(people):
    from memoryhub.services.ingest import fragment_ingest

    fragment, _ = fragment_ingest(source=people.wiki, value="Restart the payments worker first.", created_at=MAY_8,
                                  resources=[{"id": "runbooks/payments.md", "title": "Payments runbook"}])
    fragment.refresh_from_db()
    assert fragment.context == "8 May 2023\nPayments runbook"
    assert fragment.value == "Restart the payments worker first."
