"""memoryhub's OAuth policy, plugged into django-oauth-toolkit through its seams:
the validator class, the oauthlib server class, the scopes backend and the client
ID metadata document fetcher (see OAUTH2_PROVIDER in settings).

The rules, in one place (who may hold what is memoryhub.access's: this module
asks `grantable_scopes` and `token_holder`):

- Audience (RFC 8707): a token is issued for exactly one of our resource URLs,
  BASE_URL + "/mcp", + "/mcp/readonly" or + "/api/admin" (the REST admin API);
  a request naming none gets "/mcp". Connected sources' ingest tokens carry no
  audience at all.
- Scopes: people's clients may ask for the memory scopes and workspace.admin;
  an agent gets the part of what it asks for that its admin granted (never
  memory.audit); a source gets "ingest" only. workspace.admin is issued for the
  REST admin API alone and that resource for workspace.admin alone
  (`access.audience_refusal`), so an admin token opens no MCP tool and an MCP
  token does not open the admin API. Internal scopes (registration,
  introspection, ingest) are never advertised and never open an MCP tool (see
  memoryhub.oauth.tokens).
- Lifetimes: people's access tokens live 15 minutes and come with a rotating
  refresh token; client-credentials tokens live 60 minutes and come alone.
- PKCE with S256 only, and redirect URIs that match a registered one exactly and
  are https or http on a loopback address.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import oauthlib.oauth2
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.utils import timezone
from oauth2_provider.cimd import CIMDError, SafeMetadataFetcher, is_cimd_client_id
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken
from oauth2_provider.oauth2_validators import OAuth2Validator as ToolkitValidator
from oauth2_provider.scopes import SettingsScopes
from oauth2_provider.settings import oauth2_settings
from oauthlib.oauth2.rfc6749 import errors

from memoryhub import access
from memoryhub.access import ADMIN_SCOPE, INGEST_SCOPE, MEMORY_SCOPES, PERSON_SCOPES
from memoryhub.models import RedeemedCode
from memoryhub.oauth.tokens import token_checksum
from memoryhub.services.arguments import has_control_character

PERSON_TOKEN_SECONDS = 15 * 60
AGENT_TOKEN_SECONDS = 60 * 60
REGISTRATION_SCOPE = "registration"
INTROSPECTION_SCOPE = "introspection"
INTERNAL_SCOPES = (REGISTRATION_SCOPE, INTROSPECTION_SCOPE, INGEST_SCOPE)
# What a person's client gets when it names no scope: enough to search, nothing more.
PERSON_DEFAULT_SCOPES = ("memory.read",)
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
# RFC 7636 §4.2: 43 to 128 unreserved characters.
CODE_CHALLENGE = re.compile(r"[A-Za-z0-9\-._~]{43,128}")
MCP_PATH = "/mcp"
MCP_READONLY_PATH = "/mcp/readonly"
ADMIN_API_PATH = "/api/admin"
# How long an exchanged authorization code is remembered, so a replay revokes what it issued.
REDEEMED_CODE_KEPT = timedelta(hours=24)


# ---------------------------------------------------------------- resources


def resource_url(path: str) -> str:
    # Read at call time: the public origin is configuration, and tests move it.
    return settings.BASE_URL.rstrip("/") + path


def resource_urls() -> tuple[str, str]:
    """The MCP endpoints' resource URLs."""
    return resource_url(MCP_PATH), resource_url(MCP_READONLY_PATH)


def admin_api_url() -> str:
    """The REST admin API's resource URL (its tokens carry workspace.admin alone)."""
    return resource_url(ADMIN_API_PATH)


def issued_resources() -> tuple[str, ...]:
    return (*resource_urls(), admin_api_url())


def for_admin_api(request) -> bool:
    """Whether this token request's audience is the REST admin API."""
    resource = getattr(request, "resource", None)
    return isinstance(resource, list) and resource == [admin_api_url()]


