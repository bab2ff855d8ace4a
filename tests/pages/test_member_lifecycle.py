"""A member's lifecycle: deactivated (signed out, every app disconnected at
once, their token refused at /mcp on the next request), reactivated, removed
(no roles; memory kept, readable by nobody, erasable); passwords changed by
the person and set by an admin."""

from __future__ import annotations

import datetime as dt
import json
import secrets

import httpx2
import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from oauth2_provider.models import AccessToken, Grant, RefreshToken

from memoryhub.errors import Conflict, PermissionDenied
from memoryhub.models import Fragment, Membership, User
from memoryhub.services import members
from tests.conftest import PASSWORD, signed_in
from tests.pages.helpers import remember, sign_in_form
from tests.support.tokens import REDIRECT_URI, person_mcp_token


def _tokens(user: User) -> tuple[str, RefreshToken]:
    """A connected app of `user`: an access token, its refresh token and a code not yet exchanged."""
    raw, access = person_mcp_token(user, scope="memory.read memory.write")
    refresh = RefreshToken.objects.create(application=access.application, user=user, token=secrets.token_urlsafe(32),
                                          access_token=access)
    Grant.objects.create(application=access.application, user=user, code=secrets.token_urlsafe(16),
                         expires=timezone.now() + dt.timedelta(minutes=1), redirect_uri=REDIRECT_URI,
                         scope="memory.read", code_challenge="x" * 43, code_challenge_method="S256")
    return raw, refresh


def test_deactivating_ends_every_credential_at_once(people):
    _, refresh = _tokens(people.bruno)
    session = signed_in(people.bruno)
    assert session.get("/memory/").status_code == 200
    members.member_deactivate(caller=people.caller(people.ada), user_id=people.bruno.pk)
    assert not AccessToken.objects.filter(user=people.bruno).exists()
    assert RefreshToken.objects.get(pk=refresh.pk).revoked is not None
    assert not Grant.objects.filter(user=people.bruno).exists()
    # The web session ends on its next request.
    assert session.get("/memory/").status_code == 302
    assert sign_in_form(Client(), people.bruno).status_code != 302  # cannot sign in
    members.member_reactivate(caller=people.caller(people.ada), user_id=people.bruno.pk)
    assert sign_in_form(Client(), people.bruno).status_code == 302


def test_the_token_stops_working_at_mcp_on_the_next_request(asgi_server, live_people):
    people = live_people
    raw, _ = _tokens(people.bruno)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Authorization": f"Bearer {raw}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28"}
    before = httpx2.post(f"{asgi_server.url}/mcp", json=call, headers=headers, timeout=30)
    assert before.status_code != 401, before.text
    members.member_deactivate(caller=people.caller(people.ada), user_id=people.bruno.pk)
    after = httpx2.post(f"{asgi_server.url}/mcp", json=call, headers=headers, timeout=30)
    assert after.status_code == 401
    assert after.headers["WWW-Authenticate"].startswith("Bearer")


def test_an_admin_cannot_deactivate_themselves_or_the_last_admin(people):
    with pytest.raises(Conflict, match="yourself"):
        members.member_deactivate(caller=people.caller(people.ada), user_id=people.ada.pk)
    with pytest.raises(Conflict, match="at least one admin"):
        members.member_deactivate(caller=people.system(), user_id=people.ada.pk)
    with pytest.raises(PermissionDenied):
        members.member_deactivate(caller=people.caller(people.cleo), user_id=people.bruno.pk)
    assert User.objects.get(pk=people.ada.pk).is_active


def test_removing_keeps_memory_readable_by_nobody_until_it_is_erased(people):
    remember(people.bruno, "My locker code is in the blue notebook.")
    members.member_remove(caller=people.caller(people.ada), user_id=people.bruno.pk)
    membership = Membership.objects.get(user=people.bruno)
    assert membership.removed_at is not None and not membership.roles.exists() and not membership.is_admin
    assert Fragment.objects.filter(owner_user=people.bruno, value__contains="blue notebook").exists()
    page = signed_in(people.ada).get("/workspace/members/").content.decode()
    assert "removed " in page and "Reactivate" in page
    response = signed_in(people.ada).post(f"/workspace/members/{people.bruno.pk}/erase/", {"confirm": "bruno"})
    assert response.status_code == 302
    assert not Fragment.objects.filter(value__contains="blue notebook").exists()


def test_the_members_page_buttons(people):
    admin = signed_in(people.ada)
    for action, active in (("deactivate", False), ("reactivate", True), ("remove", False)):
        response = admin.post(f"/workspace/members/{people.cleo.pk}/{action}/", follow=True)
        assert response.status_code == 200 and "cleo" in response.content.decode()
        assert User.objects.get(pk=people.cleo.pk).is_active is active
    assert admin.post(f"/workspace/members/{people.cleo.pk}/explode/").status_code == 404
    refused = admin.post(f"/workspace/members/{people.ada.pk}/deactivate/", follow=True).content.decode()
    assert "cannot deactivate yourself" in refused
    assert signed_in(people.bruno).post(f"/workspace/members/{people.cleo.pk}/reactivate/").status_code == 403
    assert signed_in(people.olga).post(f"/workspace/members/{people.cleo.pk}/reactivate/").status_code == 404
    assert not User.objects.get(pk=people.cleo.pk).is_active


