"""Splitting a document into fragments: paragraphs and sentences, never over the bound."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from contract.limits import FRAGMENT_VALUE_MAX_BYTES
from memoryhub.services.ingest import CHUNK_MAX_CHARS, chunk_text


def _words(text: str) -> list[str]:
    return re.findall(r"\S+", text)


def test_it_keeps_short_paragraphs_together():
    text = "First paragraph about deploys.\n\nSecond paragraph about rollbacks."
    assert chunk_text(text) == ["First paragraph about deploys.\n\nSecond paragraph about rollbacks."]


def test_it_starts_a_fragment_at_each_heading():
    text = "# Deploys\n\nShip on Tuesdays.\n\n## Rollbacks\n\nRevert the release tag.\n\nPage the on-call."
    assert chunk_text(text) == [
        "# Deploys\n\nShip on Tuesdays.",
        "## Rollbacks\n\nRevert the release tag.\n\nPage the on-call.",
    ]


def test_it_packs_paragraphs_up_to_the_bound():
    paragraphs = [f"Paragraph {i} " + "word " * 60 for i in range(20)]
    chunks = chunk_text("\n\n".join(paragraphs))
    assert len(chunks) > 1
    assert all(len(chunk) <= CHUNK_MAX_CHARS for chunk in chunks)
    # No paragraph is cut: each one fits, so each lands whole in one fragment.
    for paragraph in paragraphs:
        assert sum(paragraph.strip() in chunk for chunk in chunks) == 1


def test_a_long_paragraph_is_cut_at_sentence_ends():
    sentences = [f"Sentence number {i} says something about the incident review process." for i in range(40)]
    chunks = chunk_text(" ".join(sentences))
    assert len(chunks) > 1
    for chunk in chunks:
        assert len(chunk) <= CHUNK_MAX_CHARS
        assert chunk.startswith("Sentence number") and chunk.endswith("process.")


def test_a_code_block_with_blank_lines_stays_one_paragraph():
    text = "Run this:\n\n```\nstep one\n\nstep two\n```\n\nDone."
    assert chunk_text(text) == [text]


def test_a_word_longer_than_the_bound_is_cut():
    word = ("abcdefg" * CHUNK_MAX_CHARS)[: CHUNK_MAX_CHARS * 2 + 5]
    chunks = chunk_text(word + " tail")
    assert [len(chunk) for chunk in chunks] == [CHUNK_MAX_CHARS, CHUNK_MAX_CHARS, 10]


def test_repeated_paragraphs_are_kept_once():
    assert chunk_text("# A\n\nSame.\n\n# B\n\nOther.\n\n# A\n\nSame.") == ["# A\n\nSame.", "# B\n\nOther."]


def test_whitespace_only_text_has_no_fragments():
    assert chunk_text(" \n\n\t\n") == []


@settings(max_examples=150, deadline=None)
@given(st.lists(
    st.one_of(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=400),
        st.sampled_from(["\n", "\n\n", "# Heading", "```", ". ", "A. B", "x" * 1500, " " * 30]),
    ),
    max_size=30,
))
def test_every_fragment_fits_and_no_word_is_lost(parts):
    text = "".join(parts)
    chunks = chunk_text(text)
    assert all(0 < len(chunk) <= CHUNK_MAX_CHARS for chunk in chunks)
    assert all(len(chunk.encode("utf-8")) <= FRAGMENT_VALUE_MAX_BYTES for chunk in chunks)
    assert chunk_text(text) == chunks  # deterministic
    words = _words(text)
    if not any(len(word) > CHUNK_MAX_CHARS for word in words):
        # Cuts fall only between words: every word survives, in order (a repeated
        # fragment is kept once, so the fragments' words are a subsequence).
        kept = [word for chunk in chunks for word in _words(chunk)]
        assert set(kept) == set(words)
        remaining = iter(words)
        assert all(word in remaining for word in kept)
