"""People's own pages: home, my memory (browse, search, provenance, forget),
receipts (their own reads, replayed) and connected apps. Views parse input,
call one service and render it; the services decide what a person may see."""

from __future__ import annotations

import datetime as dt
import json
import uuid

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_ratelimit.decorators import ratelimit

from memoryhub import access, errors
from memoryhub.oauth.policy import AGENT_TOKEN_SECONDS, PERSON_TOKEN_SECONDS
from memoryhub.pages.callers import SignedInRequest, login_required, person_caller
from memoryhub.pages.client_configs import MCP_SDK_REQUIREMENT, client_configs
from memoryhub.pages.forms import PasswordChangeForm, SearchForm, form_error
from memoryhub.services import connected_apps, fragments, members, portability, proposals, receipts
from memoryhub.services.search import SearchResult, fragments_search


def _cursor(request: HttpRequest) -> str | None:
    return request.GET.get("cursor") or None


@require_GET
@login_required
def home(request: SignedInRequest) -> HttpResponse:
    context: dict = {"membership": access.person_membership(request.user)}
    if context["membership"] is not None:
        context["pending"] = proposals.proposals_pending_count(caller=person_caller(request))
    return render(request, "pages/home.html", context)


# What a search said beyond what its receipt records (each hit's score, the
# notice), kept in the person's session for the results page of their last few
# searches; a receipt opened without them still shows what was served.
SEARCHES_KEPT = 10


def _keep_search(request: HttpRequest, result: SearchResult) -> None:
    kept = dict(request.session.get("searches", {}))
    kept[result.receipt_id] = {
        "scores": {str(hit.fragment.pk): hit.score for hit in result.hits},
        "notice": result.notice or "", "abstain_reason": result.abstain_reason or "",
    }
    request.session["searches"] = dict(list(kept.items())[-SEARCHES_KEPT:])


