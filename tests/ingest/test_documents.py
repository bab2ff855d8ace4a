"""The document service: upsert, unchanged, update, delete, and what reads see before and after."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from memoryhub.errors import Conflict, InvalidArgument, NotFound
from memoryhub.models import Fragment, Resource
from memoryhub.services import ingest, workspaces
from memoryhub.services.search import memory_search

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


def values(result: dict) -> list[str]:
    return [fragment["value"] for fragment in result["fragments"]]


def test_it_stores_a_document_as_attributed_shared_fragments(acme):
    result = upsert(acme.wiki)
    assert (result.status, result.fragments, result.added, result.collection) == ("created", 2, 2, "runbooks")
    fragments = live(acme.wiki)
    resource = Resource.objects.get(tenant=acme.tenant, external_id="handbook.md")
    for fragment in fragments:
        assert fragment.collection.name == "runbooks"
        assert fragment.owner_user is None and fragment.owner_agent is None
        assert fragment.source == acme.wiki
        assert list(fragment.agents.all()) == [acme.wiki.agent]
        assert list(fragment.resources.all()) == [resource]
        assert fragment.created_at == CREATED
        assert fragment.grounding_status == Fragment.Grounding.GROUNDED
        assert fragment.embedding is None  # tier 2 fills it
    assert resource.source == acme.wiki and resource.created_at == CREATED

    found = memory_search(caller=acme.owner, query="rollback release tag")
    top = found["fragments"][0]
    assert "rollback reverts the release tag" in top["value"]
    assert top["agents"] == ["wiki"]
    assert top["resources"] == [{"id": "handbook.md", "title": "Handbook", "uri": "https://wiki.example.com/handbook"}]
    assert top["created_at"] == "2026-03-01T09:00:00Z"


def test_the_same_document_again_changes_nothing(acme, django_capture_on_commit_callbacks):
    upsert(acme.wiki)
    before = {(f.pk, f.recorded_at) for f in live(acme.wiki)}
    updated_at = Resource.objects.get(external_id="handbook.md").updated_at
    with django_capture_on_commit_callbacks() as callbacks:
        result = upsert(acme.wiki)
    assert (result.status, result.added, result.retired, result.kept) == ("unchanged", 0, 0, 2)
    assert {(f.pk, f.recorded_at) for f in live(acme.wiki)} == before
    assert Resource.objects.get(external_id="handbook.md").updated_at == updated_at
    assert Fragment.objects.count() == 2
    assert callbacks == []  # nothing to embed, nothing queued


def test_an_update_retires_the_changed_fragments_at_that_instant(acme):
    upsert(acme.wiki)
    before_update = timezone.now()
    old = {f.value: f for f in live(acme.wiki)}
    changed = HANDBOOK.replace("reverts the release tag", "redeploys the previous image")
    result = upsert(acme.wiki, text=changed)
    assert (result.status, result.kept, result.added, result.retired) == ("updated", 1, 1, 1)

    retired = Fragment.objects.get(pk=old[next(v for v in old if "release tag" in v)].pk)
    new = next(f for f in live(acme.wiki) if "previous image" in f.value)
    assert retired.retired_at == new.recorded_at
    assert retired.retired_reason == Fragment.Retired.SUPERSEDED
    # The unchanged section is the same fragment as before, never retired.
    kept = old[next(v for v in old if "Tuesdays" in v)]
    assert Fragment.objects.get(pk=kept.pk).retired_at is None

    now = memory_search(caller=acme.owner, query="rollback release tag previous image")
    assert any("previous image" in v for v in values(now))
    assert not any("release tag" in v for v in values(now))
    past = memory_search(caller=acme.owner, query="rollback release tag previous image", as_of=before_update)
    assert any("release tag" in v for v in values(past))
    assert not any("previous image" in v for v in values(past))


def test_a_new_title_or_uri_changes_the_resource_only(acme):
    upsert(acme.wiki)
    ids = {f.pk for f in live(acme.wiki)}
    result = upsert(acme.wiki, title="Team handbook", uri="https://wiki.example.com/team-handbook")
    assert (result.status, result.added, result.retired) == ("updated", 0, 0)
    assert {f.pk for f in live(acme.wiki)} == ids
    resource = Resource.objects.get(external_id="handbook.md")
    assert (resource.title, resource.uri) == ("Team handbook", "https://wiki.example.com/team-handbook")


def test_a_new_collection_or_created_at_replaces_every_fragment_and_reuses_their_vectors(acme):
    upsert(acme.wiki)
    ingest.fragments_embed_pending(source_id=acme.wiki.pk)
    vectors = {f.value: list(f.embedding) for f in live(acme.wiki)}
    result = upsert(acme.wiki, collection="incidents")
    assert (result.status, result.kept, result.added, result.retired) == ("updated", 0, 2, 2)
    moved = live(acme.wiki)
    assert {f.collection.name for f in moved} == {"incidents"}
    # Keyed by content hash: the same text needs no second embedding.
    assert {f.value: list(f.embedding) for f in moved} == vectors

    result = upsert(acme.wiki, collection="incidents", created_at=CREATED + dt.timedelta(days=1))
    assert (result.kept, result.added, result.retired) == (0, 2, 2)
    assert {f.created_at for f in live(acme.wiki)} == {CREATED + dt.timedelta(days=1)}


def test_delete_retires_every_fragment_and_the_past_still_sees_them(acme):
    upsert(acme.wiki)
    before_delete = timezone.now()
    result = ingest.document_delete(source=acme.wiki, resource_id="handbook.md")
    assert (result.status, result.retired) == ("deleted", 2)
    assert live(acme.wiki) == []
    assert {f.retired_reason for f in Fragment.objects.all()} == {Fragment.Retired.FORGOTTEN}
    assert Resource.objects.get(external_id="handbook.md").deleted_at is not None

    assert memory_search(caller=acme.owner, query="rollback release tag")["fragments"] == []
    past = memory_search(caller=acme.owner, query="rollback release tag", as_of=before_delete)
    assert any("release tag" in v for v in values(past))

    again = ingest.document_delete(source=acme.wiki, resource_id="handbook.md")
    assert (again.status, again.retired) == ("already_deleted", 0)
    restored = upsert(acme.wiki)
    assert (restored.status, restored.added) == ("created", 2)


def test_deleting_a_document_never_sent_is_not_found(acme):
    with pytest.raises(NotFound) as caught:
        ingest.document_delete(source=acme.wiki, resource_id="nowhere.md")
    assert caught.value.field == "resource_id"


def test_a_resource_id_of_another_source_is_refused_and_nothing_is_written(acme):
    upsert(acme.wiki)
    with pytest.raises(Conflict) as caught:
        upsert(acme.tickets, text="Somebody else's text.")
    assert caught.value.field == "resource_id"
    with pytest.raises(Conflict):
        ingest.document_delete(source=acme.tickets, resource_id="handbook.md")
    assert Fragment.objects.filter(source=acme.tickets).count() == 0
    assert len(live(acme.wiki)) == 2


def test_embedding_is_queued_only_once_the_document_commits(acme, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        upsert(acme.wiki)
    assert len(callbacks) == 1


def test_the_embedding_write_only_fills_empty_vectors(acme):
    upsert(acme.wiki)
    first = ingest.fragments_embed_pending(source_id=acme.wiki.pk)
    assert (first.embedded, first.more) == (2, False)
    stamped = {f.pk: f.embedded_at for f in live(acme.wiki)}
    assert all(stamped.values())
    # A second delivery of the same work finds nothing to do...
    assert ingest.fragments_embed_pending(source_id=acme.wiki.pk).embedded == 0
    # ...and even a write aimed at those rows changes none of them.
    ids = list(stamped)
    assert ingest._embeddings_write(ids, [[0.0] * 384 for _ in ids]) == 0
    assert {f.pk: f.embedded_at for f in live(acme.wiki)} == stamped


def test_progress_counts_what_is_searchable(acme):
    upsert(acme.wiki)
    upsert(acme.wiki, resource_id="gone.md", text="A page that will be deleted.")
    ingest.document_delete(source=acme.wiki, resource_id="gone.md")
    assert ingest.source_progress(source=acme.wiki) == {
        "source": "wiki", "documents": 1, "deleted_documents": 1, "fragments": 2, "pending_embedding": 2,
    }
    ingest.fragments_embed_pending(source_id=acme.wiki.pk)
    assert ingest.source_progress(source=acme.wiki)["pending_embedding"] == 0
    status = ingest.document_status(source=acme.wiki, resource_id="handbook.md")
    assert (status["fragments"], status["pending_embedding"], status["collection"]) == (2, 0, "runbooks")


def test_nothing_crosses_workspaces(acme):
    globex = workspaces.workspace_create(slug="globex")
    workspaces.collection_create(tenant=globex, name="handbooks")
    source, _ = workspaces.source_connect(tenant=globex, name="globex-wiki", collection="handbooks")
    upsert(acme.wiki)
    # The same resource id in another workspace is another document.
    assert upsert(source).status == "created"
    assert len(live(acme.wiki)) == 2 and len(live(source)) == 2
    # And another workspace's collections do not exist here.
    with pytest.raises(InvalidArgument) as caught:
        upsert(source, resource_id="x.md", collection="runbooks")
    assert caught.value.field == "collection"
    assert ingest.document_delete(source=source, resource_id="handbook.md").retired == 2
    assert len(live(acme.wiki)) == 2
