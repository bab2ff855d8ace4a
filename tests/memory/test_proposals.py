"""Agent proposals: parked, then approved (optionally edited) or rejected by a
workspace admin of the same tenant; approval runs the write pipeline as the agent."""

from __future__ import annotations

import pytest

from memoryhub.errors import Conflict, NotFound, PermissionDenied
from memoryhub.models import Fragment, Membership, Proposal
from memoryhub.services.proposals import proposal_approve, proposal_reject, proposals_pending
from memoryhub.services.search import memory_search
from memoryhub.services.write import memory_write


@pytest.fixture
def proposal(acme) -> Proposal:
    out = memory_write(caller=acme.agent, content="Ticket triage starts with P1s. Escalate P1s within 15 minutes.",
                       session_id="run-7")
    return Proposal.objects.get(pk=out["proposal_id"])


def test_approval_runs_the_pipeline_as_the_agent(acme, proposal):
    result = proposal_approve(caller=acme.admin, proposal_id=proposal.pk, reason="looks right")
    assert [r["operation"] for r in result["results"]] == ["stored", "stored"]
    proposal.refresh_from_db()
    assert proposal.state == "approved" and proposal.decided_by == acme.admin.user
    assert proposal.result == result and proposal.decision_reason == "looks right"
    rows = Fragment.objects.filter(pk__in=[r["fragment_id"] for r in result["results"]])
    for fragment in rows:
        # Attributed to the agent, private to it, written now.
        assert fragment.owner_agent == acme.agent.agent and fragment.owner_user is None
        assert list(fragment.agents.all()) == [acme.agent.agent]
        assert fragment.client_id == acme.agent.client_id and fragment.session_id == "run-7"
        assert fragment.recorded_at == proposal.decided_at
    served = memory_search(caller=acme.agent, query="ticket triage P1")
    assert {f["id"] for f in served["fragments"]} == {str(f.pk) for f in rows}
    assert served["fragments"][0]["agents"] == ["triage-bot"]
    # Approved memory is the agent's private memory: the approving admin does not read it.
    assert memory_search(caller=acme.admin, query="ticket triage P1")["fragments"] == []


def test_approval_judges_against_the_agents_own_memory(acme, proposal):
    proposal_approve(caller=acme.admin, proposal_id=proposal.pk)
    again = memory_write(caller=acme.agent, content="Ticket triage starts with P1s.")
    result = proposal_approve(caller=acme.admin, proposal_id=again["proposal_id"])
    assert [r["operation"] for r in result["results"]] == ["merged"]


def test_an_admin_may_edit_before_approving(acme, proposal):
    result = proposal_approve(caller=acme.admin, proposal_id=proposal.pk,
                              edited_content="Ticket triage starts with P1 and P0 tickets.")
    (stored,) = result["results"]
    assert Fragment.objects.get(pk=stored["fragment_id"]).value == "Ticket triage starts with P1 and P0 tickets."
    proposal.refresh_from_db()
    assert proposal.edited_content == "Ticket triage starts with P1 and P0 tickets."


def test_approval_applies_privacy_and_policy_at_that_moment(acme, proposal):
    acme.tenant.write_policy = "blocklist"
    acme.tenant.blocked_terms = ["P1s"]
    acme.tenant.save()
    result = proposal_approve(caller=acme.admin, proposal_id=proposal.pk)
    assert [r["reason"] for r in result["results"]] == ["policy_drop", "policy_drop"]
    assert not Fragment.objects.filter(owner_agent=acme.agent.agent).exists()


def test_only_a_workspace_admin_decides(acme, globex, proposal):
    for caller in (acme.owner, acme.member, acme.outsider):
        with pytest.raises(PermissionDenied):
            proposal_approve(caller=caller, proposal_id=proposal.pk)
        with pytest.raises(PermissionDenied):
            proposal_reject(caller=caller, proposal_id=proposal.pk)
    # Agents approve nothing, their own proposals least of all.
    with pytest.raises(PermissionDenied):
        proposal_approve(caller=acme.agent, proposal_id=proposal.pk)
    # An admin of another workspace does not even find it.
    assert Membership.objects.get(user=globex.admin.user).is_admin
    with pytest.raises(NotFound):
        proposal_approve(caller=globex.admin, proposal_id=proposal.pk)
    proposal.refresh_from_db()
    assert proposal.state == "pending"
    assert not Fragment.objects.filter(owner_agent=acme.agent.agent).exists()


def test_a_decided_proposal_cannot_be_decided_again(acme, proposal):
    proposal_reject(caller=acme.admin, proposal_id=proposal.pk, reason="duplicate of the runbook")
    proposal.refresh_from_db()
    assert proposal.state == "rejected" and proposal.decision_reason == "duplicate of the runbook"
    with pytest.raises(Conflict):
        proposal_approve(caller=acme.admin, proposal_id=proposal.pk)
    assert not Fragment.objects.filter(owner_agent=acme.agent.agent).exists()


def test_the_review_queue_lists_pending_proposals_for_admins(acme, proposal):
    assert list(proposals_pending(caller=acme.admin)) == [proposal]
    with pytest.raises(PermissionDenied):
        proposals_pending(caller=acme.member)
    with pytest.raises(NotFound):
        proposal_approve(caller=acme.admin, proposal_id="not-a-uuid")
