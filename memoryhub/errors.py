"""The one error family of the memory domain. Each interface maps it once:
DRF's exception handler, the console's messages, the MCP client's tool errors."""

from __future__ import annotations


class MemoryhubError(Exception):
    code = "error"
    status = 400

    def __init__(self, message: str, *, code: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.field = field

    def as_dict(self) -> dict:
        body = {"code": self.code, "message": self.message}
        if self.field:
            body["field"] = self.field
        return body


class InvalidArgument(MemoryhubError):
    code = "invalid_argument"


class NotFound(MemoryhubError):
    code = "not_found"
    status = 404


class PermissionDenied(MemoryhubError):
    code = "permission_denied"
    status = 403


class Conflict(MemoryhubError):
    code = "conflict"
    status = 409


class DeadlineExceeded(MemoryhubError):
    code = "deadline_exceeded"
    status = 504


def is_unavailable(exception: BaseException) -> bool:
    """A database or Redis that cannot be reached right now (not a bug)."""
    from django.db import InterfaceError, OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return isinstance(exception, OperationalError | InterfaceError | RedisConnectionError | RedisTimeoutError)
