"""The review queue: pending proposals of the admin's own workspace, with a
preview of what approving each would do."""

from __future__ import annotations

import datetime as dt

from django.test import Client
from django.utils import timezone

from memoryhub.models import Fragment, Proposal
from memoryhub.services import agents
from reviews import views
from tests.conftest import signed_in
from tests.pages.helpers import propose


def test_it_shows_pending_proposals_with_their_context(people):
    propose(people.triage_bot, "The build cache lives on cache-01.", session_id="sess-7",
            resource="https://ci.acme.test/runs/9")
    response = signed_in(people.ada).get("/reviews/")
    assert response.status_code == 200
    text = response.content.decode()
    for expected in ("triage-bot", "The build cache lives on cache-01.", "sess-7", "https://ci.acme.test/runs/9",
                     "If you approve:", "Stored 1 new fact."):
        assert expected in text


def test_it_validates_ownership(people):
    propose(people.globex_bot, "Globex ships on Thursdays.")
    text = signed_in(people.ada).get("/reviews/").content.decode()
    assert "Globex ships on Thursdays." not in text
    assert "Nothing waits for review." in text
    assert signed_in(people.bruno).get("/reviews/").status_code == 403
    assert signed_in(people.nomad).get("/reviews/").status_code == 403
    assert Client().get("/reviews/").status_code == 302


def test_the_preview_says_what_would_be_merged_or_superseded(people):
    first = propose(people.triage_bot, "The deploy window is at 14:00.")
    signed_in(people.ada).post(f"/reviews/{first.pk}/approve/")
    propose(people.triage_bot, "The deploy window is at 16:00.")
    # Another conversation: the same payload again would be an idempotent retry.
    propose(people.triage_bot, "The deploy window is at 14:00.", session_id="later")
    text = signed_in(people.ada).get("/reviews/").content.decode()
    assert "Replaces “<bdi>The deploy window is at 14:00.</bdi>”" in text
    assert "Already in triage-bot's memory: “<bdi>The deploy window is at 14:00.</bdi>”" in text


def test_the_preview_says_why_a_fact_would_be_dropped(people):
    people.acme.write_policy = "blocklist"
    people.acme.blocked_terms = ["Project Falcon"]
    people.acme.save()
    propose(people.triage_bot, "Project Falcon launches in May.")
    text = signed_in(people.ada).get("/reviews/").content.decode()
    assert "policy_drop" in text and "Project Falcon" in text


def test_the_preview_writes_nothing(people):
    first = propose(people.triage_bot, "The deploy window is at 14:00.")
    signed_in(people.ada).post(f"/reviews/{first.pk}/approve/")
    propose(people.triage_bot, "The deploy window is at 16:00.")
    before = list(Fragment.objects.values_list("pk", "retired_at"))
    signed_in(people.ada).get("/reviews/")
    assert list(Fragment.objects.values_list("pk", "retired_at")) == before
    assert Proposal.objects.filter(state="pending").count() == 1


def test_it_filters_by_agent_and_age(people):
    other = agents.agent_register(caller=people.caller(people.ada), name="summariser", scopes=["memory.write"],
                                  roles=[])
    propose(people.triage_bot, "Triage fact, fresh.")
    old = propose(other, "Summariser fact, old.")
    Proposal.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(days=2))
    client = signed_in(people.ada)
    by_agent = client.get("/reviews/", {"agent": "summariser"}).content.decode()
    assert "Summariser fact, old." in by_agent and "Triage fact, fresh." not in by_agent
    by_age = client.get("/reviews/", {"age": "1d"}).content.decode()
    assert "Summariser fact, old." in by_age and "Triage fact, fresh." not in by_age


def test_it_pages(people, monkeypatch):
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    # Facts unlike each other: a near-duplicate would be named on the other's page.
    for fact in ("The release train leaves every Tuesday.", "The office printer is on floor 3.",
                 "Customer Initech renews in April."):
        propose(people.triage_bot, fact)
    client = signed_in(people.ada)
    first = client.get("/reviews/").content.decode()
    second = client.get("/reviews/", {"page": 2}).content.decode()
    assert "release train" in first and "Initech" not in first
    assert "Initech" in second and "Page 2 of 2" in second


def test_it_loads_its_shortcuts_script_and_no_inline_script(people):
    propose(people.triage_bot, "Some fact.")
    response = signed_in(people.ada).get("/reviews/")
    text = response.content.decode()
    assert '<script src="/static/js/reviews.js" defer></script>' in text
    assert "<script>" not in text and " style=" not in text
    assert "script-src 'self'" in response["Content-Security-Policy"]
