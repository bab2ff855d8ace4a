"""The one mapping of the domain's error family on Django paths: a refusal the
view did not turn into a form error becomes a 403, 404, 409 or 400; and a
dependency that is down for the moment (PostgreSQL restarting, Redis away)
becomes a 503 with Retry-After, never a 500.

And the pages people see when something goes wrong (Django's handlers,
named in memoryhub.urls, and the CSRF failure view): the site's frame and
navigation, the reason in plain words and a way back. Paths that programs
call (memoryhub.middleware.answers_machines) keep answering JSON."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseServerError
from django.shortcuts import render
from django.template import loader

from memoryhub import errors
from memoryhub.middleware import answers_machines, refusal

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


UNREADABLE = ("The request could not be read: its body is too large, has too many fields, or is not in an "
              "encoding or form this server reads. Nothing was changed.")
NOT_FOUND = "There is no page at this address. The link may be mistyped, or what it pointed to was removed."
FORBIDDEN = "Your account is not allowed to open this page."
CSRF_FAILED = ("The form could not be sent safely: the page was open too long, or you signed in or out in another "
               "tab since it was loaded. Go back, reload the page and send the form again; nothing was changed.")
BROKEN = ("Something went wrong on our side and the page could not be shown. Nothing you sent was half-done: "
          "try again in a moment, and tell your workspace's admin if it keeps happening.")


def _error_page(request: HttpRequest, *, status: int, title: str, reason: str) -> HttpResponse:
    if answers_machines(request.path_info):
        return refusal(request, "", reason, status=status)
    return render(request, "errors/error.html", {"status": status, "title": title, "reason": reason}, status=status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400: a body Django refuses before any view reads it (too many
    fields, too large, a multipart form without its boundary). Programs get
    the JSON their endpoint answers in (OAuth's endpoints an OAuth error)."""
    return _error_page(request, status=400, title="The request could not be read", reason=UNREADABLE)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404. A refusal of the domain (a receipt that is not yours) says
    why in its own words; Django's own 404s (no such URL) get the plain one."""
    reason = exception.args[0] if isinstance(exception.__cause__, errors.NotFound) else NOT_FOUND
    return _error_page(request, status=404, title="Page not found", reason=reason)


def forbidden(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler403: the refusal's own words (every PermissionDenied the pages
    raise carries a sentence for the person), else a plain one."""
    reason = str(exception.args[0]) if exception.args and isinstance(exception.args[0], str) else FORBIDDEN
    return _error_page(request, status=403, title="Not allowed", reason=reason or FORBIDDEN)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW. Django's reason ("CSRF token missing") means nothing
    to a person; it is logged by Django already."""
    return _error_page(request, status=403, title="The form has expired", reason=CSRF_FAILED)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500. Rendered without the request (no session, no user, no
    database: whatever broke may be what those need) from a template that
    reads nothing but its own words."""
    if answers_machines(request.path_info):
        return refusal(request, "", "Internal error.", status=500)
    return HttpResponseServerError(loader.get_template("errors/500.html").render({"reason": BROKEN}))
