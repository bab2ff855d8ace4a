"""The in-process `mcpapi.client.MemoryClient`: the MCP tools' way into the
memory services when both run in one process (and, behind the internal API,
the edge deployment's too).

Each call checks the scope its operation needs (memoryhub.access.require_scope,
the contract's one table), turns the verified `Principal` into a domain
`Caller` (nothing from the tool arguments takes part in that), runs one
service in a worker thread, renders the domain's result as the contract's
output (memoryhub.mcp_adapter.render) and maps the domain's `MemoryhubError`
to `MemoryServiceError`, the only failure type the MCP layer knows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from mcpapi.client import MemoryServiceError, Principal
from mcpapi.observe import REQUEST_ID as MCP_REQUEST_ID
from memoryhub import access
from memoryhub.errors import MemoryhubError, is_unavailable
from memoryhub.mcp_adapter import render
from memoryhub.observability import REQUEST_ID
from memoryhub.services.fragments import fragment_write
from memoryhub.services.health import read_probe
from memoryhub.services.receipts import receipt_replay
from memoryhub.services.search import fragments_search

logger = logging.getLogger("memoryhub.mcp_adapter")

T = TypeVar("T")

# How much sooner than the MCP layer's read timeout the domain's own deadline falls.
DEADLINE_MARGIN_SECONDS = 0.5


def caller_for(principal: Principal, *, operation: str) -> access.Caller:
    """The domain caller for `operation`, when the credential's scopes allow it."""
    access.require_scope(principal.scopes, operation)
    return access.caller_from_principal(
        tenant=principal.tenant, subject=principal.subject, kind=principal.kind, client_id=principal.client_id
    )


class InProcessMemoryClient:
    def __init__(self, *, read_timeout: float | None = None) -> None:
        self.read_timeout = read_timeout or settings.MEMORYHUB_SEARCH_DEADLINE_SECONDS

    @property
    def _deadline(self) -> float:
        """The domain's deadline: the database cancels a slow read a little before the MCP
        layer stops waiting for it, so the caller reads the domain's own explanation and no
        statement is left running after the answer."""
        budget = min(self.read_timeout, settings.MEMORYHUB_SEARCH_DEADLINE_SECONDS)
        return max(budget / 2, budget - DEADLINE_MARGIN_SECONDS)

    async def _run(self, work: Callable[[], T]) -> T:
        def in_thread() -> T:
            close_old_connections()
            try:
                return work()
            except MemoryhubError as exc:
                raise MemoryServiceError(exc.code, exc.message) from exc
            except Exception as exc:
                if is_unavailable(exc):
                    raise MemoryServiceError(
                        "unavailable", "Memory is briefly unavailable; retry in a few seconds.") from exc
                raise
            finally:
                # Worker threads are pooled: give back what CONN_MAX_AGE says not to keep.
                close_old_connections()

        # The MCP request's id goes with the work into the domain's logs and tasks.
        token = REQUEST_ID.set(REQUEST_ID.get() or MCP_REQUEST_ID.get())
        try:
            # Not thread-sensitive: a slow search must not queue every other call
            # (a whoami probe included) behind it on Django's single sync thread.
            return await sync_to_async(in_thread, thread_sensitive=False)()
        finally:
            REQUEST_ID.reset(token)

    async def search(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            caller = caller_for(principal, operation="memory_search")
            # Each argument by name: anything else in `arguments` never reaches the domain.
            result = fragments_search(
                caller=caller,
                query=arguments.get("query", ""),
                limit=arguments.get("limit"),
                as_of=arguments.get("as_of"),
                created_after=arguments.get("created_after"),
                created_before=arguments.get("created_before"),
                resource_ids=arguments.get("resource_ids"),
                agents=arguments.get("agents"),
                task=arguments.get("task"),
                task_tags=arguments.get("task_tags"),
                deadline_seconds=self._deadline,
                budget=render.SEARCH_RESULT_BUDGET,
            )
            return render.search_output(result)

        return await self._run(work)

    async def write(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            caller = caller_for(principal, operation="memory_write")
            outcome = fragment_write(
                caller=caller,
                content=arguments.get("content", ""),
                session_id=arguments.get("session_id"),
                resource=arguments.get("resource"),
                idempotency_key=arguments.get("idempotency_key"),
            )
            return render.write_output(outcome)

        return await self._run(work)

    async def receipt(self, principal: Principal, receipt_id: str) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            caller = caller_for(principal, operation="memory_receipt")
            replay = receipt_replay(caller=caller, receipt_id=receipt_id, deadline_seconds=self._deadline)
            return render.receipt_output(replay)

        return await self._run(work)

    async def probe(self, principal: Principal) -> str:
        def work() -> str:
            try:
                caller = caller_for(principal, operation="whoami")
            except MemoryhubError:
                return "unavailable"
            return read_probe(caller=caller)

        return await self._run(work)


def inprocess_client_factory(*, read_timeout: float) -> InProcessMemoryClient:
    """`mcpapi.client.MemoryClientFactory` for the single-process deployment."""
    return InProcessMemoryClient(read_timeout=read_timeout)
