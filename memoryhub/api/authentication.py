"""Who may call the ingestion API: a connected source, with its own token.

The token is a DOT access token from the client-credentials grant, checked by
DOT itself (OAuth2Authentication → OAuthLibCore → our OAuth2Validator, which
finds tokens by checksum since they are stored hashed). On top of that:

- the token must carry the `ingest` scope (403 insufficient_scope otherwise);
- its holder must still be a live connected source whose admin grants it
  `ingest` (memoryhub.access.token_holder; 403 otherwise).

A token issued for an MCP resource (/mcp, /mcp/readonly) fails DOT's audience
check here, and an ingest token carries no audience and no memory scope, so
it opens no MCP tool (memoryhub.oauth.tokens): the two never mix.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import SuspiciousOperation
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from oauth2_provider.contrib.rest_framework import OAuth2Authentication
from oauth2_provider.oauth2_backends import get_oauthlib_core
from rest_framework import exceptions, status

from memoryhub import access
from memoryhub.access import INGEST_SCOPE
from memoryhub.models import Source
from memoryhub.services import sources


@dataclass(frozen=True)
class SourcePrincipal:
    """request.user on the ingestion API."""

    source: Source
    client_id: str
    is_authenticated: bool = True

    def __str__(self) -> str:
        return f"source:{self.source.agent.name}"


class InsufficientScope(exceptions.APIException):
    status_code = status.HTTP_403_FORBIDDEN
    default_code = "insufficient_scope"
    default_detail = f"This API needs a connected source's token with the {INGEST_SCOPE!r} scope."


class IngestTokenAuthentication(OAuth2Authentication):
    www_authenticate_realm = "memoryhub-ingest"

    def authenticate(self, request):  # type: ignore[no-untyped-def]
        # DOT reads the request's form parameters; given DRF's request that would
        # parse the JSON body before the caller is known. Django's own request
        # has no form parameters for JSON, so the token is checked first.
        try:
            valid, oauthlib_request = get_oauthlib_core().verify_request(request._request, scopes=[])
        except ValueError as error:
            raise SuspiciousOperation(error) from error
        if not valid:
            if _has_bearer(request):
                request.oauth2_error = {"error": "invalid_token",
                                        **getattr(oauthlib_request, "oauth2_error", {})}
                raise exceptions.AuthenticationFailed("The access token is invalid, expired or not for this API.")
            return None  # no credentials at all: DRF answers 401 with our challenge
        token = oauthlib_request.access_token
        if INGEST_SCOPE not in token.scope.split():
            raise InsufficientScope()
        source = access.ingesting_source(application=token.application, user=token.user,
                                         granted=token.scope.split())
        if source is None:
            raise exceptions.PermissionDenied("This token does not belong to a connected source of a workspace.")
        refusal = access.source_refusal(source)
        if refusal is not None:
            sources.source_error_record(source=source, message=refusal)  # its health line shows it
            raise exceptions.PermissionDenied(refusal)
        return SourcePrincipal(source=source, client_id=token.application.client_id), token


def _has_bearer(request) -> bool:  # type: ignore[no-untyped-def]
    return request.META.get("HTTP_AUTHORIZATION", "").lower().startswith("bearer")


class IngestTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes the ingestion API's credentials."""

    target_class = "memoryhub.api.authentication.IngestTokenAuthentication"
    name = "sourceClientCredentials"
    priority = 1

    def get_security_definition(self, auto_schema):  # type: ignore[no-untyped-def]
        return {
            "type": "oauth2",
            "description": (
                "A connected source's own credentials: POST grant_type=client_credentials to /o/token/ "
                "(HTTP Basic with the source's client id and secret) and send the access token as "
                "`Authorization: Bearer …`. Tokens last 60 minutes."
            ),
            "flows": {
                "clientCredentials": {
                    "tokenUrl": "/o/token/",
                    "scopes": {INGEST_SCOPE: "Feed documents into the workspace's shared memory"},
                }
            },
        }

    def get_security_requirement(self, auto_schema):  # type: ignore[no-untyped-def]
        return {self.name: [INGEST_SCOPE]}
