"""Middleware of every Django request: security headers, and the refusal of
hostile characters before any view or library sees them."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote_plus

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from memoryhub.services.arguments import ascii_digits, unstorable

# JSON bodies larger than this are left to the view's own limit (and refusal).
JSON_INSPECT_MAX_BYTES = 4 * 1024 * 1024


class SecurityHeadersMiddleware:
    """Headers Django 5.2 does not set itself: a Content-Security-Policy and a
    Permissions-Policy on every page."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", settings.CONTENT_SECURITY_POLICY)
        response.headers.setdefault("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
        return response


class HostileInputMiddleware:
    """NUL characters and lone surrogates in the path, the query string, a
    header, a cookie, Basic credentials, a form field or a JSON string are
    refused with 400 and a message naming where, before sessions, CSRF, the
    OAuth toolkit or any view sees them (they would otherwise reach PostgreSQL
    and fail there as a 500). Nothing is read or written before the refusal."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        problem = next(self._problems(request), None)
        if problem is not None:
            where, why = problem
            return refusal(request, where.removeprefix(JSON_FIELD), f"{where} {why}.")
        return self.get_response(request)

    def _problems(self, request: HttpRequest) -> Iterator[tuple[str, str]]:
        yield from _checked("the path", request.path_info)
        for key, values in request.GET.lists():
            yield from _checked("a query parameter name", key)
            for value in values:
                yield from _checked(f"query parameter {_shown(key)}", value)
        for name, value in request.META.items():
            if name.startswith("HTTP_") and isinstance(value, str):
                yield from _checked(f"header {name[5:].replace('_', '-').title()}", value)
        for key, value in request.COOKIES.items():
            yield from _checked(f"cookie {_shown(key)}", key + value)
        yield from _basic_credentials(request.META.get("HTTP_AUTHORIZATION", ""))
        if request.method in ("POST", "PUT", "PATCH", "DELETE"):
            yield from _body_problems(request)


def _shown(name: str) -> str:
    return repr(name.replace("\x00", "\\u0000")[:64])


def _checked(where: str, text: str) -> Iterator[tuple[str, str]]:
    why = unstorable(text)
    if why is not None:
        yield where, why


def _basic_credentials(header: str) -> Iterator[tuple[str, str]]:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic" or not encoded.strip():
        return
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):  # not base64, not ASCII, not UTF-8 (UnicodeDecodeError is a ValueError)
        return  # not credentials at all: the authorisation server refuses them as such
    client_id, _, secret = decoded.partition(":")
    # RFC 6749 §2.3.1: both parts are form-urlencoded before Basic encoding.
    yield from _checked("the client id in the Basic credentials", unquote_plus(client_id))
    yield from _checked("the client secret in the Basic credentials", unquote_plus(secret))


def _body_problems(request: HttpRequest) -> Iterator[tuple[str, str]]:
    content_type = request.META.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        # The raw body first: views that read it themselves (open registration)
        # still can after the form is parsed from it.
        _ = request.body
        for key, values in request.POST.lists():
            yield from _checked("a form field name", key)
            for value in values:
                yield from _checked(f"form field {_shown(key)}", value)
    elif content_type == "application/json" or content_type.endswith("+json"):
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if not ascii_digits(declared) or int(declared) > JSON_INSPECT_MAX_BYTES:
            return
        try:
            document = json.loads(request.body)
        except RecursionError:
            yield "the JSON body", "is nested too deeply"
            return
        except ValueError:
            return  # malformed JSON: the view refuses it as such
        yield from _json_problems(document)


# An API refusal's `field` is the member's path alone ("text", "arguments.query"),
# as the APIs name their fields; the message keeps the prefix.
JSON_FIELD = "JSON field "


def _json_problems(document: Any) -> Iterator[tuple[str, str]]:
    """Every string of a parsed JSON document, walked without recursion (any depth)."""
    pending: list[tuple[Any, str]] = [(document, "")]
    while pending:
        value, where = pending.pop()
        if isinstance(value, str):
            yield from _checked(f"{JSON_FIELD}{where or 'the body'}", value)
        elif isinstance(value, dict):
            for key, item in value.items():
                yield from _checked("a JSON member name", key)
                pending.append((item, f"{where}.{key}" if where else key))
        elif isinstance(value, list):
            pending.extend((item, f"{where}[{index}]") for index, item in enumerate(value))


def answers_machines(path: str) -> bool:
    """Paths whose clients are programs, not people: their errors stay JSON
    (the REST and internal APIs, MCP, OAuth's endpoints and discovery), except
    the consent page a person opens in a browser."""
    if path.startswith("/o/authorize"):
        return False
    return path.startswith(("/api/", "/internal/", "/mcp", "/o/", "/.well-known/"))


def refusal(request: HttpRequest, field: str, message: str, status: int = 400) -> HttpResponse:
    """A refusal in the shape each part of the site answers errors in."""
    path = request.path_info
    message = message.replace("\x00", "\\u0000")
    if path.startswith(("/o/", "/.well-known/")):
        error = "server_error" if status >= 500 and status != 503 else "invalid_request"
        return JsonResponse({"error": error, "error_description": message}, status=status)
    if path.startswith(("/api/", "/internal/", "/mcp")):
        code = {400: "invalid_argument", 403: "permission_denied", 404: "not_found", 500: "internal",
                503: "unavailable"}.get(status, "request_refused")
        return JsonResponse({"error": {"code": code, "message": message, "field": field}}, status=status)
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
