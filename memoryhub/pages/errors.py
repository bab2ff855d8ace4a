"""The one mapping of the domain's error family on Django paths: a refusal the
view did not turn into a form error becomes a 403, 404, 409 or 400; and a
dependency that is down for the moment (PostgreSQL restarting, Redis away)
becomes a 503 with Retry-After, never a 500."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest

from memoryhub import errors
from memoryhub.middleware import refusal

logger = logging.getLogger("memoryhub.unavailable")


class DomainErrorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if errors.is_unavailable(exception):
            logger.warning("%s %s: a dependency is unavailable (%s)", request.method, request.path_info,
                           type(exception).__name__)
            response = refusal(request, "", "The service is briefly unavailable; retry in a few seconds.", status=503)
            response["Retry-After"] = "5"
            return response
        if not isinstance(exception, errors.MemoryhubError):
            return None
        if isinstance(exception, errors.NotFound):
            raise Http404(exception.message) from exception
        if isinstance(exception, errors.PermissionDenied):
            raise PermissionDenied(exception.message) from exception
        return HttpResponseBadRequest(exception.message, content_type="text/plain; charset=utf-8",
                                      status=exception.status)
