"""Rotating and revoking a connected source's credentials: admins only; the
old secret and every token minted with it stop at once; what the source
contributed stays."""

from __future__ import annotations

import pytest

from memoryhub.errors import NotFound, PermissionDenied
from memoryhub.models import Fragment, Source
from memoryhub.services import sources
from memoryhub.services.ingest import fragment_ingest
from tests.conftest import signed_in
from tests.ingest.conftest import client_credentials_token, doc


def test_only_an_admin_of_the_workspace_rotates_or_revokes(people):
    for caller in (people.caller(people.bruno), people.caller(people.triage_bot)):
        with pytest.raises(PermissionDenied):
            sources.source_revoke(caller=caller, name="wiki")
        with pytest.raises(PermissionDenied):
            sources.source_rotate_secret(caller=caller, name="wiki")
    with pytest.raises(NotFound):
        sources.source_revoke(caller=people.caller(people.olga), name="wiki")  # acme's, not globex's


def test_a_rotated_secret_ends_the_old_one_and_its_tokens(live_people, asgi_server, wiki_api):
    old = live_people.wiki_credentials
    rotated = sources.source_rotate_secret(caller=live_people.caller(live_people.ada), name="wiki")
    assert rotated.client_id == old.client_id and rotated.client_secret != old.client_secret
    assert wiki_api.upsert(doc()).status_code == 401  # the token minted before the rotation
    assert client_credentials_token(asgi_server.url, old.client_id, old.client_secret).status_code == 401
    fresh = client_credentials_token(asgi_server.url, rotated.client_id, rotated.client_secret)
    assert fresh.status_code == 200, fresh.text


def test_a_revoked_source_keeps_what_it_contributed(live_people, asgi_server, wiki_api):
    fragment, _ = fragment_ingest(source=live_people.wiki, value="Contributed before the source was revoked.")
    sources.source_revoke(caller=live_people.caller(live_people.ada), name="wiki")
    assert wiki_api.upsert(doc()).status_code == 401
    assert Fragment.objects.filter(pk=fragment.pk, retired_at__isnull=True).exists()
    with pytest.raises(PermissionDenied, match="revoked"):
        sources.source_get(caller=live_people.caller(live_people.ada), name="wiki")


def test_a_disabled_source_is_refused_with_a_reason_and_enabled_again(live_people, asgi_server, wiki_api):
    fragment, _ = fragment_ingest(source=live_people.wiki, value="Contributed before the source was disabled.")
    ada = live_people.caller(live_people.ada)
    sources.source_set_enabled(caller=ada, name="wiki", enabled=False)
    refused = wiki_api.upsert(doc())
    assert refused.status_code == 403 and "disabled by an admin" in refused.json()["error"]["message"]
    live_people.wiki.refresh_from_db()
    assert "disabled by an admin" in live_people.wiki.last_error  # its health line shows the refusal
    assert Fragment.objects.filter(pk=fragment.pk, retired_at__isnull=True).exists()
    sources.source_set_enabled(caller=ada, name="wiki", enabled=True)
    assert wiki_api.upsert(doc()).status_code == 201  # the same token works again
    with pytest.raises(PermissionDenied):
        sources.source_set_enabled(caller=live_people.caller(live_people.bruno), name="wiki", enabled=False)


def test_the_health_line_shows_contributions_waiting_work_and_the_last_refusal(live_people, asgi_server, wiki_api):
    assert wiki_api.upsert(doc()).status_code == 201
    assert wiki_api.upsert(doc("handbook/other.md")).status_code == 201
    assert wiki_api.delete("handbook/other.md").status_code == 200
    bad = wiki_api.upsert({**doc("handbook/bad.md"), "created_at": "yesterday"})
    assert bad.status_code == 400
    health = {h.source.agent.name: h for h in sources.sources_health(caller=live_people.caller(live_people.ada))}
    wiki = health["wiki"]
    assert (wiki.state, wiki.documents, wiki.deleted_documents, wiki.fragments) == ("active", 1, 1, 1)
    assert wiki.pending_embedding == 1 and wiki.last_change is not None  # no worker runs here
    wiki.source.refresh_from_db()
    assert "created_at" in wiki.source.last_error and wiki.source.last_error_at is not None
    page = signed_in(live_people.ada).get("/workspace/sources/").content.decode()
    assert "1 document (1 deleted) · 1 fragment · <strong>1 waiting for their embedding</strong>" in page
    assert "created_at" in page and "Last refused" in page
    assert health["tickets"].documents == 0 and health["tickets"].last_change is None


def test_the_sources_page_buttons_and_the_command(people, capsys):
    import json

    from django.core.management import call_command

    admin = signed_in(people.ada)
    rotated = admin.post("/workspace/sources/wiki/rotate/")
    assert rotated.status_code == 200 and "New secret for wiki" in rotated.content.decode()
    assert "no-store" in rotated["Cache-Control"]
    assert "is disabled" in admin.post("/workspace/sources/wiki/disable/", follow=True).content.decode()
    call_command("source", "acme", "wiki", "status", json=True)
    assert json.loads(capsys.readouterr().out)["state"] == "disabled"
    call_command("source", "acme", "wiki", "enable", json=True)
    assert json.loads(capsys.readouterr().out)["state"] == "active"
    assert admin.post("/workspace/sources/wiki/explode/").status_code == 404
    assert signed_in(people.bruno).post("/workspace/sources/wiki/disable/").status_code == 403
    # Revoking cannot be undone: the page asks for the name typed again, and anything else ends nothing.
    for typed in ({}, {"confirm": "wik"}, {"confirm": "WIKI"}, {"confirm": "w" * 201}):
        refused = admin.post("/workspace/sources/wiki/revoke/", typed, follow=True).content.decode()
        assert "Type wiki exactly" in refused, typed
    assert admin.post("/workspace/sources/wiki/revoke/", {"confirm": "wiki\x00"}).status_code == 400
    assert Source.objects.get(tenant=people.acme, agent__name="wiki").agent.revoked_at is None
    assert "revoked for good" in admin.post("/workspace/sources/wiki/revoke/", {"confirm": " wiki "},
                                            follow=True).content.decode()
    call_command("source", "acme", "wiki", "status", json=True)
    assert json.loads(capsys.readouterr().out)["state"] == "revoked"


def test_the_command_does_not_feed_a_disabled_source(people, tmp_path):
    from django.core.management import CommandError, call_command

    sources.source_set_enabled(caller=people.caller(people.ada), name="wiki", enabled=False)
    export = tmp_path / "docs.jsonl"
    export.write_text('{"resource_id": "a.md", "text": "A document."}\n')
    with pytest.raises(CommandError, match="disabled by an admin"):
        call_command("ingest", "acme", "wiki", str(export), no_progress=True)
