"""People's own pages: home, my memory (browse, search, provenance, forget)
and receipts (their own reads, replayed). Views parse input, call one
service and render it; the services decide what a person may see."""

from __future__ import annotations

import datetime as dt
import uuid

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from memoryhub import errors
from memoryhub.access import Caller, caller_for_user, caller_is_admin
from memoryhub.models import Membership, Proposal, User
from memoryhub.services import browse, limits
from memoryhub.services.receipts import receipt_replay
from memoryhub.services.search import memory_search


class SignedInRequest(HttpRequest):
    user: User  # login_required guarantees it


class SearchForm(forms.Form):
    q = forms.CharField(label="Search your memory", max_length=limits.QUERY_MAX_CHARS, required=False)
    as_of = forms.DateTimeField(
        label="As it stood at (UTC)", required=False,
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}),
        help_text="Leave empty for now.",
    )
    limit = forms.IntegerField(label="At most", min_value=limits.LIMIT_MIN, max_value=limits.LIMIT_MAX,
                               required=False, widget=forms.NumberInput(attrs={"inputmode": "numeric"}))


def _person_caller(request: SignedInRequest) -> Caller:
    """The signed-in person as a caller of the memory services; someone with no
    place in a workspace has no memory pages."""
    try:
        return caller_for_user(user=request.user)
    except errors.PermissionDenied:
        raise PermissionDenied("Your account is not part of a workspace.") from None


def _cursor(request: HttpRequest) -> str | None:
    return request.GET.get("cursor") or None


@require_GET
@login_required
def home(request: SignedInRequest) -> HttpResponse:
    tenant_id = request.user.tenant_id
    membership = (
        None if tenant_id is None else Membership.objects.filter(user=request.user, tenant_id=tenant_id).first()
    )
    context: dict = {"membership": membership}
    if membership is not None and request.user.is_active:
        caller = caller_for_user(user=request.user)
        if caller_is_admin(caller):
            context["pending"] = Proposal.objects.filter(tenant=caller.tenant, state=Proposal.State.PENDING).count()
    return render(request, "pages/home.html", context)


@require_GET
@login_required
def my_memory(request: SignedInRequest) -> HttpResponse:
    """Browse one's own memory newest first; with a query, search everything
    one may see through the same service the MCP tool calls (and get a receipt)."""
    caller = _person_caller(request)
    form = SearchForm(request.GET or None)
    context: dict = {"form": form, "include_retired": request.GET.get("show") == "all"}
    status = 200
    if form.is_bound and form.is_valid() and form.cleaned_data["q"].strip():
        as_of = form.cleaned_data["as_of"]
        try:
            context["result"] = memory_search(
                caller=caller, query=form.cleaned_data["q"], limit=form.cleaned_data["limit"],
                as_of=as_of.astimezone(dt.UTC) if as_of else None,
            )
        except errors.MemoryhubError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            status = 400
        else:
            ids = [item["id"] for item in context["result"]["fragments"]]
            context["owned"] = {
                pk for pk, view in browse.receipt_fragments(caller=caller, fragment_ids=ids).items() if view.owned
            }
    elif form.is_bound and not form.is_valid():
        status = 400
    try:
        context["page"] = browse.fragments_browse(
            caller=caller, cursor=_cursor(request), include_retired=context["include_retired"]
        )
    except errors.InvalidArgument as exc:
        messages.error(request, exc.message)
        return redirect("my_memory")
    return render(request, "pages/memory.html", context, status=status)


@require_GET
@login_required
def fragment_detail(request: SignedInRequest, fragment_id: uuid.UUID) -> HttpResponse:
    caller = _person_caller(request)
    try:
        view = browse.fragment_get(caller=caller, fragment_id=fragment_id)
    except errors.NotFound:
        raise Http404("No such fragment in your memory.") from None
    replaced, successor = browse.fragment_history(caller=caller, fragment=view.fragment)
    return render(request, "pages/fragment.html", {"view": view, "replaced": replaced, "successor": successor})


@require_http_methods(["GET", "POST"])
@login_required
def fragment_forget(request: SignedInRequest, fragment_id: uuid.UUID) -> HttpResponse:
    """GET asks to confirm; POST forgets: the fragment is retired now, and
    reads of the past still see it."""
    caller = _person_caller(request)
    try:
        view = browse.fragment_get(caller=caller, fragment_id=fragment_id)
    except errors.NotFound:
        raise Http404("No such fragment in your memory.") from None
    if not view.owned:
        # Shared memory belongs to its collection; only one's own is forgotten here.
        raise Http404("No such fragment in your memory.")
    if request.method == "GET":
        return render(request, "pages/forget.html", {"view": view})
    try:
        browse.fragment_forget(caller=caller, fragment_id=view.fragment.pk)
    except errors.Conflict as exc:
        messages.error(request, exc.message)
        return redirect("fragment_detail", fragment_id=view.fragment.pk)
    messages.success(request, "Forgotten. Searches no longer find it; a search of the past (as of an earlier "
                              "time) still does, and your receipts still account for it.")
    return redirect("my_memory")


@require_GET
@login_required
def receipt_list(request: SignedInRequest) -> HttpResponse:
    caller = _person_caller(request)
    try:
        page = browse.receipts_browse(caller=caller, cursor=_cursor(request))
    except errors.InvalidArgument as exc:
        messages.error(request, exc.message)
        return redirect("receipt_list")
    return render(request, "pages/receipts.html", {"page": page})


@require_GET
@login_required
def receipt_detail(request: SignedInRequest, receipt_id: str) -> HttpResponse:
    """One of the person's receipts, replayed now: what it served then, what
    the identical read serves today, and the difference."""
    caller = _person_caller(request)
    try:
        replay = receipt_replay(caller=caller, receipt_id=receipt_id)
    except (errors.NotFound, errors.InvalidArgument):
        raise Http404("No receipt with this id is yours.") from None
    shown = browse.receipt_fragments(
        caller=caller, fragment_ids=[*replay["served_then"], *replay["served_now"]]
    )
    rows = {
        name: [(pk, shown.get(pk)) for pk in replay[name]]
        for name in ("served_then", "served_now", "missing_now", "extra_now")
    }
    return render(request, "pages/receipt.html", {"replay": replay, "rows": rows})
