"""Who may call the REST APIs.

The ingestion API: a connected source, with its own token.

The token is a DOT access token from the client-credentials grant, checked by
DOT itself (OAuth2Authentication → OAuthLibCore → our OAuth2Validator, which
finds tokens by checksum since they are stored hashed). On top of that:

- the token must carry the `ingest` scope (403 insufficient_scope otherwise);
- its holder must still be a live connected source whose admin grants it
  `ingest` (memoryhub.access.token_holder; 403 otherwise).

A token issued for an MCP resource (/mcp, /mcp/readonly) fails DOT's audience
check here, and an ingest token carries no audience and no memory scope, so
it opens no MCP tool (memoryhub.oauth.tokens): the two never mix.

The REST admin API: a person who administers their workspace, through a
client they authorised with the `workspace.admin` scope for the admin API's
own resource (BASE_URL + "/api/admin"; memoryhub.oauth.policy). DOT checks
the token and its audience; memoryhub.access.admin_api_caller decides, on
every request, whether its holder still administers their workspace. A token
issued for an MCP endpoint fails the audience check here (401), and an admin
API token fails it at /mcp and carries no memory scope besides.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import SuspiciousOperation
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from oauth2_provider.contrib.rest_framework import OAuth2Authentication
from oauth2_provider.oauth2_backends import get_oauthlib_core
from rest_framework import exceptions, status

from memoryhub import access
from memoryhub.access import ADMIN_SCOPE, INGEST_SCOPE, Caller
from memoryhub.models import Source
from memoryhub.oauth.policy import ADMIN_API_PATH, admin_api_url, resource_url
from memoryhub.oauth.tokens import mark_used
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
    # What the WWW-Authenticate challenge names (RFC 6750 §3.1).
    realm = "memoryhub-ingest"
    scope = INGEST_SCOPE


class AdminInsufficientScope(InsufficientScope):
    default_detail = f"This API needs a token with the {ADMIN_SCOPE!r} scope, issued for {ADMIN_API_PATH}."
    realm = "memoryhub-admin"
    scope = ADMIN_SCOPE


def _verified_token(request):  # type: ignore[no-untyped-def]
    """DOT's access token for the request, None without credentials; a bearer
    token that is invalid, expired or for another resource is refused (401)."""
    # DOT reads the request's form parameters; given DRF's request that would
    # parse the JSON body before the caller is known. Django's own request
    # has no form parameters for JSON, so the token is checked first.
    try:
        valid, oauthlib_request = get_oauthlib_core().verify_request(request._request, scopes=[])
    except ValueError as error:
        raise SuspiciousOperation(error) from error
    if not valid:
        if _has_bearer(request):
            request.oauth2_error = {"error": "invalid_token", **getattr(oauthlib_request, "oauth2_error", {})}
            raise exceptions.AuthenticationFailed("The access token is invalid, expired or not for this API.")
        return None  # no credentials at all: DRF answers 401 with our challenge
    return oauthlib_request.access_token


class IngestTokenAuthentication(OAuth2Authentication):
    www_authenticate_realm = "memoryhub-ingest"

    def authenticate(self, request):  # type: ignore[no-untyped-def]
        token = _verified_token(request)
        if token is None:
            return None
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


@dataclass(frozen=True)
class AdminPrincipal:
    """request.user on the REST admin API: the admin, as the domain's caller."""

    caller: Caller
    is_authenticated: bool = True

    def __str__(self) -> str:
        return self.caller.subject


class AdminTokenAuthentication(OAuth2Authentication):
    www_authenticate_realm = "memoryhub-admin"

    def authenticate(self, request):  # type: ignore[no-untyped-def]
        token = _verified_token(request)
        if token is None:
            return None
        # DOT's audience check is a URL prefix; the admin API wants its own resource exactly.
        if admin_api_url() not in (token.resource or []):
            request.oauth2_error = {"error": "invalid_token",
                                    "error_description": "The access token was not issued for this API."}
            raise exceptions.AuthenticationFailed("The access token was not issued for this API.")
        try:
            caller = access.admin_api_caller(application=token.application, user=token.user,
                                             granted=token.scope.split(), client_id=token.application.client_id)
        except access.InsufficientScope:
            raise AdminInsufficientScope() from None
        if caller is None:
            request.oauth2_error = {"error": "invalid_token",
                                    "error_description": "Nobody is entitled to this token any more."}
            raise exceptions.AuthenticationFailed("The access token is no longer valid.")
        mark_used(token)  # Connected apps shows when it was last used
        return AdminPrincipal(caller=caller), token

    def authenticate_header(self, request):  # type: ignore[no-untyped-def]
        # RFC 9728 §5.1: where a client learns how to get a token for this API.
        metadata = resource_url("/.well-known/oauth-protected-resource" + ADMIN_API_PATH)
        return f'{super().authenticate_header(request)},resource_metadata="{metadata}"'


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


class AdminTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes the REST admin API's credentials."""

    target_class = "memoryhub.api.authentication.AdminTokenAuthentication"
    name = "workspaceAdmin"
    priority = 1

    def get_security_definition(self, auto_schema):  # type: ignore[no-untyped-def]
        return {
            "type": "oauth2",
            "description": (
                "A workspace admin's own authorisation: a client the admin authorises on the consent page "
                f"(authorization code with PKCE S256) with scope={ADMIN_SCOPE} and resource=<origin>{ADMIN_API_PATH} "
                "(RFC 8707), sending the access token as `Authorization: Bearer …`. Such a token carries "
                f"{ADMIN_SCOPE} alone, is valid here only (never at /mcp), lasts 15 minutes with a rotating refresh "
                "token, and works only while its holder is an admin of the workspace. Agents and connected "
                "sources are never issued it."
            ),
            "flows": {
                "authorizationCode": {
                    "authorizationUrl": "/o/authorize/",
                    "tokenUrl": "/o/token/",
                    "refreshUrl": "/o/token/",
                    "scopes": {ADMIN_SCOPE: "Administer your workspace (members, roles, collections, access rules, "
                                            "connected sources, agents) while you are one of its admins"},
                }
            },
        }

    def get_security_requirement(self, auto_schema):  # type: ignore[no-untyped-def]
        return {self.name: [ADMIN_SCOPE]}
