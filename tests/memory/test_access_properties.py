"""Property tests of the access rules: random tenants, roles, rules, fragments,
readers, instants and filters, checked against an oracle written here from the
spec's decisions (not from memoryhub.access).

For every generated world:
* the SQL predicate and the Python row check each select exactly the oracle's set;
* search never serves a fragment the oracle denies, and answers the same twice;
* with the SQL predicate bypassed, the row check alone still serves nothing denied;
* with the row check switched off, the SQL predicate alone still serves nothing denied.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field

import pytest
from django.db import transaction
from django.db.models import Q
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from memoryhub import access
from memoryhub.models import (
    AccessRule,
    Agent,
    Collection,
    EnforcementAlarm,
    Fragment,
    Membership,
    Role,
    Source,
    Tenant,
    User,
)
from memoryhub.services import search
from memoryhub.services.write import fact_hash

BASE = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
WORDS = ["deploy", "invoice", "payroll", "incident", "roadmap", "backup", "renewal", "oncall"]
DIMENSIONS = 384


@dataclass
class World:
    tenants: list[Tenant] = field(default_factory=list)
    users: list[User] = field(default_factory=list)
    agents: list[Agent] = field(default_factory=list)
    fragments: list[Fragment] = field(default_factory=list)
    # Plain facts for the oracle.
    user_roles: dict[int, set[int]] = field(default_factory=dict)
    agent_roles: dict[int, set[int]] = field(default_factory=dict)
    rules: set[tuple[int, int]] = field(default_factory=set)  # (role id, collection id)


def _vector(rng: random.Random) -> list[float]:
    values = [rng.gauss(0, 1) for _ in range(DIMENSIONS)]
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


@st.composite
def worlds(draw):
    return {
        "seed": draw(st.integers(0, 2**32 - 1)),
        "roles": draw(st.integers(1, 3)),
        "collections": draw(st.integers(1, 3)),
        "rule_density": draw(st.floats(0, 1)),
        "users": draw(st.integers(1, 3)),
        "agents": draw(st.integers(1, 2)),
        "sources": draw(st.integers(0, 2)),
        "fragments": draw(st.integers(1, 24)),
        "reader": draw(st.integers(0, 100)),
        # Either any hour, or exactly an instant a fragment was recorded or retired at:
        # the boundaries are where a wrong comparison would show.
        "as_of": draw(st.tuples(st.sampled_from(["hours", "edge"]), st.integers(-2, 60))),
        "agents_filter": draw(st.one_of(st.none(), st.lists(st.integers(0, 6), max_size=3))),
        "created_after": draw(st.one_of(st.none(), st.tuples(st.sampled_from(["days", "edge"]), st.integers(-40, 60)))),
        "query_words": draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)),
    }


def _build(spec) -> World:
    rng = random.Random(spec["seed"])
    world = World()
    names = iter(range(10_000))
    for t in range(2):
        tenant = Tenant.objects.create(slug=f"prop-{spec['seed']}-{t}", name="t")
        world.tenants.append(tenant)
        roles = [Role.objects.create(tenant=tenant, name=f"r{i}") for i in range(spec["roles"])]
        collections = [Collection.objects.create(tenant=tenant, name=f"c{i}") for i in range(spec["collections"])]
        for role in roles:
            for collection in collections:
                if rng.random() < spec["rule_density"]:
                    AccessRule.objects.create(tenant=tenant, role=role, collection=collection)
                    world.rules.add((role.pk, collection.pk))
        for _ in range(spec["users"]):
            user = User.objects.create(username=f"u{spec['seed']}-{next(names)}", tenant=tenant)
            membership = Membership.objects.create(tenant=tenant, user=user, is_admin=rng.random() < 0.4)
            held = [r for r in roles if rng.random() < 0.5]
            membership.roles.set(held)
            world.users.append(user)
            world.user_roles[user.pk] = {r.pk for r in held}
        for _ in range(spec["agents"]):
            agent = Agent.objects.create(tenant=tenant, name=f"a{next(names)}")
            held = [r for r in roles if rng.random() < 0.5]
            agent.roles.set(held)
            world.agents.append(agent)
            world.agent_roles[agent.pk] = {r.pk for r in held}
        sources = []
        for _ in range(spec["sources"]):
            agent = Agent.objects.create(tenant=tenant, name=f"s{next(names)}", kind=Agent.Kind.SOURCE)
            sources.append(Source.objects.create(tenant=tenant, agent=agent))
            world.agents.append(agent)
        tenant_users = [u for u in world.users if u.tenant_id == tenant.pk]
        tenant_agents = [a for a in world.agents if a.tenant_id == tenant.pk]
        for _ in range(spec["fragments"]):
            home = rng.choice(["user", "agent", "collection", "collection"])
            words = rng.sample(WORDS, 2)
            recorded = BASE + dt.timedelta(hours=rng.randint(0, 24))
            retired = recorded + dt.timedelta(hours=rng.randint(1, 10)) if rng.random() < 0.3 else None
            source = rng.choice(sources) if sources and home == "collection" and rng.random() < 0.5 else None
            fragment = Fragment.objects.create(
                tenant=tenant,
                owner_user=rng.choice(tenant_users) if home == "user" else None,
                owner_agent=(
                    rng.choice([a for a in tenant_agents if a.kind == "assistant"]) if home == "agent" else None
                ),
                collection=rng.choice(collections) if home == "collection" else None,
                source=source,
                value=f"The {words[0]} note mentions {words[1]}.",
                created_at=BASE - dt.timedelta(days=rng.randint(0, 30)),
                recorded_at=recorded,
                retired_at=retired,
                retired_reason="superseded" if retired else "",
                content_hash=fact_hash(str(rng.random())),
                embedding=_vector(rng) if rng.random() < 0.8 else None,
            )
            links = rng.sample(tenant_agents, k=min(len(tenant_agents), rng.randint(0, 2)))
            if source is not None:
                links.append(source.agent)
            fragment.agents.set(links)
            world.fragments.append(fragment)
    return world


def _oracle(world: World, spec, reader, as_of: dt.datetime, named: set[str] | None,
            created_after: dt.datetime | None) -> set:
    """Decisions 4-7, written independently of memoryhub.access."""
    is_agent = isinstance(reader, Agent)
    roles = world.agent_roles[reader.pk] if is_agent else world.user_roles[reader.pk]
    allowed = set()
    for f in world.fragments:
        links = list(f.agents.all())
        if f.tenant_id != reader.tenant_id:
            continue
        if not (f.recorded_at <= as_of and (f.retired_at is None or f.retired_at > as_of)):
            continue
        if f.owner_user_id is not None:
            home_ok = not is_agent and f.owner_user_id == reader.pk
        elif f.owner_agent_id is not None:
            home_ok = is_agent and f.owner_agent_id == reader.pk
        else:
            home_ok = any((role, f.collection_id) in world.rules for role in roles)
        if not home_ok:
            continue
        sources = {a.name for a in links if a.kind == Agent.Kind.SOURCE}
        if f.source_id is not None:
            sources.add(f.source.agent.name)
        if is_agent and sources and not sources <= (named or set()):
            continue
        if named is not None:
            contributors = {a.name for a in links} | ({f.source.agent.name} if f.source_id else set())
            if not contributors & named:
                continue
        if created_after is not None and not f.created_at > created_after:
            continue
        allowed.add(f.pk)
    return allowed


def _reader_caller(world: World, spec):
    tenant = world.tenants[0]
    readers = [u for u in world.users if u.tenant_id == tenant.pk] + [
        a for a in world.agents if a.tenant_id == tenant.pk and a.kind == Agent.Kind.ASSISTANT
    ]
    reader = readers[spec["reader"] % len(readers)]
    if isinstance(reader, Agent):
        return reader, access.Caller(tenant=tenant, kind="agent", agent=reader)
    return reader, access.Caller(tenant=tenant, kind="user", user=reader)


def _instant(choice, edges: list[dt.datetime], *, unit: dt.timedelta) -> dt.datetime:
    mode, number = choice
    if mode == "edge" and edges:
        return sorted(edges)[number % len(edges)]
    return BASE + number * unit


def _named(world: World, spec) -> set[str] | None:
    # An empty list narrows nothing, like an absent one.
    if not spec["agents_filter"]:
        return None
    pool = [a.name for a in world.agents] + ["nobody"]
    return {pool[i % len(pool)] for i in spec["agents_filter"]}


def _check_world(spec, monkeypatch):
    world = _build(spec)
    reader, caller = _reader_caller(world, spec)
    as_of = _instant(spec["as_of"], [i for f in world.fragments for i in (f.recorded_at, f.retired_at) if i],
                     unit=dt.timedelta(hours=1))
    named = _named(world, spec)
    created_after = None
    if spec["created_after"] is not None:
        created_after = _instant(spec["created_after"], [f.created_at for f in world.fragments],
                                 unit=dt.timedelta(days=1))
    expected = _oracle(world, spec, reader, as_of, named, created_after)
    filters = {"agents": sorted(named) if named is not None else (), "created_after": created_after}

    policy = access.read_policy(caller=caller, as_of=as_of, **filters)
    sql = set(Fragment.objects.filter(policy.queryset_filter()).values_list("pk", flat=True))
    rows = access.with_access_facts(Fragment.objects.filter(tenant__in=world.tenants))
    python = {f.pk for f in rows if policy.refusal(f) is None}
    assert sql == expected
    assert python == expected

    request = search.SearchRequest.validated(
        query=" ".join(spec["query_words"]), limit=50, agents=filters["agents"], created_after=created_after
    )

    def served() -> list[str]:
        execution = search.search_execute(
            caller=caller, request=request, as_of=as_of, deadline=search.Deadline(60), receipt_id="rcpt_test"
        )
        return execution.result.served_ids

    first = served()
    target(float(len(first)), label="fragments served")
    assert {str(pk) for pk in expected} >= set(first)
    assert served() == first  # same rules, data and instant: same answer
    assert not EnforcementAlarm.objects.exists()

    with monkeypatch.context() as patch:
        patch.setattr(search, "index_filter", lambda policy: Q(tenant__in=world.tenants))
        assert {str(pk) for pk in expected} >= set(served())
    with monkeypatch.context() as patch:
        patch.setattr(search, "row_check", lambda policy, names, **read: lambda values: None)
        assert {str(pk) for pk in expected} >= set(served())


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(spec=worlds())
def test_search_never_serves_a_denied_fragment(spec, monkeypatch):
    with transaction.atomic():
        _check_world(spec, monkeypatch)
        transaction.set_rollback(True)
