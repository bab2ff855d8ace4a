"""Rotating and revoking a connected source's credentials: admins only; the
old secret and every token minted with it stop at once; what the source
contributed stays."""

from __future__ import annotations

import pytest

from memoryhub.errors import NotFound, PermissionDenied
from memoryhub.models import Fragment
from memoryhub.services import sources
from memoryhub.services.ingest import fragment_ingest
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