def _search_form_of(served: receipts.ServedResults) -> SearchForm:
    asked = served.request
    as_of = served.receipt.as_of if served.receipt.as_of_explicit else None
    return SearchForm(initial={"q": asked.get("query", ""), "limit": asked.get("limit"),
                               "as_of": as_of.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S") if as_of else None})


@require_http_methods(["GET", "POST"])
@login_required
def my_memory(request: SignedInRequest) -> HttpResponse:
    """Browse one's own memory newest first. Searching is an act: the form
    POSTs, the search runs through the same service the MCP tool calls (and
    leaves a receipt), and the answer is a redirect to this page naming the
    receipt, which shows what that read served without searching again. So a
    reload, back or forward records nothing; pressing Search again does."""
    caller = person_caller(request)
    context: dict = {"include_retired": request.GET.get("show") == "all"}
    status = 200
    if request.method == "POST":
        form = SearchForm(request.POST)
        if form.is_valid() and not form.cleaned_data["q"].strip():
            form.add_error("q", "Type what to search for.")
        if form.is_valid():
            as_of = form.cleaned_data["as_of"]
            try:
                result = fragments_search(
                    caller=caller, query=form.cleaned_data["q"], limit=form.cleaned_data["limit"],
                    as_of=as_of.astimezone(dt.UTC) if as_of else None,
                )
            except errors.MemoryhubError as exc:
                form_error(form, exc)
            else:
                _keep_search(request, result)
                return redirect(f"{reverse('my_memory')}?{urlencode({'receipt': result.receipt_id})}")
        status = 400
    elif request.GET.get("receipt"):
        served = receipts.receipt_served(caller=caller, receipt_id=request.GET["receipt"])
        form = _search_form_of(served)
        context.update(served=served, said=request.session.get("searches", {}).get(served.receipt.pk, {}))
    else:
        form = SearchForm(initial={"q": request.GET.get("q", "")})
    context["form"] = form
    try:
        context["page"] = fragments.fragments_browse(
            caller=caller, cursor=_cursor(request), include_retired=context["include_retired"]
        )
    except errors.InvalidArgument as exc:
        messages.error(request, exc.message)
        return redirect("my_memory")
    return render(request, "pages/memory.html", context, status=status)


@require_GET
@login_required
def fragment_detail(request: SignedInRequest, fragment_id: uuid.UUID) -> HttpResponse:
    caller = person_caller(request)
    view = fragments.fragment_get(caller=caller, fragment_id=fragment_id)
    replaced, successor = fragments.fragment_history(caller=caller, fragment=view.fragment)
    return render(request, "pages/fragment.html", {"view": view, "replaced": replaced, "successor": successor})


@require_http_methods(["GET", "POST"])
@login_required
def fragment_forget(request: SignedInRequest, fragment_id: uuid.UUID) -> HttpResponse:
    """GET asks to confirm; POST forgets: the fragment is retired now, and
    reads of the past still see it."""
    caller = person_caller(request)
    # Shared memory belongs to its collection; only one's own is forgotten here.
    view = fragments.fragment_get(caller=caller, fragment_id=fragment_id, own=True)
    if request.method == "GET":
        return render(request, "pages/forget.html", {"view": view})
    try:
        fragments.fragment_forget(caller=caller, fragment_id=view.fragment.pk)
    except errors.Conflict as exc:
        messages.error(request, exc.message)
        return redirect("fragment_detail", fragment_id=view.fragment.pk)
    messages.success(request, "Forgotten. Searches no longer find it; a search of the past (as of an earlier "
                              "time) still does, and your receipts still account for it.")
    return redirect("my_memory")


@require_GET
@login_required
def receipt_list(request: SignedInRequest) -> HttpResponse:
    caller = person_caller(request)
    try:
        page = receipts.receipts_browse(caller=caller, cursor=_cursor(request))
    except errors.InvalidArgument as exc:
        messages.error(request, exc.message)
        return redirect("receipt_list")
    return render(request, "pages/receipts.html", {"page": page})


@require_GET
@login_required
def receipt_detail(request: SignedInRequest, receipt_id: str) -> HttpResponse:
    """One of the person's receipts, replayed now: what it served then, what
    the identical read serves today, and the difference. A read made over MCP
    was cut to the MCP result budget; the replay is cut to the same one."""
    caller = person_caller(request)
    try:
        replay = receipts.receipt_replay(caller=caller, receipt_id=receipt_id)
    except errors.InvalidArgument:
        raise errors.NotFound(receipts.RECEIPT_NOT_YOURS) from None
    shown = receipts.receipt_fragments(caller=caller, fragment_ids=[*replay.served_then, *replay.served_now])
    rows = {
        name: [(pk, shown.get(pk)) for pk in getattr(replay, name)]
        for name in ("served_then", "served_now", "missing_now", "extra_now")
    }
    return render(request, "pages/receipt.html", {"replay": replay, "rows": rows})


@require_GET
@login_required
def memory_download(request: SignedInRequest) -> HttpResponse:
    """Everything the person owns and every receipt of their reads, as one
    JSON Lines file (memoryhub.services.portability.memory_export)."""
    caller = person_caller(request)
    body = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in portability.memory_export(caller=caller))
    response = HttpResponse(body, content_type="application/x-ndjson; charset=utf-8")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="memoryhub-memory-{stamp}.jsonl"'
    response["Cache-Control"] = "no-store"
    return response


@sensitive_post_parameters()
@ratelimit(key=lambda group, request: f"{request.user.tenant_id}:{request.user.pk}", rate="10/h", method="POST",
           block=False)
@require_http_methods(["GET", "POST"])
@login_required
def password_page(request: SignedInRequest) -> HttpResponse:
    """A person changes their own password; they stay signed in here."""
    caller = person_caller(request)
    form = PasswordChangeForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and getattr(request, "limited", False):
        form.add_error(None, "Too many attempts; try again in an hour.")
        return render(request, "account/password.html", {"form": form}, status=429)
    if request.method == "POST":
        if form.is_valid():
            try:
                user = members.password_change(caller=caller, old_password=form.cleaned_data["old_password"],
                                               new_password=form.cleaned_data["new_password"])
            except errors.InvalidArgument as exc:
                form_error(form, exc)
            else:
                update_session_auth_hash(request, user)
                messages.success(request, "Your password is changed.")
                return redirect("password_change")
        return render(request, "account/password.html", {"form": form}, status=400)
    return render(request, "account/password.html", {"form": form})


@require_GET
@login_required
def connect_page(request: SignedInRequest) -> HttpResponse:
    """How to connect each MCP client to this server, made for its public address."""
    caller = person_caller(request)
    return render(request, "account/connect.html", {
        "configs": client_configs(settings.BASE_URL), "tenant": caller.tenant,
        "token_minutes": PERSON_TOKEN_SECONDS // 60, "agent_token_minutes": AGENT_TOKEN_SECONDS // 60,
        "mcp_sdk_requirement": MCP_SDK_REQUIREMENT,
        "metadata_documents": settings.OAUTH2_PROVIDER.get("CIMD_ENABLED", True),
    })


@require_GET
@login_required
def connected_apps_page(request: SignedInRequest) -> HttpResponse:
    apps = connected_apps.connected_apps_list(caller=person_caller(request))
    return render(request, "account/connected_apps.html",
                  {"apps": apps, "connected": sum(app.connected for app in apps),
                   "token_minutes": PERSON_TOKEN_SECONDS // 60})


@require_POST
@login_required
def disconnect_all_apps(request: SignedInRequest) -> HttpResponse:
    ended = connected_apps.connected_apps_disconnect_all(caller=person_caller(request))
    messages.success(
        request,
        f"Disconnected {ended} app{'s' if ended != 1 else ''}. None can renew its access; an access token one already "
        f"holds keeps working until it expires, at most {PERSON_TOKEN_SECONDS // 60} minutes.",
    )
    return redirect("connected_apps")


@require_POST
@login_required
def disconnect_app(request: SignedInRequest, application_id: int) -> HttpResponse:
    if connected_apps.connected_app_disconnect(caller=person_caller(request), application_id=application_id):
        messages.success(
            request,
            f"Disconnected. The app can no longer renew its access; an access token it already "
            f"holds keeps working until it expires, at most {PERSON_TOKEN_SECONDS // 60} minutes.",
        )
    return redirect("connected_apps")
