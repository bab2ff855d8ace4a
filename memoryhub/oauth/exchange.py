"""RFC 8693 token exchange for the edge deployment, and the memory-service
credential it issues.

An edge process (`mcpapi.edge`) holds no secret and no database. On every MCP
request it sends the caller's access token here, and nowhere else, and gets back
a credential for the memory service's internal API (`memoryhub.mcp_adapter.internal_api`).
The exchange is also the edge's token verification: the answer names the
tenant, subject, principal kind, scopes and resource.

The credential:

- is an opaque 256-bit random string stored only as its SHA-256 checksum, in a
  django-oauth-toolkit `AccessToken` (hashed storage is on, see
  COMPLIANT_BCP_RFC9700_TOKEN_STORAGE). No signing key exists anywhere: the
  memory service checks a credential by looking it up, so an edge host, even a
  compromised one, never sees key material, and a credential can be deleted;
- has exactly one audience, the memory service (`service_audience()`). No other
  grant issues that audience (memoryhub.oauth.policy.token_audience), the MCP gateway's
  verifier refuses it (it wants /mcp or /mcp/readonly exactly), and a token for
  /mcp is not accepted by the internal API: neither opens the other;
- belongs to the caller's own application and person (or agent), so it resolves
  to the same tenant, subject and kind through the same code as the caller's
  token (`memoryhub.oauth.tokens.verified_row`), which also re-checks that
  the person or agent is still entitled on every internal call;
- carries the caller's memory scopes or fewer: what the edge asks for must be
  among them, and a token presented at /mcp/readonly yields no memory.write;
- lives as long as one tool call may (MEMORYHUB_EXCHANGED_TOKEN_SECONDS,
  default and ceiling 25 s, the contract's per-call deadline), and never past
  the caller's token.

Why stored rather than signed: a JWT would save the memory service one indexed
lookup, but it needs a signing key at the authorisation server and a trusted
verification key at every service process, and it cannot be withdrawn within its
lifetime. The memory service has the database anyway; the lookup costs less than
a millisecond and the exchange already costs one round trip.

Each subject token may be exchanged at most twice as often in a minute as the
MCP rate limit lets one principal through (a full burst plus a minute's refill);
429 with Retry-After beyond, which the edge passes on. The edge exchanges before
its rate limit knows who is calling, and a flood must not become a flood of
credential rows.

The edge is a public client: it presents no client credentials, because it has
none. The subject token is its only authority, so anyone holding a caller's
token could exchange it too; what they would get opens exactly that caller's
rights, at the memory service only, for 25 s. The internal API belongs on the
private network all the same (see README, Deployment); with
MEMORYHUB_INTERNAL_API off (the single-process default) this grant is refused.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from django_ratelimit.core import get_usage
from oauth2_provider.models import AccessToken, set_token_value

from memoryhub import access
from memoryhub.errors import PermissionDenied
from memoryhub.oauth.policy import MCP_READONLY_PATH, resource_url, resource_urls
from memoryhub.oauth.tokens import MAX_TOKEN_LENGTH, VerifiedToken, access_token_row, token_checksum, verified_row

TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
# The contract's per-call deadline: no credential outlives the call it serves.
MAX_CREDENTIAL_SECONDS = 25.0
AUDIENCE_PATH = "/internal/memory"
# One exchange in this many also deletes its principal's expired credentials.
PURGE_EVERY = 16
# RFC 6749 §3.2: no parameter may be sent twice. These are the ones we read.
_PARAMETERS = (
    "grant_type", "subject_token", "subject_token_type", "resource", "audience", "scope",
    "requested_token_type", "actor_token", "actor_token_type",
)


def service_audience() -> str:
    """The memory service's audience identifier (read at call time: tests move BASE_URL)."""
    return settings.MEMORYHUB_SERVICE_AUDIENCE or settings.BASE_URL.rstrip("/") + AUDIENCE_PATH


def credential_lifetime() -> float:
    return min(settings.MEMORYHUB_EXCHANGED_TOKEN_SECONDS, settings.MEMORYHUB_TOOL_DEADLINE_SECONDS,
               MAX_CREDENTIAL_SECONDS)


class ExchangeRefused(Exception):
    def __init__(self, error: str, description: str, status: int = 400, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True)