def issuer() -> str:
    """Our RFC 8414 issuer identifier: the public origin (OIDC_ISS_ENDPOINT in settings)."""
    return oauth2_settings.OIDC_ISS_ENDPOINT or settings.BASE_URL.rstrip("/")


def _invalid_target(description: str, request) -> errors.CustomOAuth2Error:
    return errors.CustomOAuth2Error(error="invalid_target", description=description, request=request)


def token_audience(application: Application, requested: list[str], request) -> list[str]:
    """The one resource a token for `application` is issued for, or invalid_target."""
    if is_source_client(application):
        if requested:
            raise _invalid_target("Ingestion credentials are not issued for a resource.", request)
        return []
    if len(requested) > 1:
        raise _invalid_target("Ask for one resource per token.", request)
    if requested and requested[0] not in issued_resources():
        raise _invalid_target(
            f"Tokens are issued only for {', '.join(issued_resources()[:-1])} and {issued_resources()[-1]}.", request
        )
    return list(requested) or [resource_url(MCP_PATH)]


def check_scopes_fit_audience(request) -> dict:
    """oauthlib hook once scopes and audience are known (after consent's scope
    check, and before any token is saved): workspace.admin only for the REST
    admin API, and that resource for workspace.admin only."""
    user = getattr(request, "user", None)
    why = access.audience_refusal(request.scopes or [], admin_api=for_admin_api(request), user=user,
                                  before_consent=user is None and request.grant_type is None)
    if why is not None:
        raise errors.InvalidScopeError(description=why, request=request)
    return {}


def _requested_resources(request) -> list[str]:
    # After consent DOT hands the resources over as a list (from the form); on the
    # first visit they are still repeated query parameters, of which oauthlib keeps
    # only the last, so read them all from the query string.
    if isinstance(request.resource, list):
        return request.resource
    try:
        return [value for key, value in request.uri_query_params if key == "resource"]
    except ValueError:
        raise errors.InvalidRequestFatalError(description="Unable to parse query string", request=request) from None


def check_authorization_request(request) -> dict:
    """oauthlib pre-authorization hook: refuse what consent must never be asked for.

    Runs on the first visit and again when the consent form comes back, so a
    tampered hidden field meets the same rules.
    """
    if not request.code_challenge:
        raise errors.MissingCodeChallengeError(request=request)
    if not CODE_CHALLENGE.fullmatch(request.code_challenge):
        raise errors.InvalidRequestError(description="code_challenge is malformed (RFC 7636).", request=request)
    if request.code_challenge_method != "S256":
        # oauthlib defaults a missing method to "plain"; RFC 9700 wants S256 only.
        raise errors.InvalidRequestError(description="code_challenge_method must be S256.", request=request)
    request.resource = token_audience(request.client, _requested_resources(request), request)
    return {}


# ---------------------------------------------------------------- redirects


def redirect_uri_allowed(uri: str) -> bool:
    """https anywhere, or plain http to this machine's loopback (RFC 8252 §7.3).
    Never with whitespace or a control character in it: urlsplit drops some of
    them silently, and DOT keeps a client's URIs separated by whitespace, so one
    URI with a space in it would be stored as two, the second never checked."""
    if not uri or has_control_character(uri) or any(char.isspace() for char in uri):
        return False
    try:
        parts = urlsplit(uri)
    except ValueError:
        return False
    if parts.fragment or "#" in uri or "@" in parts.netloc or "*" in parts.netloc or not parts.hostname:
        return False
    if parts.scheme == "https":
        return True
    return parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS


def with_issuer(url: str) -> str:
    """The redirect with RFC 9207's `iss` set, if it is not there already."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(key == "iss" for key, _ in query):
        return url
    return urlunsplit(parts._replace(query=urlencode([*query, ("iss", issuer())])))


# ---------------------------------------------------------------- scopes


def _verifier_matches(challenge: str, verifier: str | None) -> bool:
    """RFC 7636 S256: BASE64URL(SHA256(verifier)) == challenge."""
    if not challenge or not verifier:
        return False
    digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return hmac.compare_digest(digest, challenge)


def _lock(queryset) -> None:  # type: ignore[no-untyped-def]
    """Lock these rows until the token endpoint's transaction ends (outside one, do nothing)."""
    if connection.in_atomic_block:
        list(queryset.select_for_update().values_list("pk", flat=True))


