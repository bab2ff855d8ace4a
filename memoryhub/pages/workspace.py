"""Workspace administration for a workspace's admins: members and roles,
collections, access rules (with the two checks beside them), headless agents,
connected sources and the workspace's settings. An admin only ever sees their
own workspace; superusers have the Django admin. Every view parses input,
calls one service (which asks memoryhub.access) and renders."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memoryhub import errors
from memoryhub.access import Caller
from memoryhub.models import Source
from memoryhub.oauth.policy import AGENT_TOKEN_SECONDS, MCP_PATH, MCP_READONLY_PATH, resource_url
from memoryhub.pages.callers import SignedInRequest, admin_caller, login_required
from memoryhub.pages.forms import (
    AccessRuleForm,
    AgentForm,
    ConfirmForm,
    EraseForm,
    MemberAddForm,
    MemberForm,
    NamedForm,
    PasswordSetForm,
    SettingsForm,
    SourceForm,
    form_error,
)
from memoryhub.services import (
    access_rules,
    agents,
    collections,
    members,
    portability,
    receipt_chain,
    roles,
    sources,
    workspaces,
)
from memoryhub.services.agents import AgentCredentials
from memoryhub.services.arguments import ascii_digits


def _role_names(caller: Caller) -> list[str]:
    return [role.name for role in roles.roles_list(caller=caller)]


def _collection_names(caller: Caller) -> list[str]:
    return collections.collection_names(caller=caller)


def _no_store(response: HttpResponse) -> HttpResponse:
    # A secret is on this page and nowhere else: keep it out of every cache.
    response["Cache-Control"] = "no-store"
    return response


# --------------------------------------------------------------------------- overview


@require_GET
@login_required
def overview(request: SignedInRequest) -> HttpResponse:
    summary = workspaces.workspace_overview(caller=admin_caller(request))
    return render(request, "workspace/overview.html", {"workspace": summary.workspace, "summary": summary})


# --------------------------------------------------------------------------- members and roles


def _render_members(request: SignedInRequest, caller: Caller, *, add_form: MemberAddForm | None = None,
                    role_form: NamedForm | None = None, status: int = 200) -> HttpResponse:
    names = _role_names(caller)
    listed = [
        (membership, MemberForm(roles=names, prefix=f"m{membership.user_id}", initial={
            "roles": [role.name for role in membership.roles.all()], "is_admin": membership.is_admin,
        }))
        for membership in members.members_list(caller=caller)
    ]
    return render(request, "workspace/members.html", {
        "workspace": caller.tenant, "members": listed, "roles": roles.roles_list(caller=caller),
        "add_form": add_form or MemberAddForm(roles=names), "role_form": role_form or NamedForm(),
    }, status=status)


@require_GET
@login_required
def members_page(request: SignedInRequest) -> HttpResponse:
    return _render_members(request, admin_caller(request))


@require_POST
@login_required
def member_add(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    form = MemberAddForm(request.POST, roles=_role_names(caller))
    if form.is_valid():
        try:
            user = members.member_add(caller=caller, **form.cleaned_data)
        except errors.MemoryhubError as exc:
            form_error(form, exc)
        else:
            messages.success(request, f"{user.username} joined {caller.tenant.name}.")
            return redirect("workspace:members")
    return _render_members(request, caller, add_form=form, status=400)


@require_POST
@login_required
def member_update(request: SignedInRequest, user_id: int) -> HttpResponse:
    caller = admin_caller(request)
    membership = members.member_get(caller=caller, user_id=user_id)
    form = MemberForm(request.POST, roles=_role_names(caller), prefix=f"m{user_id}")
    if not form.is_valid():
        messages.error(request, "Choose roles of this workspace.")
        return redirect("workspace:members")
    try:
        members.member_update(caller=caller, user_id=user_id, **form.cleaned_data)
    except errors.MemoryhubError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Saved {membership.user.username}'s roles. They apply from their next read.")
    return redirect("workspace:members")


@require_POST
@login_required
def role_add(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    form = NamedForm(request.POST)
    if form.is_valid():
        try:
            role = roles.role_create(caller=caller, **form.cleaned_data)
        except errors.MemoryhubError as exc:
            form_error(form, exc)
        else:
            messages.success(request, f"Role {role.name} added. Grant it collections on the access rules page.")
            return redirect("workspace:members")
    return _render_members(request, caller, role_form=form, status=400)


@require_POST
@login_required
def role_delete(request: SignedInRequest, role_id: int) -> HttpResponse:
    role = roles.role_delete(caller=admin_caller(request), role_id=role_id)
    messages.success(request, f"Role {role.name} removed, with its access rules.")
    return redirect("workspace:members")


# --------------------------------------------------------------------------- collections


def _render_collections(request: SignedInRequest, caller: Caller, *, form: NamedForm | None = None,
                        status: int = 200) -> HttpResponse:
    return render(request, "workspace/collections.html", {
        "workspace": caller.tenant, "collections": collections.collections_list(caller=caller),
        "form": form or NamedForm(),
    }, status=status)


@require_GET
@login_required
def collections_page(request: SignedInRequest) -> HttpResponse:
    return _render_collections(request, admin_caller(request))


@require_POST
@login_required
def collection_add(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    form = NamedForm(request.POST)
    if form.is_valid():
        try:
            collection = collections.collection_create(caller=caller, **form.cleaned_data)
        except errors.MemoryhubError as exc:
            form_error(form, exc)
        else:
            messages.success(request, f"Collection {collection.name} added. Nobody reads it until a rule says so.")
            return redirect("workspace:collections")
    return _render_collections(request, caller, form=form, status=400)


@require_POST
@login_required
def collection_change(request: SignedInRequest, collection_id: int, action: str) -> HttpResponse:
    """Rename a collection, retire its live fragments (typing its name), or delete it (one service each)."""
    caller = admin_caller(request)
    try:
        if action == "rename":
            renamed = collections.collection_rename(caller=caller, collection_id=collection_id,
                                                    name=request.POST.get("name", ""))
            messages.success(request, f"Renamed to {renamed.name}. Connectors must send the new name.")
        elif action == "retire":
            retired = collections.collection_retire_fragments(caller=caller, collection_id=collection_id,
                                                              confirm=request.POST.get("confirm", ""))
            messages.success(request, f"Retired {retired} fragment{'s' if retired != 1 else ''}: reads of now no "
                                      "longer see them; reads of the past still do.")
        elif action == "delete":
            name = collections.collection_delete(caller=caller, collection_id=collection_id)
            messages.success(request, f"Collection {name} deleted with its access rules.")
        else:
            raise errors.NotFound("No such action.")
    except (errors.InvalidArgument, errors.Conflict) as exc:
        messages.error(request, exc.message)
    return redirect("workspace:collections")


# --------------------------------------------------------------------------- access rules and checks


def _int_param(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name, "")
    return int(value) if ascii_digits(value) and len(value) < 19 else None


def _render_access(request: SignedInRequest, caller: Caller, *, form: AccessRuleForm | None = None,
                   status: int = 200) -> HttpResponse:
    context: dict = {
        "workspace": caller.tenant, "rules": access_rules.access_rules_list(caller=caller),
        "grid": access_rules.access_rules_grid(caller=caller),
        "form": form or AccessRuleForm(roles=_role_names(caller), collections=_collection_names(caller)),
        "collections": collections.collections_list(caller=caller), "members": members.members_list(caller=caller),
    }
    collection_id, person_id = _int_param(request, "collection"), _int_param(request, "person")
    if collection_id is not None:
        context["checked_collection"] = collections.collection_get(caller=caller, collection_id=collection_id)
        context["readers"] = collections.collection_readers(caller=caller, collection_id=collection_id)
    if person_id is not None:
        context["checked_member"] = members.member_get(caller=caller, user_id=person_id)
        context["reach"] = collections.member_readable_collections(caller=caller, user_id=person_id)
    return render(request, "workspace/access.html", context, status=status)


@require_GET
@login_required
def access_page(request: SignedInRequest) -> HttpResponse:
    return _render_access(request, admin_caller(request))


@require_POST
@login_required
def access_grant(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    form = AccessRuleForm(request.POST, roles=_role_names(caller), collections=_collection_names(caller))
    if form.is_valid():
        try:
            rule = access_rules.access_rule_grant(caller=caller, role=form.cleaned_data["role"],
                                                  collection=form.cleaned_data["collection"])
        except errors.MemoryhubError as exc:
            form_error(form, exc)
        else:
            messages.success(request, f"{rule.role.name} may now read {rule.collection.name}.")
            return redirect(f"{reverse('workspace:access')}?collection={rule.collection_id}")
    return _render_access(request, caller, form=form, status=400)


@require_POST
@login_required
def access_revoke(request: SignedInRequest, rule_id: int) -> HttpResponse:
    rule = access_rules.access_rule_revoke(caller=admin_caller(request), rule_id=rule_id)
    messages.success(request, f"{rule.role.name} may no longer read {rule.collection.name}, from the next read on.")
    return redirect("workspace:access")


# --------------------------------------------------------------------------- headless agents


def _render_agents(request: SignedInRequest, caller: Caller, form: AgentForm, status: int = 200) -> HttpResponse:
    return render(request, "workspace/agents.html", {
        "workspace": caller.tenant, "agents": agents.agents_list(caller=caller), "form": form,
    }, status=status)


def _render_agent_credentials(request: SignedInRequest, credentials: AgentCredentials, *,
                              rotated: bool) -> HttpResponse:
    return _no_store(render(request, "workspace/agent_credentials.html", {
        "credentials": credentials,
        "rotated": rotated,
        "token_endpoint": request.build_absolute_uri(reverse("oauth2_provider:token")),
        "resource": resource_url(MCP_PATH),
        "readonly_resource": resource_url(MCP_READONLY_PATH),
        "token_minutes": AGENT_TOKEN_SECONDS // 60,
    }))


@require_GET
@login_required
def agents_page(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    return _render_agents(request, caller, AgentForm(roles=_role_names(caller)))


@require_POST
@login_required
@never_cache
def agent_add(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    form = AgentForm(request.POST, roles=_role_names(caller))
    if form.is_valid():
        try:
            credentials = agents.agent_register(
                caller=caller, name=form.cleaned_data["name"], scopes=form.cleaned_data["scopes"],
                roles=form.cleaned_data["roles"], display_name=form.cleaned_data["display_name"],
            )
        except errors.MemoryhubError as exc:
            form_error(form, exc)
        else:
            return _render_agent_credentials(request, credentials, rotated=False)
    return _render_agents(request, caller, form, status=400)


@require_POST
@login_required
@never_cache
def agent_rotate(request: SignedInRequest, name: str) -> HttpResponse:
    try:
        credentials = agents.agent_rotate_secret(caller=admin_caller(request), name=name)
    except errors.InvalidArgument as exc:
        messages.error(request, exc.message)
        return redirect("workspace:agents")
    return _render_agent_credentials(request, credentials, rotated=True)


@require_POST
@login_required
def agent_revoke(request: SignedInRequest, name: str) -> HttpResponse:
    try:
        agent = agents.agent_revoke(caller=admin_caller(request), name=name, confirm=_typed(request))
    except errors.InvalidArgument as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Agent {agent.name} is revoked: its credentials and tokens no longer work.")
    return redirect("workspace:agents")


def _typed(request: HttpRequest) -> str:
    """What the admin typed to confirm an act that cannot be undone (empty when nothing)."""
    form = ConfirmForm(request.POST)
    return form.cleaned_data["confirm"] if form.is_valid() else ""


# --------------------------------------------------------------------------- connected sources


def _render_sources(request: SignedInRequest, caller: Caller, *, form: SourceForm | None = None,
                    status: int = 200) -> HttpResponse:
    return render(request, "workspace/sources.html", {
        "workspace": caller.tenant, "sources": sources.sources_health(caller=caller),
        "form": form or SourceForm(collections=_collection_names(caller)),
    }, status=status)


@require_GET
@login_required
def sources_page(request: SignedInRequest) -> HttpResponse:
    return _render_sources(request, admin_caller(request))


@require_POST
@login_required
@never_cache
def source_add(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    form = SourceForm(request.POST, collections=_collection_names(caller))
    if form.is_valid():
        try:
            source, credentials = sources.source_register(
                caller=caller, name=form.cleaned_data["name"], kind=form.cleaned_data["kind"],
                collection=form.cleaned_data["collection"] or None,
            )
        except errors.MemoryhubError as exc:
            form_error(form, exc)
        else:
            return _render_source_credentials(request, caller, source, credentials)
    return _render_sources(request, caller, form=form, status=400)


def _render_source_credentials(request: SignedInRequest, caller: Caller, source: Source,
                               credentials: AgentCredentials, *, rotated: bool = False) -> HttpResponse:
    return _no_store(render(request, "workspace/source_credentials.html", {
        "workspace": caller.tenant, "source": source, "credentials": credentials, "rotated": rotated,
        "token_endpoint": request.build_absolute_uri(reverse("oauth2_provider:token")),
        "ingest_endpoint": _ingest_endpoint(request),
        "token_minutes": AGENT_TOKEN_SECONDS // 60,
    }))


@require_POST
@login_required
@never_cache
def source_rotate(request: SignedInRequest, name: str) -> HttpResponse:
    caller = admin_caller(request)
    credentials = sources.source_rotate_secret(caller=caller, name=name)
    return _render_source_credentials(request, caller, credentials.agent.source, credentials, rotated=True)


@require_POST
@login_required
def source_state(request: SignedInRequest, name: str, state: str) -> HttpResponse:
    """Disable or enable a source (one service)."""
    if state not in ("disable", "enable"):
        raise errors.NotFound("No such action.")
    source = sources.source_set_enabled(caller=admin_caller(request), name=name, enabled=state == "enable")
    messages.success(request, f"{source.agent.name} is {'enabled' if state == 'enable' else 'disabled'}." + (
        "" if state == "enable" else " The ingestion API refuses it from its next request; its memory stays."))
    return redirect("workspace:sources")


@require_POST
@login_required
def source_revoke(request: SignedInRequest, name: str) -> HttpResponse:
    try:
        source = sources.source_revoke(caller=admin_caller(request), name=name, confirm=_typed(request))
    except errors.InvalidArgument as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{source.agent.name} is revoked for good: its credentials and tokens no longer "
                                  "work. What it contributed stays, governed by the access rules.")
    return redirect("workspace:sources")


def _ingest_endpoint(request: HttpRequest) -> str:
    try:
        return request.build_absolute_uri(reverse("ingest-document-upsert"))
    except NoReverseMatch:
        return ""


_LIFECYCLE = {
    "deactivate": (members.member_deactivate, "{name} is deactivated: signed out, and every app of theirs is "
                                              "disconnected. Their memory is kept; nobody reads it."),
    "reactivate": (members.member_reactivate, "{name} can sign in again; their apps must be connected anew."),
    "remove": (members.member_remove, "{name} was removed: deactivated, no roles. Their memory is kept; nobody "
                                      "reads it until you erase it."),
}


@require_POST
@login_required
def member_lifecycle(request: SignedInRequest, user_id: int, action: str) -> HttpResponse:
    """Deactivate, reactivate or remove a member (one service each)."""
    caller = admin_caller(request)
    if action not in _LIFECYCLE:
        raise errors.NotFound("No such action.")
    operation, done = _LIFECYCLE[action]
    try:
        membership = operation(caller=caller, user_id=user_id)
    except errors.Conflict as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, done.format(name=membership.user.username))
    return redirect("workspace:members")


@sensitive_post_parameters()
@require_POST
@login_required
def member_password(request: SignedInRequest, user_id: int) -> HttpResponse:
    """An admin sets a temporary password for a member."""
    caller = admin_caller(request)
    form = PasswordSetForm(request.POST, prefix=f"p{user_id}")
    if form.is_valid():
        try:
            user = members.member_set_password(caller=caller, user_id=user_id, password=form.cleaned_data["password"])
        except (errors.InvalidArgument, errors.Conflict) as exc:
            messages.error(request, exc.message)
        else:
            if user.pk == request.user.pk:
                update_session_auth_hash(request, user)
            messages.success(request, f"{user.username}'s password is set, and their apps are disconnected. Tell "
                                      "them to change it after signing in.")
    else:
        messages.error(request, "Type a password.")
    return redirect("workspace:members")


@require_http_methods(["GET", "POST"])
@login_required
def member_erase(request: SignedInRequest, user_id: int) -> HttpResponse:
    """Erase a person's memory outright (a deletion request), after the admin
    types the person's name: the values are destroyed, the receipts stay."""
    caller = admin_caller(request)
    if request.method == "POST":
        form = EraseForm(request.POST)
        if form.is_valid():
            try:
                done = portability.memory_erase(caller=caller, user_id=user_id, confirm=form.cleaned_data["confirm"])
            except errors.InvalidArgument as exc:
                form_error(form, exc)
            else:
                messages.success(request, f"Erased {done.fragments} memor{'y' if done.fragments == 1 else 'ies'} of "
                                          f"{done.username}. The receipts that served them keep only their hashes.")
                return redirect("workspace:members")
        person = members.member_get(caller=caller, user_id=user_id).user
        return render(request, "workspace/member_erase.html", {"person": person, "form": form}, status=400)
    person = members.member_get(caller=caller, user_id=user_id).user
    return render(request, "workspace/member_erase.html", {"person": person, "form": EraseForm()})


