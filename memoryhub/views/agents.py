"""Workspace admins' page for headless agents: register one (its client id and
secret are shown once), rotate its secret, revoke it."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from memoryhub.errors import MemoryhubError
from memoryhub.models import Agent, Membership, Role, Tenant, User
from memoryhub.oauth import AGENT_TOKEN_SECONDS, MCP_PATH, MCP_READONLY_PATH, resource_url
from memoryhub.services.workspaces import (
    AGENT_SCOPES,
    AgentCredentials,
    agent_register,
    agent_revoke,
    agent_rotate_secret,
)


class SignedInRequest(HttpRequest):
    user: User  # login_required guarantees it


SCOPE_LABELS = {
    "memory.read": "memory.read: search the memory its roles can see",
    "memory.write": "memory.write: propose facts (each waits for an admin's approval)",
}


class AgentForm(forms.Form):
    name = forms.SlugField(max_length=64, help_text="Letters, digits and hyphens; callers name it in `agents`.")
    display_name = forms.CharField(max_length=200, required=False)
    scopes = forms.MultipleChoiceField(
        choices=[(scope, SCOPE_LABELS[scope]) for scope in AGENT_SCOPES],
        widget=forms.CheckboxSelectMultiple,
        initial=["memory.read"],
    )

    def __init__(self, *args, tenant: Tenant, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["roles"] = forms.MultipleChoiceField(
            choices=[(role.name, role.name) for role in Role.objects.filter(tenant=tenant)],
            widget=forms.CheckboxSelectMultiple, required=False,
        )


def _admin_workspace(request: SignedInRequest) -> Tenant:
    """The workspace the signed-in person administers; anyone else is refused."""
    membership = Membership.objects.filter(user=request.user, is_admin=True).select_related("tenant").first()
    if membership is None or membership.tenant_id != request.user.tenant_id:
        raise PermissionDenied("Only workspace admins manage agents.")
    return membership.tenant


def _get_agent_for_admin(request: SignedInRequest, name: str) -> Agent:
    tenant = _admin_workspace(request)
    agent = Agent.objects.filter(tenant=tenant, name=name, kind=Agent.Kind.ASSISTANT).first()
    if agent is None:
        raise Http404("No such agent in your workspace.")
    return agent


def _render_list(request: SignedInRequest, tenant: Tenant, form: AgentForm, status: int = 200) -> HttpResponse:
    agents = Agent.objects.filter(tenant=tenant, kind=Agent.Kind.ASSISTANT).prefetch_related("roles")
    return render(request, "workspace/agents.html", {"workspace": tenant, "agents": agents, "form": form},
                  status=status)


def _render_credentials(request: SignedInRequest, credentials: AgentCredentials, *, rotated: bool) -> HttpResponse:
    response = render(request, "workspace/agent_credentials.html", {
        "credentials": credentials,
        "rotated": rotated,
        "token_endpoint": request.build_absolute_uri(reverse("oauth2_provider:token")),
        "resource": resource_url(MCP_PATH),
        "readonly_resource": resource_url(MCP_READONLY_PATH),
        "token_minutes": AGENT_TOKEN_SECONDS // 60,
    })
    # The secret is on this page and nowhere else: keep it out of every cache.
    response["Cache-Control"] = "no-store"
    return response


@require_GET
@login_required
def agent_list(request: SignedInRequest) -> HttpResponse:
    tenant = _admin_workspace(request)
    return _render_list(request, tenant, AgentForm(tenant=tenant))


@require_POST
@login_required
@never_cache
def agent_add(request: SignedInRequest) -> HttpResponse:
    tenant = _admin_workspace(request)
    form = AgentForm(request.POST, tenant=tenant)
    if not form.is_valid():
        return _render_list(request, tenant, form, status=400)
    try:
        credentials = agent_register(
            tenant=tenant, name=form.cleaned_data["name"], scopes=form.cleaned_data["scopes"],
            roles=form.cleaned_data["roles"], display_name=form.cleaned_data["display_name"],
            created_by=request.user,
        )
    except MemoryhubError as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return _render_list(request, tenant, form, status=400)
    return _render_credentials(request, credentials, rotated=False)


@require_POST
@login_required
@never_cache
def agent_rotate(request: SignedInRequest, name: str) -> HttpResponse:
    agent = _get_agent_for_admin(request, name)
    try:
        credentials = agent_rotate_secret(agent=agent)
    except MemoryhubError as exc:
        messages.error(request, exc.message)
        return redirect("agent_list")
    return _render_credentials(request, credentials, rotated=True)


@require_POST
@login_required
def agent_remove(request: SignedInRequest, name: str) -> HttpResponse:
    agent = _get_agent_for_admin(request, name)
    agent_revoke(agent=agent)
    messages.success(request, f"Agent {agent.name} is revoked: its credentials and tokens no longer work.")
    return redirect("agent_list")
