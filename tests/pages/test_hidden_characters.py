"""Stored text that would act on the display instead of being seen (bidi
overrides, isolates, control characters) is shown as a visible marker, on the
review console and on a person's memory pages, never passed on raw."""

from __future__ import annotations

import pytest
from django.template import Context, Template

from memoryhub.models import Proposal
from memoryhub.services.fragments import fragment_write
from tests.conftest import signed_in

TRICK = "Pay invoice\u202egpj.exe\u202c now \x1b[31mred\x07"
RAW = ("\u202e", "\u202c", "\x1b", "\x07")


def rendered(template: str, **context: object) -> str:
    return Template("{% load shown %}" + template).render(Context(context))


def test_the_filter_marks_each_hidden_character_and_escapes_the_rest():
    html = rendered("{{ value|shown }}", value=TRICK + " <b>&")
    assert not any(char in html for char in RAW)
    for code in ("U+202E", "U+202C", "U+001B", "U+0007"):
        assert f"[{code}]</span>" in html
    assert 'title="RIGHT-TO-LEFT OVERRIDE"' in html
    assert "&lt;b&gt;&amp;" in html and html.startswith("<bdi>") and html.endswith("</bdi>")


@pytest.mark.parametrize("value", ["", None, "plain words", "שלום עולם", "emoji \U0001f468\u200d\U0001f469", "a\tb\nc"])
def test_ordinary_text_passes_unmarked(value):
    html = rendered("{{ value|shown }}", value=value)
    assert "hidden-char" not in html
    assert html == f"<bdi>{value or ''}</bdi>"


@pytest.mark.parametrize(("char", "code"), [
    ("\u200b", "U+200B"), ("\u2060", "U+2060"), ("\u2062", "U+2062"), ("\ufeff", "U+FEFF"), ("\U000e0041", "U+E0041"),
    ("\x85", "U+0085"), ("\u3164", "U+3164"), ("\u180e", "U+180E"), ("\u206e", "U+206E"), ("\ufff9", "U+FFF9"),
    ("\U000e0101", "U+E0101"), ("\u00ad", "U+00AD"), ("\u034f", "U+034F"), ("\u17b4", "U+17B4"),
    ("\u2028", "U+2028"), ("\u2029", "U+2029"), ("\x7f", "U+007F"), ("\x9f", "U+009F"), ("\x00", "U+0000"),
    ("\U000e007f", "U+E007F"), ("\U000e01ef", "U+E01EF"),
])
def test_characters_that_show_nothing_are_marked(char, code):
    html = rendered("{{ value|shown }}", value=f"pay{char}pal")
    assert f"[{code}]</span>" in html and char not in html


def test_the_pattern_marks_exactly_the_characters_it_names():
    """The one compiled pattern against the sets it is built from, over every
    code point: its escaping and its ranges hold at both ends."""
    import unicodedata

    from memoryhub.templatetags import shown

    named = shown.BIDI_CONTROLS | shown.INVISIBLE | shown.SEPARATORS
    for code in [*range(0xD800), *range(0xE000, 0x110000)]:
        char = chr(code)
        expected = (char in named or code in shown.TAGS or code in shown.VARIATION_SELECTORS
                    or (unicodedata.category(char) == "Cc" and char not in shown.KEPT))
        assert shown.hidden_character(char) is expected, hex(code)
    for kept in ("\u200d", "\u200c", "\ufe0f", "\U000e0080", "\U000e01f0", "-", "\t"):
        assert not shown.hidden_character(kept)


def test_what_is_already_escaped_is_not_escaped_again():
    html = rendered('{{ names|join:", "|shown }}', names=["a&b", "c\u202ed"])
    assert html.startswith("<bdi>a&amp;b, c<span") and "&amp;amp;" not in html and "[U+202E]" in html


def test_a_browsers_line_breaks_are_not_marked():
    assert rendered("{{ value|shown|linebreaksbr }}", value="one\r\ntwo") == "<bdi>one<br>two</bdi>"
    assert rendered("{{ value|has_hidden }}", value="one\r\ntwo") == "False"


def test_line_breaks_still_become_breaks_after_it():
    assert rendered("{{ value|shown|linebreaksbr }}", value="one\ntwo <i>") == "<bdi>one<br>two &lt;i&gt;</bdi>"


