"""The document service: upsert, unchanged, update, delete, and what reads see before and after."""

from __future__ import annotations

import base64
import datetime as dt
import json

import pytest
from django.utils import timezone

from memoryhub.errors import Conflict, InvalidArgument, NotFound
from memoryhub.mcp_adapter.render import search_output
from memoryhub.models import Fragment, Resource
from memoryhub.services import enrichment, ingest
from memoryhub.services.provenance import DocumentRef
from tests.ingest.conftest import search, values

CREATED = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)
HANDBOOK = (
    "# Deploys\n\nWe deploy the billing service on Tuesdays after the change review.\n\n"
    "# Rollbacks\n\nA rollback reverts the release tag and pages the billing on-call engineer."
)


def upsert(source, resource_id="handbook.md", text=HANDBOOK, **fields):  # type: ignore[no-untyped-def]
    fields.setdefault("title", "Handbook")
    fields.setdefault("uri", "https://wiki.example.com/handbook")
    fields.setdefault("created_at", CREATED)
    document = ingest.document_validated(resource_id=resource_id, text=text, **fields)
    return ingest.document_upsert(source=source, document=document)


def live(source, resource_id="handbook.md"):  # type: ignore[no-untyped-def]
    return list(Fragment.objects.filter(source=source, resources__external_id=resource_id, retired_at__isnull=True)
                .order_by("value"))


def test_it_stores_a_document_as_attributed_shared_fragments(people):
    result = upsert(people.wiki)
    assert (result.status, result.fragments, result.added, result.collection) == ("created", 2, 2, "runbooks")
    fragments = live(people.wiki)
    resource = Resource.objects.get(tenant=people.acme, external_id="handbook.md")
    for fragment in fragments:
        assert fragment.collection.name == "runbooks"
        assert fragment.owner_user is None and fragment.owner_agent is None
        assert fragment.source == people.wiki
        assert list(fragment.agents.all()) == [people.wiki.agent]
        assert list(fragment.resources.all()) == [resource]
        assert fragment.created_at == CREATED
        assert fragment.grounding_status == Fragment.Grounding.GROUNDED
        assert fragment.embedding is None  # tier 2 fills it
    assert resource.source == people.wiki and resource.created_at == CREATED

    found = search(people, people.bruno, "rollback release tag")
    top = found.hits[0]
    assert "rollback reverts the release tag" in top.fragment.value
    assert top.provenance.agents == ("wiki",)
    assert top.provenance.documents == (
        DocumentRef(id="handbook.md", title="Handbook", uri="https://wiki.example.com/handbook"),)
    assert top.fragment.created_at == CREATED
    # And as memory_search's contract renders it.
    rendered = search_output(found)["fragments"][0]
    assert rendered["agents"] == ["wiki"]
    assert rendered["resources"] == [{"id": "handbook.md", "title": "Handbook",
                                      "uri": "https://wiki.example.com/handbook"}]
    assert rendered["created_at"] == "2026-03-01T09:00:00Z"


def test_the_same_document_again_changes_nothing(people, django_capture_on_commit_callbacks):
    upsert(people.wiki)
    before = {(f.pk, f.recorded_at) for f in live(people.wiki)}
    updated_at = Resource.objects.get(external_id="handbook.md").updated_at
    with django_capture_on_commit_callbacks() as callbacks:
        result = upsert(people.wiki)
    assert (result.status, result.added, result.retired, result.kept) == ("unchanged", 0, 0, 2)
    assert {(f.pk, f.recorded_at) for f in live(people.wiki)} == before
    assert Resource.objects.get(external_id="handbook.md").updated_at == updated_at
    assert Fragment.objects.count() == 2
    assert callbacks == []  # nothing to embed, nothing queued


def test_an_update_retires_the_changed_fragments_at_that_instant(people):
    upsert(people.wiki)
    before_update = timezone.now()
    old = {f.value: f for f in live(people.wiki)}
    changed = HANDBOOK.replace("reverts the release tag", "redeploys the previous image")
    result = upsert(people.wiki, text=changed)
    assert (result.status, result.kept, result.added, result.retired) == ("updated", 1, 1, 1)

    retired = Fragment.objects.get(pk=old[next(v for v in old if "release tag" in v)].pk)
    new = next(f for f in live(people.wiki) if "previous image" in f.value)
    assert retired.retired_at == new.recorded_at
    assert retired.retired_reason == Fragment.Retired.SUPERSEDED
    # The unchanged section is the same fragment as before, never retired.
    kept = old[next(v for v in old if "Tuesdays" in v)]
    assert Fragment.objects.get(pk=kept.pk).retired_at is None

    now = search(people, people.bruno, "rollback release tag previous image")
    assert any("previous image" in v for v in values(now))
    assert not any("release tag" in v for v in values(now))
    past = search(people, people.bruno, "rollback release tag previous image", as_of=before_update)
    assert any("release tag" in v for v in values(past))
    assert not any("previous image" in v for v in values(past))


