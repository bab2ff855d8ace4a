"""A person's connected apps: the clients they authorised that still hold a
refresh chain or a live access token, and disconnecting one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken

from memoryhub import access
from memoryhub.access import MEMORY_SCOPES, Caller


@dataclass(frozen=True)
class ConnectedApp:
    application: Application
    scopes: list[str]
    connected: bool  # a refresh chain is alive
    access_ends: datetime | None  # when the last access token already issued expires


def connected_apps_list(*, caller: Caller) -> list[ConnectedApp]:
    """The clients the caller authorised that still hold a live refresh token or access token."""
    user = access.require_person(caller, what="manage connected apps")
    now = timezone.now()
    live_refresh = set(
        RefreshToken.objects.filter(user=user, revoked__isnull=True).values_list("application_id", flat=True)
    )
    access_tokens = AccessToken.objects.filter(user=user, expires__gt=now).values_list(
        "application_id", "scope", "expires"
    )
    scopes: dict[int, set[str]] = {}
    access_ends: dict[int, datetime] = {}
    for application_id, scope, expires in access_tokens:
        memory = set(scope.split()) & set(MEMORY_SCOPES)
        if not memory:
            continue  # a registration token, not an authorisation
        scopes.setdefault(application_id, set()).update(memory)
        access_ends[application_id] = max(expires, access_ends.get(application_id, expires))
    for application_id in live_refresh:
        scopes.setdefault(application_id, set())
    applications = Application.objects.in_bulk(list(scopes))
    apps = [
        ConnectedApp(
            application=applications[application_id],
            scopes=[s for s in MEMORY_SCOPES if s in granted],
            connected=application_id in live_refresh,
            access_ends=access_ends.get(application_id),
        )
        for application_id, granted in scopes.items()
        if application_id in applications
    ]
    return sorted(apps, key=lambda app: (not app.connected, str(app.application).lower()))


@transaction.atomic
def connected_app_disconnect(*, caller: Caller, application_id: int) -> bool:
    """End the caller's refresh chains with one client, and any code not yet
    exchanged. Scoped to the caller's own tokens: someone else's id ends nothing.

    Access tokens already issued are left to expire (at most 15 minutes): the
    contract promises exactly that window, and an edge deployment that verifies
    elsewhere could not honour a shorter one.
    """
    user = access.require_person(caller, what="manage connected apps")
    refresh_tokens = RefreshToken.objects.select_for_update().filter(
        user=user, application_id=application_id, revoked__isnull=True
    )
    ended = 0
    for refresh_token in refresh_tokens:
        # Not RefreshToken.revoke(): that also deletes the paired access token.
        refresh_token.revoked = timezone.now()
        refresh_token.save(update_fields=["revoked", "updated"])
        ended += 1
    codes, _ = Grant.objects.filter(user=user, application_id=application_id).delete()
    return bool(ended or codes)