def client_registered(client_id: str) -> bool:
    return bool(client_id) and Application.objects.filter(client_id=client_id).exists()


def is_source_client(application: Application | None) -> bool:
    agent = access.agent_of(application)
    return agent is not None and agent.kind == agent.Kind.SOURCE


class ScopePolicy(SettingsScopes):
    """DOT's scopes backend. With no application (discovery) it answers with the
    memory scopes only, so internal scopes never reach any metadata document."""

    def get_available_scopes(self, application=None, request=None, *args, **kwargs):
        return sorted(access.grantable_scopes(application))

    def get_default_scopes(self, application=None, request=None, *args, **kwargs):
        available = access.grantable_scopes(application)
        if application is not None and access.agent_of(application) is not None:
            return sorted(available)
        # A person's client asking for the REST admin API means its one scope.
        wanted = (ADMIN_SCOPE,) if request is not None and for_admin_api(request) else PERSON_DEFAULT_SCOPES
        return [scope for scope in wanted if scope in available]


# ---------------------------------------------------------------- lifetimes


def access_token_lifetime(request) -> int:
    """Seconds an access token lives: agents (client credentials) an hour, people 15 minutes."""
    if request.grant_type == "client_credentials":
        return AGENT_TOKEN_SECONDS
    return PERSON_TOKEN_SECONDS


UNOFFERED_GRANT_TYPES = ("password", "urn:ietf:params:oauth:grant-type:device_code")


def _each_scope_once(request) -> None:  # type: ignore[no-untyped-def]
    request.scopes = list(dict.fromkeys(request.scopes or []))


class Server(oauthlib.oauth2.Server):
    """oauthlib's server with our lifetimes and authorization-request rules."""

    def __init__(self, request_validator, token_expires_in=None, *args, **kwargs):
        # ACCESS_TOKEN_EXPIRE_SECONDS is one number; the lifetime depends on the grant.
        super().__init__(request_validator, access_token_lifetime, *args, **kwargs)
        self.auth_grant.custom_validators.pre_auth.append(check_authorization_request)
        self.auth_grant.custom_validators.post_auth.append(check_scopes_fit_audience)
        # Decide the audience while a refusal can still reach the client as a proper
        # OAuth error; DOT would otherwise decide it only while saving the token.
        for grant in (self.auth_grant, self.credentials_grant, self.refresh_grant):
            grant.custom_validators.post_token.append(request_validator.validate_token_resource)
        # The grants this server does not offer are not in its token endpoint, so
        # oauthlib answers them unsupported_grant_type (the device grant would
        # otherwise reach DOT's device lookup, and a 500 without device_code).
        for grant_type in UNOFFERED_GRANT_TYPES:
            self._grant_types.pop(grant_type, None)
        # A refresh takes its scopes from the request without validate_scopes:
        # each scope once there too.
        self.refresh_grant.custom_validators.post_token.append(_each_scope_once)


# ---------------------------------------------------------------- validator


