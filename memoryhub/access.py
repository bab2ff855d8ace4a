"""THE visibility rules of memoryhub, in one place.

Who may see which fragment is written once, below, as a small rule tree
(`visibility_rule`, `narrowing_rule`). The tree has two interpreters:

* `Rule.q()` turns it into a Django `Q` that goes into the SQL of every index
  query (pgvector and full-text), so the indexes only ever hand back rows the
  caller may see;
* `Rule.holds(facts)` evaluates it in Python against one loaded row, the check
  every row passes again before it is served.

Because both come from the same tree, the two layers cannot drift apart by
someone editing one and forgetting the other; because they are separate
interpreters (SQL vs Python), a bug or a bypass in one is still caught by the
other. Tests prove each layer on its own.

The rules (decisions 4-7 of the spec):

* nothing crosses tenants;
* a private fragment is readable by its owner alone (owner_user for people,
  owner_agent for agents); a workspace admin sees no one else's private memory;
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
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from django.db.models import Exists, OuterRef, Q

from memoryhub.errors import PermissionDenied
from memoryhub.models import AccessRule, Agent, Fragment, Membership, Role, Tenant, User

CallerKind = Literal["user", "agent"]


# --------------------------------------------------------------------------- callers


@dataclass(frozen=True)
class Caller:
    """Who is asking, as the domain sees it: built from a verified principal
    (or a logged-in person in the web console), never from tool arguments."""

    tenant: Tenant
    kind: CallerKind
    user: User | None = None
    agent: Agent | None = None
    client_id: str = ""
    # The subject the credential named; kept on receipts and alarms.
    subject: str = ""

    def __post_init__(self) -> None:
        if (self.kind == "user") != (self.user is not None) or (self.kind == "agent") != (self.agent is not None):
            raise ValueError("a caller is either a person or an agent")
        if not self.subject:
            object.__setattr__(self, "subject", self.default_subject)

    @property
    def default_subject(self) -> str:
        # The same form memoryhub.token_verifier puts in a principal.
        if self.user is not None:
            return f"user:{self.user.username}"
        assert self.agent is not None
        return f"agent:{self.agent.name}"

    @property
    def principal_key(self) -> str:
        """A stable key for per-principal records (idempotency): ids, not names."""
        if self.user is not None:
            return f"user:{self.user.pk}"
        assert self.agent is not None
        return f"agent:{self.agent.pk}"

    @property
    def display_name(self) -> str:
        if self.user is not None:
            return self.user.username
        assert self.agent is not None
        return self.agent.name


def caller_for_user(*, user: User, client_id: str = "", subject: str = "") -> Caller:
    """A person acting in their own workspace. Refuses people without one."""
    if not user.is_active or user.tenant_id is None:
        raise PermissionDenied("This person has no active place in a workspace.")
    membership = Membership.objects.select_related("tenant").filter(user=user, tenant_id=user.tenant_id).first()
    if membership is None:
        raise PermissionDenied("This person is not a member of their workspace.")
    return Caller(tenant=membership.tenant, kind="user", user=user, client_id=client_id, subject=subject)


def caller_for_agent(*, agent: Agent, client_id: str = "", subject: str = "") -> Caller:
    if agent.revoked_at is not None:
        raise PermissionDenied("This agent's access has been revoked.")
    if agent.kind != Agent.Kind.ASSISTANT:
        # A connected source's identity ingests; it never reads or writes memory as a caller.
        raise PermissionDenied("A connected source cannot search or write memory.")
    return Caller(tenant=agent.tenant, kind="agent", agent=agent, client_id=client_id, subject=subject)


def caller_from_principal(*, tenant: str, subject: str, kind: str, client_id: str) -> Caller:
    """The domain caller for a verified token's principal.

    Subjects have the form memoryhub.token_verifier gives them: "user:<username>"
    for a person, "agent:<name>" for an agent. An agent is found by the OAuth
    client its credentials belong to and must carry its own name as subject.
    Whatever the token says, the person or agent must belong to the token's
    tenant: a mismatch is refused, never resolved to someone else.
    """
    tenant_obj = _tenant(tenant)
    prefix, _, name = subject.partition(":")
    if kind == "user" and prefix == "user" and name:
        user = User.objects.filter(username=name, tenant=tenant_obj).first()
        if user is None:
            raise PermissionDenied("The credential's person is not in this workspace.")
        return caller_for_user(user=user, client_id=client_id, subject=subject)
    if kind == "agent" and prefix == "agent" and name and client_id:
        agent = (
            Agent.objects.select_related("tenant")
            .filter(tenant=tenant_obj, application__client_id=client_id, name=name)
            .first()
        )
        if agent is None:
            raise PermissionDenied("The credential's agent is not registered in this workspace.")
        return caller_for_agent(agent=agent, client_id=client_id, subject=subject)
    raise PermissionDenied("The credential does not name a person or an agent of this workspace.")


def _tenant(value: str) -> Tenant:
    try:
        tenant = Tenant.objects.filter(pk=uuid.UUID(str(value))).first()
    except ValueError:
        tenant = Tenant.objects.filter(slug=value).first()
    if tenant is None:
        raise PermissionDenied("The credential's workspace does not exist.")
    return tenant


def caller_is_admin(caller: Caller) -> bool:
    if caller.user is None:
        return False
    return Membership.objects.filter(user=caller.user, tenant=caller.tenant, is_admin=True).exists()


# --------------------------------------------------------------------------- role audience


@dataclass(frozen=True)
class Audience:
    """The roles a caller holds at the moment of a read (decision 5) and the
    collections today's access rules open to them."""

    role_names: tuple[str, ...]
    collection_ids: frozenset[int]


