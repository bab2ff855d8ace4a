"""The review preview says who could read the fact once approved (one
function: memoryhub.access.fact_audience) and flags what is nearly the same:
other pending proposals of the same agent and its live memory."""

from __future__ import annotations

import numpy as np
import pytest

from memoryhub import access, errors
from memoryhub.embeddings import get_embedder
from memoryhub.services.proposals import NEAR_DUPLICATE_SIMILARITY, proposal_approve, proposals_preview
from tests.conftest import signed_in
from tests.pages.helpers import propose

# The pairs the threshold was measured on (memoryhub/services/proposals.py says why 0.85).
NEARLY_THE_SAME = [
    ("The deploy freeze starts on Friday.", "Deploy freeze begins Friday."),
    ("The staging database is db-stg-2.", "Staging DB host is db-stg-2."),
    ("The on-call rotation changes every Monday.", "On-call rotates each Monday."),
    ("Restart the ingest worker with systemctl restart ingest.",
     "To restart the ingest worker run systemctl restart ingest."),
    ("The deploy freeze starts on 20 December.", "The deploy freeze starts on 18 December."),
]
DIFFERENT = [
    ("The staging database is db-stg-2.", "The production database is db-prod-1."),
    ("Alice leads the payments team.", "Bob leads the payments team."),
    ("Restart the ingest worker with systemctl restart ingest.", "The ingest worker logs to /var/log/ingest.log."),
    ("Customer Initech renews in April.", "Globex renews in March."),
    ("The VPN requires the Acme certificate.", "The office printer is on floor 3."),
]


def _similarity(a: str, b: str) -> float:
    first, second = get_embedder().embed([a, b])
    return float(np.dot(first, second))


def test_the_threshold_separates_the_measured_pairs():
    for a, b in NEARLY_THE_SAME:
        assert _similarity(a, b) >= NEAR_DUPLICATE_SIMILARITY, (a, b)
    for a, b in DIFFERENT:
        assert _similarity(a, b) < NEAR_DUPLICATE_SIMILARITY, (a, b)


# --------------------------------------------------------------------------- the audience


def test_an_approved_fact_is_read_only_by_the_agent_that_proposed_it(people):
    proposal = propose(people.triage_bot, "The release train leaves every Tuesday.")
    preview = proposals_preview(caller=people.caller(people.ada), proposals=[proposal])[proposal.pk]
    assert preview.audience == access.FactAudience(
        private=True, readers=(access.Reader(kind="agent", name="triage-bot", roles=()),))
    text = signed_in(people.ada).get(f"/reviews/{proposal.pk}/").content.decode()
    assert "<strong>Who can read it:</strong>" in text and "only the agent triage-bot." in text


def test_the_audience_of_a_collection_is_whoever_its_rules_let_read_it(people):
    ada = people.caller(people.ada)
    runbooks = access.fact_audience(ada, collection=people.collection("runbooks"))
    assert not runbooks.private and runbooks.granting_roles == ("engineering",)
    assert [(r.kind, r.name, r.roles) for r in runbooks.readers] == [
        ("person", "ada", ("engineering",)), ("person", "bruno", ("engineering",)),
        ("person", "cleo", ("engineering",)), ("agent", "triage-bot", ("engineering",))]
    accounts = access.fact_audience(ada, collection=people.collection("accounts"))
    assert [r.name for r in accounts.readers] == ["ada", "carol"]
    mine = access.fact_audience(ada, owner_user=people.bruno)
    assert mine.private and [r.name for r in mine.readers] == ["bruno"]


def test_the_audience_is_asked_only_by_admins_of_the_same_workspace(people):
    with pytest.raises(errors.PermissionDenied):
        access.fact_audience(people.caller(people.bruno), collection=people.collection("runbooks"))
    with pytest.raises(errors.PermissionDenied):
        access.fact_audience(people.caller(people.olga), collection=people.collection("runbooks"))
    with pytest.raises(errors.PermissionDenied):
        access.fact_audience(people.caller(people.olga), owner_user=people.bruno)


# --------------------------------------------------------------------------- near-duplicates