def test_a_new_title_or_uri_changes_the_resource_only(people):
    upsert(people.wiki)
    ids = {f.pk for f in live(people.wiki)}
    result = upsert(people.wiki, title="Team handbook", uri="https://wiki.example.com/team-handbook")
    assert (result.status, result.added, result.retired) == ("updated", 0, 0)
    assert {f.pk for f in live(people.wiki)} == ids
    resource = Resource.objects.get(external_id="handbook.md")
    assert (resource.title, resource.uri) == ("Team handbook", "https://wiki.example.com/team-handbook")


def test_a_new_collection_or_created_at_replaces_every_fragment_and_reuses_their_vectors(people):
    upsert(people.wiki)
    enrichment.fragments_embed_pending(source_id=people.wiki.pk)
    vectors = {f.value: list(f.embedding) for f in live(people.wiki)}
    result = upsert(people.wiki, collection="incidents")
    assert (result.status, result.kept, result.added, result.retired) == ("updated", 0, 2, 2)
    moved = live(people.wiki)
    assert {f.collection.name for f in moved} == {"incidents"}
    # Keyed by content hash: the same text needs no second embedding.
    assert {f.value: list(f.embedding) for f in moved} == vectors

    result = upsert(people.wiki, collection="incidents", created_at=CREATED + dt.timedelta(days=1))
    assert (result.kept, result.added, result.retired) == (0, 2, 2)
    assert {f.created_at for f in live(people.wiki)} == {CREATED + dt.timedelta(days=1)}


def test_delete_retires_every_fragment_and_the_past_still_sees_them(people):
    upsert(people.wiki)
    before_delete = timezone.now()
    result = ingest.document_delete(source=people.wiki, resource_id="handbook.md")
    assert (result.status, result.retired) == ("deleted", 2)
    assert live(people.wiki) == []
    assert {f.retired_reason for f in Fragment.objects.all()} == {Fragment.Retired.FORGOTTEN}
    assert Resource.objects.get(external_id="handbook.md").deleted_at is not None

    assert search(people, people.bruno, "rollback release tag").hits == []
    past = search(people, people.bruno, "rollback release tag", as_of=before_delete)
    assert any("release tag" in v for v in values(past))

    again = ingest.document_delete(source=people.wiki, resource_id="handbook.md")
    assert (again.status, again.retired) == ("already_deleted", 0)
    restored = upsert(people.wiki)
    assert (restored.status, restored.added) == ("created", 2)


def test_deleting_a_document_never_sent_is_not_found(people):
    with pytest.raises(NotFound) as caught:
        ingest.document_delete(source=people.wiki, resource_id="nowhere.md")
    assert caught.value.field == "resource_id"


def test_a_resource_id_of_another_source_is_refused_and_nothing_is_written(people):
    upsert(people.wiki)
    with pytest.raises(Conflict) as caught:
        upsert(people.tickets, text="Somebody else's text.")
    assert caught.value.field == "resource_id"
    with pytest.raises(Conflict):
        ingest.document_delete(source=people.tickets, resource_id="handbook.md")
    assert Fragment.objects.filter(source=people.tickets).count() == 0
    assert len(live(people.wiki)) == 2


def newly_queued(queue: str, before: int) -> list[tuple[str, list]]:
    """(task name, args) of the messages put on the broker's `queue` since it held
    `before` of them, newest last; they are taken off again (no worker runs here)."""
    import redis
    from django.conf import settings

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    new = broker.llen(queue) - before
    # kombu's Redis transport LPUSHes: the newest messages are at the head of the list.
    messages = [broker.lpop(queue) for _ in range(new)][::-1]
    found = []
    for raw in messages:
        message = json.loads(raw)
        body = json.loads(base64.b64decode(message["body"]))
        found.append((message["headers"]["task"], body[0]))
    return found


def queue_length(queue: str) -> int:
    import redis
    from django.conf import settings

    return redis.Redis.from_url(settings.CELERY_BROKER_URL).llen(queue)


