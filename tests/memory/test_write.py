"""memory_write: the pipeline, privacy and policy drops, privacy of what is
written, idempotency, and the tier-2 enqueue on commit."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memoryhub import access
from memoryhub.errors import Conflict
from memoryhub.mcp_adapter.render import write_output
from memoryhub.models import Fragment, IdempotencyRecord, Proposal
from memoryhub.services import enrichment, write
from memoryhub.services.fragments import fragment_write
from memoryhub.services.search import fragments_search
from memoryhub.services.write import WriteOutcome

WRITE_FIELDS = {"outcome", "results", "review_state", "dropped", "drop_reasons"}
RESULT_FIELDS = {"operation", "fragment_id", "superseded_fragment_id", "reason", "explanation"}


@pytest.fixture
def bruno(people):
    return people.caller(people.bruno, client_id="chat-app")


@pytest.fixture
def bot(people):
    return people.caller(people.triage_bot, client_id=people.triage_bot.client_id)


def test_a_persons_write_is_decided_synchronously(bruno):
    outcome = fragment_write(caller=bruno, content="My favourite editor is Vim. The standup is at 10am.",
                             session_id="chat-1")
    assert isinstance(outcome, WriteOutcome)
    # The contract's memory_write output, as the MCP adapter renders it.
    out = write_output(outcome)
    assert set(out) == WRITE_FIELDS
    assert out["outcome"] == "Stored 2 new facts." == outcome.summary
    assert out["review_state"] is None and out["dropped"] == 0 and out["drop_reasons"] == []
    assert [r["operation"] for r in out["results"]] == ["stored", "stored"]
    assert all(set(r) == RESULT_FIELDS for r in out["results"])
    rows = Fragment.objects.filter(pk__in=[r["fragment_id"] for r in out["results"]])
    assert {f.value for f in rows} == {"My favourite editor is Vim.", "The standup is at 10am."}
    for fragment in rows:
        assert fragment.owner_user == bruno.user and fragment.collection is None
        assert fragment.session_id == "chat-1" and fragment.client_id == "chat-app"
        assert fragment.grounding_status == "stated"
        assert fragment.recorded_at == fragment.created_at


def test_writes_are_private_to_the_writer(people, bruno):
    outcome = fragment_write(caller=bruno, content="I am planning to resign in June.")
    fragment_id = outcome.results[0].fragment_id
    assert fragments_search(caller=bruno, query="resign June").served_ids == [fragment_id]
    # Nobody else reads it: a teammate with the same roles, an outsider, the workspace
    # admin, an agent of the workspace, a person of another workspace.
    for other in (people.caller(who) for who in (people.cleo, people.carol, people.ada, people.triage_bot,
                                                   people.olga)):
        served = fragments_search(caller=other, query="resign June", limit=50)
        assert fragment_id not in served.served_ids
        policy = access.read_policy(caller=other, as_of=timezone.now())
        assert not access.visible_fragments(policy).filter(pk=fragment_id).exists()


def test_privacy_drop_is_a_result_not_an_error(bruno):
    outcome = fragment_write(
        caller=bruno,
        content="The staging deploy key is ghp_16C7e42F292c6912E7710c838347Ae178B4a.\n"
                "Deploys to staging happen from the release branch.",
    )
    dropped, stored = outcome.results
    assert dropped.operation == "dropped" and dropped.reason == "privacy_drop"
    assert dropped.fragment_id is None and "GitHub token" in dropped.explanation
    assert "ghp_" not in str(write_output(outcome)) and "ghp_" not in str(outcome.as_record())
    assert stored.operation == "stored"
    assert outcome.dropped == 1 and outcome.drop_reasons == ["privacy_drop"]
    assert outcome.summary == "Stored 1 new fact; dropped 1 (privacy_drop)."
    assert not Fragment.objects.filter(value__contains="ghp_").exists()


def test_a_whole_private_key_is_dropped_as_one_candidate(bruno):
    outcome = fragment_write(caller=bruno, content=(
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
        "QyNTUxOQAAACDr9gD4H8vZ2rOY0pWb5xq1HqX5iJd6nYrXhWk1m7tY0QAAAJgAAAAAAAAAAA\n"
        "-----END OPENSSH PRIVATE KEY-----"))
    assert [r.operation for r in outcome.results] == ["dropped"]
    assert outcome.summary == "Dropped 1 (privacy_drop)."
    assert not Fragment.objects.exists()


def test_policy_drop_follows_the_workspace_write_policy(people, bruno):
    tenant = people.acme
    tenant.write_policy = "blocklist"
    tenant.blocked_terms = ["Project Falcon", "layoffs"]
    tenant.save()
    outcome = fragment_write(caller=bruno, content="Project Falcon launches in May. Lunch is at noon. "
                                                   "The layoffs list is final.")
    assert [(r.operation, r.reason) for r in outcome.results] == [
        ("dropped", "policy_drop"), ("stored", None), ("dropped", "policy_drop")]
    assert "Project Falcon" in outcome.results[0].explanation
    assert outcome.dropped == 2 and outcome.drop_reasons == ["policy_drop"]
    # Whole words only: "falconry" is not "Falcon".
    tenant.blocked_terms = ["falcon"]
    tenant.save()
    assert fragment_write(caller=bruno, content="I took up falconry.").results[0].operation == "stored"
    # An open policy refuses nothing.
    tenant.write_policy = "open"
    tenant.save()
    assert fragment_write(caller=bruno, content="Falcon is a nice name.").dropped == 0


def test_the_same_key_and_payload_returns_the_first_answer_without_writing(bruno):
    first = fragment_write(caller=bruno, content="The release train leaves on Tuesdays.", idempotency_key="k1")
    count = Fragment.objects.count()
    again = fragment_write(caller=bruno, content="The release train leaves on Tuesdays.", idempotency_key="k1")
    assert again == first
    assert write_output(again) == write_output(first)
    assert Fragment.objects.count() == count


def test_a_derived_key_makes_an_identical_retry_safe(bruno):
    first = fragment_write(caller=bruno, content="Lunch is at noon.", session_id="s1")
    assert fragment_write(caller=bruno, content="Lunch is at noon.", session_id="s1") == first
    assert Fragment.objects.count() == 1
    # Another payload (session) is another write.
    other = fragment_write(caller=bruno, content="Lunch is at noon.", session_id="s2")
    assert other.results[0].operation == "merged"


def test_reusing_a_key_with_another_payload_is_refused_for_24_hours(people, bruno):
    fragment_write(caller=bruno, content="The release train leaves on Tuesdays.", idempotency_key="k1")
    with pytest.raises(Conflict) as caught:
        fragment_write(caller=bruno, content="The release train leaves on Fridays.", idempotency_key="k1")
    assert caught.value.field == "idempotency_key"
    assert "24 hours" in caught.value.message
    # Keys are per principal: someone else may use the same key.
    fragment_write(caller=people.caller(people.cleo), content="The release train leaves on Fridays.",
                   idempotency_key="k1")
    # After 24 hours the key is free again.
    IdempotencyRecord.objects.update(created_at=timezone.now() - dt.timedelta(hours=24, seconds=1))
    outcome = fragment_write(caller=bruno, content="The release train leaves on Fridays.", idempotency_key="k1")
    assert outcome.results[0].operation == "superseded"


def test_enrichment_is_enqueued_on_commit_for_what_is_missing(bruno, monkeypatch,
                                                               django_capture_on_commit_callbacks):
    from memoryhub.celery import app

    sent = []
    # Services enqueue by task name through the Celery app.
    monkeypatch.setattr(app, "send_task", lambda name, args=None, **options: sent.append((name, args)))
    # Embedded at write time and no resource: nothing left for tier 2.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        fragment_write(caller=bruno, content="My favourite editor is Vim.")
    assert callbacks == [] and sent == []
    # A named resource is linked by tier 2.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        outcome = fragment_write(caller=bruno, content="The Q3 plan moves the launch to October.",
                                 resource="https://wiki.example/q3-plan")
    assert len(callbacks) == 1 and sent == [(enrichment.ENRICH_TASK, [[outcome.results[0].fragment_id]])]
    # With the embedder down the write still succeeds, and tier 2 embeds it later.
    monkeypatch.setattr(write, "_embed", lambda texts: None)
    with django_capture_on_commit_callbacks(execute=True):
        outcome = fragment_write(caller=bruno, content="Our office closes at 7pm.")
    assert sent[-1] == (enrichment.ENRICH_TASK, [[outcome.results[0].fragment_id]])
    assert Fragment.objects.get(pk=outcome.results[0].fragment_id).embedding is None


def test_an_agents_write_is_parked_as_a_proposal(people, bot):
    before = Fragment.objects.count()
    outcome = fragment_write(caller=bot, content="Ticket triage starts with P1s. The token is "
                                                 "ghp_16C7e42F292c6912E7710c838347Ae178B4a.", session_id="run-7")
    assert outcome.review_state == "pending"
    assert [r.operation for r in outcome.results] == ["proposed", "dropped"]
    assert outcome.dropped == 1 and outcome.drop_reasons == ["privacy_drop"]
    assert "awaiting" in outcome.results[0].explanation.lower()
    assert Fragment.objects.count() == before  # nothing became memory
    proposal = Proposal.objects.get(pk=outcome.proposal_id)
    assert proposal.state == "pending" and proposal.agent == people.triage_bot.agent
    assert proposal.content == "Ticket triage starts with P1s."  # the secret is not parked either
    assert proposal.session_id == "run-7" and proposal.client_id == people.triage_bot.client_id
    assert outcome.summary.startswith(f"Parked as proposal {proposal.pk}")
    # An agent's memory_write output names its proposal.
    out = write_output(outcome)
    assert set(out) == WRITE_FIELDS | {"proposal_id"} and out["proposal_id"] == str(proposal.pk)
    assert out["outcome"] == outcome.summary


@pytest.mark.django_db(transaction=True)
def test_parallel_retries_of_one_key_write_once_and_all_get_the_first_answer(people):
    """The retries wait for the first write, then read its answer; a retry
    with other content is refused."""
    import threading

    from django.db import connection

    bruno = people.caller(people.bruno)
    before = Fragment.objects.count()
    answers: list = []
    refused: list = []
    barrier = threading.Barrier(6)

    def retry(content: str) -> None:
        try:
            barrier.wait()
            answers.append(fragment_write(caller=bruno, content=content, idempotency_key="parallel"))
        except Conflict as exc:
            refused.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=retry, args=("The deploy window is Thursday evening.",)) for _ in range(5)]
    threads.append(threading.Thread(target=retry, args=("The deploy window is Friday morning.",)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Fragment.objects.count() - before == 1
    stored = Fragment.objects.filter(owner_user=people.bruno).order_by("-recorded_at").first()
    if len(answers) == 5:
        # The Thursday write came first: every retry of it has its answer, Friday's is refused.
        assert len(refused) == 1 and stored.value == "The deploy window is Thursday evening."
        assert all(answer == answers[0] for answer in answers)
    else:
        # Friday's came first: it is the one write, and every Thursday retry is refused.
        assert len(answers) == 1 and len(refused) == 5 and stored.value == "The deploy window is Friday morning."
    assert IdempotencyRecord.objects.filter(key__startswith="key:").count() == 1


def test_a_write_claims_its_key_in_one_statement(bruno):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        fragment_write(caller=bruno, content="The standup moved to 9:30.", idempotency_key="one-statement")
    idempotency = [entry["sql"] for entry in captured.captured_queries if "idempotencyrecord" in entry["sql"]]
    # The claim, and the answer stored once the write is done.
    assert len(idempotency) == 2 and idempotency[0].lstrip().startswith("INSERT"), idempotency
    assert idempotency[1].startswith("UPDATE"), idempotency


def test_a_one_fact_write_sends_five_statements(bruno):
    """The key's claim; the writer's lock with the write policy; the
    judgement's reads (the same text, the same subject, the nearest
    neighbours) in one statement; the insert; the answer kept for the key."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    first = fragment_write(caller=bruno, content="The release train leaves on Thursday.")
    assert first.counts["stored"] == 1
    with CaptureQueriesContext(connection) as captured:
        outcome = fragment_write(caller=bruno, content="The standup is at 9:30.")
    assert outcome.counts["stored"] == 1
    sent = [entry["sql"].strip() for entry in captured.captured_queries if "SAVEPOINT" not in entry["sql"]]
    assert len(sent) == 5, "\n".join(sql[:120] for sql in sent)
    assert sent[0].startswith("INSERT INTO memoryhub_idempotencyrecord")
    assert "pg_advisory_xact_lock" in sent[1] and "write_policy" in sent[1]
    assert sent[2].count("UNION ALL") == 2 and "<=>" in sent[2]
    assert sent[3].startswith('INSERT INTO "memoryhub_fragment"')
    assert sent[4].startswith('UPDATE "memoryhub_idempotencyrecord"')