class OAuth2Validator(ToolkitValidator):
    def _authenticate_basic_auth(self, request):
        # DOT catches binascii.Error around base64.b64decode, but a header that
        # is not ASCII at all raises ValueError there: such credentials are
        # simply not valid ones (the request body may still authenticate).
        try:
            return super()._authenticate_basic_auth(request)
        except ValueError:
            return False

    def validate_scopes(self, client_id, scopes, client, request, *args, **kwargs):
        # Each scope once: "memory.read" asked 5,000 times is one scope, stored once.
        scopes = list(dict.fromkeys(scopes))
        request.scopes = scopes
        allowed = access.grantable_scopes(client)
        if request.grant_type != "client_credentials" or access.agent_of(client) is None:
            return set(scopes) <= allowed
        # An agent asks before it knows its grant (MCP clients ask for what the
        # resource's challenge lists), so it gets the part of the memory scopes it
        # asked for that its admin granted (RFC 6749 §3.3; the response says which).
        # Anything else, or nothing grantable, is refused.
        if not set(scopes) <= set(MEMORY_SCOPES) | allowed:
            return False
        granted = [scope for scope in scopes if scope in allowed]
        request.scopes = granted
        return bool(granted)

    def validate_redirect_uri(self, client_id, redirect_uri, request, *args, **kwargs):
        # Exact string match. DOT would accept a loopback URI on any port (RFC 8252);
        # MCP clients register the URI they will use, so exact costs them nothing.
        registered = request.client.redirect_uris.split()
        return redirect_uri_allowed(redirect_uri) and redirect_uri in registered

    def validate_token_resource(self, request) -> None:
        """The token's audience: DOT normalises the request's resources and inherits
        the grant's or refresh token's; we then insist on exactly one of ours."""
        super()._check_and_set_request_resource(request)
        request.resource = token_audience(request.client, request.resource, request)
        check_scopes_fit_audience(request)

    def _check_and_set_request_resource(self, request):
        # DOT calls this while saving the token; it was settled in validation already
        # (see Server), and settling it again gives the same answer.
        self.validate_token_resource(request)

    def validate_refresh_token(self, refresh_token, client, request, *args, **kwargs):
        # Concurrent refreshes with one token wait here for each other (the token
        # endpoint runs in a transaction, memoryhub.oauth.views.TokenView): the
        # later ones then see the first one's rotation and are refused as a
        # replay, revoking the family exactly as a sequential replay does.
        _lock(RefreshToken.objects.filter(token_checksum=token_checksum(refresh_token)))
        valid = super().validate_refresh_token(refresh_token, client, request, *args, **kwargs)
        # A person who left (deactivated, removed from the workspace) stops refreshing at once.
        return valid and access.token_holder(application=client, user=request.user) is not None

    def validate_code(self, client_id, code, client, request, *args, **kwargs):
        # Concurrent redemptions of one code wait here for each other; the first
        # deletes the grant, the others then find none (invalid_grant, not a 500).
        _lock(Grant.objects.filter(code=code, application=client))
        if super().validate_code(client_id, code, client, request, *args, **kwargs):
            return True
        # RFC 6749 §4.1.2: a code used twice revokes the tokens issued from it;
        # only when the replay carries the code's PKCE verifier, so that someone
        # who saw a spent code alone cannot end its holder's session with it.
        redeemed = RedeemedCode.objects.filter(code_checksum=token_checksum(code), application=client).first()
        if redeemed is not None and _verifier_matches(redeemed.code_challenge, request.code_verifier):
            RefreshToken.revoke_family(redeemed.token_family)
            AccessToken.objects.filter(token_checksum=redeemed.access_token_checksum).delete()
        return False

    def save_bearer_token(self, token, request, *args, **kwargs):
        super().save_bearer_token(token, request, *args, **kwargs)
        if request.grant_type == "authorization_code" and token.get("access_token"):
            refresh = token.get("refresh_token")
            family = (RefreshToken.objects.filter(token_checksum=token_checksum(refresh))
                      .values_list("token_family", flat=True).first() if refresh else None)
            challenge = (Grant.objects.filter(code=request.code, application=request.client)
                         .values_list("code_challenge", flat=True).first() or "")
            RedeemedCode.objects.filter(redeemed_at__lt=timezone.now() - REDEEMED_CODE_KEPT).delete()
            RedeemedCode.objects.create(
                code_checksum=token_checksum(request.code), application=request.client, token_family=family,
                access_token_checksum=token_checksum(token["access_token"]), code_challenge=challenge,
            )


# ---------------------------------------------------------------- client metadata documents


