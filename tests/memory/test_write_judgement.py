"""Merged / superseded / stored, on realistic pairs of facts one person writes
(the real embedder, the real database)."""

from __future__ import annotations

import pytest

from memoryhub.models import Fragment
from memoryhub.services.fragments import fragment_write
from memoryhub.services.write import split_candidates, subject_of

# (what is already in my memory, what I write now, what should happen)
CASES = [
    # The same fact again.
    ("My favourite editor is Vim.", "my favourite editor is vim", "merged"),
    ("Our staging database runs PostgreSQL 16.", "The staging database runs on PostgreSQL 16.", "merged"),
    ("Send the weekly report to Ada on Fridays.", "Send the weekly report to Ada on Fridays!", "merged"),
    # Same subject, changed value.
    ("The payments on-call this week is Bruno.", "The payments on-call this week is Chloe.", "superseded"),
    ("My manager is Ada.", "My manager is Bruno.", "superseded"),
    ("I live in Lisbon.", "I live in Porto.", "superseded"),
    ("I work at Acme.", "I work at Globex.", "superseded"),
    ("The quarterly review is in March.", "The quarterly review is in April.", "superseded"),
    ("Standup time: 9:30", "Standup time: 10:00", "superseded"),
    # Nearly the same sentence with one detail changed (a date, a place).
    ("The deploy freeze starts on 20 December.", "The deploy freeze starts on 18 December.", "superseded"),
    ("The VPN config lives in the ops vault.", "The VPN config lives in the security vault.", "superseded"),
    # Same words, another order: the newer wording wins.
    ("Chloe prefers email over Slack.", "Chloe prefers Slack over email.", "superseded"),
    # Different facts, however alike.
    ("I like hiking.", "I like jazz.", "stored"),
    ("The standup is at 10:00.", "Lunch is at 12:30.", "stored"),
    ("The standup is at 10am.", "The standup is on Zoom.", "stored"),
    ("It is raining.", "It is sunny.", "stored"),
    ("Ada is the tech lead.", "Ada is a marathon runner.", "stored"),
    ("I drink my coffee black.", "My laptop is a ThinkPad X1.", "stored"),
]


@pytest.fixture
def bruno(people):
    return people.caller(people.bruno)


@pytest.mark.parametrize(("existing", "new", "expected"), CASES)
def test_judgement_table(people, bruno, existing, new, expected):
    (old,) = fragment_write(caller=bruno, content=existing).results
    assert old.operation == "stored"
    (result,) = fragment_write(caller=bruno, content=new).results
    assert result.operation == expected, result
    old_row = Fragment.objects.get(pk=old.fragment_id)
    if expected == "merged":
        assert result.fragment_id == old.fragment_id
        assert old_row.retired_at is None
        assert Fragment.objects.filter(owner_user=people.bruno).count() == 1
    elif expected == "superseded":
        new_row = Fragment.objects.get(pk=result.fragment_id)
        assert result.superseded_fragment_id == old.fragment_id
        # Retired at the very instant the successor became memory.
        assert old_row.retired_at == new_row.recorded_at
        assert old_row.retired_reason == "superseded" and old_row.successor_id == new_row.pk
        assert result.explanation
    else:
        assert result.fragment_id != old.fragment_id and result.superseded_fragment_id is None
        assert old_row.retired_at is None


def test_a_neighbour_whose_similarity_cannot_be_told_is_not_the_same_fact(people, bruno):
    """Reordered words are the same fact only when the meanings are close: a
    stored fact whose embedding has no direction (its cosine distance is NaN)
    is never taken to be close, so it is not retired by word overlap alone."""
    (old,) = fragment_write(caller=bruno, content="Chloe prefers email over Slack.").results
    row = Fragment.objects.get(pk=old.fragment_id)
    Fragment.objects.filter(pk=row.pk).update(embedding=[0.0] * len(row.embedding))
    (result,) = fragment_write(caller=bruno, content="Chloe prefers Slack over email.").results
    assert result.operation == "stored", result
    assert Fragment.objects.get(pk=old.fragment_id).retired_at is None


def test_it_judges_only_against_the_writers_own_memory(people, bruno):
    fragment_write(caller=people.caller(people.cleo), content="My manager is Ada.")
    (result,) = fragment_write(caller=bruno, content="My manager is Bruno.").results
    assert result.operation == "stored"
    # A new session (another payload, so not an idempotent retry) says it again.
    (again,) = fragment_write(caller=bruno, content="My manager is Bruno.", session_id="s2").results
    assert again.operation == "merged"


def test_it_judges_against_live_memory_only(bruno):
    fragment_write(caller=bruno, content="My manager is Ada.")
    fragment_write(caller=bruno, content="My manager is Bruno.")
    # "Ada" was retired; writing it again is a change back, not a duplicate of a retired row.
    (result,) = fragment_write(caller=bruno, content="My manager is Ada.", session_id="s2").results
    assert result.operation == "superseded"


@pytest.mark.parametrize(("text", "subject"), [
    ("My favourite editor is Vim.", "my favourite editor"),
    ("The standup is at 10am.", "standup|at"),
    ("I live in Lisbon.", "i live in"),
    ("Standup time: 9:30", "standup time"),
    ("It is raining.", ""),
    ("There is a bug in the login form.", ""),
    ("Ada is the tech lead.", ""),
    ("Ada is in Lisbon this week.", "ada|in"),
    ("Deploys need two approvals.", ""),
])
def test_subjects(text, subject):
    assert subject_of(text) == subject


def test_content_is_split_into_candidate_facts():
    content = """Notes from the 1:1 with Dr. Smith, e.g. about the migration.
- The migration starts on 3 March.
- Bruno owns the rollback plan.
* Chloe reviews it. She needs the runbook by Friday!
1. Ask J. Doe about the budget
  and the headcount.

-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
-----END OPENSSH PRIVATE KEY-----
Version 2.4.1 ships next week."""
    assert split_candidates(content) == [
        "Notes from the 1:1 with Dr. Smith, e.g. about the migration.",
        "The migration starts on 3 March.",
        "Bruno owns the rollback plan.",
        "Chloe reviews it.",
        "She needs the runbook by Friday!",
        "Ask J. Doe about the budget and the headcount.",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
        "-----END OPENSSH PRIVATE KEY-----",
        "Version 2.4.1 ships next week.",
    ]


def test_a_very_long_note_is_judged_in_at_most_64_pieces():
    content = " ".join(f"Fact number {n} is about server {n}." for n in range(200))
    pieces = split_candidates(content)
    assert len(pieces) <= 64
    assert " ".join(pieces) == content
