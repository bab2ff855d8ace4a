"""Collections."""

from __future__ import annotations

from memoryhub.models import Collection
from tests.conftest import signed_in


def test_it_lists_collections_with_their_readers(people):
    text = signed_in(people.ada).get("/workspace/collections/").content.decode()
    assert "runbooks" in text and "incidents" in text and "accounts" in text and "engineering" in text


def test_it_adds_a_collection(people):
    client = signed_in(people.ada)
    added = client.post("/workspace/collections/add/", {"name": "postmortems", "description": "Postmortems"})
    assert added.status_code == 302
    assert Collection.objects.get(tenant=people.acme, name="postmortems").description == "Postmortems"
    assert client.post("/workspace/collections/add/", {"name": "postmortems"}).status_code == 400


def test_it_validates_ownership(people):
    signed_in(people.olga).post("/workspace/collections/add/", {"name": "globex-notes"})
    assert Collection.objects.get(name="globex-notes").tenant == people.globex
    assert "globex-notes" not in signed_in(people.ada).get("/workspace/collections/").content.decode()
    assert signed_in(people.bruno).post("/workspace/collections/add/", {"name": "x"}).status_code == 403
    assert not Collection.objects.filter(name="x").exists()


def test_it_counts_renames_retires_and_deletes(people):
    from django.utils import timezone

    from memoryhub.models import AccessRule, Fragment, Source
    from tests.pages.helpers import search, share

    share(people, "Rotate the TLS certificates every quarter.", "runbooks")
    admin = signed_in(people.ada)
    runbooks = Collection.objects.get(tenant=people.acme, name="runbooks")
    page = admin.get("/workspace/collections/").content.decode()
    assert "1 live fragment" in page
    before = timezone.now()
    # Rename: a taken name is refused, a free one kept; the rules and the source follow the row.
    assert "already exists" in admin.post(f"/workspace/collections/{runbooks.pk}/rename/", {"name": "incidents"},
                                          follow=True).content.decode()
    admin.post(f"/workspace/collections/{runbooks.pk}/rename/", {"name": "Run Books"})
    assert Collection.objects.get(pk=runbooks.pk).name == "run-books"
    # Delete is refused while something live is in it; retiring needs its name typed.
    assert "still holds 1 live fragment" in admin.post(f"/workspace/collections/{runbooks.pk}/delete/",
                                                       follow=True).content.decode()
    assert "Type run-books exactly" in admin.post(f"/workspace/collections/{runbooks.pk}/retire/",
                                                  {"confirm": "runbooks"}, follow=True).content.decode()
    retired = admin.post(f"/workspace/collections/{runbooks.pk}/retire/", {"confirm": "run-books"}, follow=True)
    assert "Retired 1 fragment" in retired.content.decode()
    assert search(people.bruno, "TLS certificates").hits == []
    assert [h.fragment.value for h in search(people.bruno, "TLS certificates", as_of=before).hits] == [
        "Rotate the TLS certificates every quarter."]
    deleted = admin.post(f"/workspace/collections/{runbooks.pk}/delete/", follow=True).content.decode()
    assert "Collection run-books deleted" in deleted and "run-books</h2>" not in deleted
    hidden = Collection.objects.get(pk=runbooks.pk)
    assert hidden.deleted_at is not None and hidden.name != "run-books"
    assert not AccessRule.objects.filter(collection=hidden).exists()
    assert Source.objects.get(pk=people.wiki.pk).default_collection is None
    assert Fragment.objects.filter(collection=hidden).count() == 1  # its retired fragment keeps its home
    # The name is free again; a collection that never held anything goes entirely.
    admin.post("/workspace/collections/add/", {"name": "run-books"})
    empty = Collection.objects.get(tenant=people.acme, name="run-books")
    admin.post(f"/workspace/collections/{empty.pk}/delete/")
    assert not Collection.objects.filter(pk=empty.pk).exists()
    assert admin.post(f"/workspace/collections/{empty.pk}/delete/").status_code == 404
    assert admin.post(f"/workspace/collections/{hidden.pk}/rename/", {"name": "back"}).status_code == 404


def test_only_the_workspaces_admins_change_collections(people):
    runbooks = Collection.objects.get(tenant=people.acme, name="runbooks")
    assert signed_in(people.bruno).post(f"/workspace/collections/{runbooks.pk}/delete/").status_code == 403
    assert signed_in(people.olga).post(f"/workspace/collections/{runbooks.pk}/rename/",
                                       {"name": "mine"}).status_code == 404
    assert signed_in(people.ada).post(f"/workspace/collections/{runbooks.pk}/explode/").status_code == 404
    assert Collection.objects.get(pk=runbooks.pk).name == "runbooks"


def test_a_retired_collections_documents_come_back_when_sent_again(people):
    from memoryhub.services.ingest import document_upsert, document_validated
    from tests.ingest.conftest import doc

    def send():  # type: ignore[no-untyped-def]
        return document_upsert(source=people.wiki, document=document_validated(**doc("handbook/a.md", "Text A.")))

    assert send().status == "created"
    runbooks = Collection.objects.get(tenant=people.acme, name="runbooks")
    signed_in(people.ada).post(f"/workspace/collections/{runbooks.pk}/retire/", {"confirm": "runbooks"})
    again = send()
    assert again.status == "created" and again.added == 1  # not "unchanged" with nothing live


def test_a_rename_is_judged_on_the_whole_name_sent(people):
    """The page hands the service the name as posted: 64 characters are kept,
    a longer one is refused with its own length, a NUL byte is a bad request,
    and a refused rename changes nothing."""
    from memoryhub.services.collections import COLLECTION_NAME_MAX_CHARS

    admin = signed_in(people.ada)
    runbooks = Collection.objects.get(tenant=people.acme, name="runbooks")
    url = f"/workspace/collections/{runbooks.pk}/rename/"
    for sent, why in [("r" * (COLLECTION_NAME_MAX_CHARS + 1), f"is {COLLECTION_NAME_MAX_CHARS + 1} characters long"),
                      ("r" * 5000, "is 5000 characters long")]:
        page = admin.post(url, {"name": sent}, follow=True)
        assert page.status_code == 200
        assert why in page.content.decode(), why
        assert Collection.objects.get(pk=runbooks.pk).name == "runbooks"
    assert admin.post(url, {"name": "run\x00books"}).status_code == 400
    assert Collection.objects.get(pk=runbooks.pk).name == "runbooks"
    admin.post(url, {"name": "r" * COLLECTION_NAME_MAX_CHARS})
    assert Collection.objects.get(pk=runbooks.pk).name == "r" * COLLECTION_NAME_MAX_CHARS
