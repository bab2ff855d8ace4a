"""Workspaces: creating one (the deployment's operator only), finding one by
slug, its overview and its settings (its admins)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, Q

from memoryhub import access
from memoryhub.access import Caller, Operator
from memoryhub.errors import Conflict, InvalidArgument, NotFound
from memoryhub.models import AccessRule, Agent, Collection, Membership, Proposal, Role, Source, Tenant
from memoryhub.services.arguments import checked_name, checked_text, storable

BLOCKED_TERMS_MAX = 200
BLOCKED_TERM_MAX_CHARS = 100
SLUG_MAX_CHARS = 64
NAME_MAX_CHARS = 200


def workspace_get(*, slug: str) -> Tenant:
    """The workspace with this slug (for commands, which name one)."""
    tenant = Tenant.objects.filter(slug=storable(slug, field="workspace")).first()
    if tenant is None:
        raise NotFound(f"No workspace named {slug!r}.", field="workspace")
    return tenant


@transaction.atomic
def workspace_create(*, caller: Operator, slug: str, name: str = "", exist_ok: bool = False) -> Tenant:
    access.require_operator(caller)
    # Too long or unstorable is refused, not cut.
    clean = checked_name(slug, field="slug", max_chars=SLUG_MAX_CHARS, what="A workspace")
    name = checked_text(name, field="name", max_chars=NAME_MAX_CHARS)
    existing = Tenant.objects.filter(slug=clean).first()
    if existing is not None:
        if exist_ok:
            return existing
        raise Conflict(f"A workspace named {clean!r} already exists.", field="slug")
    return Tenant.objects.create(slug=clean, name=name or clean)


@dataclass(frozen=True)
class Overview:
    workspace: Tenant
    members: int  # who can sign in
    members_inactive: int  # deactivated or removed
    roles: int
    collections: int
    rules: int
    sources: int  # feeding shared memory: neither disabled nor revoked
    sources_paused: int  # disabled (revoked ones are gone for good and not counted)
    agents: int
    pending: int


def workspace_overview(*, caller: Caller) -> Overview:
    tenant = access.require_admin(caller)
    active = Q(user__is_active=True, removed_at__isnull=True)
    members = Membership.objects.filter(tenant=tenant, user__tenant=tenant).aggregate(
        active=Count("pk", filter=active), inactive=Count("pk", filter=~active))
    live = Source.objects.filter(tenant=tenant, agent__revoked_at__isnull=True).aggregate(
        feeding=Count("pk", filter=Q(disabled_at__isnull=True)),
        paused=Count("pk", filter=Q(disabled_at__isnull=False)))
    return Overview(
        workspace=tenant,
        members=members["active"],
        members_inactive=members["inactive"],
        roles=Role.objects.filter(tenant=tenant).count(),
        collections=Collection.objects.filter(tenant=tenant, deleted_at__isnull=True).count(),
        rules=AccessRule.objects.filter(tenant=tenant).count(),
        sources=live["feeding"],
        sources_paused=live["paused"],
        agents=Agent.objects.filter(tenant=tenant, kind=Agent.Kind.ASSISTANT, revoked_at__isnull=True).count(),
        pending=Proposal.objects.filter(tenant=tenant, state=Proposal.State.PENDING).count(),
    )


def workspace_settings_update(
    *, caller: Caller, judgment_plane: bool, relevance_floor: float, write_policy: str,
    blocked_terms: Sequence[str], stale_policy: str | None = None,
) -> Tenant:
    """The workspace's settings; `stale_policy` unchanged when not given."""
    tenant = access.require_admin(caller)
    if stale_policy is not None and stale_policy not in Tenant.StalePolicy.values:
        raise InvalidArgument(f"Unknown policy for stale memories {stale_policy!r}.", field="stale_policy")
    if not 0.0 <= relevance_floor <= 1.0:
        raise InvalidArgument("The relevance floor is a score between 0 and 1.", field="relevance_floor")
    if write_policy not in Tenant.WritePolicy.values:
        raise InvalidArgument(f"Unknown write policy {write_policy!r}.", field="write_policy")
    terms = list(dict.fromkeys(term.strip() for term in blocked_terms if term.strip()))
    if len(terms) > BLOCKED_TERMS_MAX:
        raise InvalidArgument(f"At most {BLOCKED_TERMS_MAX} blocked terms.", field="blocked_terms")
    if any(len(term) > BLOCKED_TERM_MAX_CHARS for term in terms):
        raise InvalidArgument(f"A blocked term is at most {BLOCKED_TERM_MAX_CHARS} characters.",
                              field="blocked_terms")
    if write_policy == Tenant.WritePolicy.BLOCKLIST and not terms:
        raise InvalidArgument("The blocklist policy needs at least one blocked term.", field="blocked_terms")
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        tenant.judgment_plane = judgment_plane
        tenant.relevance_floor = relevance_floor
        tenant.write_policy = write_policy
        tenant.blocked_terms = terms
        tenant.stale_policy = stale_policy or tenant.stale_policy
        tenant.save(update_fields=["judgment_plane", "relevance_floor", "write_policy", "blocked_terms",
                                   "stale_policy"])
    return tenant
