"""What memoryhub reports about itself: Prometheus metrics and structured logs.

Metrics (prometheus-client): search phases, enforcement alarms, page latency
by group, sweeps, and, computed when scraped, fragments pending enrichment and
the task queue's depth; the MCP layer adds its own (mcpapi.observe). With more
than one worker process the registry is multiprocess (PROMETHEUS_MULTIPROC_DIR,
set by mcpapi.serving). `/metrics` (memoryhub.pages.health) answers loopback
clients, or anyone with `Authorization: Bearer $MEMORYHUB_METRICS_TOKEN`;
everyone else gets 404.

Logs are JSON lines (MEMORYHUB_LOG_FORMAT=plain for humans): every line carries
the request id of the request or task it belongs to. A request's id comes from
a sane X-Request-Id header or is made up, is answered in X-Request-Id, travels
into the Celery tasks the request enqueues, and is logged by them.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from django.http import HttpRequest, HttpResponse
from prometheus_client import Counter, Histogram

REQUEST_ID: ContextVar[str] = ContextVar("memoryhub_request_id", default="")
_SANE_ID = re.compile(r"[A-Za-z0-9._-]{8,64}")
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0)

SEARCH_PHASE_SECONDS = Histogram("memoryhub_search_phase_seconds",
                                 "Time in each phase of a search (embedding, on a thread of its own where "
                                 "the encoder leaves a core, and embedding_wait: how long the read then "
                                 "waited for it; prologue: its first statement, "
                                 "the workspace's settings, the query's lexemes and the caller's roles; "
                                 "index_compile: both pools' statement compiled (alongside the embedding, "
                                 "where it is embedded so); "
                                 "index_query: both pools in one statement, or vector_query and lexical_query "
                                 "when one pool answers; row_check; serving: the served hits built with their "
                                 "provenance; receipt)", ["phase"], buckets=SECONDS)
ENFORCEMENT_ALARMS = Counter("memoryhub_enforcement_alarms",
                             "Rows an index query returned that the row check refused (should stay 0)")
PAGE_SECONDS = Histogram("memoryhub_http_seconds", "Django requests, by URL group and status",
                         ["group", "status"], buckets=SECONDS)
READ_POOL_READS = Counter("memoryhub_read_pool_reads",
                          "Reads sent to the read pool, with replicas configured, by where they were served "
                          "(replica; primary: no replica could serve it; primary_after_loss: the replica failed "
                          "under the read, which ran again on the primary), and why (caught_up; behind: by the "
                          "last moments' writes; lagging, not_answering, promoted, position_unknown; lost)",
                          ["served_by", "why"])
SWEEPS = Counter("memoryhub_sweeps", "Sweeps run (fragments pending enrichment enqueued again)")
SWEPT = Counter("memoryhub_swept_fragments", "Fragments the sweeps enqueued again")


class phase:
    """`with phase("row_check"):` times one phase of a search."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        SEARCH_PHASE_SECONDS.labels(phase=self.name).observe(time.perf_counter() - self.started)


# --------------------------------------------------------------------------- logs


class JsonFormatter(logging.Formatter):
    FIELDS = ("request_id", "endpoint", "status", "duration_ms", "principal_kind", "tool", "method", "path",
              "group", "task")

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        for name in self.FIELDS:
            value = getattr(record, name, None)
            if value not in (None, ""):
                line[name] = value
        line.setdefault("request_id", current_request_id())
        if not line["request_id"]:
            del line["request_id"]
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def current_request_id() -> str:
    return REQUEST_ID.get()


def request_id(presented: str | None) -> str:
    return presented if presented and _SANE_ID.fullmatch(presented) else uuid.uuid4().hex


def url_group(path: str) -> str:
    first = path.strip("/").split("/", 1)[0]
    return first if first in ("memory", "receipts", "account", "workspace", "reviews", "o", "api", "internal",
                              "accounts", ".well-known", "admin", "static", "healthz", "readyz", "metrics") \
        else ("home" if not first else "other")


class RequestLogMiddleware:
    """One JSON line per Django request (id, method, group, status, duration),
    its latency in the page histogram, and its id answered in X-Request-Id."""

    logger = logging.getLogger("memoryhub.requests")

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        token = REQUEST_ID.set(request_id(request.META.get("HTTP_X_REQUEST_ID")))
        try:
            response = self.get_response(request)
            response["X-Request-Id"] = REQUEST_ID.get()
            duration = time.perf_counter() - started
            group = url_group(request.path_info)
            PAGE_SECONDS.labels(group=group, status=str(response.status_code)).observe(duration)
            self.logger.info("request", extra={
                "request_id": REQUEST_ID.get(), "method": request.method, "group": group,
                "status": response.status_code,
                "duration_ms": round(duration * 1000, 1),
                "principal_kind": "user" if getattr(request, "user", None) and request.user.is_authenticated
                else "",
            })
            return response
        finally:
            REQUEST_ID.reset(token)