def test_it_flags_a_pending_proposal_that_says_nearly_the_same(people):
    first = propose(people.triage_bot, "The deploy freeze starts on Friday.")
    second = propose(people.triage_bot, "Deploy freeze begins Friday.")
    unrelated = propose(people.triage_bot, "The office printer is on floor 3.")
    previews = proposals_preview(caller=people.caller(people.ada), proposals=[first, second, unrelated])
    near = previews[first.pk].near
    assert [(n.kind, n.text, n.proposal_id) for n in near] == [
        ("proposal", "Deploy freeze begins Friday.", str(second.pk))]
    assert near[0].similarity >= NEAR_DUPLICATE_SIMILARITY
    assert [n.proposal_id for n in previews[second.pk].near] == [str(first.pk)]
    assert previews[unrelated.pk].near == []
    text = signed_in(people.ada).get(f"/reviews/{first.pk}/").content.decode()
    assert "Nearly the same as 1 other" in text
    assert f'href="/reviews/{second.pk}/"' in text and "Deploy freeze begins Friday." in text


def test_it_flags_live_memory_of_the_agent_and_links_only_what_the_reviewer_may_open(people):
    ada = people.caller(people.ada)
    first = propose(people.triage_bot, "The on-call rotation changes every Monday.")
    proposal_approve(caller=ada, proposal_id=first.pk)
    again = propose(people.triage_bot, "On-call rotates each Monday.")
    preview = proposals_preview(caller=ada, proposals=[again])[again.pk]
    assert preview.candidates[0].operation == "stored"  # the pipeline would not merge it: only the flag says so
    assert [(n.kind, n.text, n.fragment_id) for n in preview.near] == [
        ("memory", "The on-call rotation changes every Monday.", None)]  # the agent's private memory: no page
    text = signed_in(people.ada).get(f"/reviews/{again.pk}/").content.decode()
    flagged = text.split('class="preview__near"')[1].split("</ul>")[0]
    assert "The on-call rotation changes every Monday." in flagged and "in memory" in flagged
    assert "/memory/" not in flagged


def test_another_agents_or_workspaces_proposals_are_never_flagged(people):
    mine = propose(people.triage_bot, "The deploy freeze starts on Friday.")
    propose(people.globex_bot, "The deploy freeze starts on Friday.")
    preview = proposals_preview(caller=people.caller(people.ada), proposals=[mine])[mine.pk]
    assert preview.near == []


def test_an_edit_is_compared_as_edited(people):
    proposal = propose(people.triage_bot, "The office printer is on floor 3.")
    other = propose(people.triage_bot, "The deploy freeze starts on Friday.")
    response = signed_in(people.ada).post(f"/reviews/{proposal.pk}/", {"content": "Deploy freeze begins Friday."})
    assert [n.proposal_id for n in response.context["preview"].near] == [str(other.pk)]


def test_a_page_of_previews_has_a_bounded_cost_whatever_an_agent_sends(people, monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memoryhub.services import proposals as proposals_module

    embedded: list[int] = []
    embedder = get_embedder()

    class Counting:
        name = embedder.name

        def embed(self, texts):
            embedded.append(len(texts))
            return embedder.embed(texts)

    monkeypatch.setattr(proposals_module, "get_embedder", lambda: Counting())
    # A backlog bigger than anything compared, each proposal longer than what is compared of it.
    many = [propose(people.triage_bot, " ".join(f"Fact {n}.{k} is that host h{n}x{k} runs service s{k}."
                                                for k in range(12)))
            for n in range(proposals_module.NEAR_PROPOSALS_PER_AGENT + 10)]
    page = many[:20]
    with CaptureQueriesContext(connection) as queries:
        previews = proposals_preview(caller=people.caller(people.ada), proposals=page)
    assert sum(embedded) <= proposals_module.NEAR_EMBED_BUDGET
    # The near-duplicate lookups (the dry run of each write has its own, bounded by the write's limits).
    limit = f"LIMIT {proposals_module.NEAR_MEMORIES_PER_FACT}"
    vector_queries = [q for q in queries.captured_queries if "<=>" in q["sql"] and q["sql"].endswith(limit)]
    assert 0 < len(vector_queries) <= len(page) * proposals_module.NEAR_FACTS_PER_PROPOSAL
    assert all(len(p.near) <= proposals_module.NEAR_SHOWN_MAX for p in previews.values())
    # What could not be embedded within this request is said, and a later view compares it.
    embedded.clear()
    again = proposals_preview(caller=people.caller(people.ada), proposals=page)
    assert sum(embedded) <= proposals_module.NEAR_EMBED_BUDGET
    assert not any(p.near_unchecked for p in again.values())
