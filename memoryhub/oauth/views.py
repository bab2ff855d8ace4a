"""The people-facing and discovery side of the authorisation server: sign-in,
consent, protected-resource metadata and open client registration. Token
issuance itself is django-oauth-toolkit's, shaped by memoryhub.oauth.policy;
a person's connected apps are a page of theirs (memoryhub.pages.people)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import login as auth_login
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render, resolve_url
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.debug import sensitive_post_parameters
from django_ratelimit.core import get_usage
from oauth2_provider import views as toolkit_views
from oauth2_provider.views import AuthorizationView, OAuthProtectedResourceMetadataView
from oauth2_provider.views.dynamic_client_registration import (
    DynamicClientRegistrationManagementView,
    DynamicClientRegistrationView,
)

from memoryhub import access
from memoryhub.access import ADMIN_SCOPE
from memoryhub.middleware import refusal
from memoryhub.models import Tenant
from memoryhub.oauth.policy import (
    ADMIN_API_PATH,
    MCP_PATH,
    MCP_READONLY_PATH,
    PERSON_TOKEN_SECONDS,
    UNOFFERED_GRANT_TYPES,
    client_metadata_problem,
    client_registered,
    issuer,
    metadata_document_failure,
    resource_url,
    with_issuer,
)
from memoryhub.oauth.signin import WORKSPACE_COOKIE, SignInForm

# Failed sign-ins allowed per window per username; per client address, and open
# registrations per address (anonymous: bound how fast one address adds clients),
# are settings (MEMORYHUB_SIGNIN_FAILURES_PER_ADDRESS, MEMORYHUB_REGISTRATIONS_PER_ADDRESS).
LOGIN_FAILURES_PER_USERNAME = "5/15m"
MAX_REGISTRATION_BYTES = 16 * 1024


# ---------------------------------------------------------------- sign-in


def _login_username(group: str, request: HttpRequest) -> str:
    # The workspace is part of the name: "ada" of acme and "ada" of globex are two people.
    return f'{request.POST.get("workspace", "").strip().lower()}/{request.POST.get("username", "").strip().lower()}'


def _login_failures(request: HttpRequest, *, increment: bool) -> list[dict]:
    checks = [("login.username", _login_username, LOGIN_FAILURES_PER_USERNAME),
              ("login.address", "ip", settings.MEMORYHUB_SIGNIN_FAILURES_PER_ADDRESS)]
    usages = [
        get_usage(request, group=group, key=key, rate=rate, method="POST", increment=increment)
        for group, key, rate in checks
    ]
    return [usage for usage in usages if usage is not None]


def _after_login_url(request: HttpRequest) -> str:
    """Where sign-in goes on: `next` when it is a path on this site ("/..."),
    else the default. Only a path: Django's redirect() would read "foo" as a
    URL name to reverse (a 500, or a page picked by name)."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target.startswith("/") and url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return resolve_url(settings.LOGIN_REDIRECT_URL)


