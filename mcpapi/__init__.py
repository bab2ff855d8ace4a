"""The MCP endpoint: gateway (HTTP policy), server (tools), client (the way into memory).

Importable without Django configured; nothing here imports `memoryhub`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version

# The project's version (pyproject.toml) for when the distribution is not installed.
FALLBACK_VERSION = "0.1.0"


def _version() -> str:
    try:
        return _distribution_version("memoryhub")
    except PackageNotFoundError:
        return FALLBACK_VERSION


__version__ = _version()
