"""The review console: a workspace admin decides the agent proposals of their
own workspace. Views parse input, call one service and render; who may do
what is memoryhub.access's (`require_reviewer`, `require_decider`), asked by
the services in memoryhub.services.proposals."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.contrib import messages
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memoryhub import errors
from memoryhub.access import Caller
from memoryhub.models import Proposal
from memoryhub.pages.callers import SignedInRequest, admin_caller, login_required
from memoryhub.services import proposals as review
from memoryhub.services.proposals import proposal_approve, proposal_reject
from reviews.forms import ApproveForm, BulkForm, HistoryFilterForm, QueueFilterForm, RejectForm

PAGE_SIZE = 20


def _get_proposal_for_admin(request: SignedInRequest, proposal_id: uuid.UUID) -> tuple[Caller, Proposal]:
    caller = admin_caller(request)
    # Another workspace's proposal and one that never existed look the same (404).
    return caller, review.proposal_get(caller=caller, proposal_id=proposal_id)


def _text(errors_: Iterable[object]) -> str:
    return " ".join(map(str, errors_))


def _back(request: HttpRequest) -> HttpResponse:
    """Back to the page the decision was made on (its filters and page kept)."""
    target = request.POST.get("next", "")
    if target.startswith("/reviews/") and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return redirect(target)
    return redirect("reviews:queue")


def _page(request: HttpRequest, queryset) -> Page:  # type: ignore[no-untyped-def]
    return Paginator(queryset, PAGE_SIZE).get_page(request.GET.get("page"))


def _query_without_page(request: HttpRequest) -> str:
    query = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()


@require_GET
@login_required
def queue(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    filters = QueueFilterForm(request.GET, agents=review.proposal_agents(caller=caller))
    chosen = filters.cleaned_data if filters.is_valid() else {}
    page = _page(request, review.proposals_queue(caller=caller, agent=chosen.get("agent", ""),
                                                 age=chosen.get("age", "")))
    previews = review.proposals_preview(caller=caller, proposals=page.object_list)
    items = [(proposal, previews.get(proposal.pk)) for proposal in page.object_list]
    return render(request, "reviews/queue.html", {
        "workspace": caller.tenant, "filters": filters, "page": page, "items": items,
        "query": _query_without_page(request), "reject_form": RejectForm(),
    })


@require_http_methods(["GET", "POST"])
@login_required
def detail(request: SignedInRequest, proposal_id: uuid.UUID) -> HttpResponse:
    """One proposal: its full content, an edit box, and the preview of
    approving it as it stands or as edited (POST previews, it decides nothing)."""
    caller, proposal = _get_proposal_for_admin(request, proposal_id)
    form = ApproveForm(request.POST or None, initial={"content": proposal.content})
    preview = None
    status = 200
    if proposal.state == Proposal.State.PENDING:
        contents = {}
        if request.method == "POST":
            if form.is_valid() and form.cleaned_data["content"].strip():
                contents[proposal.pk] = form.cleaned_data["content"]
            else:
                if form.is_valid():
                    form.add_error("content", "The edited fact cannot be empty.")
                status = 400
        if status == 200:
            preview = review.proposals_preview(caller=caller, proposals=[proposal], contents=contents).get(proposal.pk)
    return render(request, "reviews/detail.html", {
        "workspace": caller.tenant, "proposal": proposal, "form": form, "preview": preview,
        "reject_form": RejectForm(), "edited": request.method == "POST",
    }, status=status)


@require_POST
@login_required
def approve(request: SignedInRequest, proposal_id: uuid.UUID) -> HttpResponse:
    caller, proposal = _get_proposal_for_admin(request, proposal_id)
    form = ApproveForm(request.POST)
    if not form.is_valid():
        messages.error(request, _text(form.errors.get("content", ["The edited fact is not valid."])))
        return redirect("reviews:detail", proposal_id=proposal.pk)
    edited = form.cleaned_data["content"]
    if "content" in request.POST and not edited.strip():
        messages.error(request, "The edited fact cannot be empty.")
        return redirect("reviews:detail", proposal_id=proposal.pk)
    # Unchanged text is a plain approval: the fact keeps the agent's confidence.
    if not edited.strip() or edited.strip() == proposal.content.strip():
        edited = None
    try:
        result = proposal_approve(caller=caller, proposal_id=proposal.pk, edited_content=edited)
    except errors.MemoryhubError as exc:
        messages.error(request, exc.message)
        return _back(request)
    messages.success(request, f"Approved {proposal.agent.name}'s proposal{' as edited' if edited else ''}: "
                              f"{result.summary}")
    return _back(request)


@require_POST
@login_required
def reject(request: SignedInRequest, proposal_id: uuid.UUID) -> HttpResponse:
    caller, proposal = _get_proposal_for_admin(request, proposal_id)
    form = RejectForm(request.POST)
    if not form.is_valid():
        messages.error(request, _text(form.errors["reason"]))
        return _back(request)
    try:
        proposal_reject(caller=caller, proposal_id=proposal.pk, reason=form.cleaned_data["reason"])
    except errors.MemoryhubError as exc:
        messages.error(request, exc.message)
        return _back(request)
    messages.success(request, f"Rejected {proposal.agent.name}'s proposal. Nothing became memory.")
    return _back(request)


@require_POST
@login_required
def bulk(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    form = BulkForm(request.POST)
    if not form.is_valid():
        for field_errors in form.errors.values():
            messages.error(request, _text(field_errors))
        return _back(request)
    action = form.cleaned_data["action"]
    decided, refused = 0, []
    for proposal_id in form.cleaned_data["proposals"]:
        try:
            if action == "approve":
                proposal_approve(caller=caller, proposal_id=proposal_id)
            else:
                proposal_reject(caller=caller, proposal_id=proposal_id, reason=form.cleaned_data["reason"])
            decided += 1
        except (errors.NotFound, errors.Conflict) as exc:
            refused.append(exc.message)
    verb = "Approved" if action == "approve" else "Rejected"
    if decided:
        messages.success(request, f"{verb} {decided} proposal{'s' if decided != 1 else ''}.")
    for message in dict.fromkeys(refused):
        messages.error(request, f"Skipped: {message}")
    return _back(request)


@require_GET
@login_required
def history(request: SignedInRequest) -> HttpResponse:
    caller = admin_caller(request)
    filters = HistoryFilterForm(request.GET, agents=review.proposal_agents(caller=caller))
    chosen = filters.cleaned_data if filters.is_valid() else {}
    page = _page(request, review.proposals_decided(caller=caller, agent=chosen.get("agent", ""),
                                                   state=chosen.get("state", "")))
    return render(request, "reviews/history.html", {
        "workspace": caller.tenant, "filters": filters, "page": page, "query": _query_without_page(request),
    })