def test_the_command(people, capsys):
    call_command("person", "acme", "cleo", "deactivate", json=True)
    assert json.loads(capsys.readouterr().out) == {"username": "cleo", "active": False, "removed": False,
                                                   "admin": False, "roles": ["engineering"]}
    call_command("person", "acme", "cleo", "reactivate")
    assert User.objects.get(pk=people.cleo.pk).is_active


def test_a_person_changes_their_password(people):
    client = signed_in(people.bruno)
    new = "a-much-longer-passphrase-9"
    wrong = client.post("/account/password/", {"old_password": "nope", "new_password": new, "again": new})
    assert wrong.status_code == 400 and "not your current password" in wrong.content.decode()
    differ = client.post("/account/password/", {"old_password": PASSWORD, "new_password": new, "again": new + "x"})
    assert differ.status_code == 400 and "differ" in differ.content.decode()
    weak = client.post("/account/password/", {"old_password": PASSWORD, "new_password": "password1",
                                              "again": "password1"})
    assert weak.status_code == 400
    done = client.post("/account/password/", {"old_password": PASSWORD, "new_password": new, "again": new},
                       follow=True)
    assert "Your password is changed." in done.content.decode()
    assert client.get("/memory/").status_code == 200  # still signed in here
    assert User.objects.get(pk=people.bruno.pk).check_password(new)


def test_an_admin_sets_a_temporary_password(people):
    temporary = "temporary-passphrase-42"
    response = signed_in(people.ada).post(f"/workspace/members/{people.cleo.pk}/password/",
                                          {f"p{people.cleo.pk}-password": temporary}, follow=True)
    assert "password is set" in response.content.decode()
    assert User.objects.get(pk=people.cleo.pk).check_password(temporary)
    weak = signed_in(people.ada).post(f"/workspace/members/{people.cleo.pk}/password/",
                                      {f"p{people.cleo.pk}-password": "short"}, follow=True)
    assert "too short" in weak.content.decode().lower()
    assert signed_in(people.bruno).post(f"/workspace/members/{people.cleo.pk}/password/",
                                        {f"p{people.cleo.pk}-password": temporary}).status_code == 403
    # Setting it disconnects their apps (they notice); a deactivated person's cannot be set at all.
    _, refresh = _tokens(people.cleo)
    signed_in(people.ada).post(f"/workspace/members/{people.cleo.pk}/password/",
                               {f"p{people.cleo.pk}-password": "another-temporary-pass-7"})
    assert RefreshToken.objects.get(pk=refresh.pk).revoked is not None
    assert not AccessToken.objects.filter(user=people.cleo).exists()
    members.member_deactivate(caller=people.caller(people.ada), user_id=people.cleo.pk)
    with pytest.raises(Conflict, match="reactivate them"):
        members.member_set_password(caller=people.caller(people.ada), user_id=people.cleo.pk,
                                    password="yet-another-passphrase-1")
    members.member_set_password(caller=people.system(), user_id=people.cleo.pk, password="operator-sets-it-42")


def test_a_removed_member_gets_no_roles_until_reactivated(people):
    members.member_remove(caller=people.caller(people.ada), user_id=people.cleo.pk)
    with pytest.raises(Conflict, match="reactivate them"):
        members.member_update(caller=people.caller(people.ada), user_id=people.cleo.pk, roles=["engineering"],
                              is_admin=True)
    members.member_reactivate(caller=people.caller(people.ada), user_id=people.cleo.pk)
    members.member_update(caller=people.caller(people.ada), user_id=people.cleo.pk, roles=["engineering"],
                          is_admin=True)
    # With cleo an admin too, ada may be demoted; then cleo may not.
    members.member_update(caller=people.caller(people.cleo), user_id=people.ada.pk, roles=[], is_admin=False)
    with pytest.raises(Conflict, match="at least one admin"):
        members.member_update(caller=people.system(), user_id=people.cleo.pk, roles=[], is_admin=False)


def test_password_attempts_are_limited(people):
    client = signed_in(people.bruno)
    statuses = [client.post("/account/password/", {"old_password": "wrong", "new_password": "x" * 12,
                                                   "again": "x" * 12}).status_code for _ in range(11)]
    assert statuses[:10] == [400] * 10 and statuses[10] == 429
    # A body that is not a form is refused as one, limited or not.
    assert client.post("/account/password/", data="[1, 2", content_type="application/json").status_code == 429
    fresh = signed_in(people.cleo)
    assert fresh.post("/account/password/", data="[1, 2", content_type="application/json").status_code == 400