def test_the_judgement_reads_neighbours_in_their_order(people, bruno):
    """The neighbours come from a union, which has no order of its own: its
    statement orders it, so the judgement weighs the nearest first, ties by
    id, and a neighbour whose distance is not a number last."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from pgvector.django import CosineDistance

    from memoryhub.models import Fragment

    for value in ("The deploy window is Thursday evening.", "The deploy freeze starts in December.",
                  "Our deploys go out on Thursdays.", "The office plants need water."):
        fragment_write(caller=bruno, content=value)
    writer = write.Writer(tenant=bruno.tenant, user=bruno.user)
    live = writer.live_private()
    vector = write._embed(["When is the deploy window?"])[0]
    # Two at the same distance (their order is their ids'), one with no direction (a NaN distance).
    window, freeze, thursdays, plants = live.order_by("recorded_at")
    live.filter(pk=freeze.pk).update(embedding=thursdays.embedding)
    live.filter(pk=plants.pk).update(embedding=[0.0] * len(vector))
    with CaptureQueriesContext(connection) as captured:
        found = write._judged_rows(writer, "When is the deploy window?", vector)
    (statement,) = [entry["sql"] for entry in captured.captured_queries]
    # The order is the whole statement's, after its last part: by its third, fourth and first
    # columns (kind, distance, id).
    assert statement.rsplit(")", 1)[-1].strip() == "ORDER BY 3 ASC, 4 ASC, 1 ASC", statement
    assert statement.startswith('(SELECT "memoryhub_fragment"."id" AS "id", "memoryhub_fragment"."value" AS "value", ')
    columns = statement.split(" FROM ", 1)[0]
    assert ' AS "kind", ' in columns and columns.endswith(' AS "distance"'), columns
    neighbours = [row.pk for row in found[write._NEIGHBOUR]]
    assert neighbours[-1] == plants.pk
    tied = sorted([freeze.pk, thursdays.pk])
    assert neighbours[neighbours.index(tied[0]):][:2] == tied
    expected = list(
        Fragment.objects.filter(pk__in=[window.pk, freeze.pk, thursdays.pk])
        .annotate(distance=CosineDistance("embedding", vector)).order_by("distance", "pk")
        .values_list("pk", flat=True)
    )
    assert neighbours == [*expected, plants.pk]
    assert write._SAME not in found and write._SUBJECT not in found


def _advisory_locks_held() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_the_writers_lock_is_held_to_the_end_of_the_transaction(live_people):
    """Held for the transaction, gone with it; and the write policy read with
    it is the workspace's as stored now, not the one read with the caller."""
    from django.db import transaction

    from memoryhub.models import Tenant

    tenant = Tenant.objects.get(pk=live_people.acme.pk)
    Tenant.objects.filter(pk=tenant.pk).update(write_policy=Tenant.WritePolicy.BLOCKLIST, blocked_terms=["ssn"])
    assert tenant.write_policy == Tenant.WritePolicy.OPEN
    assert _advisory_locks_held() == 0
    with transaction.atomic():
        write.Writer(tenant=tenant, user=live_people.bruno).hold()
        assert _advisory_locks_held() == 1
    assert _advisory_locks_held() == 0
    assert (tenant.write_policy, tenant.blocked_terms) == (Tenant.WritePolicy.BLOCKLIST, ["ssn"])


def test_a_write_for_a_workspace_gone_is_refused(people):
    import uuid

    from django.db import transaction

    from memoryhub.errors import NotFound
    from memoryhub.models import Tenant

    with pytest.raises(NotFound), transaction.atomic():
        write.Writer(tenant=Tenant(pk=uuid.uuid4()), user=people.bruno).hold()
