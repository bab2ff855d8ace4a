"""The memory service's internal API: what an edge process's `HttpMemoryClient`
(mcpapi.edge) calls, one view per `MemoryClient` method.

    POST /internal/memory/search    body: memory_search arguments   → its output
    POST /internal/memory/write     body: memory_write arguments    → its output
    POST /internal/memory/receipt   body: {"receipt_id": "…"}        → memory_receipt output
    POST /internal/memory/probe     body: {}                         → {"read_pool_ready": "…"}

Only a credential from the token exchange opens it (memoryhub.oauth.exchange.
credential_principal): a missing, unknown or expired one, one for another
audience, and a caller's own OAuth token all get 401. Past that, each view
hands the credential's principal to the same `InProcessMemoryClient` the
single-process deployment uses, so the scope check (memoryhub.access.
require_scope: an operation outside the credential's scopes gets 403 before any
work), the principal → caller conversion, the services, the rendering, the
result budget and the error mapping are one code path in both topologies.

Errors are `{"error": {"code", "message"}}`, as on the ingestion API. The
`Memoryhub-Read-Timeout` header carries the edge's upstream read bound; the
service never takes longer than its own MEMORYHUB_SEARCH_DEADLINE_SECONDS.

Off unless MEMORYHUB_INTERNAL_API is set (404), and meant for the private network.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from mcpapi.client import MemoryServiceError, Principal
from memoryhub.access import InsufficientScope
from memoryhub.errors import MemoryhubError
from memoryhub.mcp_adapter.client import InProcessMemoryClient
from memoryhub.mcp_adapter.verifier import principal_of
from memoryhub.oauth.exchange import credential_principal

logger = logging.getLogger("memoryhub.mcp_adapter.internal_api")

READ_TIMEOUT_HEADER = "HTTP_MEMORYHUB_READ_TIMEOUT"
# The gateway already refused MCP bodies over 256 KiB; the arguments are smaller still.
MAX_BODY_BYTES = 256 * 1024
CHALLENGE = 'Bearer realm="memoryhub-internal"'

Operation = Callable[[InProcessMemoryClient, Principal, dict[str, Any]], Awaitable[Any]]


def _status_by_code() -> dict[str, int]:
    found: dict[str, int] = {}
    pending: list[type[MemoryhubError]] = [MemoryhubError]
    while pending:
        cls = pending.pop()
        found[cls.code] = cls.status
        pending.extend(cls.__subclasses__())
    return found


def _json_plain(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _error(status: int, code: str, message: str, *, challenge: str | None = None) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
    if challenge is not None:
        response["WWW-Authenticate"] = challenge
    return response


def _bearer(request: HttpRequest) -> str | None:
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _verify_in_thread(token: str) -> Principal | None:
    close_old_connections()
    try:
        verified = credential_principal(token)
        return principal_of(verified, credential=token) if verified is not None else None
    finally:
        close_old_connections()


def _read_timeout(request: HttpRequest) -> float:
    ceiling = float(settings.MEMORYHUB_SEARCH_DEADLINE_SECONDS)
    try:
        asked = float(request.META.get(READ_TIMEOUT_HEADER, ceiling))
    except ValueError:
        return ceiling
    return asked if 0 < asked <= ceiling else ceiling


def _body(request: HttpRequest) -> dict[str, Any] | None:
    if int(request.META.get("CONTENT_LENGTH") or 0) > MAX_BODY_BYTES:
        return None
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


async def _serve(request: HttpRequest, *, operation: Operation) -> JsonResponse:
    if not settings.MEMORYHUB_INTERNAL_API:
        return _error(404, "not_found", "Not found.")
    token = _bearer(request)
    if token is None:
        return _error(401, "unauthorized", "A memory-service credential is required.", challenge=CHALLENGE)
    # Not thread-sensitive: every edge request comes through here.
    principal = await sync_to_async(_verify_in_thread, thread_sensitive=False)(token)
    if principal is None:
        return _error(
            401, "invalid_token", "The credential is invalid, expired or not for the memory service.",
            challenge=f'{CHALLENGE}, error="invalid_token"',
        )
    body = _body(request)
    if body is None:
        return _error(400, "invalid_argument", "The body must be one JSON object of at most 256 KiB.")
    client = InProcessMemoryClient(read_timeout=_read_timeout(request))
    try:
        result = await operation(client, principal, body)
    except MemoryServiceError as exc:
        challenge = None
        if isinstance(exc.__cause__, InsufficientScope):
            challenge = f'{CHALLENGE}, error="insufficient_scope", scope="{exc.__cause__.scope}"'
        return _error(_status_by_code().get(exc.code, 400), exc.code, exc.message, challenge=challenge)
    return JsonResponse(result, safe=False, json_dumps_params={"default": _json_plain})


View = Callable[[HttpRequest], Coroutine[Any, Any, JsonResponse]]


def _internal(view: View) -> View:
    return csrf_exempt(never_cache(require_POST(view)))


@_internal
async def search(request: HttpRequest) -> JsonResponse:
    return await _serve(request, operation=lambda client, principal, body: client.search(principal, body))


@_internal
async def write(request: HttpRequest) -> JsonResponse:
    return await _serve(request, operation=lambda client, principal, body: client.write(principal, body))


@_internal
async def receipt(request: HttpRequest) -> JsonResponse:
    async def replay(client: InProcessMemoryClient, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
        receipt_id = body.get("receipt_id")
        if not isinstance(receipt_id, str) or not receipt_id:
            raise MemoryServiceError("invalid_argument", "receipt_id is required.")
        return await client.receipt(principal, receipt_id)

    return await _serve(request, operation=replay)


@_internal
async def probe(request: HttpRequest) -> JsonResponse:
    async def read_pool(client: InProcessMemoryClient, principal: Principal, body: dict[str, Any]) -> dict[str, str]:
        return {"read_pool_ready": await client.probe(principal)}

    return await _serve(request, operation=read_pool)


# Included by memoryhub.urls under /internal/.
urlpatterns = [
    path("memory/search", search, name="internal-memory-search"),
    path("memory/write", write, name="internal-memory-write"),
    path("memory/receipt", receipt, name="internal-memory-receipt"),
    path("memory/probe", probe, name="internal-memory-probe"),
]
