from __future__ import annotations

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from memoryhub.errors import MemoryhubError


def exception_handler(exc, context):
    if isinstance(exc, MemoryhubError):
        return Response({"error": exc.as_dict()}, status=exc.status)
    return drf_exception_handler(exc, context)
