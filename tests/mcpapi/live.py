"""A real uvicorn serving `build_app` on 127.0.0.1 with the fakes behind it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from mcpapi.auth import resource_url
from mcpapi.client import MEMORY_SCOPES, TokenVerifier
from mcpapi.connection import FULL_ENDPOINT, Endpoint
from mcpapi.gateway import GatewaySettings, build_app
from tests.support.proxy import bind_localhost, serve_in_thread

from .fakes import FakeVerifier, MemoryStore, mint_token, not_found_app, token_claims

REDIS_URL = "redis://127.0.0.1:6379/0"
# Every key this test run writes starts with this; the session fixture deletes them.
KEY_PREFIX = f"test-mcpapi:{uuid.uuid4().hex[:8]}:"
ALLOWED_ORIGIN = "https://app.example.com"


@dataclass
class RunningServer:
    base_url: str
    store: MemoryStore
    settings: GatewaySettings
    name: str = "fake"

    @property
    def max_body_bytes(self) -> int:
        return self.settings.max_body_bytes

    @property
    def allowed_origin(self) -> str:
        return ALLOWED_ORIGIN

    def url(self, endpoint: Endpoint = FULL_ENDPOINT) -> str:
        return self.base_url + endpoint

    def token(
        self,
        *,
        endpoint: Endpoint = FULL_ENDPOINT,
        kind: str = "user",
        scopes: tuple[str, ...] = MEMORY_SCOPES,
        **claims: Any,
    ) -> str:
        """A fresh principal each call, so rate-limit buckets never collide."""
        return mint_token(
            resource=claims.pop("resource", None) or resource_url(self.base_url, endpoint),
            kind=kind,
            scopes=scopes,
            **claims,
        )

    def identity(self, token: str) -> tuple[str, str, str]:
        """(subject, tenant, principal_kind) as whoami must report them for `token`."""
        claims = token_claims(token)
        return claims["subject"], claims["tenant"], claims["kind"]

    def writes_by(self, subject: str) -> int:
        """`write` calls the fake MemoryClient recorded for `subject`."""
        return sum(
            1
            for operation, principal, _ in list(self.store.calls)
            if operation == "write" and principal.subject == subject
        )


@contextmanager
def serving(*, verifier: TokenVerifier | None = None, **overrides: Any) -> Iterator[RunningServer]:
    """`overrides` are GatewaySettings fields; `verifier` replaces the fake one."""
    sock, base_url = bind_localhost()
    settings = replace(
        GatewaySettings(
            base_url=base_url,
            allowed_origins={ALLOWED_ORIGIN},
            redis_url=REDIS_URL,
            rate_limit_key_prefix=KEY_PREFIX,
        ),
        **overrides,
    )
    store = MemoryStore()
    app = build_app(
        verifier=verifier or FakeVerifier(),
        client_factory=store.factory,
        fallback=not_found_app,
        settings=settings,
    )
    with serve_in_thread(app, sock, thread_name="fake-gateway"):
        yield RunningServer(base_url=base_url, store=store, settings=settings)