@sensitive_post_parameters("password")
@csrf_protect
@never_cache
def login(request: HttpRequest) -> HttpResponse:
    remembered = request.GET.get("workspace") or request.COOKIES.get(WORKSPACE_COOKIE, "")
    form = SignInForm(request, data=request.POST if request.method == "POST" else None,
                      initial={"workspace": remembered[:64]})
    context = {"form": form, "next": request.POST.get("next") or request.GET.get("next", "")}
    if request.method != "POST":
        return render(request, "registration/login.html", context)
    # Counted before the password is checked, so a throttled guess learns nothing.
    blocked = [usage for usage in _login_failures(request, increment=False) if usage["count"] >= usage["limit"]]
    if blocked:
        retry_after = max(1, max(usage["time_left"] for usage in blocked))
        context["throttled_minutes"] = -(-retry_after // 60)
        response = render(request, "registration/login.html", context, status=429)
        response["Retry-After"] = str(retry_after)
        return response
    if form.is_valid():
        auth_login(request, form.get_user())
        response = HttpResponseRedirect(_after_login_url(request))
        # Remembered for the next sign-in on this browser (not a secret: a workspace's short name).
        response.set_cookie(WORKSPACE_COOKIE, form.cleaned_data.get("workspace") or "", max_age=365 * 24 * 3600,
                            samesite="Lax", secure=request.is_secure(), httponly=True)
        return response
    _login_failures(request, increment=True)
    return render(request, "registration/login.html", context)


# ---------------------------------------------------------------- consent


SCOPE_WORDS = {
    "memory.read": "Search the memory you can see in {workspace}: your private memory and what the "
    "workspace's access rules share with you.",
    "memory.write": "Save facts from your conversations as your private memory. Nobody else sees them.",
    "memory.audit": "Reopen your own search receipts: what a search served then, and what it serves now.",
    ADMIN_SCOPE: "Administer {workspace} as you, through its REST admin API: its members, roles, collections, "
    "access rules, connected sources and agents, for as long as you are one of its admins. It cannot search or "
    "save memory.",
}


def _workspace_of(user) -> Tenant | None:
    """The workspace a person authorises a client for; only people of a workspace can."""
    membership = access.person_membership(user) if user.is_authenticated else None
    return membership.tenant if membership is not None else None


def _consent_csp(redirect_uri: str) -> str | None:
    """The site's CSP with the client's origin allowed as a form target.

    Chromium applies form-action to the redirect that follows the consent form,
    so without this the browser would refuse to carry the code back to the client.
    """
    parts = urlsplit(redirect_uri)
    origin = f"{parts.scheme}://{parts.netloc}"
    if parts.scheme not in ("http", "https") or any(c in origin for c in " ;,'\"\\"):
        return None
    directives = [d.strip() for d in settings.CONTENT_SECURITY_POLICY.split(";") if d.strip()]
    return "; ".join(f"{d} {origin}" if d.startswith("form-action") else d for d in directives)


class TokenView(toolkit_views.TokenView):
    """DOT's token endpoint, in one transaction: the validator locks the code or
    refresh token it checks (memoryhub.oauth.policy), so concurrent uses of one
    code or one refresh token are decided one after another: exactly one
    succeeds, the rest get invalid_grant, and a reuse revokes as it would
    sequentially."""

    def post(self, request, *args, **kwargs):
        with transaction.atomic():
            if request.POST.get("grant_type") in UNOFFERED_GRANT_TYPES:
                # DOT answers the device grant itself before oauthlib sees it (a
                # 500 without device_code); this server offers no device flow,
                # so oauthlib's server refuses it as a grant it does not support.
                return self.authorization_flow_token_response(request)
            return super().post(request, *args, **kwargs)


class AuthorizeView(AuthorizationView):
    """DOT's consent view with our page: who asks, for which workspace, what in
    plain words. Only people who belong to a workspace can authorise anything."""

    def get(self, request, *args, **kwargs):
        if _workspace_of(request.user) is None:
            return _no_workspace(request)
        if request.GET.get("approval_prompt", "force") != "force":
            # DOT lets a client ask to skip consent when it already holds a live
            # token; after Disconnect that token lives on, so consent is always asked.
            request.GET = request.GET.copy()
            request.GET["approval_prompt"] = "force"
        return super().get(request, *args, **kwargs)

    def post(self, request, *args, **kwargs):
        if _workspace_of(request.user) is None:
            return _no_workspace(request)
        if not client_registered(request.POST.get("client_id", "")):
            # DOT's form_valid looks the client up with .get() and would answer a 500.
            return refusal(request, "client_id", "client_id names no registered client.")
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        workspace = _workspace_of(self.request.user)
        workspace_name = workspace.name if workspace else ""
        application = context.get("application")
        redirect_uri = context.get("redirect_uri") or ""
        resource = (context.get("resource") or resource_url(MCP_PATH)).split()[0]
        context.update(
            workspace=workspace,
            scope_items=[
                {"name": scope, "words": SCOPE_WORDS.get(scope, scope).format(workspace=workspace_name)}
                for scope in context.get("scopes", [])
            ],
            read_only=resource == resource_url(MCP_READONLY_PATH),
            admin_api=resource == resource_url(ADMIN_API_PATH),
            admin_refusal=access.audience_refusal([ADMIN_SCOPE], admin_api=True, user=self.request.user)
            if resource == resource_url(ADMIN_API_PATH) else None,
            return_host=urlsplit(redirect_uri).netloc,
            client_name=(application.name if application else "") or "An unnamed app",
            self_named=bool(application and application.registration_source != "manual"),
            identified_by=urlsplit(application.client_id).netloc
            if application and application.registration_source == "cimd" else "",
            token_minutes=PERSON_TOKEN_SECONDS // 60,
        )
        return context

    def render_to_response(self, context, **response_kwargs):
        if context.get("error") is not None:
            # A client that named itself by a metadata document we could not use: say which, why, and what to do.
            context = {**context, "metadata_failure": metadata_document_failure(self.request.GET.get("client_id", ""))}
        response = super().render_to_response(context, **response_kwargs)
        policy = _consent_csp(context.get("redirect_uri") or "")
        if policy:
            response["Content-Security-Policy"] = policy
        return response

    def redirect(self, redirect_to, application):
        # DOT adds RFC 9207's iss to successful responses; errors carry it too.
        return super().redirect(with_issuer(redirect_to), application)


def _no_workspace(request: HttpRequest) -> HttpResponse:
    return render(request, "oauth2_provider/no_workspace.html", status=403)


# ---------------------------------------------------------------- discovery


class ProtectedResourceMetadataView(OAuthProtectedResourceMetadataView):
    """RFC 9728 metadata for /mcp (the root document too), /mcp/readonly and
    /api/admin: the exact resource URL and the scopes usable there."""

    path = MCP_PATH

    def get_resource(self, request):
        return resource_url(self.path)

    def get_authorization_servers(self, request):
        return [issuer()]

    def get_scopes_supported(self):
        if self.path == ADMIN_API_PATH:
            return [ADMIN_SCOPE]
        scopes = super().get_scopes_supported()
        if self.path == MCP_READONLY_PATH:
            return [scope for scope in scopes if scope != "memory.write"]
        return scopes


# ---------------------------------------------------------------- registration


def _registration_error(error: str, description: str, status: int = 400) -> JsonResponse:
    return JsonResponse({"error": error, "error_description": description}, status=status)


def _apply_registration_policy(request: HttpRequest) -> JsonResponse | None:
    """Check a registration document against our policy and hand DOT the
    normalised one; an error response, or None to carry on."""
    if len(request.body) > MAX_REGISTRATION_BYTES:
        return _registration_error("invalid_client_metadata", "The registration document is too large.")
    try:
        metadata = json.loads(request.body)
    except (ValueError, RecursionError):
        return _registration_error("invalid_client_metadata", "Request body must be valid JSON")
    if not isinstance(metadata, dict):
        return _registration_error("invalid_client_metadata", "Request body must be a JSON object")
    problem = client_metadata_problem(metadata)
    if problem:
        code = "invalid_redirect_uri" if "redirect" in problem else "invalid_client_metadata"
        return _registration_error(code, problem)
    # Anyone may register, so a client secret would prove nothing: every client
    # registered here is public, whatever method it asked for (RFC 7591 §3.2.1
    # lets the server replace requested values; the response says "none").
    metadata["token_endpoint_auth_method"] = "none"
    metadata.setdefault("grant_types", ["authorization_code", "refresh_token"])
    # DOT's own registration code reads the document from the body.
    request._body = json.dumps(metadata).encode()
    return None


class RegisterClientView(DynamicClientRegistrationView):
    """RFC 7591 open registration, narrowed to MCP clients: public clients using
    authorization code with PKCE, https or loopback redirect URIs, memory scopes."""

    def post(self, request, *args, **kwargs):
        usage = get_usage(request, group="oauth.register", key="ip",
                          rate=settings.MEMORYHUB_REGISTRATIONS_PER_ADDRESS,
                          method="POST", increment=True)
        if usage is not None and usage["should_limit"]:
            response = _registration_error("too_many_requests", "Too many registrations; try later.", 429)
            response["Retry-After"] = str(max(1, usage["time_left"]))
            return response
        return _apply_registration_policy(request) or super().post(request, *args, **kwargs)


class ManageRegisteredClientView(DynamicClientRegistrationManagementView):
    """RFC 7592 read, update and delete with the registration token; an update
    meets the same policy as the registration."""

    def put(self, request, *args, **kwargs):
        return _apply_registration_policy(request) or super().put(request, *args, **kwargs)
