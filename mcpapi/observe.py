"""What the MCP layer reports: Prometheus metrics and one log line per request.

Metrics (prometheus-client; in multiprocess mode when PROMETHEUS_MULTIPROC_DIR
is set, as mcpapi.serving does for more than one worker): request latency by
endpoint, the latency of the gateway's own steps (the token's check, the rate
limit), tool-call latency by tool and outcome, requests by endpoint and
status, token verifications by outcome, rate-limit refusals. The request id
(the client's X-Request-Id when it is a sane token, else a new one) is kept in
`REQUEST_ID` for the whole request, answered in the X-Request-Id header, and
logged.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from prometheus_client import Counter, Histogram

logger = logging.getLogger("mcpapi.requests")

REQUEST_ID: ContextVar[str] = ContextVar("mcpapi_request_id", default="")
_SANE_ID = re.compile(r"[A-Za-z0-9._-]{8,64}")

# Latency buckets from a whoami to a search at its deadline.
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0)

# The gateway's steps, from a fraction of a millisecond up.
STEP_SECONDS_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

REQUEST_SECONDS = Histogram("memoryhub_mcp_request_seconds",
                            "MCP requests, from the gateway's first look to the answer sent, by endpoint",
                            ["endpoint"], buckets=SECONDS)
STEP_SECONDS = Histogram("memoryhub_mcp_step_seconds",
                         "What an MCP request waits for in the gateway before the SDK serves it, by step: "
                         "token (its check, with who holds it), rate_limit (the principal's limit)",
                         ["step"], buckets=STEP_SECONDS_BUCKETS)
TOOL_SECONDS = Histogram("memoryhub_mcp_tool_seconds", "MCP tool calls, by tool and outcome (ok, error)",
                         ["tool", "outcome"], buckets=SECONDS)
REQUESTS = Counter("memoryhub_mcp_requests", "MCP HTTP requests, by endpoint and status", ["endpoint", "status"])
VERIFICATIONS = Counter("memoryhub_token_verifications", "Bearer tokens checked at the MCP endpoint, by outcome",
                        ["outcome"])
RATE_LIMITED = Counter("memoryhub_rate_limited", "MCP requests refused by the per-principal rate limit")


def request_id(presented: str | None) -> str:
    return presented if presented and _SANE_ID.fullmatch(presented) else uuid.uuid4().hex


def log_request(*, endpoint: str, status: int, duration: float, principal_kind: str, tool: str) -> None:
    REQUESTS.labels(endpoint=endpoint, status=str(status)).inc()
    REQUEST_SECONDS.labels(endpoint=endpoint).observe(duration)
    logger.info("mcp request", extra={
        "request_id": REQUEST_ID.get(), "endpoint": endpoint, "status": status,
        "duration_ms": round(duration * 1000, 1), "principal_kind": principal_kind, "tool": tool,
    })


@contextmanager
def step(name: str) -> Iterator[None]:
    """Time one of the gateway's steps (STEP_SECONDS), however it ends."""
    started = time.perf_counter()
    try:
        yield
    finally:
        STEP_SECONDS.labels(step=name).observe(time.perf_counter() - started)
