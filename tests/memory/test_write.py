"""memory_write: the pipeline, privacy and policy drops, privacy of what is
written, idempotency, and the tier-2 enqueue on commit."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memoryhub import access
from memoryhub.errors import Conflict
from memoryhub.models import Fragment, IdempotencyRecord, Proposal
from memoryhub.services import write
from memoryhub.services.search import memory_search
from memoryhub.services.write import memory_write

WRITE_FIELDS = {"outcome", "results", "review_state", "dropped", "drop_reasons"}
RESULT_FIELDS = {"operation", "fragment_id", "superseded_fragment_id", "reason", "explanation"}


def test_a_persons_write_is_decided_synchronously(acme):
    out = memory_write(caller=acme.owner, content="My favourite editor is Vim. The standup is at 10am.",
                       session_id="chat-1")
    assert set(out) == WRITE_FIELDS
    assert out["outcome"] == "Stored 2 new facts."
    assert out["review_state"] is None and out["dropped"] == 0 and out["drop_reasons"] == []
    assert [r["operation"] for r in out["results"]] == ["stored", "stored"]
    assert all(set(r) == RESULT_FIELDS for r in out["results"])
    rows = Fragment.objects.filter(pk__in=[r["fragment_id"] for r in out["results"]])
    assert {f.value for f in rows} == {"My favourite editor is Vim.", "The standup is at 10am."}
    for fragment in rows:
        assert fragment.owner_user == acme.owner.user and fragment.collection is None
        assert fragment.session_id == "chat-1" and fragment.client_id == "acme-client"
        assert fragment.grounding_status == "stated"
        assert fragment.recorded_at == fragment.created_at


def test_writes_are_private_to_the_writer(acme, globex):
    out = memory_write(caller=acme.owner, content="I am planning to resign in June.")
    fragment_id = out["results"][0]["fragment_id"]
    assert [f["id"] for f in memory_search(caller=acme.owner, query="resign June")["fragments"]] == [fragment_id]
    # Nobody else reads it: a teammate with the same roles, an outsider, the workspace
    # admin, an agent of the workspace, a person of another workspace.
    for other in (acme.member, acme.outsider, acme.admin, acme.agent, globex.owner):
        served = memory_search(caller=other, query="resign June", limit=50)
        assert fragment_id not in [f["id"] for f in served["fragments"]]
        policy = access.read_policy(caller=other, as_of=timezone.now())
        assert not access.visible_fragments(policy).filter(pk=fragment_id).exists()


def test_privacy_drop_is_a_result_not_an_error(acme):
    out = memory_write(
        caller=acme.owner,
        content="The staging deploy key is ghp_16C7e42F292c6912E7710c838347Ae178B4a.\n"
                "Deploys to staging happen from the release branch.",
    )
    dropped, stored = out["results"]
    assert dropped["operation"] == "dropped" and dropped["reason"] == "privacy_drop"
    assert dropped["fragment_id"] is None and "GitHub token" in dropped["explanation"]
    assert "ghp_" not in str(out)
    assert stored["operation"] == "stored"
    assert out["dropped"] == 1 and out["drop_reasons"] == ["privacy_drop"]
    assert out["outcome"] == "Stored 1 new fact; dropped 1 (privacy_drop)."
    assert not Fragment.objects.filter(value__contains="ghp_").exists()


def test_a_whole_private_key_is_dropped_as_one_candidate(acme):
    out = memory_write(caller=acme.owner, content=(
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
        "QyNTUxOQAAACDr9gD4H8vZ2rOY0pWb5xq1HqX5iJd6nYrXhWk1m7tY0QAAAJgAAAAAAAAAAA\n"
        "-----END OPENSSH PRIVATE KEY-----"))
    assert [r["operation"] for r in out["results"]] == ["dropped"]
    assert out["outcome"] == "Dropped 1 (privacy_drop)."
    assert not Fragment.objects.exists()


def test_policy_drop_follows_the_workspace_write_policy(acme):
    acme.tenant.write_policy = "blocklist"
    acme.tenant.blocked_terms = ["Project Falcon", "layoffs"]
    acme.tenant.save()
    out = memory_write(caller=acme.owner, content="Project Falcon launches in May. Lunch is at noon. "
                                                  "The layoffs list is final.")
    assert [(r["operation"], r["reason"]) for r in out["results"]] == [
        ("dropped", "policy_drop"), ("stored", None), ("dropped", "policy_drop")]
    assert "Project Falcon" in out["results"][0]["explanation"]
    assert out["dropped"] == 2 and out["drop_reasons"] == ["policy_drop"]
    # Whole words only: "falconry" is not "Falcon".
    acme.tenant.blocked_terms = ["falcon"]
    acme.tenant.save()
    assert memory_write(caller=acme.owner, content="I took up falconry.")["results"][0]["operation"] == "stored"
    # An open policy refuses nothing.
    acme.tenant.write_policy = "open"
    acme.tenant.save()
    assert memory_write(caller=acme.owner, content="Falcon is a nice name.")["dropped"] == 0


def test_the_same_key_and_payload_returns_the_first_answer_without_writing(acme):
    first = memory_write(caller=acme.owner, content="The release train leaves on Tuesdays.", idempotency_key="k1")
    count = Fragment.objects.count()
    again = memory_write(caller=acme.owner, content="The release train leaves on Tuesdays.", idempotency_key="k1")
    assert again == first
    assert Fragment.objects.count() == count


def test_a_derived_key_makes_an_identical_retry_safe(acme):
    first = memory_write(caller=acme.owner, content="Lunch is at noon.", session_id="s1")
    assert memory_write(caller=acme.owner, content="Lunch is at noon.", session_id="s1") == first
    assert Fragment.objects.count() == 1
    # Another payload (session) is another write.
    other = memory_write(caller=acme.owner, content="Lunch is at noon.", session_id="s2")
    assert other["results"][0]["operation"] == "merged"


def test_reusing_a_key_with_another_payload_is_refused_for_24_hours(acme):
    memory_write(caller=acme.owner, content="The release train leaves on Tuesdays.", idempotency_key="k1")
    with pytest.raises(Conflict) as caught:
        memory_write(caller=acme.owner, content="The release train leaves on Fridays.", idempotency_key="k1")
    assert caught.value.field == "idempotency_key"
    assert "24 hours" in caught.value.message
    # Keys are per principal: someone else may use the same key.
    memory_write(caller=acme.member, content="The release train leaves on Fridays.", idempotency_key="k1")
    # After 24 hours the key is free again.
    IdempotencyRecord.objects.update(created_at=timezone.now() - dt.timedelta(hours=24, seconds=1))
    out = memory_write(caller=acme.owner, content="The release train leaves on Fridays.", idempotency_key="k1")
    assert out["results"][0]["operation"] == "superseded"


def test_enrichment_is_enqueued_on_commit_for_what_is_missing(acme, monkeypatch,
                                                               django_capture_on_commit_callbacks):
    from memoryhub import tasks

    sent = []
    monkeypatch.setattr(tasks.enrich_fragments, "delay", lambda ids: sent.append(ids))
    # Embedded at write time and no resource: nothing left for tier 2.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        memory_write(caller=acme.owner, content="My favourite editor is Vim.")
    assert callbacks == [] and sent == []
    # A named resource is linked by tier 2.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        out = memory_write(caller=acme.owner, content="The Q3 plan moves the launch to October.",
                           resource="https://wiki.example/q3-plan")
    assert len(callbacks) == 1 and sent == [[out["results"][0]["fragment_id"]]]
    # With the embedder down the write still succeeds, and tier 2 embeds it later.
    monkeypatch.setattr(write, "_embed", lambda texts: None)
    with django_capture_on_commit_callbacks(execute=True):
        out = memory_write(caller=acme.owner, content="Our office closes at 7pm.")
    assert sent[-1] == [out["results"][0]["fragment_id"]]
    assert Fragment.objects.get(pk=out["results"][0]["fragment_id"]).embedding is None


def test_an_agents_write_is_parked_as_a_proposal(acme):
    before = Fragment.objects.count()
    out = memory_write(caller=acme.agent, content="Ticket triage starts with P1s. The token is "
                                                  "ghp_16C7e42F292c6912E7710c838347Ae178B4a.", session_id="run-7")
    assert out["review_state"] == "pending"
    assert [r["operation"] for r in out["results"]] == ["proposed", "dropped"]
    assert out["dropped"] == 1 and out["drop_reasons"] == ["privacy_drop"]
    assert "awaiting" in out["results"][0]["explanation"].lower()
    assert Fragment.objects.count() == before  # nothing became memory
    proposal = Proposal.objects.get(pk=out["proposal_id"])
    assert proposal.state == "pending" and proposal.agent == acme.agent.agent
    assert proposal.content == "Ticket triage starts with P1s."  # the secret is not parked either
    assert proposal.session_id == "run-7" and proposal.client_id == acme.agent.client_id
    assert out["outcome"].startswith(f"Parked as proposal {proposal.pk}")
