"""Bearer tokens and the RFC 6750 / RFC 9728 challenges the gateway sends."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mcpapi.connection import Endpoint

WELL_KNOWN_PROTECTED_RESOURCE = "/.well-known/oauth-protected-resource"


@dataclass(frozen=True)
class Presented:
    """What the Authorization header carried: `sent` is true for any Bearer
    attempt, `token` only when it is well formed."""

    sent: bool
    token: str | None


def presented_token(headers: Mapping[str, str]) -> Presented:
    value = headers.get("authorization")
    if value is None:
        return Presented(sent=False, token=None)
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return Presented(sent=False, token=None)
    token = token.strip()
    return Presented(sent=True, token=token if token and " " not in token else None)


def resource_url(base_url: str, endpoint: Endpoint) -> str:
    return base_url.rstrip("/") + endpoint


def resource_metadata_url(base_url: str, endpoint: Endpoint) -> str:
    # RFC 9728 path insertion: the well-known segment goes before the resource path.
    return base_url.rstrip("/") + WELL_KNOWN_PROTECTED_RESOURCE + endpoint


def bearer_challenge(
    *, metadata_url: str, error: str | None = None, scope: str | None = None, description: str | None = None
) -> str:
    params: list[tuple[str, str]] = []
    if error is not None:
        params.append(("error", error))
    if scope is not None:
        params.append(("scope", scope))
    params.append(("resource_metadata", metadata_url))
    if description is not None:
        params.append(("error_description", description))
    return "Bearer " + ", ".join(f'{name}="{_quoted(value)}"' for name, value in params)


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
