"""The pages' one mapping of the domain's error family: a refusal the view did
not turn into a form error becomes a 403, 404, 409 or 400 page."""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest

from memoryhub import errors


class DomainErrorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, errors.MemoryhubError):
            return None
        if isinstance(exception, errors.NotFound):
            raise Http404(exception.message) from exception
        if isinstance(exception, errors.PermissionDenied):
            raise PermissionDenied(exception.message) from exception
        return HttpResponseBadRequest(exception.message, content_type="text/plain; charset=utf-8",
                                      status=exception.status)