def audience_for(caller: Caller) -> Audience:
    if caller.user is not None:
        roles = list(Role.objects.filter(tenant=caller.tenant, memberships__user=caller.user,
                                         memberships__tenant=caller.tenant))
    else:
        assert caller.agent is not None
        roles = list(Role.objects.filter(tenant=caller.tenant, agents=caller.agent))
    collection_ids = frozenset(
        AccessRule.objects.filter(tenant=caller.tenant, role__in=roles, collection__tenant=caller.tenant)
        .values_list("collection_id", flat=True)
    )
    return Audience(role_names=tuple(sorted(role.name for role in roles)), collection_ids=collection_ids)


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
class And(Rule):
    rules: tuple[Rule, ...]
    label: str = ""

    def q(self) -> Q:
        combined = Q()
        for rule in self.rules:
            combined &= rule.q()
        return combined

    def holds(self, facts: Facts) -> bool:
        return all(rule.holds(facts) for rule in self.rules)

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
        return any(rule.holds(facts) for rule in self.rules)


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


def as_of_rule(as_of: dt.datetime) -> Rule:
    """Decision 7: visible at T when recorded at or before T and not retired at or before T."""
    return Labelled(
        "not live at as_of",
        And((Compare("recorded_at", "lte", as_of), Or((IsNull("retired_at"), Compare("retired_at", "gt", as_of))))),
    )


def visibility_rule(
    *, caller: Caller, audience: Audience, as_of: dt.datetime, named_agent_ids: frozenset[int] = frozenset()
) -> Rule:
    """What this caller may see at `as_of`, before any narrowing filter."""
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
    rule: Rule = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rule", And((self.visibility, self.narrowing)))

    def queryset_filter(self) -> Q:
        """Layer 1: the predicate every index query carries."""
        return self.rule.q()

    def refusal(self, fragment: Fragment) -> str | None:
        """Layer 2: why this loaded row may not be served, or None when it may."""
        return self.rule.first_failure(fragment_facts(fragment))


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
    audience = audience or audience_for(caller)
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
    )


def fragment_facts(fragment: Fragment) -> dict[str, Any]:
    """The row as the rule tree reads it. Load fragments with
    `with_access_facts()` so this costs no extra queries."""
    return {
        "pk": fragment.pk,
        "tenant_id": fragment.tenant_id,
        "owner_user_id": fragment.owner_user_id,
        "owner_agent_id": fragment.owner_agent_id,
        "collection_id": fragment.collection_id,
        "source_id": fragment.source_id,
        "source__agent_id": fragment.source.agent_id if fragment.source is not None else None,
        "recorded_at": fragment.recorded_at,
        "retired_at": fragment.retired_at,
        "created_at": fragment.created_at,
        "agent_links": [{"agent_id": a.pk, "agent__kind": a.kind} for a in fragment.agents.all()],
        "resource_links": [{"resource__external_id": r.external_id} for r in fragment.resources.all()],
    }


def with_access_facts(queryset):  # type: ignore[no-untyped-def]
    return queryset.select_related("source__agent").prefetch_related("agents", "resources")


def fragment_readable(*, policy: ReadPolicy, fragment: Fragment) -> bool:
    return policy.refusal(fragment) is None


def visible_fragments(policy: ReadPolicy):  # type: ignore[no-untyped-def]
    """The queryset of everything this read may return (both layers still apply
    to what is served from it)."""
    return Fragment.objects.filter(policy.queryset_filter())
