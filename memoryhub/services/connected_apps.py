"""A person's connected apps: the clients they authorised that still hold a
refresh chain or a live access token, when each was connected and last used,
where it returns to, what it was granted, and disconnecting one or all.

"Last used" is the newest of its tokens' `updated`: set when a token is
issued, and moved forward when a token is used at the MCP endpoint, at most
once a minute per token (memoryhub.oauth.tokens.verified_row)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from django.db import transaction
from django.db.models import Min
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken

from memoryhub import access
from memoryhub.access import ADMIN_SCOPE, MEMORY_SCOPES, Caller
from memoryhub.oauth.policy import issued_resources


@dataclass(frozen=True)
class ConnectedApp:
    application: Application
    scopes: list[str]  # what the person granted it (its newest token's, live or expired)
    connected: bool  # a refresh chain is alive
    access_ends: datetime | None  # when the last access token already issued expires
    connected_on: datetime | None  # when the live refresh chain began (else its first token)
    last_used: datetime | None  # the last time one of its tokens was issued or used (to the minute)

    @property
    def redirect_hosts(self) -> list[str]:
        """Where it sends the person back after consent: its redirect URIs' hosts."""
        hosts = []
        for uri in self.application.redirect_uris.split():
            host = urlsplit(uri).netloc
            if host and host not in hosts:
                hosts.append(host)
        return hosts


def connected_apps_list(*, caller: Caller) -> list[ConnectedApp]:
    """The clients the caller authorised that still hold a live refresh token or access token."""
    user = access.require_person(caller, what="manage connected apps")
    now = timezone.now()
    live_refresh: dict[int, RefreshToken] = {}
    for token in RefreshToken.objects.filter(user=user, revoked__isnull=True).order_by("created"):
        live_refresh.setdefault(token.application_id, token)
    tokens = AccessToken.objects.filter(user=user).values_list("application_id", "scope", "expires", "created",
                                                               "updated", "resource")
    # What the person granted is on the tokens issued for the MCP endpoints; an
    # edge deployment's exchanged credentials (another audience, narrowed) only say it was used.
    public = set(issued_resources())
    # Per client and resource (an app may hold an MCP grant and an admin API grant), the newest token's scopes.
    scopes: dict[tuple[int, tuple[str, ...]], tuple[datetime, set[str]]] = {}
    access_ends: dict[int, datetime] = {}
    first_token: dict[int, datetime] = {}
    last_used: dict[int, datetime] = {}
    for application_id, scope, expires, created, updated, resource in tokens:
        granted = set(scope.split()) & {*MEMORY_SCOPES, ADMIN_SCOPE}
        if not granted:
            continue  # a registration token, not an authorisation
        last_used[application_id] = max(updated, last_used.get(application_id, updated))
        if not public & set(resource or []):
            continue
        key = (application_id, tuple(resource or ()))
        if key not in scopes or created > scopes[key][0]:
            scopes[key] = (created, granted)  # the grant as it stands: its newest token's scopes
        if expires > now:
            access_ends[application_id] = max(expires, access_ends.get(application_id, expires))
        first_token[application_id] = min(created, first_token.get(application_id, created))
    shown = set(live_refresh) | set(access_ends)
    families = {token.token_family for token in live_refresh.values() if token.token_family}
    chain_began = dict(
        RefreshToken.objects.filter(user=user, token_family__in=families).values("application_id")
        .annotate(began=Min("created")).values_list("application_id", "began")
    ) if families else {}
    grants: dict[int, set[str]] = {}
    for (application_id, _), (_, granted) in scopes.items():
        grants.setdefault(application_id, set()).update(granted)
    applications = Application.objects.in_bulk(list(shown))
    apps = [
        ConnectedApp(
            application=applications[application_id],
            scopes=[s for s in (*MEMORY_SCOPES, ADMIN_SCOPE) if s in grants.get(application_id, set())],
            connected=application_id in live_refresh,
            access_ends=access_ends.get(application_id),
            connected_on=chain_began.get(application_id) or (
                live_refresh[application_id].created if application_id in live_refresh else None)
            or first_token.get(application_id),
            last_used=last_used.get(application_id),
        )
        for application_id in shown
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


@transaction.atomic
def connected_apps_disconnect_all(*, caller: Caller) -> int:
    """Disconnect every app the caller connected, and every code not yet
    exchanged, in one transaction; how many apps were connected."""
    user = access.require_person(caller, what="manage connected apps")
    ended = sum(connected_app_disconnect(caller=caller, application_id=app.application.pk)
                for app in connected_apps_list(caller=caller) if app.connected)
    Grant.objects.filter(user=user).delete()
    return ended
