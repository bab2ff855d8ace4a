"""THE authority: every decision of who may see or do what in memoryhub.

Nothing else decides. Views, the review console, the REST APIs, the MCP
adapter, management commands and tasks call the caller-first services, and the
services ask this module. docs/architecture.md keeps the table "decision ->
function here -> tests".

Who is asking
  `Caller` (a person, an agent, or the explicit `system_caller` a management
  command acts as), built only from a verified principal or a signed-in person:
  `caller_for_user`, `caller_for_agent`, `caller_from_principal`. `Operator` is
  whoever runs the deployment's commands (creating a workspace).

Whether a credential's holder is still entitled
  `token_holder`: one answer for the OAuth validator (refresh), the MCP token
  verifier, the token exchange and the ingestion API's authentication.
  `grantable_scopes`: what a client may ever be issued; `audience_refusal`:
  which scopes a token for the REST admin API, or for an MCP endpoint, may
  carry. `require_scope`: the operation -> scope table of the contract
  (`contract.scopes`). `admin_api_caller`: who a REST admin API token stands
  for, when they administer their workspace now.

What a caller may do
  `is_admin` / `require_admin` (workspace administration, the review console),
  `require_reviewer` / `require_decider` (proposals), `require_person`
  (receipts, forgetting, the memory pages), `owns_fragment` / `own_fragments`
  / `own_receipts` (owner rules, retired rows included).

What a caller may see
  The visibility rules are written once, below, as a small rule tree
  (`visibility_rule`, `narrowing_rule`) with two interpreters:

  * `Rule.q()` turns it into a Django `Q` that goes into the SQL of every
    index query (pgvector and full-text), so the indexes only hand back rows
    the caller may see;
  * `Rule.holds(facts)` evaluates it in Python against one loaded row, the
    check every row passes again before it is served.

  Both come from the same tree, so the two layers cannot drift apart; being
  separate interpreters (SQL vs Python), a bug in one is still caught by the
  other. `may_read_collection` asks the same tree about a collection, and
  `readable_documents` about documents: a fragment carries a document's title
  and URI only for a reader who may read that document.

The rules (decisions 4-7 of the spec):

* nothing crosses tenants;
* a private fragment is readable by its owner alone (owner_user for people,
  owner_agent for agents); a workspace admin sees no one else's private memory,
  and the system caller reads no memory at all;
* a shared fragment (it has a collection) is readable when one of the roles the
  caller holds *now* is granted that collection by an access rule;
* memory from a connected source (Fragment.source set, or contributed by an
  agent of kind "source") reaches an agent caller only when the caller names
  that source in `agents`, and never beyond the access rules;
* `agents`, `resource_ids`, `created_after/before` only narrow;
* as_of T: recorded_at <= T and (retired_at is null or retired_at > T).
  Access rules are always today's.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Collection as CollectionOf
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from django.contrib.postgres.expressions import ArraySubquery
from django.core.exceptions import ObjectDoesNotExist
from django.db import connection
from django.db.models import Exists, JSONField, Model, OuterRef, Q, QuerySet, Value
from django.utils import timezone

from contract.scopes import MEMORY_AUDIT, MEMORY_READ, MEMORY_SCOPES, MEMORY_WRITE, OPERATION_SCOPES
from memoryhub.database.lookups import Lookup
from memoryhub.database.replicas import read_connection
from memoryhub.errors import Conflict, PermissionDenied
from memoryhub.models import (
    TALLY_HOME,
    AccessRule,
    Agent,
    Collection,
    Fragment,
    Membership,
    Proposal,
    Resource,
    Role,
    Source,
    Tenant,
    User,
)

if TYPE_CHECKING:
    from oauth2_provider.models import Application

CallerKind = Literal["user", "agent", "system"]
M = TypeVar("M", bound=Model)

# Agents never see memory_receipt (decision 2).
AGENT_SCOPES = (MEMORY_READ, MEMORY_WRITE)
# A connected source's credential opens the ingestion API and nothing else.
INGEST_SCOPE = "ingest"
# The REST admin API: a person's client only, for the admin API's own resource
# only, and useful only while the person administers their workspace.
ADMIN_SCOPE = "workspace.admin"
# What a client people authorise may ask for.
PERSON_SCOPES = (*MEMORY_SCOPES, ADMIN_SCOPE)
__all__ = ["ADMIN_SCOPE", "AGENT_SCOPES", "INGEST_SCOPE", "MEMORY_AUDIT", "MEMORY_READ", "MEMORY_SCOPES",
           "MEMORY_WRITE", "PERSON_SCOPES"]


# --------------------------------------------------------------------------- callers


@dataclass(frozen=True)
class Caller:
    """Who is asking, as the domain sees it: built from a verified principal
    (or a signed-in person in the web console), never from tool arguments.

    kind "system" is the deployment acting on a workspace (a management
    command run by whoever operates it): it passes `require_admin` and reads
    no memory."""

    tenant: Tenant
    kind: CallerKind
    user: User | None = None
    agent: Agent | None = None
    client_id: str = ""
    # The subject the credential named; kept on receipts and alarms.
    subject: str = ""

    def __post_init__(self) -> None:
        if (self.kind == "user") != (self.user is not None) or (self.kind == "agent") != (self.agent is not None):
            raise ValueError("a caller is a person, an agent, or the system")
        if not self.subject:
            object.__setattr__(self, "subject", self.default_subject)

    @property
    def default_subject(self) -> str:
        # The same form the token verifier puts in a principal.
        return subject_of(user=self.user, agent=self.agent) if self.kind != "system" else "system"

    @property
    def principal_key(self) -> str:
        """A stable key for per-principal records (idempotency): ids, not names."""
        return principal_key_of(user=self.user, agent=self.agent)

    @property
    def display_name(self) -> str:
        if self.user is not None:
            return self.user.username
        if self.agent is not None:
            return self.agent.name
        return "system"


def principal_key_of(*, user: User | None = None, agent: Agent | None = None) -> str:
    if user is not None:
        return f"user:{user.pk}"
    if agent is not None:
        return f"agent:{agent.pk}"
    return "system"


def subject_of(*, user: User | None = None, agent: Agent | None = None) -> str:
    """The subject a principal is known by: "user:<login>" (unique within its
    workspace), "agent:<name>" or "source:<name>" (unique within it too)."""
    if user is not None:
        return f"user:{user.username}"
    assert agent is not None, "a subject is a person's or an agent's"
    return f"{'source' if agent.kind == Agent.Kind.SOURCE else 'agent'}:{agent.name}"


@dataclass(frozen=True)
class Operator:
    """Whoever runs the deployment's own commands (`manage.py`): the only one
    who creates workspaces. No interface reachable from the network has one."""

    name: str = "operator"


OPERATOR = Operator()


def system_caller(*, tenant: Tenant) -> Caller:
    """The explicit caller a management command acts as on `tenant` when no
    named admin is given. It administers; it never reads or writes memory."""
    return Caller(tenant=tenant, kind="system", client_id="manage.py")


def person_membership(user: User) -> Membership | None:
    """The membership that makes `user` a live person of their workspace, or None."""
    if not user.is_active or user.tenant_id is None:
        return None
    return _live_membership(user, one_row(Membership.objects.select_related("tenant").filter(user=user)))


def _live_membership(user: User, membership: Membership | None) -> Membership | None:
    """`membership` (the person's one membership, read with them or just now)
    when it makes `user` a live person of their workspace."""
    if membership is None or not user.is_active or user.tenant_id is None or membership.tenant_id != user.tenant_id:
        return None
    return membership


def _read_with(instance: Any, name: str) -> Any:
    """The one-to-one object `name` of `instance`, read with it (select_related), or None."""
    if instance is None or instance.pk is None:
        return None
    try:
        return getattr(instance, name)
    except ObjectDoesNotExist:
        return None


def caller_for_user(*, user: User, client_id: str = "", subject: str = "") -> Caller:
    """A person acting in their own workspace. Refuses people without one."""
    return _person_caller(user, person_membership(user), client_id=client_id, subject=subject)


def _person_caller(user: User, membership: Membership | None, *, client_id: str, subject: str) -> Caller:
    if membership is None:
        raise PermissionDenied("This person has no active place in a workspace.")
    return Caller(tenant=membership.tenant, kind="user", user=user, client_id=client_id, subject=subject)


def owner_for_export(operator: Caller, *, user: User) -> Caller:
    """The person `user` as the owner of their memory, for the export the
    deployment's operator makes for them (an access request), active or not:
    it reads exactly what they own and could download themselves."""
    require_system(operator)
    if user.tenant_id != operator.tenant.pk:
        raise PermissionDenied("This person is not of this workspace.")
    return Caller(tenant=operator.tenant, kind="user", user=user, client_id="manage.py")


def caller_for_agent(*, agent: Agent, client_id: str = "", subject: str = "") -> Caller:
    if agent.revoked_at is not None:
        raise PermissionDenied("This agent's access has been revoked.")
    if agent.kind != Agent.Kind.ASSISTANT:
        # A connected source's identity ingests; it never reads or writes memory as a caller.
        raise PermissionDenied("A connected source cannot search or write memory.")
    return Caller(tenant=agent.tenant, kind="agent", agent=agent, client_id=client_id, subject=subject)


def admin_named(*, tenant: Tenant, username: str, client_id: str = "") -> Caller:
    """The admin of `tenant` named `username`, as a caller (a command's `--as`);
    refused when there is no such live person or they do not administer it."""
    # iexact compares upper cases, the unique constraint lower ones: not a
    # unique key, so the oldest such person, as before.
    user = User.objects.filter(tenant=tenant, username__iexact=username).order_by("pk").first()
    if user is None:
        raise PermissionDenied(f"No person named {username!r} in this workspace.")
    caller = caller_for_user(user=user, client_id=client_id)
    require_admin(caller)
    return caller


# Finding a credential's caller, in one statement each, compiled once per
# connection and run prepared (memoryhub.database.lookups).
class _InWorkspace(Generic[M]):
    """A lookup of one of a workspace's rows, by the workspace a credential
    names: its id, or its slug when the value is not one (_workspace_id).
    `build(workspace, *values)`: the queryset, given the Q that finds the
    workspace's rows."""

    def __init__(self, build: Callable[..., QuerySet[M]], *kinds: type) -> None:
        self.by_id: Lookup[M] = Lookup(lambda pk, *values: build(Q(tenant_id=pk), *values), uuid.UUID, *kinds)
        self.by_slug: Lookup[M] = Lookup(lambda slug, *values: build(Q(tenant__slug=slug), *values), str, *kinds)

    def first(self, workspace: str, *values: Any) -> M | None:
        pk = _workspace_id(workspace)
        return self.by_id.first(pk, *values) if pk is not None else self.by_slug.first(workspace, *values)


_PERSON_IN_WORKSPACE: _InWorkspace[User] = _InWorkspace(
    lambda workspace, name: User.objects.select_related("membership__tenant").filter(workspace, username=name), str)
_AGENT_IN_WORKSPACE: _InWorkspace[Agent] = _InWorkspace(
    lambda workspace, client_id, name: Agent.objects.select_related("tenant").filter(
        workspace, application__client_id=client_id, name=name), str, str)


def caller_from_principal(*, tenant: str, subject: str, kind: str, client_id: str) -> Caller:
    """The domain caller for a verified token's principal.

    Subjects have the form `token_holder` gives them: "user:<username>" for a
    person, "agent:<name>" for an agent. An agent is found by the OAuth client
    its credentials belong to and must carry its own name as subject. Whatever
    the token says, the person or agent must belong to the token's tenant: a
    mismatch is refused, never resolved to someone else.
    """
    prefix, _, name = subject.partition(":")
    # One statement: the person with their membership and its workspace, or
    # the agent with its workspace; the workspace is looked up on its own only
    # to say why nobody was found.
    if kind == "user" and prefix == "user" and name:
        user = _PERSON_IN_WORKSPACE.first(tenant, name)
        if user is None:
            _tenant(tenant)
            raise PermissionDenied("The credential's person is not in this workspace.")
        membership = _live_membership(user, _read_with(user, "membership"))
        return _person_caller(user, membership, client_id=client_id, subject=subject)
    if kind == "agent" and prefix == "agent" and name and client_id:
        agent = _AGENT_IN_WORKSPACE.first(tenant, client_id, name)
        if agent is None:
            _tenant(tenant)
            raise PermissionDenied("The credential's agent is not registered in this workspace.")
        return caller_for_agent(agent=agent, client_id=client_id, subject=subject)
    raise PermissionDenied("The credential does not name a person or an agent of this workspace.")


def one_row(queryset: QuerySet[M]) -> M | None:
    """The row a lookup by a unique key finds, or None. Not `first()`, which
    orders by the primary key: a unique key has nothing to order, and the
    ordering cost the compiler and the planner more than the rest of a
    credential's lookup."""
    return next(iter(queryset[:1]), None)


def _workspace_id(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _tenant(value: str) -> Tenant:
    pk = _workspace_id(value)
    tenant = one_row(Tenant.objects.filter(pk=pk) if pk is not None else Tenant.objects.filter(slug=value))
    if tenant is None:
        raise PermissionDenied("The credential's workspace does not exist.")
    return tenant


# --------------------------------------------------------------------------- credentials: liveness and scopes


@dataclass(frozen=True)
class Holder:
    """Who an OAuth token stands for, while they are still entitled to it (a
    connected source's holder carries its Source as `agent.source`, read with
    it by `agent_of`; a token read with TOKEN_HOLDER_RELATED leaves it to be
    read when used)."""

    tenant: Tenant
    kind: Literal["user", "agent", "source"]
    user: User | None = None
    agent: Agent | None = None
    # The most this holder may hold today (a token's own scopes are cut to these).
    scopes: frozenset[str] = frozenset()

    @property
    def subject(self) -> str:
        return subject_of(user=self.user, agent=self.agent)


def agent_of(application: Application | None) -> Agent | None:
    """The agent or connected source whose client `application` is, if any."""
    if application is None or application.pk is None:
        return None
    return one_row(Agent.objects.select_related("tenant", "source").filter(application=application))


def _agent_scopes(agent: Agent) -> frozenset[str]:
    if agent.revoked_at is not None:
        return frozenset()
    if agent.kind == Agent.Kind.SOURCE:
        return agent.scope_set & {INGEST_SCOPE}
    return agent.scope_set & frozenset(AGENT_SCOPES)


def grantable_scopes(application: Application | None) -> frozenset[str]:
    """Everything `application` may ever be issued: a client people authorise
    may ask for the memory scopes and workspace.admin; an agent what its admin
    granted (never memory.audit, never workspace.admin); a connected source
    `ingest` only; a revoked one nothing. (With no application, discovery: the
    memory scopes.)"""
    from oauth2_provider.models import Application as ApplicationModel

    if application is None:
        return frozenset(MEMORY_SCOPES)
    agent = agent_of(application)
    if agent is not None:
        return _agent_scopes(agent)
    if application.authorization_grant_type == ApplicationModel.GRANT_AUTHORIZATION_CODE:
        return frozenset(PERSON_SCOPES)
    return frozenset()


def audience_refusal(scopes: CollectionOf[str], *, admin_api: bool, user: User | None = None,
                     before_consent: bool = False) -> str | None:
    """Why a token carrying `scopes` may not be issued (to `user`) for the REST
    admin API (admin_api) or for an MCP endpoint, or None. The two never mix: a
    token for the admin API carries workspace.admin alone, and a token for MCP
    never carries it, so neither opens the other. workspace.admin goes only to
    a live person who administers their workspace at that moment: at consent,
    at the code's exchange and at every refresh. (`before_consent`: the consent
    page is being drawn and nobody has answered it yet; the page asks again
    with the signed-in person and offers no Allow when refused.)"""
    if admin_api and set(scopes) != {ADMIN_SCOPE}:
        return f"A token for the REST admin API carries the {ADMIN_SCOPE} scope and nothing else."
    if not admin_api and ADMIN_SCOPE in scopes:
        return f"The {ADMIN_SCOPE} scope is issued only for the REST admin API's resource."
    if admin_api and not before_consent:
        membership = person_membership(user) if user is not None and user.is_authenticated else None
        if membership is None or not membership.is_admin:
            return f"Only a workspace's admins are issued the {ADMIN_SCOPE} scope."
    return None


# What a stored token is read with so that token_holder needs no statement of its own.
TOKEN_HOLDER_RELATED = ("application__agent__tenant", "user__membership__tenant")


def token_holder(*, application: Application | None, user: User | None, read_with_token: bool = False) -> Holder | None:
    """Who a token issued to `application` (for `user`, when a person
    authorised it) stands for now, or None when nobody is entitled to it any
    more: a revoked agent or source, a deactivated person, a person who left
    their workspace. Checked on every use of a token, not only when issued.
    `read_with_token`: the token was just read with TOKEN_HOLDER_RELATED, in
    the same statement, so its agent and membership are taken from it."""
    agent = _read_with(application, "agent") if read_with_token else agent_of(application)
    if agent is not None:
        if agent.revoked_at is not None:
            return None
        kind: Literal["agent", "source"] = "source" if agent.kind == Agent.Kind.SOURCE else "agent"
        return Holder(tenant=agent.tenant, kind=kind, agent=agent, scopes=_agent_scopes(agent))
    if application is None or user is None:
        return None
    membership = _live_membership(user, _read_with(user, "membership")) if read_with_token else person_membership(user)
    if membership is None:
        return None
    return Holder(tenant=membership.tenant, kind="user", user=user, scopes=frozenset(MEMORY_SCOPES))


def scopes_at_mcp(holder: Holder, granted: CollectionOf[str]) -> frozenset[str]:
    """What a token opens at the MCP endpoint: its memory scopes, cut to what
    its holder may hold today; nothing at all for a connected source's token."""
    if holder.kind == "source":
        return frozenset()
    return frozenset(granted) & holder.scopes & frozenset(MEMORY_SCOPES)


def exchangeable_scopes(held: CollectionOf[str], asked: CollectionOf[str], *, read_only: bool) -> frozenset[str]:
    """The scopes an edge's memory-service credential may carry: never more than
    the caller's token, and never memory.write from the read-only endpoint."""
    wanted = frozenset(asked) or frozenset(held)
    if not wanted <= frozenset(held):
        raise PermissionDenied("A credential never carries more than the subject token grants.")
    if read_only:
        wanted -= {MEMORY_WRITE}
    if not wanted:
        raise PermissionDenied("No memory scope is left to grant at this resource.")
    return wanted


def ingesting_source(*, application: Application | None, user: User | None,
                     granted: CollectionOf[str]) -> Source | None:
    """The connected source a token stands for when it may feed the ingestion
    API now: a live source whose admin grants `ingest`, with a token carrying it
    (a disabled one is then refused with `source_refusal`'s reason)."""
    holder = token_holder(application=application, user=user)
    if holder is None or holder.kind != "source" or INGEST_SCOPE not in holder.scopes:
        return None
    if INGEST_SCOPE not in granted:
        return None
    return getattr(holder.agent, "source", None)


def source_refusal(source: Source) -> str | None:
    """Why a connected source may not feed memory now (its admin disabled it), or None."""
    if source.disabled_at is not None:
        return ("This source is disabled by an admin of its workspace; nothing it sends is taken until it is "
                "enabled again.")
    return None


def admin_api_caller(*, application: Application | None, user: User | None, granted: CollectionOf[str],
                     client_id: str = "") -> Caller | None:
    """The caller a REST admin API token stands for, checked on every request:
    None when nobody is entitled to the token any more (a deactivated person,
    one who left their workspace) or it is not a person's; InsufficientScope
    without workspace.admin; PermissionDenied when the person does not
    administer their workspace now (one who stops being an admin is refused on
    their next request)."""
    holder = token_holder(application=application, user=user)
    if holder is None or holder.kind != "user" or holder.user is None:
        return None
    if ADMIN_SCOPE not in granted:
        raise InsufficientScope(ADMIN_SCOPE)
    caller = Caller(tenant=holder.tenant, kind="user", user=holder.user, client_id=client_id)
    require_admin(caller)
    return caller


def require_document_of(source: Source, resource: Resource | None) -> None:
    """A source changes only documents it sent (or ones no source owns yet)."""
    if resource is not None and resource.source_id not in (None, source.pk):
        raise Conflict(f"The resource id {resource.external_id!r} belongs to another source of this workspace.",
                       field="resource_id")


def require_scope(scopes: CollectionOf[str], operation: str) -> None:
    """Refuse `operation` to a credential without the scope it needs."""
    needed = OPERATION_SCOPES[operation]
    if needed is not None and needed not in scopes:
        raise InsufficientScope(needed)


class InsufficientScope(PermissionDenied):
    code = "insufficient_scope"

    def __init__(self, scope: str) -> None:
        super().__init__(f"This credential was not granted the {scope} scope.")
        self.scope = scope


# --------------------------------------------------------------------------- what a caller may do


def is_admin(caller: Caller) -> bool:
    """A workspace admin of the caller's own workspace (or the system caller)."""
    if caller.kind == "system":
        return True
    if caller.user is None:
        return False
    return Membership.objects.filter(user=caller.user, tenant=caller.tenant, is_admin=True).exists()


def require_admin(caller: Caller) -> Tenant:
    """Workspace administration and the review console: admins of this
    workspace only (agents never). Returns the workspace they administer."""
    if not is_admin(caller):
        raise PermissionDenied("Only a workspace admin can do this.")
    return caller.tenant


def require_receipt_auditor(caller: Caller) -> Tenant:
    """The workspace's receipt chain as a whole (its page, checkpoints and
    export): its admins. What they see of other people's reads is what an
    audit needs and no more: who read when, through which client, under which
    roles, the ids of what was served and keyed hashes; never a query or a
    value (the hashes are HMACs whose keys they are not shown)."""
    return require_admin(caller)


def require_operator(operator: Operator) -> None:
    if not isinstance(operator, Operator):
        raise PermissionDenied("Only the deployment's operator can do this.")


def require_system(caller: Caller) -> Tenant:
    """What only the deployment does to a workspace (seeding the demo, writing
    as its people): the system caller of a management command."""
    if caller.kind != "system":
        raise PermissionDenied("Only the deployment itself can do this.")
    return caller.tenant


def require_person(caller: Caller, *, what: str = "this") -> User:
    """Receipts, forgetting and the memory pages are people's (decision 2,
    contract 001: no deletion through an AI client)."""
    if caller.kind != "user" or caller.user is None:
        raise PermissionDenied(f"Only people can do {what}.")
    return caller.user


def is_reviewer(caller: Caller) -> bool:
    """Whether `require_reviewer` would let the caller in (a person's home page asks)."""
    return caller.kind != "agent" and is_admin(caller)


def may_review(caller: Caller, proposal: Proposal) -> bool:
    """A reviewer of the proposal's own workspace."""
    return is_reviewer(caller) and proposal.tenant_id == caller.tenant.pk


def require_reviewer(caller: Caller) -> Tenant:
    """Seeing the review queue and its previews: a workspace admin. Every
    fragment an agent owns became memory through this console's approval, so
    showing the agent's memory to the workspace's admins in a preview reveals
    nothing they were not already shown."""
    if caller.kind == "agent":
        raise PermissionDenied("Agents cannot review proposals; a workspace admin decides them.")
    return require_admin(caller)


def require_decider(caller: Caller, proposal: Proposal) -> None:
    """Approving or rejecting: a person who administers the proposal's
    workspace. (Its author is an agent, and agents decide nothing.)"""
    if caller.kind != "user":
        raise PermissionDenied("Agents cannot approve or reject proposals; a workspace admin decides them.")
    require_admin(caller)
    if proposal.tenant_id != caller.tenant.pk:
        raise PermissionDenied("This proposal belongs to another workspace.")


def owns_fragment(caller: Caller, fragment: Fragment) -> bool:
    """The owner rule: a fragment is one's own when one owns it privately, live
    or retired (retired rows are one's history, never anyone else's)."""
    if fragment.tenant_id != caller.tenant.pk:
        return False
    if caller.user is not None:
        return fragment.owner_user_id == caller.user.pk
    if caller.agent is not None:
        return fragment.owner_agent_id == caller.agent.pk
    return False


def own_fragments(caller: Caller) -> Q:
    """The caller's own private fragments, retired ones included (SQL form of `owns_fragment`)."""
    if caller.user is not None:
        return Q(tenant=caller.tenant, owner_user=caller.user)
    if caller.agent is not None:
        return Q(tenant=caller.tenant, owner_agent=caller.agent)
    return Q(pk__in=[])


def own_receipts(caller: Caller) -> Q:
    """The serving receipts one may reopen: one's own reads, a person's only
    (agents never see memory_receipt)."""
    user = require_person(caller, what="reopen receipts")
    return Q(tenant=caller.tenant, reader_user=user)


def proposals_for_review(caller: Caller) -> QuerySet[Proposal]:
    """The proposals a reviewer may open: those of their own workspace."""
    return Proposal.objects.filter(tenant=require_reviewer(caller))


def agent_memory_for_review(caller: Caller, agent: Agent) -> QuerySet[Fragment]:
    """An agent's private memory, as the review console shows it beside a
    proposal it would merge into or supersede (see `require_reviewer`)."""
    tenant = require_reviewer(caller)
    return Fragment.objects.filter(tenant=tenant, owner_agent=agent)


# --------------------------------------------------------------------------- role audience


@dataclass(frozen=True)
class Audience:
    """The roles a caller holds at the moment of a read (decision 5) and the
    collections today's access rules open to them."""

    role_names: tuple[str, ...]
    collection_ids: frozenset[int]


def role_audience(caller: Caller) -> Audience:
    """The caller's roles and the collections their access rules open, read
    in one statement."""
    if caller.kind == "system":
        return Audience(role_names=(), collection_ids=frozenset())
    # Where the read it is part of runs (a replica inside replicas.on_pool).
    with read_connection.cursor() as cursor:
        cursor.execute(*_held_roles_sql(caller.tenant.pk, _pk(caller.user), _pk(caller.agent)))
        return _audience_of_rows(cursor.fetchall())


def role_audience_sql(caller: Caller) -> tuple[str, list[Any]] | None:
    """role_audience as one SQL expression, for a statement that reads more
    than the audience (a search's first): a JSON array of [role name,
    [collection ids]]; audience_of reads its value. None for the system
    caller, whose audience is empty."""
    if caller.kind == "system":
        return None
    sql, params = _held_roles_sql(caller.tenant.pk, _pk(caller.user), _pk(caller.agent))
    return (f"(SELECT coalesce(jsonb_agg(jsonb_build_array(held.name, held.opened)), '[]'::jsonb) "  # noqa: S608 - Django's SQL
            f"FROM ({sql}) AS held(name, opened))", list(params))


def audience_of(value: str | list[Any]) -> Audience:
    """The Audience of a role_audience_sql value (JSON text, as Django has psycopg hand it over, or decoded)."""
    rows = json.loads(value) if isinstance(value, str) else value
    return _audience_of_rows(rows)


def _pk(instance: Model | None) -> Any:
    return instance.pk if instance is not None else None


def _held_roles(tenant_id: uuid.UUID, user_id: int | None, agent_id: int | None):  # type: ignore[no-untyped-def]
    """A caller's roles as (name, ids of the collections its access rules
    open), by the ids they are decided by: the person's, or else the agent's."""
    if user_id is not None:
        roles = Role.objects.filter(tenant_id=tenant_id, memberships__user_id=user_id,
                                    memberships__tenant_id=tenant_id)
    else:
        assert agent_id is not None
        roles = Role.objects.filter(tenant_id=tenant_id, agents__id=agent_id)
    opened = AccessRule.objects.filter(tenant_id=tenant_id, role=OuterRef("pk"), collection__tenant_id=tenant_id)
    return roles.annotate(opened=ArraySubquery(opened.values("collection_id"))).values_list("name", "opened")


@functools.lru_cache(maxsize=4096)
def _held_roles_sql(tenant_id: uuid.UUID, user_id: int | None, agent_id: int | None) -> tuple[str, tuple[Any, ...]]:
    """_held_roles' statement, compiled once per caller and kept (it holds
    nothing but these ids: what it reads is read when it runs), for
    role_audience and role_audience_sql alike. Compiling it took about a
    millisecond of every search."""
    sql, params = _held_roles(tenant_id, user_id, agent_id).query.sql_with_params()
    return sql, tuple(params)


def _audience_of_rows(held: Sequence[Sequence[Any]]) -> Audience:
    """The Audience of a caller's roles as (name, ids of the collections it
    opens, or None for none) rows, read by cursor or as JSON."""
    return Audience(role_names=tuple(sorted(name for name, _ in held)),
                    collection_ids=frozenset(pk for _, opened in held for pk in opened or ()))


def agent_ids_named(*, tenant: Tenant, names: Iterable[str]) -> frozenset[int]:
    """Agents (assistants or sources) of this tenant with these names. Unknown
    names match nothing: naming a stranger narrows, it never widens."""
    wanted = {name for name in names if name}
    if not wanted:
        return frozenset()
    return frozenset(Agent.objects.filter(tenant=tenant, name__in=wanted).values_list("id", flat=True))


# --------------------------------------------------------------------------- the rule tree

Facts = Mapping[str, Any]

# Many-to-many relations a rule may quantify over: name -> (through model, FK to the fragment).
_RELATIONS = {
    "agent_links": (Fragment.agents.through, "fragment_id"),
    "resource_links": (Fragment.resources.through, "fragment_id"),
}


class Rule:
    label = ""

    def q(self) -> Q:
        raise NotImplementedError

    def holds(self, facts: Facts) -> bool:
        raise NotImplementedError

    def first_failure(self, facts: Facts) -> str | None:
        """The label of the first clause that refuses these facts, or None."""
        return None if self.holds(facts) else (self.label or type(self).__name__)

    def facts_read(self) -> frozenset[str]:
        """The facts this rule reads: the columns it compares, the relations
        it looks into (and what it reads of their rows), its parts'. A field
        this does not know is taken to read a fact of its own name, so a new
        kind of rule is never taken to read less than it does."""
        read: set[str] = set()
        for item in fields(self):  # type: ignore[arg-type]
            value = getattr(self, item.name)
            if item.name in ("name", "relation"):
                read.add(value)
            elif item.name == "rule":
                read |= value.facts_read()
            elif item.name == "rules":
                for part in value:
                    read |= part.facts_read()
            elif item.name not in _NOT_FACTS:
                read.add(f"{type(self).__name__}.{item.name}")
        return frozenset(read)


# A rule's fields that hold what a fact is compared with, or its wording.
_NOT_FACTS = frozenset({"value", "values", "op", "label", "text"})


@dataclass(frozen=True)
class Eq(Rule):
    name: str
    value: Any

    def q(self) -> Q:
        return Q(**{self.name: self.value})

    def holds(self, facts: Facts) -> bool:
        return facts[self.name] is not None and facts[self.name] == self.value


@dataclass(frozen=True)
class In(Rule):
    name: str
    values: frozenset

    def q(self) -> Q:
        return Q(**{f"{self.name}__in": sorted(self.values, key=str)})

    def holds(self, facts: Facts) -> bool:
        return facts[self.name] is not None and facts[self.name] in self.values


@dataclass(frozen=True)
class NotIn(Rule):
    """Only for columns that are never NULL (SQL's NOT IN and Python's `not in`
    disagree on NULL)."""

    name: str
    values: frozenset

    def q(self) -> Q:
        return ~Q(**{f"{self.name}__in": sorted(self.values, key=str)})

    def holds(self, facts: Facts) -> bool:
        return facts[self.name] not in self.values


@dataclass(frozen=True)
class IsNull(Rule):
    name: str

    def q(self) -> Q:
        return Q(**{f"{self.name}__isnull": True})

    def holds(self, facts: Facts) -> bool:
        return facts[self.name] is None


@dataclass(frozen=True)
class Compare(Rule):
    name: str
    op: Literal["lte", "lt", "gt"]
    value: dt.datetime

    def q(self) -> Q:
        return Q(**{f"{self.name}__{self.op}": self.value})

    def holds(self, facts: Facts) -> bool:
        current = facts[self.name]
        if current is None:
            return False
        if self.op == "lte":
            return current <= self.value
        if self.op == "lt":
            return current < self.value
        return current > self.value


@dataclass(frozen=True)
class Some(Rule):
    """Some related row (agent link, resource link) satisfies `rule`."""

    relation: str
    rule: Rule

    def q(self) -> Q:
        through, fk = _RELATIONS[self.relation]
        return Q(Exists(through._default_manager.filter(Q(**{fk: OuterRef("pk")}) & self.rule.q())))

    def holds(self, facts: Facts) -> bool:
        return any(self.rule.holds(related) for related in facts[self.relation])


@dataclass(frozen=True)
class NoneOf(Rule):
    """No related row satisfies `rule`. The only negation the tree has: NOT
    EXISTS is two-valued in SQL, so both interpreters agree on it."""

    relation: str
    rule: Rule

    def q(self) -> Q:
        return ~Some(self.relation, self.rule).q()

    def holds(self, facts: Facts) -> bool:
        return not Some(self.relation, self.rule).holds(facts)


@dataclass(frozen=True)
class Nothing(Rule):
    """Refuses every row (the system caller's visibility)."""

    label: str = "reads no memory"

    def q(self) -> Q:
        return Q(pk__in=[])

    def holds(self, facts: Facts) -> bool:
        return False


@dataclass(frozen=True)
class And(Rule):
    rules: tuple[Rule, ...]
    label: str = ""

    def q(self) -> Q:
        combined = Q()
        for rule in self.rules:
            combined &= rule.q()
        return combined

    def holds(self, facts: Facts) -> bool:
        # A loop, not all() over a generator: a search checks its reader's rule
        # on each of about 80 rows, and with the generators' frames that took
        # 4.7 us a row against 3.2 (the row check's own rows, at 10k).
        for rule in self.rules:  # noqa: SIM110 - see above
            if not rule.holds(facts):
                return False
        return True

    def first_failure(self, facts: Facts) -> str | None:
        for rule in self.rules:
            failure = rule.first_failure(facts)
            if failure is not None:
                return f"{self.label}: {failure}" if self.label else failure
        return None


@dataclass(frozen=True)
class Or(Rule):
    rules: tuple[Rule, ...]
    label: str = ""

    def q(self) -> Q:
        if not self.rules:
            return Q(pk__in=[])
        combined = self.rules[0].q()
        for rule in self.rules[1:]:
            combined |= rule.q()
        return combined

    def holds(self, facts: Facts) -> bool:
        for rule in self.rules:  # noqa: SIM110 - a loop, as And.holds
            if rule.holds(facts):
                return True
        return False


@dataclass(frozen=True)
class Labelled(Rule):
    text: str
    rule: Rule

    def q(self) -> Q:
        return self.rule.q()

    def holds(self, facts: Facts) -> bool:
        return self.rule.holds(facts)

    def first_failure(self, facts: Facts) -> str | None:
        return None if self.rule.holds(facts) else self.text


# --------------------------------------------------------------------------- a rule compiled over a row


class _Writing:
    """A compiled check being written (compiled_check): where each fact is
    in the row, and the values the text names (its rules' values and the
    refusals it returns), each by a name of its own, never by its text."""

    def __init__(self, names: Sequence[str]) -> None:
        self.places = {name: index for index, name in enumerate(names)}
        self.constants: list[Any] = []

    def fact(self, name: str) -> str | None:
        column = ROW_FACT_NAMES.get(name)
        place = None if column is None else self.places.get(column)
        return None if place is None else f"v[{place}]"

    def constant(self, value: Any) -> str:
        self.constants.append(value)
        return f"k{len(self.constants) - 1}"


_COMPARED = {"lte": "<=", "lt": "<", "gt": ">"}


def _holds_text(rule: Rule, writing: _Writing) -> str | None:
    """`rule.holds` as one Python expression over the row `v`, or None when
    it reads what a row read by position does not hold as a fact (its linked
    rows) or is of a kind this does not know (a subclass included: it may
    hold otherwise)."""
    kind = type(rule)
    if kind in (And, Or):
        parts = [_holds_text(part, writing) for part in rule.rules]  # type: ignore[attr-defined]
        if any(part is None for part in parts):
            return None
        if not parts:
            return "True" if kind is And else "False"
        return "(" + (" and " if kind is And else " or ").join(parts) + ")"  # type: ignore[arg-type]
    if kind is Labelled:
        return _holds_text(rule.rule, writing)  # type: ignore[attr-defined]
    if kind is Nothing:
        return "False"
    if kind not in (Eq, In, NotIn, IsNull, Compare):
        return None
    fact = writing.fact(rule.name)  # type: ignore[attr-defined]
    if fact is None:
        return None
    if kind is IsNull:
        return f"({fact} is None)"
    if kind is NotIn:
        return f"({fact} not in {writing.constant(rule.values)})"  # type: ignore[attr-defined]
    if kind is In:
        return f"({fact} is not None and {fact} in {writing.constant(rule.values)})"  # type: ignore[attr-defined]
    if kind is Eq:
        return f"({fact} is not None and {fact} == {writing.constant(rule.value)})"  # type: ignore[attr-defined]
    compared = _COMPARED.get(rule.op)  # type: ignore[attr-defined]
    if compared is None:
        return None
    return f"({fact} is not None and {fact} {compared} {writing.constant(rule.value)})"  # type: ignore[attr-defined]


def _failure_lines(rule: Rule, prefix: str, writing: _Writing, lines: list[str]) -> bool:
    """Append to `lines` what `rule.first_failure` does, as statements that
    return the first refusal (after `prefix`, the labels of the Ands around
    it); False when some part cannot be written (_holds_text)."""
    if type(rule) is And:
        inner = f"{prefix}{rule.label}: " if rule.label else prefix
        return all(_failure_lines(part, inner, writing, lines) for part in rule.rules)
    holds = _holds_text(rule, writing)
    if holds is None:
        return False
    refused = rule.text if type(rule) is Labelled else (rule.label or type(rule).__name__)  # type: ignore[attr-defined]
    if not isinstance(refused, str):  # the interpreter returns it as it is
        return False
    lines.append(f"if not {holds}: return {writing.constant(prefix + refused)}")
    return True


def compiled_check(rule: Rule, names: Sequence[str]) -> Callable[[Sequence[Any]], str | None] | None:
    """`rule.first_failure` of a row read by position in the order of
    `names` (the facts of a FragmentValues of those names, ROW_FACT_NAMES),
    as Python written for it: each clause in order, each fact read where it
    is in the row, returning the same refusal. None when the rule reads what
    such a row does not hold as a fact (its linked rows), holds a kind of
    rule it does not know or a refusal that is not text, or is nested deeper
    than Python compiles, or when the row lacks a fact. Checking a search's
    candidates was mostly walking the rule's objects and building each row's
    facts."""
    writing = _Writing(names)
    if not set(ROW_FACT_NAMES.values()) <= writing.places.keys():
        return None  # fragment_facts reads every fact, and fails on such a row whatever the rule reads
    lines: list[str] = []
    try:
        if not _failure_lines(rule, "", writing, lines):
            return None
        make = _check_maker("".join(f"        {line}\n" for line in lines), len(writing.constants))
    except (RecursionError, SyntaxError):  # a rule nested deeper than Python's parser or stack goes
        return None
    return make(*writing.constants)


@functools.lru_cache(maxsize=512)
def _check_maker(body: str, count: int) -> Callable[..., Callable[[Sequence[Any]], str | None]]:
    """The function that makes a check of this body given its `count`
    values: compiled once for each shape of rule and row, whatever the
    values (a reader's workspace, roles and instant)."""
    values = ", ".join(f"k{index}" for index in range(count))
    text = f"def make({values}):\n    def check(v):\n{body}        return None\n    return check\n"
    namespace: dict[str, Any] = {}
    # The text holds only places in the row, the values' names and Python's
    # operators (_holds_text, _failure_lines): nothing of a value is in it.
    exec(compile(text, "<access rule>", "exec"), namespace)  # noqa: S102
    return namespace["make"]  # type: ignore[no-any-return]


def as_of_rule(as_of: dt.datetime) -> Rule:
    """Decision 7: visible at T when recorded at or before T and not retired at or before T."""
    return Labelled(
        "not live at as_of",
        And((Compare("recorded_at", "lte", as_of), Or((IsNull("retired_at"), Compare("retired_at", "gt", as_of))))),
    )


# A fragment's home: its workspace and exactly one of its collection, its
# owning person or its owning agent (models.FragmentTally's keys).
HOME_FACTS = frozenset(TALLY_HOME)


def tally_corrections(as_of: dt.datetime) -> tuple[Rule, Rule]:
    """Where a tally of the live fragments (retired_at unset, models.FragmentTally)
    and `as_of_rule(as_of)` disagree: the rows it counts that are not live at
    `as_of` (recorded after it, not retired), and the rows live at `as_of` that
    it does not count (recorded by it, retired after it). Live at `as_of` is
    exactly: counted and not the first, or the second
    (tests/memory/test_tallies.py checks it row by row)."""
    return (And((IsNull("retired_at"), Compare("recorded_at", "gt", as_of))),
            And((Compare("recorded_at", "lte", as_of), Compare("retired_at", "gt", as_of))))


def visibility_rule(
    *, caller: Caller, audience: Audience, as_of: dt.datetime, named_agent_ids: frozenset[int] = frozenset()
) -> Rule:
    """What this caller may see at `as_of`, before any narrowing filter."""
    if caller.kind == "system":
        return Nothing()
    readable = In("collection_id", audience.collection_ids)
    clauses: list[Rule] = [Labelled("other tenant", Eq("tenant_id", caller.tenant.pk)), as_of_rule(as_of)]
    if caller.user is not None:
        clauses.append(Labelled("not owner and no role reads its collection",
                                Or((Eq("owner_user_id", caller.user.pk), readable))))
    else:
        assert caller.agent is not None
        clauses.append(Labelled("not owner and no role reads its collection",
                                Or((Eq("owner_agent_id", caller.agent.pk), readable))))
        # Decision 6: an agent reads a connected source's memory only when it names that source.
        clauses.append(Labelled("connected source not named in agents", And((
            Or((IsNull("source_id"), In("source__agent_id", named_agent_ids))),
            NoneOf("agent_links", And((Eq("agent__kind", Agent.Kind.SOURCE), NotIn("agent_id", named_agent_ids)))),
        ))))
    return And(tuple(clauses))


def narrowing_rule(
    *,
    named_agent_ids: frozenset[int] | None = None,
    resource_ids: Sequence[str] = (),
    created_after: dt.datetime | None = None,
    created_before: dt.datetime | None = None,
) -> Rule:
    """The caller's filters. Each only removes rows; none can add one."""
    clauses: list[Rule] = []
    if named_agent_ids is not None:
        clauses.append(Labelled("not contributed by the named agents", Or((
            In("source__agent_id", named_agent_ids),
            Some("agent_links", In("agent_id", named_agent_ids)),
        ))))
    if resource_ids:
        clauses.append(Labelled("not about the named resources",
                                Some("resource_links", In("resource__external_id", frozenset(resource_ids)))))
    if created_after is not None:
        clauses.append(Labelled("created before created_after", Compare("created_at", "gt", created_after)))
    if created_before is not None:
        clauses.append(Labelled("created after created_before", Compare("created_at", "lt", created_before)))
    return And(tuple(clauses))


@dataclass(frozen=True)
class ReadPolicy:
    """Everything one read is allowed to return: visibility AND the caller's filters."""

    caller: Caller
    audience: Audience
    as_of: dt.datetime
    visibility: Rule
    narrowing: Rule
    named_agent_ids: frozenset[int] = frozenset()
    rule: Rule = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rule", And((self.visibility, self.narrowing)))

    def queryset_filter(self) -> Q:
        """Layer 1: the predicate every index query carries."""
        return self.rule.q()

    def refusal(self, fragment: Fragment | FragmentValues) -> str | None:
        """Layer 2: why this loaded row may not be served, or None when it may."""
        return self.rule.first_failure(fragment_facts(fragment, links=self.reads_links))

    def row_check(self, names: Sequence[str], *, row: Callable[[Sequence[Any]], FragmentValues] | None = None,
                  ) -> Callable[[Sequence[Any]], str | None]:
        """Layer 2 for rows read by position, in the order of `names` (a
        search's row check reads every candidate so): a row's refusal, as
        `refusal` gives it of the same row read as values (`row` builds
        those; FragmentValues.of_row by default). The rule is written once
        into Python that reads each fact where it is in the row
        (compiled_check); a rule that reads more than a row's own facts (its
        linked rows, or a kind of rule compiled_check does not know) is
        interpreted, each row built with `row`, as `refusal` does."""
        check = compiled_check(self.rule, names)
        if check is not None:
            return check
        build = row or (lambda values: FragmentValues.of_row(names, values))

        def interpreted(values: Sequence[Any]) -> str | None:
            return self.refusal(build(values))

        return interpreted

    @functools.cached_property
    def reads_links(self) -> bool:
        """Whether the rule reads a fragment's linked agents or documents (an
        agent's read, or a read filtered by agents or documents): the facts
        of a row that cost the most to build are built only for such a read.
        A kind of rule facts_read does not know (it names what such a rule
        reads after its class) is taken to read them. A rule that asks for
        them where they were not built is refused them with an error, never
        passed a row (_WithoutLinks)."""
        read = self.rule.facts_read()
        return bool(read & _LINK_FACTS) or any("." in fact for fact in read)

    def tallied(self) -> Rule | None:
        """What this read may see apart from time, when that reads nothing but
        a fragment's home (HOME_FACTS, the keys of models.FragmentTally under
        the same names), so the reader's totals can be summed from the tallies
        and corrected to `as_of` (tally_corrections). Derived from the
        visibility rule itself: its clauses but `as_of_rule`, or None when any
        of them reads more (an agent's read also reads the connected sources
        it names) or when the read is narrowed (the filters read each row)."""
        if self.narrowing != And(()) or not isinstance(self.visibility, And):
            return None
        time = as_of_rule(self.as_of)
        rest = tuple(rule for rule in self.visibility.rules if rule != time)
        if len(rest) != len(self.visibility.rules) - 1 or not all(rule.facts_read() <= HOME_FACTS for rule in rest):
            return None
        return And(rest)

    def at(self, instant: dt.datetime) -> ReadPolicy | None:
        """The same read as of `instant`: its visibility's time clause
        (as_of_rule) at that instant, every other clause and filter as they
        are; None when its visibility has no one such clause."""
        time = as_of_rule(self.as_of)
        if not isinstance(self.visibility, And) or self.visibility.rules.count(time) != 1:
            return None
        visibility = And(tuple(as_of_rule(instant) if rule == time else rule for rule in self.visibility.rules),
                         self.visibility.label)
        return ReadPolicy(caller=self.caller, audience=self.audience, as_of=instant, visibility=visibility,
                          narrowing=self.narrowing, named_agent_ids=self.named_agent_ids)

    def unnarrowed(self) -> ReadPolicy:
        """The same read without the caller's filters (what is visible at all)."""
        return ReadPolicy(caller=self.caller, audience=self.audience, as_of=self.as_of, visibility=self.visibility,
                          narrowing=And(()), named_agent_ids=self.named_agent_ids)


def read_policy(
    *,
    caller: Caller,
    as_of: dt.datetime,
    agents: Sequence[str] = (),
    resource_ids: Sequence[str] = (),
    created_after: dt.datetime | None = None,
    created_before: dt.datetime | None = None,
    audience: Audience | None = None,
) -> ReadPolicy:
    if caller.kind == "system":
        raise PermissionDenied("The system caller administers workspaces; it reads no memory.")
    audience = audience or role_audience(caller)
    named = agent_ids_named(tenant=caller.tenant, names=agents)
    return ReadPolicy(
        caller=caller,
        audience=audience,
        as_of=as_of,
        visibility=visibility_rule(caller=caller, audience=audience, as_of=as_of, named_agent_ids=named),
        narrowing=narrowing_rule(
            named_agent_ids=named if agents else None,
            resource_ids=resource_ids,
            created_after=created_after,
            created_before=created_before,
        ),
        named_agent_ids=named,
    )


# The facts fragment_facts builds from a fragment's linked rows.
_LINK_FACTS = frozenset({"agent_links", "resource_links"})


class _WithoutLinks(dict):  # type: ignore[type-arg]
    """A row's facts built without its linked rows' (for a rule that reads
    none): a rule that asks for them anyway, however it asks, gets an error,
    never a row passed for want of them."""

    def __missing__(self, key: str) -> Any:
        raise KeyError(f"{key}: this row's facts were built without its linked rows")

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in _LINK_FACTS else super().get(key, default)

    def __contains__(self, key: object) -> bool:
        if key in _LINK_FACTS:
            self.__missing__(str(key))
        return super().__contains__(key)


# A fragment's own columns fragment_facts gives as facts of the same names;
# with them, its key (`pk`) and its source's agent (`source__agent_id`).
_OWN_FACTS = ("tenant_id", "owner_user_id", "owner_agent_id", "collection_id", "source_id",
              "recorded_at", "retired_at", "created_at")

# Where each fact fragment_facts gives of a row read as values (FragmentValues)
# is, by the name of the row's value: what a compiled check reads (row_check).
ROW_FACT_NAMES: Mapping[str, str] = MappingProxyType(
    {"pk": "id", **{name: name for name in _OWN_FACTS}, "source__agent_id": "facts_source_agent_id"})


def fragment_facts(fragment: Fragment | FragmentValues, *, links: bool = True) -> dict[str, Any]:
    """The row as the rule tree reads it. Load fragments with
    `with_access_facts()`, or read them as values with `fact_columns`, so
    this costs no extra queries. `links`: False leaves out the linked rows'
    facts (_LINK_FACTS), for a rule that does not read them."""
    facts = {"pk": fragment.pk, **{name: getattr(fragment, name) for name in _OWN_FACTS},
             "source__agent_id": _source_agent_id(fragment)}
    if links:
        facts.update(_link_facts(fragment))
        return facts
    return _WithoutLinks(facts)


def _source_agent_id(fragment: Fragment | FragmentValues) -> int | None:
    if isinstance(fragment, FragmentValues):  # read with fact_columns
        return fragment.facts_source_agent_id  # type: ignore[no-any-return]
    return fragment.source.agent_id if fragment.source is not None else None


def _link_facts(fragment: Fragment | FragmentValues) -> dict[str, Any]:
    if isinstance(fragment, FragmentValues):  # read with fact_columns
        return {
            "agent_links": [{"agent_id": row["id"], "agent__kind": row["kind"]} for row in fragment.facts_agents or ()],
            "resource_links": [{"resource__external_id": row["external_id"]} for row in fragment.facts_resources or ()],
        }
    return {
        "agent_links": [{"agent_id": a.pk, "agent__kind": a.kind} for a in fragment.agents.all()],
        "resource_links": [{"resource__external_id": r.external_id} for r in fragment.resources.all()],
    }


def _collection_facts(collection: Collection, instant: dt.datetime) -> dict[str, Any]:
    """The facts of a live fragment of `collection` contributed by no connected
    source: what "may read this collection" means in the rule tree's terms."""
    return {
        "pk": None, "tenant_id": collection.tenant_id, "owner_user_id": None, "owner_agent_id": None,
        "collection_id": collection.pk, "source_id": None, "source__agent_id": None,
        "recorded_at": instant, "retired_at": None, "created_at": instant,
        "agent_links": [], "resource_links": [],
    }


def with_access_facts(queryset):  # type: ignore[no-untyped-def]
    """`queryset` with what `fragment_facts` reads of a model instance:
    its source's agent in the same statement, its agents and documents
    prefetched. A read of many rows reads them as values instead
    (FragmentValues, fact_columns)."""
    return queryset.select_related("source__agent").prefetch_related("agents", "resources")


@dataclass(frozen=True)
class FactColumn:
    """One column fragment_facts reads of a FragmentValues besides the
    fragment's own: its name (the attribute), its SQL, and the expression
    Django reads its value as (whose converters apply to it)."""

    name: str
    sql: str
    expression: Any


def fact_columns(source: str) -> tuple[FactColumn, ...]:
    """What fragment_facts reads of a FragmentValues besides the fragment's
    own columns, over the fragment's table (unaliased) with its source joined
    as `source`: the source's agent, and the linked agents and documents as
    JSON arrays of whole rows (_linked_rows_sql)."""
    agent = Source._meta.get_field("agent")
    linked = Value(None, output_field=JSONField())
    return (
        FactColumn("facts_source_agent_id", f"{source}.{connection.ops.quote_name(str(agent.column))}",
                   agent.get_col(source)),  # type: ignore[union-attr]
        FactColumn("facts_agents", _linked_rows_sql("agents"), linked),
        FactColumn("facts_resources", _linked_rows_sql("resources"), linked),
    )


class FragmentValues:
    """A fragment read as values: its columns by their attribute names, `pk`,
    and its access facts by the names fact_columns gives them. fragment_facts
    reads it as it reads the model, so a read that checks many rows and serves
    a few (search's row check) builds model instances for those only.

    `later`: the names of values kept as the database sent them, converted
    by `convert(name, value)` when first read (a row's JSON, most of which a
    check that refuses or does not serve the row never reads)."""

    def __init__(self, values: dict[str, Any], *, later: Sequence[str] = (),
                 convert: Callable[[str, Any], Any] | None = None) -> None:
        self._fill(tuple(values), values.values(), later, convert)

    @classmethod
    def of_row(cls, names: Sequence[str], values: Iterable[Any], *, later: Sequence[str] = (),
               convert: Callable[[str, Any], Any] | None = None) -> FragmentValues:
        """A row read by position: `values` in the order of `names`. The same
        as building one from a dict of them, without the dict: a search's row
        check builds one for every candidate."""
        row = cls.__new__(cls)
        row._fill(names, values, later, convert)
        return row

    def _fill(self, names: Sequence[str], values: Iterable[Any], later: Sequence[str],
              convert: Callable[[str, Any], Any] | None) -> None:
        state = self.__dict__
        state.update(zip(names, values, strict=True))
        state["pk"] = state["id"]
        if later:
            assert convert is not None
            state["_later"] = {name: state.pop(name) for name in later}
            state["_read"], state["_convert"] = names, convert

    def __getattr__(self, name: str) -> Any:
        # Reached only for a name not yet read as a value: one still as the
        # database sent it, or one that was not read (declared too so that
        # type checkers accept reading the columns as attributes).
        later = self.__dict__.get("_later")
        if later is None or name not in later:
            raise AttributeError(name)
        value = self.__dict__[name] = self._convert(name, later[name])
        del later[name]
        return value

    def converted(self) -> dict[str, Any]:
        """Every value read, by name in the order read, each converted."""
        read = self.__dict__.get("_read")
        if read is None:
            return {name: value for name, value in self.__dict__.items() if name != "pk"}
        return {name: getattr(self, name) for name in read}


@functools.cache
def _linked_rows_sql(name: str) -> str:
    """A fragment's linked agents or documents, each row whole, as one JSON
    array (by id; NULL when it links none), read with the fragment. It names
    the fragment table as the outermost query does: use it in a statement
    whose FROM names that table unaliased, never nested as a subquery."""
    # Written once from the models' names: compiling the same subquery
    # through the ORM for every search cost more than the rest of the row
    # check's Python.
    def quote(value: object) -> str:
        return connection.ops.quote_name(str(value))

    relation = Fragment._meta.get_field(name)
    through, model = relation.remote_field.through, relation.related_model  # type: ignore[union-attr]
    assert model is not None
    link_column = quote(through._meta.get_field(model._meta.model_name).column)  # type: ignore[union-attr]
    own_column = quote(through._meta.get_field("fragment").column)  # type: ignore[union-attr]
    pairs = ", ".join(f"'{item.attname}', t.{quote(item.column)}" for item in model._meta.concrete_fields)
    key = quote(model._meta.pk.column)  # type: ignore[union-attr]
    fragment_key = f"{quote(Fragment._meta.db_table)}.{quote(Fragment._meta.pk.column)}"  # type: ignore[union-attr]
    # json, not jsonb: nothing is looked up in it before Python reads it, and
    # building jsonb (parsed and sorted key by key) took a third of the row
    # check's execution. As text, as Django reads a JSONField's jsonb.
    return (f"(SELECT json_agg(json_build_object({pairs}) ORDER BY t.{key})::text "  # noqa: S608 - our models' names
            f"FROM {quote(through._meta.db_table)} AS l JOIN {quote(model._meta.db_table)} AS t "
            f"ON t.{key} = l.{link_column} WHERE l.{own_column} = {fragment_key})")


def fragment_readable(*, policy: ReadPolicy, fragment: Fragment) -> bool:
    return policy.refusal(fragment) is None


def visible_fragments(policy: ReadPolicy) -> QuerySet[Fragment]:
    """The queryset of everything this read may return (both layers still apply
    to what is served from it)."""
    return Fragment.objects.filter(policy.queryset_filter())


def fragments_shown_to(caller: Caller, fragments: Iterable[Fragment]) -> list[Fragment]:
    """Of these fragments (loaded with `with_access_facts`), the ones a
    person's pages may show: their own (live or retired), or ones today's
    access rules let them read now."""
    shown, policy = [], None
    for fragment in fragments:
        if owns_fragment(caller, fragment):
            shown.append(fragment)
        elif caller.kind != "system":
            policy = policy or read_policy(caller=caller, as_of=timezone.now())
            if fragment_readable(policy=policy, fragment=fragment):
                shown.append(fragment)
    return shown


def may_read_collection(caller: Caller, collection: Collection, *, audience: Audience | None = None) -> bool:
    """Whether `caller` may read the shared memory of `collection` now (the
    admin's two checks, "who can read this" and "what can this person read")."""
    if caller.kind == "system" or collection.tenant_id != caller.tenant.pk:
        return False
    instant = timezone.now()
    rule = visibility_rule(caller=caller, audience=audience or role_audience(caller), as_of=instant)
    return rule.holds(_collection_facts(collection, instant))


# --------------------------------------------------------------------------- the audience of a fact


@dataclass(frozen=True)
class Reader:
    kind: str  # "person" or "agent"
    name: str
    roles: tuple[str, ...]  # the roles that give them the right (none for an owner)
    user_id: int | None = None


@dataclass(frozen=True)
class FactAudience:
    """Who may read a fact kept in one place: private memory (its owner alone)
    or a collection (whoever today's access rules let read it)."""

    private: bool
    readers: tuple[Reader, ...]
    # A collection's: the roles its rules name, held by someone or not.
    granting_roles: tuple[str, ...] = ()


def fact_audience(
    caller: Caller, *, collection: Collection | None = None, owner_user: User | None = None,
    owner_agent: Agent | None = None,
) -> FactAudience:
    """Who could read a fact kept in `collection`, or privately by its owner,
    now: the same rule tree every read obeys (`may_read_collection`), asked
    for each active person and assistant agent of the workspace. Connected
    sources are writers, never readers. For a workspace's admins (the access
    page, the review console), who may see the members and rules anyway."""
    tenant = require_admin(caller)
    if collection is None:
        if owner_user is not None and owner_user.tenant_id == tenant.pk:
            return FactAudience(private=True, readers=(Reader(kind="person", name=owner_user.username, roles=(),
                                                              user_id=owner_user.pk),))
        if owner_agent is not None and owner_agent.tenant_id == tenant.pk:
            return FactAudience(private=True, readers=(Reader(kind="agent", name=owner_agent.name, roles=()),))
        raise PermissionDenied("A private fact's owner must belong to this workspace.")
    if collection.tenant_id != tenant.pk:
        raise PermissionDenied("This collection belongs to another workspace.")
    granting = tuple(sorted(AccessRule.objects.filter(tenant=tenant, collection=collection)
                            .values_list("role__name", flat=True)))
    candidates: list[tuple[Caller, Reader]] = []
    memberships = (Membership.objects.filter(tenant=tenant, user__tenant=tenant, user__is_active=True)
                   .select_related("user", "tenant").order_by("user__username"))
    for membership in memberships:
        candidates.append((caller_for_user(user=membership.user),
                           Reader(kind="person", name=membership.user.username, roles=(), user_id=membership.user_id)))
    for agent in Agent.objects.filter(tenant=tenant, kind=Agent.Kind.ASSISTANT, revoked_at__isnull=True).order_by(
            "name"):
        candidates.append((caller_for_agent(agent=agent), Reader(kind="agent", name=agent.name, roles=())))
    readers = []
    for reader_caller, reader in candidates:
        audience = role_audience(reader_caller)
        if may_read_collection(reader_caller, collection, audience=audience):
            readers.append(Reader(kind=reader.kind, name=reader.name, user_id=reader.user_id,
                                  roles=tuple(name for name in audience.role_names if name in granting)))
    return FactAudience(private=False, readers=tuple(readers), granting_roles=granting)


# --------------------------------------------------------------------------- documents


def readable_documents(
    caller: Caller, resource_ids: Iterable[int], *, named_agent_ids: frozenset[int] = frozenset(),
    audience: Audience | None = None, as_of: dt.datetime | None = None,
) -> frozenset[int]:
    """Of these documents (Resource ids), the ones `caller` may read now: a live
    shared fragment of the document is visible to them under today's rules
    (with `as_of`: a fragment live at that instant, still under today's rules;
    how a deleted document is judged, memoryhub.services.provenance).

    A fragment carries a document's title and URI only for a reader who may
    read the document, both when a write is linked to a document (enrichment)
    and again whenever it is served, so a reader who loses the collection stops
    seeing the title at once. Everyone else gets the id the writer gave and
    nothing else: an unknown id and a forbidden one look the same."""
    wanted = frozenset(resource_ids)
    if not wanted or caller.kind == "system":
        return frozenset()
    rule = visibility_rule(caller=caller, audience=audience or role_audience(caller), as_of=as_of or timezone.now(),
                           named_agent_ids=named_agent_ids)
    links = Fragment.resources.through.objects.filter(
        resource_id__in=sorted(wanted),
        fragment__in=Fragment.objects.filter(rule.q(), collection__isnull=False).values("pk"),
    )
    return frozenset(links.values_list("resource_id", flat=True).distinct())


def document_history_told(
    caller: Caller, *, changed: Iterable[int], deleted: Mapping[int, dt.datetime], instant: dt.datetime,
    named_agent_ids: frozenset[int] = frozenset(), audience: Audience | None = None,
) -> frozenset[int]:
    """Of the documents linked to memories `caller` is served, those whose
    history by `instant` the caller may be told (a memory resting on them is
    then served stale or ungrounded): a change, when the caller may read the
    document at `instant`; a deletion, when they could read it just before it
    was deleted (both under today's rules). Nobody learns anything of a
    document they may not read."""
    told = set(readable_documents(caller, changed, named_agent_ids=named_agent_ids, audience=audience,
                                  as_of=instant)) if changed else set()
    for pk, deleted_at in deleted.items():
        just_before = deleted_at - dt.timedelta(microseconds=1)
        told |= readable_documents(caller, [pk], named_agent_ids=named_agent_ids, audience=audience,
                                   as_of=just_before)
    return frozenset(told)


def document_to_link(caller: Caller, reference: str) -> Resource | None:
    """The document of the caller's workspace that `reference` (an external id or
    a URI the writer gave) names, when the caller may read it; else None."""
    if not reference:
        return None
    candidates = list(
        Resource.objects.filter(tenant=caller.tenant, deleted_at__isnull=True)
        .filter(Q(external_id=reference) | Q(uri=reference)).order_by("pk")
    )
    readable = readable_documents(caller, [resource.pk for resource in candidates])
    return next((resource for resource in candidates if resource.pk in readable), None)
