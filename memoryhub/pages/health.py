"""Liveness and readiness probes (not pages, but plain views of the same kind)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

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