def test_the_review_console_shows_a_proposals_hidden_characters(people):
    from django.utils import timezone

    from memoryhub.services.proposals import proposal_park

    bot = people.caller(people.triage_bot, client_id=people.triage_bot.client_id)
    proposal_park(caller=bot, content=TRICK, session_id="s\u2067ion\u2069", resource="", now=timezone.now())
    proposal = Proposal.objects.get(tenant=people.acme, content=TRICK)
    admin = signed_in(people.ada)
    queue = admin.get("/reviews/").content.decode()
    assert "[U+202E]" in queue and "[U+001B]" in queue and "[U+2067]" in queue
    assert not any(char in queue for char in (*RAW, "\u2067"))
    # The edit box holds the text as stored (approving it unedited must not
    # count as an edit); above it, the same text with each character marked.
    detail = admin.get(f"/reviews/{proposal.pk}/").content.decode()
    warning = detail.split('id="hidden-characters"', 1)[1].split("</div>", 1)[0]
    assert "[U+202E]" in warning and "[U+0007]" in warning and not any(char in warning for char in RAW)
    assert "[U+2067]" in detail.split("<dt>Session</dt>", 1)[1].split("</dd>", 1)[0]
    proposal_park(caller=bot, content="The office closes at 6pm.", session_id="", resource="", now=timezone.now())
    plain = Proposal.objects.get(tenant=people.acme, content="The office closes at 6pm.")
    page = admin.get(f"/reviews/{plain.pk}/")
    assert page.status_code == 200 and 'id="hidden-characters"' not in page.content.decode()


def test_a_persons_memory_page_shows_hidden_characters(people):
    bruno = people.caller(people.bruno, client_id="chat-app")
    fragment_write(caller=bruno, content=TRICK, session_id="chat\u202e1")
    client = signed_in(people.bruno)
    page = client.get("/memory/").content.decode()
    assert "[U+202E]" in page and not any(char in page for char in RAW)


def test_the_workspace_pages_show_hidden_characters(people):
    from memoryhub.models import Agent, Collection, Role, Source

    Agent.objects.filter(pk=people.triage_bot.agent.pk).update(display_name="Triage \u202etob")
    Role.objects.filter(tenant=people.acme, name="sales").update(description="Sells \u2067things\u2069")

    Collection.objects.filter(tenant=people.acme, name="runbooks").update(description="How-to \u202eevil")
    Source.objects.filter(pk=people.wiki.pk).update(kind="wiki\x1b[0m", last_error="refused \u2066x\u2069")
    admin = signed_in(people.ada)
    collections = admin.get("/workspace/collections/").content.decode()
    assert "[U+202E]" in collections and "\u202e" not in collections
    sources = admin.get("/workspace/sources/").content.decode()
    assert "[U+001B]" in sources and "[U+2066]" in sources and "\x1b" not in sources and "\u2066" not in sources
    agents = admin.get("/workspace/agents/").content.decode()
    assert "[U+202E]" in agents and "\u202e" not in agents
    members = admin.get("/workspace/members/").content.decode()
    assert "[U+2067]" in members and "\u2067" not in members


def test_receipts_and_a_fragments_page_show_hidden_characters(people):
    from oauth2_provider.models import Application

    from memoryhub.services.search import fragments_search

    app = Application.objects.create(name="Desk \u202epot", client_id="desk-1", client_type=Application.CLIENT_PUBLIC,
                                     authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
                                     redirect_uris="http://127.0.0.1:1/cb")
    bruno = people.caller(people.bruno, client_id=app.client_id)
    written = fragment_write(caller=bruno, content="The release train leaves at noon.", session_id="s\u2066x\u2069")
    receipt = fragments_search(caller=bruno, query="release \u200btrain").receipt_id
    client = signed_in(people.bruno)
    for url in ("/receipts/", f"/receipts/{receipt}/", f"/memory/{written.results[0].fragment_id}/"):
        page = client.get(url).content.decode()
        assert "hidden-char" in page, url
        assert not any(char in page for char in "\u202e\u2066\u2069\u200b"), url


def test_a_fragments_history_shows_hidden_characters(people):
    bruno = people.caller(people.bruno)
    fragment_write(caller=bruno, content="My favourite editor is Vim\u202e.")
    newer = fragment_write(caller=bruno, content="My favourite editor is Emacs.")
    assert newer.counts["superseded"] == 1
    page = signed_in(people.bruno).get(f"/memory/{newer.results[0].fragment_id}/").content.decode()
    assert "Replaced <a" in page and "[U+202E]" in page and "\u202e" not in page
