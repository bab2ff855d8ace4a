"""Agent proposals: parked, then approved (optionally edited) or rejected by a
workspace admin of the same tenant; approval runs the write pipeline as the agent."""

from __future__ import annotations

import pytest

from memoryhub.errors import Conflict, NotFound, PermissionDenied
from memoryhub.models import Fragment, Membership, Proposal
from memoryhub.services.fragments import fragment_write
from memoryhub.services.proposals import proposal_approve, proposal_reject, proposals_pending
from memoryhub.services.search import fragments_search
from memoryhub.services.write import WriteOutcome


@pytest.fixture
def bot(people):
    return people.caller(people.triage_bot, client_id=people.triage_bot.client_id)


@pytest.fixture
def ada(people):
    return people.caller(people.ada)


@pytest.fixture
def proposal(bot) -> Proposal:
    outcome = fragment_write(caller=bot, content="Ticket triage starts with P1s. Escalate P1s within 15 minutes.",
                             session_id="run-7")
    return Proposal.objects.get(pk=outcome.proposal_id)


def test_approval_runs_the_pipeline_as_the_agent(people, bot, ada, proposal):
    result = proposal_approve(caller=ada, proposal_id=proposal.pk, reason="looks right")
    assert isinstance(result, WriteOutcome)
    assert [r.operation for r in result.results] == ["stored", "stored"]
    proposal.refresh_from_db()
    assert proposal.state == "approved" and proposal.decided_by == people.ada
    assert proposal.result == result.as_record() and proposal.decision_reason == "looks right"
    assert WriteOutcome.from_record(proposal.result) == result
    rows = Fragment.objects.filter(pk__in=[r.fragment_id for r in result.results])
    for fragment in rows:
        # Attributed to the agent, private to it, written now.
        assert fragment.owner_agent == people.triage_bot.agent and fragment.owner_user is None
        assert list(fragment.agents.all()) == [people.triage_bot.agent]
        assert fragment.client_id == people.triage_bot.client_id and fragment.session_id == "run-7"
        assert fragment.recorded_at == proposal.decided_at
    served = fragments_search(caller=bot, query="ticket triage P1")
    assert set(served.served_ids) == {str(f.pk) for f in rows}
    assert served.hits[0].provenance.agents == ("triage-bot",)
    # Approved memory is the agent's private memory: the approving admin does not read it.
    assert fragments_search(caller=ada, query="ticket triage P1").hits == []


def test_approval_judges_against_the_agents_own_memory(bot, ada, proposal):
    proposal_approve(caller=ada, proposal_id=proposal.pk)
    again = fragment_write(caller=bot, content="Ticket triage starts with P1s.")
    result = proposal_approve(caller=ada, proposal_id=again.proposal_id)
    assert [r.operation for r in result.results] == ["merged"]


def test_an_admin_may_edit_before_approving(ada, proposal):
    result = proposal_approve(caller=ada, proposal_id=proposal.pk,
                              edited_content="Ticket triage starts with P1 and P0 tickets.")
    (stored,) = result.results
    assert Fragment.objects.get(pk=stored.fragment_id).value == "Ticket triage starts with P1 and P0 tickets."
    proposal.refresh_from_db()
    assert proposal.edited_content == "Ticket triage starts with P1 and P0 tickets."


def test_approval_applies_privacy_and_policy_at_that_moment(people, ada, proposal):
    people.acme.write_policy = "blocklist"
    people.acme.blocked_terms = ["P1s"]
    people.acme.save()
    result = proposal_approve(caller=ada, proposal_id=proposal.pk)
    assert [r.reason for r in result.results] == ["policy_drop", "policy_drop"]
    assert not Fragment.objects.filter(owner_agent=people.triage_bot.agent).exists()


def test_only_a_workspace_admin_decides(people, bot, proposal):
    for caller in (people.caller(who) for who in (people.bruno, people.cleo, people.carol)):
        with pytest.raises(PermissionDenied):
            proposal_approve(caller=caller, proposal_id=proposal.pk)
        with pytest.raises(PermissionDenied):
            proposal_reject(caller=caller, proposal_id=proposal.pk)
    # Agents approve nothing, their own proposals least of all.
    with pytest.raises(PermissionDenied):
        proposal_approve(caller=bot, proposal_id=proposal.pk)
    # An admin of another workspace does not even find it.
    assert Membership.objects.get(user=people.olga).is_admin
    with pytest.raises(NotFound):
        proposal_approve(caller=people.caller(people.olga), proposal_id=proposal.pk)
    proposal.refresh_from_db()
    assert proposal.state == "pending"
    assert not Fragment.objects.filter(owner_agent=people.triage_bot.agent).exists()


def test_a_decided_proposal_cannot_be_decided_again(people, ada, proposal):
    proposal_reject(caller=ada, proposal_id=proposal.pk, reason="duplicate of the runbook")
    proposal.refresh_from_db()
    assert proposal.state == "rejected" and proposal.decision_reason == "duplicate of the runbook"
    with pytest.raises(Conflict):
        proposal_approve(caller=ada, proposal_id=proposal.pk)
    assert not Fragment.objects.filter(owner_agent=people.triage_bot.agent).exists()


def test_the_review_queue_lists_pending_proposals_for_admins(people, ada, proposal):
    assert list(proposals_pending(caller=ada)) == [proposal]
    with pytest.raises(PermissionDenied):
        proposals_pending(caller=people.caller(people.cleo))
    with pytest.raises(NotFound):
        proposal_approve(caller=ada, proposal_id="not-a-uuid")