def test_embedding_is_queued_by_task_name_only_once_the_document_commits(
    people, django_capture_on_commit_callbacks, private_task_queue
):
    before = queue_length(private_task_queue)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        upsert(people.wiki)
    assert len(callbacks) == 1
    assert queue_length(private_task_queue) == before  # nothing before the commit
    callbacks[0]()
    assert newly_queued(private_task_queue, before) == [(enrichment.EMBED_SOURCE_TASK, [people.wiki.pk])]
    assert enrichment.EMBED_SOURCE_TASK == "memoryhub.tasks.embed_source_fragments"
    # While that task waits, the next commit of the same source queues no second one.
    with django_capture_on_commit_callbacks(execute=True):
        upsert(people.wiki, resource_id="other.md", text="Another page of the same source.")
    assert newly_queued(private_task_queue, before) == []


def test_a_single_fragment_from_a_source_is_enriched_by_task_name_after_commit(
    people, django_capture_on_commit_callbacks, private_task_queue
):
    before = queue_length(private_task_queue)
    with django_capture_on_commit_callbacks(execute=True):
        fragment, created = ingest.fragment_ingest(
            source=people.wiki, value="The VPN gateway restarts every Sunday at 03:00.",
            resources=[{"id": "vpn.md", "title": "VPN", "uri": "https://wiki.example.com/vpn"}],
        )
    assert created
    assert newly_queued(private_task_queue, before) == [(enrichment.ENRICH_TASK, [[str(fragment.pk)]])]
    assert enrichment.ENRICH_TASK == "memoryhub.tasks.enrich_fragments"
    assert list(fragment.resources.values_list("external_id", "uri")) == [("vpn.md", "https://wiki.example.com/vpn")]


@pytest.mark.parametrize("uri", ["javascript:alert(1)", "data:text/html,x", "file:///etc/passwd", "vpn.md",
                                 "//evil.example.com/vpn"])
def test_a_single_fragments_document_link_must_be_http_too(people, uri):
    with pytest.raises(InvalidArgument) as caught:
        ingest.fragment_ingest(source=people.wiki, value="The VPN gateway restarts every Sunday at 03:00.",
                               resources=[{"id": "vpn.md", "title": "VPN", "uri": uri}])
    assert caught.value.field == "uri"
    assert not Fragment.objects.exists() and not Resource.objects.exists()


def test_the_embedding_write_only_fills_empty_vectors(people):
    upsert(people.wiki)
    first = enrichment.fragments_embed_pending(source_id=people.wiki.pk)
    assert (first.embedded, first.more) == (2, False)
    stamped = {f.pk: f.embedded_at for f in live(people.wiki)}
    assert all(stamped.values())
    # A second delivery of the same work finds nothing to do...
    assert enrichment.fragments_embed_pending(source_id=people.wiki.pk).embedded == 0
    # ...and even a write aimed at those rows changes none of them.
    ids = list(stamped)
    assert enrichment._embeddings_write(ids, [[0.0] * 384 for _ in ids]) == 0
    assert {f.pk: f.embedded_at for f in live(people.wiki)} == stamped


def test_progress_counts_what_is_searchable(people):
    upsert(people.wiki)
    upsert(people.wiki, resource_id="gone.md", text="A page that will be deleted.")
    ingest.document_delete(source=people.wiki, resource_id="gone.md")
    assert ingest.source_progress(source=people.wiki) == {
        "source": "wiki", "documents": 1, "deleted_documents": 1, "fragments": 2, "pending_embedding": 2,
    }
    enrichment.fragments_embed_pending(source_id=people.wiki.pk)
    assert ingest.source_progress(source=people.wiki)["pending_embedding"] == 0
    status = ingest.document_status(source=people.wiki, resource_id="handbook.md")
    assert (status["fragments"], status["pending_embedding"], status["collection"]) == (2, 0, "runbooks")


def test_nothing_crosses_workspaces(people):
    source = people.globex_wiki  # feeds globex's own "runbooks"
    upsert(people.wiki)
    # The same resource id in another workspace is another document.
    assert upsert(source).status == "created"
    assert len(live(people.wiki)) == 2 and len(live(source)) == 2
    assert {f.collection.tenant for f in live(source)} == {people.globex}
    # And another workspace's collections do not exist here.
    with pytest.raises(InvalidArgument) as caught:
        upsert(source, resource_id="x.md", collection="incidents")
    assert caught.value.field == "collection"
    assert ingest.document_delete(source=source, resource_id="handbook.md").retired == 2
    assert len(live(people.wiki)) == 2
