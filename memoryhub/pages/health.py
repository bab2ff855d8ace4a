"""Liveness and readiness probes, and the metrics scrape (not pages, but plain views of the same kind)."""

from __future__ import annotations

import datetime as dt
import hmac
import os
from collections.abc import Iterator

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from memoryhub.services.enrichment import fragments_pending, queue_depth
from memoryhub.services.health import readiness


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    checks = readiness()
    ready = all(check["ok"] for check in checks.values())
    degraded = any(check.get("degraded") for check in checks.values())
    status = "unavailable" if not ready else "degraded" if degraded else "ready"
    return JsonResponse({"status": status, "checks": checks}, status=200 if ready else 503)




class BacklogCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        pending = GaugeMetricFamily("memoryhub_pending_enrichment",
                                    "Fragments waiting for embedding or linking longer than a sweep interval")
        pending.add_metric([], len(fragments_pending(
            older_than=dt.timedelta(seconds=settings.MEMORYHUB_SWEEP_SECONDS), limit=100_000)))
        yield pending
        depth = GaugeMetricFamily("memoryhub_task_queue_depth", "Tasks waiting in the Celery queue")
        depth.add_metric([], queue_depth())
        yield depth


def _registry() -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        for collector in list(REGISTRY._collector_to_names):
            registry.register(collector)
    registry.register(BacklogCollector())
    return registry


def _may_scrape(request: HttpRequest) -> bool:
    token = settings.MEMORYHUB_METRICS_TOKEN
    scheme, _, presented = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode()):
        return True
    # Loopback, and not relayed by a proxy on this machine for someone else.
    return (request.META.get("REMOTE_ADDR") in ("127.0.0.1", "::1")
            and "HTTP_X_FORWARDED_FOR" not in request.META)


@require_GET
@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not _may_scrape(request):
        return HttpResponseNotFound("Not found.", content_type="text/plain")
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)