class Exchanged:
    credential: str
    expires_in: int
    # The credential's principal: the caller's identity, its scopes, the service audience.
    principal: VerifiedToken
    # The MCP resource the subject token was presented at.
    resource: str

    def as_response(self) -> dict:
        principal = self.principal
        return {
            "access_token": self.credential,
            "issued_token_type": ACCESS_TOKEN_TYPE,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
            "scope": " ".join(principal.memory_scopes),
            "audience": principal.resource,
            # Extension members: what the edge needs to act for the caller, so the
            # exchange is its token verification as well.
            "resource": self.resource,
            "tenant": principal.tenant,
            "subject": principal.subject,
            "principal_kind": principal.kind,
            "client_id": principal.client_id,
        }


# ---------------------------------------------------------------- the exchange


def token_exchange_issue(
    *,
    subject_token: str,
    subject_token_type: str,
    resource: str,
    audience: str,
    scope: str = "",
    requested_token_type: str = "",
) -> Exchanged:
    """Exchange a caller's MCP access token for a memory-service credential, or
    raise ExchangeRefused with the RFC 8693 / RFC 6749 error."""
    if subject_token_type != ACCESS_TOKEN_TYPE:
        raise ExchangeRefused("invalid_request", f"subject_token_type must be {ACCESS_TOKEN_TYPE}.")
    if requested_token_type and requested_token_type != ACCESS_TOKEN_TYPE:
        raise ExchangeRefused("invalid_request", f"Only {ACCESS_TOKEN_TYPE} is issued.")
    if audience != service_audience():
        raise ExchangeRefused("invalid_target", "Credentials are issued for the memory service only.")
    if resource not in resource_urls():
        raise ExchangeRefused("invalid_target", "resource must be the MCP resource the token was presented at.")
    if not subject_token or len(subject_token) > MAX_TOKEN_LENGTH:
        raise ExchangeRefused("invalid_grant", "The subject token is invalid.")
    subject = access_token_row(subject_token)
    # Same checks as the MCP gateway's own verifier: unexpired, issued for exactly
    # this resource, a memory scope, the person or agent still entitled. An
    # exchanged credential (audience: the memory service) is not for any MCP
    # resource, so it cannot be exchanged again.
    principal = verified_row(subject, resource=resource) if subject is not None else None
    if subject is None or principal is None:
        raise ExchangeRefused("invalid_grant", "The subject token is invalid, expired or not for this resource.")
    scopes = _granted_scopes(principal, resource=resource, requested=scope)
    now = timezone.now()
    expires = min(now + timedelta(seconds=credential_lifetime()), subject.expires)
    raw = secrets.token_urlsafe(32)
    credential = AccessToken(
        application_id=subject.application_id,
        user_id=subject.user_id,
        scope=" ".join(sorted(scopes)),
        resource=[audience],
        expires=expires,
    )
    set_token_value(credential, raw)
    credential.save()
    if credential.pk % PURGE_EVERY == 0:
        # One credential is written per MCP request and is worthless 25 s later.
        # About one exchange in PURGE_EVERY also clears its principal's expired
        # rows (an indexed handful, a few queries), which keeps busy principals'
        # debris small without a query on every request; `manage.py cleartokens`
        # (cron) removes what idle principals leave.
        AccessToken.objects.filter(
            application_id=subject.application_id, user_id=subject.user_id, expires__lt=now,
            resource=[audience],
        ).delete()
    issued = VerifiedToken(
        tenant=principal.tenant, subject=principal.subject, kind=principal.kind, scopes=frozenset(scopes),
        client_id=principal.client_id, resource=audience,
    )
    return Exchanged(
        credential=raw, expires_in=max(0, math.ceil((expires - now).total_seconds())), principal=issued,
        resource=resource,
    )


def _granted_scopes(principal: VerifiedToken, *, resource: str, requested: str) -> frozenset[str]:
    try:
        return access.exchangeable_scopes(principal.scopes, requested.split(),
                                          read_only=resource == resource_url(MCP_READONLY_PATH))
    except PermissionDenied as refused:
        raise ExchangeRefused("invalid_scope", refused.message) from None


# ---------------------------------------------------------------- the credential