def client_metadata_problem(metadata: dict) -> str | None:
    """Why a client's self-description (RFC 7591 / CIMD) breaks our registration
    policy, or None: public clients, authorization code, memory scopes, and
    https or loopback redirect URIs."""
    redirect_uris = metadata.get("redirect_uris")
    if not isinstance(redirect_uris, list) or not redirect_uris:
        return "redirect_uris must list at least one URI"
    bad = [uri for uri in redirect_uris if not isinstance(uri, str) or not redirect_uri_allowed(uri)]
    if bad:
        return "redirect URIs must be https, or http on a loopback address (127.0.0.1, [::1], localhost)"
    grant_types = metadata.get("grant_types", ["authorization_code"])
    if not isinstance(grant_types, list) or not all(isinstance(grant, str) for grant in grant_types) \
            or not set(grant_types) <= {"authorization_code", "refresh_token"}:
        return "grant_types may only be authorization_code and refresh_token"
    response_types = metadata.get("response_types", ["code"])
    if response_types != ["code"]:
        return "response_types may only be code"
    scope = metadata.get("scope", "")
    if not isinstance(scope, str) or not set(scope.split()) <= set(PERSON_SCOPES):
        return f"scope may name only {', '.join(PERSON_SCOPES)}"
    return None


class ClientMetadataFetcher(SafeMetadataFetcher):
    """DOT's SSRF-hardened CIMD fetcher, plus our registration policy. Why a
    document could not be used is kept for as long as DOT backs off from the
    URL, so the consent page can tell the person (`metadata_document_failure`)."""

    def fetch(self, client_id):
        try:
            metadata, max_age = super().fetch(client_id)
        except CIMDError as exc:
            self._remember(client_id, _fetch_failure_words(str(exc)))
            raise
        problem = client_metadata_problem(metadata)
        if problem:
            self._remember(client_id, f"it does not meet this server's client policy: {problem}")
            raise CIMDError(problem)
        return metadata, max_age

    @staticmethod
    def _remember(client_id: str, why: str) -> None:
        cache.set(_failure_key(client_id), why, max(oauth2_settings.CIMD_FAILURE_BACKOFF_SECONDS, 60))


# What a person is told of a failed fetch: fixed words, never the resolver's or
# the network's own text (which could name internal addresses).
_FETCH_FAILURES = (
    ("could not resolve", "its host name could not be resolved from this server (it may have no outbound internet)"),
    ("non-public address", "its host is not on the public internet"),
    ("did not resolve to any address", "its host name has no address"),
    ("could not fetch", "it could not be fetched from this server (it may have no outbound internet, or the site "
                        "did not answer)"),
    ("returned HTTP", "the site answered with an error instead of the document"),
    ("client_id URL", "the address is not a valid metadata document address (https, a host and a path, no user "
                      "name, fragment or dot segments)"),
)


def _fetch_failure_words(error: str) -> str:
    for marker, words in _FETCH_FAILURES:
        if marker in error:
            return words
    return "what it returned is not a usable client metadata document (a small JSON object)"


def _failure_key(client_id: str) -> str:
    return "oauth:cimd-failure:" + hashlib.sha256(client_id.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class MetadataDocumentFailure:
    url: str
    why: str
    accepted: bool  # whether this server accepts client metadata documents at all


def metadata_document_failure(client_id: str) -> MetadataDocumentFailure | None:
    """For a refused authorization request whose client_id is a client ID
    metadata document URL: which URL, and why it could not be used."""
    if not is_cimd_client_id(client_id):
        return None
    if not oauth2_settings.CIMD_ENABLED:
        return MetadataDocumentFailure(
            client_id, "This server does not accept client metadata documents "
                       "(MEMORYHUB_CLIENT_METADATA_DOCUMENTS is off), so it does not advertise them.", False)
    if client_registered(client_id):
        return None  # known already: the refusal is about something else
    why = cache.get(_failure_key(client_id))
    return MetadataDocumentFailure(
        client_id, f"This server tried to fetch it and could not use it: {why}." if why else
        "This server could not fetch it, or it does not meet this server's client policy (public clients, the "
        "authorization code grant, https or loopback redirect addresses, the memory scopes or workspace.admin).", True)


