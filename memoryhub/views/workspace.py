"""Workspace administration for a workspace's admins: members and roles,
collections, access rules (with the two checks beside them), connected
sources and the workspace's settings. Agents have their own page
(memoryhub.views.agents). An admin only ever sees their own workspace;
superusers have the Django admin."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memoryhub import errors
from memoryhub.access import Caller, caller_for_user, caller_is_admin
from memoryhub.models import Agent, Proposal, Tenant, User
from memoryhub.oauth import AGENT_TOKEN_SECONDS
from memoryhub.services import admin


class SignedInRequest(HttpRequest):
    user: User  # login_required guarantees it


def _admin_caller(request: SignedInRequest) -> Caller:
    """The signed-in person, when they administer their own workspace."""
    try:
        caller = caller_for_user(user=request.user)
    except errors.MemoryhubError:
        raise PermissionDenied("Only workspace admins administer the workspace.") from None
    if not caller_is_admin(caller):
        raise PermissionDenied("Only workspace admins administer the workspace.")
    return caller


def _not_found(exc: errors.NotFound) -> Http404:
    return Http404(exc.message)


def _form_error(form: forms.Form, exc: errors.MemoryhubError) -> None:
    form.add_error(exc.field if exc.field in form.fields else None, exc.message)


def set_choices(field: forms.Field, choices: list) -> None:
    assert isinstance(field, forms.ChoiceField)
    field.choices = choices


def _role_choices(caller: Caller) -> list[tuple[str, str]]:
    return [(role.name, role.name) for role in admin.roles_list(caller=caller)]


# --------------------------------------------------------------------------- forms


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150, help_text="What they sign in with.",
                               widget=forms.TextInput(attrs={"autocomplete": "off", "autocapitalize": "none"}))
    email = forms.EmailField(required=False)
    password = forms.CharField(widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}), strip=False,
                               help_text="At least 10 characters; they can change it later.")
    roles = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    is_admin = forms.BooleanField(required=False, label="Workspace admin")

    def __init__(self, *args, caller: Caller, **kwargs):
        super().__init__(*args, **kwargs)
        set_choices(self.fields["roles"], _role_choices(caller))


class MemberForm(forms.Form):
    roles = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    is_admin = forms.BooleanField(required=False, label="Workspace admin")

    def __init__(self, *args, caller: Caller, **kwargs):
        super().__init__(*args, **kwargs)
        set_choices(self.fields["roles"], _role_choices(caller))


class NamedForm(forms.Form):
    name = forms.SlugField(max_length=64, help_text="Letters, digits and hyphens.")
    description = forms.CharField(max_length=200, required=False)


class AccessRuleForm(forms.Form):
    role = forms.TypedChoiceField(coerce=int)
    collection = forms.TypedChoiceField(coerce=int)

    def __init__(self, *args, caller: Caller, **kwargs):
        super().__init__(*args, **kwargs)
        set_choices(self.fields["role"], [(role.pk, role.name) for role in admin.roles_list(caller=caller)])
        set_choices(self.fields["collection"], [(c.pk, c.name) for c in admin.collections_list(caller=caller)])


class SourceForm(forms.Form):
    name = forms.SlugField(max_length=64, help_text="Agents name it in `agents` to read what it contributed.")
    kind = forms.CharField(max_length=64, initial="documents", help_text="documents, tickets, chat…")
    collection = forms.TypedChoiceField(coerce=int, empty_value=None, required=False,
                                        label="Default collection")

    def __init__(self, *args, caller: Caller, **kwargs):
        super().__init__(*args, **kwargs)
        set_choices(self.fields["collection"], [("", "None (it names one with each fragment)")] + [
            (c.pk, c.name) for c in admin.collections_list(caller=caller)
        ])


class SettingsForm(forms.Form):
    judgment_plane = forms.BooleanField(
        required=False, label="Judgment plane",
        help_text="Arrange search results for the caller's task and task tags. Never changes what is visible.",
    )
    relevance_floor = forms.FloatField(
        min_value=0.0, max_value=1.0, label="Relevance floor",
        widget=forms.NumberInput(attrs={"step": "0.01", "inputmode": "decimal"}),
        help_text="0 to 1. A search abstains when no visible fragment scores at or above it.",
    )
    write_policy = forms.ChoiceField(choices=Tenant.WritePolicy.choices, label="Write policy")
    blocked_terms = forms.CharField(
        required=False, label="Blocked terms", widget=forms.Textarea(attrs={"rows": 5}),
        help_text="One per line. With the blocklist policy, facts mentioning one are dropped (policy_drop).",
    )


# --------------------------------------------------------------------------- overview


@require_GET
@login_required
def overview(request: SignedInRequest) -> HttpResponse:
    caller = _admin_caller(request)
    tenant = caller.tenant
    return render(request, "workspace/overview.html", {
        "workspace": tenant,
        "members": admin.members_list(caller=caller).count(),
        "roles": admin.roles_list(caller=caller).count(),
        "collections": admin.collections_list(caller=caller).count(),
        "rules": admin.access_rules_list(caller=caller).count(),
        "sources": admin.sources_list(caller=caller).count(),
        "agents": Agent.objects.filter(tenant=tenant, kind=Agent.Kind.ASSISTANT, revoked_at__isnull=True).count(),
        "pending": Proposal.objects.filter(tenant=tenant, state=Proposal.State.PENDING).count(),
    })


# --------------------------------------------------------------------------- members and roles


def _render_members(request: SignedInRequest, caller: Caller, *, add_form: MemberAddForm | None = None,
                    role_form: NamedForm | None = None, status: int = 200) -> HttpResponse:
    members = [
        (membership, MemberForm(caller=caller, prefix=f"m{membership.user_id}", initial={
            "roles": [role.name for role in membership.roles.all()], "is_admin": membership.is_admin,
        }))
        for membership in admin.members_list(caller=caller)
    ]
    return render(request, "workspace/members.html", {
        "workspace": caller.tenant, "members": members, "roles": admin.roles_list(caller=caller),
        "add_form": add_form or MemberAddForm(caller=caller), "role_form": role_form or NamedForm(),
    }, status=status)


@require_GET
@login_required
def members(request: SignedInRequest) -> HttpResponse:
    return _render_members(request, _admin_caller(request))


@require_POST
@login_required
def member_add(request: SignedInRequest) -> HttpResponse:
    caller = _admin_caller(request)
    form = MemberAddForm(request.POST, caller=caller)
    if form.is_valid():
        try:
            user = admin.member_add(caller=caller, **form.cleaned_data)
        except errors.MemoryhubError as exc:
            _form_error(form, exc)
        else:
            messages.success(request, f"{user.username} joined {caller.tenant.name}.")
            return redirect("workspace:members")
    return _render_members(request, caller, add_form=form, status=400)


@require_POST
@login_required
def member_update(request: SignedInRequest, user_id: int) -> HttpResponse:
    caller = _admin_caller(request)
    try:
        membership = admin.member_get(caller=caller, user_id=user_id)
    except errors.NotFound as exc:
        raise _not_found(exc) from None
    form = MemberForm(request.POST, caller=caller, prefix=f"m{user_id}")
    if not form.is_valid():
        messages.error(request, "Choose roles of this workspace.")
        return redirect("workspace:members")
    try:
        admin.member_update(caller=caller, user_id=user_id, **form.cleaned_data)
    except errors.MemoryhubError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Saved {membership.user.username}'s roles. They apply from their next read.")
    return redirect("workspace:members")


@require_POST
@login_required
def role_add(request: SignedInRequest) -> HttpResponse:
    caller = _admin_caller(request)
    form = NamedForm(request.POST)
    if form.is_valid():
        try:
            role = admin.role_create(caller=caller, **form.cleaned_data)
        except errors.MemoryhubError as exc:
            _form_error(form, exc)
        else:
            messages.success(request, f"Role {role.name} added. Grant it collections on the access rules page.")
            return redirect("workspace:members")
    return _render_members(request, caller, role_form=form, status=400)


@require_POST
@login_required
def role_delete(request: SignedInRequest, role_id: int) -> HttpResponse:
    caller = _admin_caller(request)
    try:
        role = admin.role_delete(caller=caller, role_id=role_id)
    except errors.NotFound as exc:
        raise _not_found(exc) from None
    messages.success(request, f"Role {role.name} removed, with its access rules.")
    return redirect("workspace:members")


# --------------------------------------------------------------------------- collections


def _render_collections(request: SignedInRequest, caller: Caller, *, form: NamedForm | None = None,
                        status: int = 200) -> HttpResponse:
    return render(request, "workspace/collections.html", {
        "workspace": caller.tenant, "collections": admin.collections_list(caller=caller),
        "form": form or NamedForm(),
    }, status=status)


@require_GET
@login_required
def collections(request: SignedInRequest) -> HttpResponse:
    return _render_collections(request, _admin_caller(request))


@require_POST
@login_required
def collection_add(request: SignedInRequest) -> HttpResponse:
    caller = _admin_caller(request)
    form = NamedForm(request.POST)
    if form.is_valid():
        try:
            collection = admin.collection_add(caller=caller, **form.cleaned_data)
        except errors.MemoryhubError as exc:
            _form_error(form, exc)
        else:
            messages.success(request, f"Collection {collection.name} added. Nobody reads it until a rule says so.")
            return redirect("workspace:collections")
    return _render_collections(request, caller, form=form, status=400)


# --------------------------------------------------------------------------- access rules and checks


def _int_param(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name, "")
    return int(value) if value.isdigit() else None


def _render_access(request: SignedInRequest, caller: Caller, *, form: AccessRuleForm | None = None,
                   status: int = 200) -> HttpResponse:
    context: dict = {
        "workspace": caller.tenant, "rules": admin.access_rules_list(caller=caller),
        "form": form or AccessRuleForm(caller=caller),
        "collections": admin.collections_list(caller=caller), "members": admin.members_list(caller=caller),
    }
    collection_id, person_id = _int_param(request, "collection"), _int_param(request, "person")
    try:
        if collection_id is not None:
            context["checked_collection"] = admin.collection_get(caller=caller, collection_id=collection_id)
            context["readers"] = admin.collection_readers(caller=caller, collection_id=collection_id)
        if person_id is not None:
            context["checked_member"] = admin.member_get(caller=caller, user_id=person_id)
            context["reach"] = admin.member_readable_collections(caller=caller, user_id=person_id)
    except errors.NotFound as exc:
        raise _not_found(exc) from None
    return render(request, "workspace/access.html", context, status=status)


@require_GET
@login_required
def access_rules(request: SignedInRequest) -> HttpResponse:
    return _render_access(request, _admin_caller(request))


@require_POST
@login_required
def access_grant(request: SignedInRequest) -> HttpResponse:
    caller = _admin_caller(request)
    form = AccessRuleForm(request.POST, caller=caller)
    if form.is_valid():
        try:
            rule = admin.access_rule_grant(caller=caller, role_id=form.cleaned_data["role"],
                                           collection_id=form.cleaned_data["collection"])
        except errors.MemoryhubError as exc:
            _form_error(form, exc)
        else:
            messages.success(request, f"{rule.role.name} may now read {rule.collection.name}.")
            return redirect(f"{reverse('workspace:access')}?collection={rule.collection_id}")
    return _render_access(request, caller, form=form, status=400)


@require_POST
@login_required
def access_revoke(request: SignedInRequest, rule_id: int) -> HttpResponse:
    caller = _admin_caller(request)
    try:
        rule = admin.access_rule_revoke(caller=caller, rule_id=rule_id)
    except errors.NotFound as exc:
        raise _not_found(exc) from None
    messages.success(request, f"{rule.role.name} may no longer read {rule.collection.name}, from the next read on.")
    return redirect("workspace:access")


# --------------------------------------------------------------------------- connected sources


def _render_sources(request: SignedInRequest, caller: Caller, *, form: SourceForm | None = None,
                    status: int = 200) -> HttpResponse:
    return render(request, "workspace/sources.html", {
        "workspace": caller.tenant, "sources": admin.sources_list(caller=caller),
        "form": form or SourceForm(caller=caller),
    }, status=status)


@require_GET
@login_required
def sources(request: SignedInRequest) -> HttpResponse:
    return _render_sources(request, _admin_caller(request))


@require_POST
@login_required
@never_cache
def source_add(request: SignedInRequest) -> HttpResponse:
    caller = _admin_caller(request)
    form = SourceForm(request.POST, caller=caller)
    if form.is_valid():
        try:
            source, credentials = admin.source_register(
                caller=caller, name=form.cleaned_data["name"], kind=form.cleaned_data["kind"],
                collection_id=form.cleaned_data["collection"],
            )
        except errors.MemoryhubError as exc:
            _form_error(form, exc)
        else:
            response = render(request, "workspace/source_credentials.html", {
                "workspace": caller.tenant, "source": source, "credentials": credentials,
                "token_endpoint": request.build_absolute_uri(reverse("oauth2_provider:token")),
                "ingest_endpoint": _ingest_endpoint(request),
                "token_minutes": AGENT_TOKEN_SECONDS // 60,
            })
            # The secret is on this page and nowhere else: keep it out of every cache.
            response["Cache-Control"] = "no-store"
            return response
    return _render_sources(request, caller, form=form, status=400)


def _ingest_endpoint(request: HttpRequest) -> str:
    try:
        return request.build_absolute_uri(reverse("ingest-document-upsert"))
    except NoReverseMatch:
        return ""


# --------------------------------------------------------------------------- settings


@require_http_methods(["GET", "POST"])
@login_required
def workspace_settings(request: SignedInRequest) -> HttpResponse:
    caller = _admin_caller(request)
    tenant = caller.tenant
    form = SettingsForm(request.POST or None, initial={
        "judgment_plane": tenant.judgment_plane, "relevance_floor": tenant.relevance_floor,
        "write_policy": tenant.write_policy, "blocked_terms": "\n".join(tenant.blocked_terms or []),
    })
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                admin.workspace_settings_update(
                    caller=caller, judgment_plane=data["judgment_plane"], relevance_floor=data["relevance_floor"],
                    write_policy=data["write_policy"], blocked_terms=data["blocked_terms"].splitlines(),
                )
            except errors.MemoryhubError as exc:
                _form_error(form, exc)
            else:
                messages.success(request, "Settings saved. They apply from the next search or write.")
                return redirect("workspace:settings")
        return render(request, "workspace/settings.html", {"workspace": tenant, "form": form}, status=400)
    return render(request, "workspace/settings.html", {"workspace": tenant, "form": form})