def credential_principal(raw: str) -> VerifiedToken | None:
    """The principal an exchanged credential stands for, or None.

    None for anything that is not a live credential issued by the exchange:
    unknown, expired, another audience (a caller's own token for /mcp included),
    a lifetime longer than any exchange issues, or a person or agent who lost
    their place since.
    """
    if not raw or len(raw) > MAX_TOKEN_LENGTH:
        return None
    audience = service_audience()
    row = access_token_row(raw)
    if row is None or row.resource != [audience]:
        return None
    if row.expires - row.created > timedelta(seconds=MAX_CREDENTIAL_SECONDS):
        return None
    return verified_row(row, resource=audience)


# ---------------------------------------------------------------- the endpoint


def _refusal(error: str, description: str, status: int = 400, retry_after: int | None = None) -> JsonResponse:
    response = JsonResponse({"error": error, "error_description": description}, status=status)
    response["Pragma"] = "no-cache"
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def _parameters(request: HttpRequest) -> dict[str, str]:
    twice = [name for name in _PARAMETERS if len(request.POST.getlist(name)) > 1]
    if twice:
        raise ExchangeRefused("invalid_request", f"Parameters may not repeat: {', '.join(twice)}.")
    return {name: request.POST.get(name, "") for name in _PARAMETERS}


def _exchange_rate(request: HttpRequest, subject_token: str) -> int | None:
    """Seconds to wait when this subject token has been exchanged too often, else None.

    The edge exchanges before its own rate limit can know who the caller is, so
    without this a flood of requests (429s included) would each write a
    credential row. The most the gateway lets one principal through in a minute
    is a full burst plus a minute's refill; twice that leaves room for every
    request it would serve, in any minute the window is cut.
    """
    rate = f"{2 * (settings.MEMORYHUB_RATE_PER_MINUTE + settings.MEMORYHUB_RATE_BURST)}/m"
    usage = get_usage(request, group="oauth.token-exchange", key=lambda group, request: token_checksum(subject_token),
                      rate=rate, method="POST", increment=True)
    if usage is not None and usage["should_limit"]:
        return max(1, int(usage["time_left"]))
    return None


def _issue_in_thread(request: HttpRequest, parameters: dict[str, str]) -> Exchanged:
    retry_after = _exchange_rate(request, parameters["subject_token"])
    if retry_after is not None:
        raise ExchangeRefused("rate_limited", "Too many exchanges for this token; retry shortly.", status=429,
                              retry_after=retry_after)
    close_old_connections()
    try:
        return token_exchange_issue(
            subject_token=parameters["subject_token"],
            subject_token_type=parameters["subject_token_type"],
            resource=parameters["resource"],
            audience=parameters["audience"],
            scope=parameters["scope"],
            requested_token_type=parameters["requested_token_type"],
        )
    finally:
        close_old_connections()


@csrf_exempt
@never_cache
@require_POST
async def token_exchange(request: HttpRequest) -> JsonResponse:
    """POST /o/token/exchange/ (RFC 8693 §2): the edge's one call per MCP request."""
    if not settings.MEMORYHUB_INTERNAL_API:
        return _refusal("unsupported_grant_type", "Token exchange is off: this deployment has no edge.")
    if "HTTP_AUTHORIZATION" in request.META:
        # Nobody is issued client credentials for this grant; a secret sent here
        # would be one we cannot check, so it is refused rather than ignored.
        return _refusal("invalid_client", "Token exchange takes no client authentication.", status=401)
    try:
        parameters = _parameters(request)
        if parameters["grant_type"] != TOKEN_EXCHANGE_GRANT:
            raise ExchangeRefused("unsupported_grant_type", f"grant_type must be {TOKEN_EXCHANGE_GRANT}.")
        if parameters["actor_token"] or parameters["actor_token_type"]:
            raise ExchangeRefused("invalid_request", "Delegation (actor_token) is not supported.")
        missing = [name for name in ("subject_token", "subject_token_type", "resource", "audience")
                   if not parameters[name]]
        if missing:
            raise ExchangeRefused("invalid_request", f"Missing: {', '.join(missing)}.")
        # Not thread-sensitive: one exchange per MCP request must not queue behind
        # Django's single shared sync thread.
        exchanged = await sync_to_async(_issue_in_thread, thread_sensitive=False)(request, parameters)
    except ExchangeRefused as refused:
        return _refusal(refused.error, refused.description, refused.status, refused.retry_after)
    response = JsonResponse(exchanged.as_response())
    response["Pragma"] = "no-cache"
    return response