# --------------------------------------------------------------------------- the receipt chain


@require_GET
@login_required
def receipt_chain_page(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    overview = receipt_chain.chain_overview(caller=caller)
    return render(request, "workspace/receipt_chain.html", {
        "workspace": caller.tenant,
        "chain": overview,
        "checkpoint_items": [(item, json.dumps(item)) for item in map(receipt_chain.checkpoint_item,
                                                                     overview.checkpoints)],
    })


@require_POST
@login_required
def receipt_checkpoint(request: SignedInRequest) -> HttpResponse:
    checkpoint = receipt_chain.checkpoint_sign(caller=admin_caller(request))
    if checkpoint is None:
        messages.info(request, "No receipt was added since the last checkpoint: nothing to sign.")
    else:
        messages.success(request, f"Checkpoint signed at entry {checkpoint.seq}.")
    return redirect("workspace:receipt_chain")


# --------------------------------------------------------------------------- settings


@require_http_methods(["GET", "POST"])
@login_required
def settings_page(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    tenant = caller.tenant
    form = SettingsForm(request.POST or None, initial={
        "judgment_plane": tenant.judgment_plane, "relevance_floor": tenant.relevance_floor,
        "write_policy": tenant.write_policy, "blocked_terms": "\n".join(tenant.blocked_terms or []),
        "stale_policy": tenant.stale_policy,
    })
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                workspaces.workspace_settings_update(
                    caller=caller, judgment_plane=data["judgment_plane"], relevance_floor=data["relevance_floor"],
                    write_policy=data["write_policy"], blocked_terms=data["blocked_terms"].splitlines(),
                    stale_policy=data["stale_policy"] or None,
                )
            except errors.MemoryhubError as exc:
                form_error(form, exc)
            else:
                messages.success(request, "Settings saved. They apply from the next search or write.")
                return redirect("workspace:settings")
        return render(request, "workspace/settings.html", {"workspace": tenant, "form": form}, status=400)
    return render(request, "workspace/settings.html", {"workspace": tenant, "form": form})
