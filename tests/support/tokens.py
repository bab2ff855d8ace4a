"""Access tokens (any client's, or a person's at the MCP endpoint), written
as the authorisation server's own rows, for tests about what happens to them
later (the OAuth flows that issue tokens are proved end to end in tests/oauth)."""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, set_token_value

from memoryhub.oauth.policy import MCP_PATH, resource_url

REDIRECT_URI = "http://127.0.0.1:8765/cb"


def make_token(*, application: Application, user: Any | None, scope: str, resource: list[str],
               expires_in: float = 900) -> str:
    """An access token written straight to the database (`user` None: the
    client's own, as client credentials issue it); the raw token."""
    raw = secrets.token_urlsafe(24)
    token = AccessToken(application=application, user=user, scope=scope, resource=resource,
                        expires=timezone.now() + dt.timedelta(seconds=expires_in))
    set_token_value(token, raw)
    token.save()
    return raw


def person_mcp_token(user: Any, *, scope: str = "memory.read memory.write memory.audit",
                     name: str = "Desk assistant", base_url: str | None = None) -> tuple[str, AccessToken]:
    """(raw token, its row) for `user` at /mcp (of `base_url`, a live server's;
    the configured one unless given), through a public client of its own."""
    application = Application.objects.create(
        name=name, client_type=Application.CLIENT_PUBLIC, client_secret="", hash_client_secret=False,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE, redirect_uris=REDIRECT_URI)
    resource = f"{base_url}{MCP_PATH}" if base_url is not None else resource_url(MCP_PATH)
    raw = make_token(application=application, user=user, scope=scope, resource=[resource])
    return raw, AccessToken.objects.get(application=application)
