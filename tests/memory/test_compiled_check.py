"""The row check's compiled rule (access.compiled_check): for any rule the
tree can build over a row's own facts, and any row read by position in any
order of columns, it refuses exactly what the rule's own interpreter refuses,
with the same words; it declines what it cannot write (a rule that reads the
linked rows, a kind of rule it does not know), and then the row is
interpreted as before."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryhub import access
from memoryhub.access import And, Compare, Eq, In, IsNull, Labelled, Nothing, NotIn, Or, Some

BASE = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
TENANTS = [uuid.UUID(int=1), uuid.UUID(int=2)]
PKS = [uuid.UUID(int=10), uuid.UUID(int=11)]
INSTANTS = [BASE + dt.timedelta(hours=hours) for hours in range(4)]

# What each fact may hold in a generated row (None where its column may be NULL).
FACT_VALUES = {
    "pk": st.sampled_from(PKS),
    "tenant_id": st.sampled_from(TENANTS),
    "owner_user_id": st.sampled_from([None, 1, 2]),
    "owner_agent_id": st.sampled_from([None, 1, 2]),
    "collection_id": st.sampled_from([None, 1, 2, 3]),
    "source_id": st.sampled_from([None, 1, 2]),
    "source__agent_id": st.sampled_from([None, 1, 2]),
    "recorded_at": st.sampled_from(INSTANTS),
    "retired_at": st.sampled_from([None, *INSTANTS]),
    "created_at": st.sampled_from(INSTANTS),
}
NEVER_NULL = ("pk", "tenant_id", "recorded_at", "created_at")  # NotIn is only for those
LABELS = st.sampled_from(["", "other tenant", "not live at as_of", "it's \"quoted\"\n{k0} v[0]"])


def _values_of(name: str) -> st.SearchStrategy:  # type: ignore[type-arg]
    return FACT_VALUES[name].filter(lambda value: value is not None)


@st.composite
def leaves(draw: st.DrawFn) -> access.Rule:
    name = draw(st.sampled_from(sorted(FACT_VALUES)))
    kind = draw(st.sampled_from(["eq", "in", "notin", "isnull", "compare", "nothing"]))
    if kind == "eq":
        return Eq(name, draw(_values_of(name)))
    if kind == "in":
        return In(name, frozenset(draw(st.lists(_values_of(name), max_size=3))))
    if kind == "notin":
        name = draw(st.sampled_from(NEVER_NULL))
        return NotIn(name, frozenset(draw(st.lists(_values_of(name), max_size=3))))
    if kind == "isnull":
        return IsNull(name)
    if kind == "compare":
        return Compare(draw(st.sampled_from(["recorded_at", "retired_at", "created_at"])),
                       draw(st.sampled_from(["lte", "lt", "gt"])), draw(st.sampled_from(INSTANTS)))
    return Nothing(label=draw(LABELS)) if draw(st.booleans()) else Nothing()


rules = st.recursive(
    leaves(),
    lambda parts: st.one_of(
        st.builds(And, st.lists(parts, max_size=4).map(tuple), LABELS),
        st.builds(Or, st.lists(parts, max_size=4).map(tuple), LABELS),
        st.builds(Labelled, LABELS, parts),
    ),
    max_leaves=12,
)


@st.composite
def rows(draw: st.DrawFn) -> tuple[tuple[str, ...], list[object]]:
    """A row as the row check reads one: every fact's column, and columns
    that are not facts, in any order."""
    facts = {name: draw(strategy) for name, strategy in FACT_VALUES.items()}
    columns = {access.ROW_FACT_NAMES[name]: value for name, value in facts.items()}
    columns.update({"value": draw(st.sampled_from(["text", None])), "distance": draw(st.sampled_from([None, 0.2])),
                    "facts_agents": None, "facts_resources": None})
    names = draw(st.permutations(sorted(columns)))
    return tuple(names), [columns[name] for name in names]


def _interpreted(rule: access.Rule, names: tuple[str, ...], values: list[object]) -> str | None:
    row = access.FragmentValues.of_row(names, values)
    return rule.first_failure(access.fragment_facts(row, links=False))


@settings(max_examples=600, deadline=None)
@given(rule=rules, row=rows())
def test_a_compiled_rule_refuses_what_the_rule_refuses_with_the_same_words(rule, row):
    names, values = row
    check = access.compiled_check(rule, names)
    assert check is not None
    assert check(values) == _interpreted(rule, names, values)


def _policy(visibility: access.Rule, narrowing: access.Rule | None = None) -> access.ReadPolicy:
    return access.ReadPolicy(caller=access.Caller(tenant=None, kind="system"), audience=None,  # type: ignore[arg-type]
                             as_of=BASE, visibility=visibility, narrowing=narrowing or And(()))


def _caller(kind: str, pk: int) -> access.Caller:
    return access.Caller(tenant=_Tenant(TENANTS[0]), kind=kind, subject=kind,  # type: ignore[arg-type]
                         **{"user" if kind == "user" else "agent": _Pk(pk)})


def _row(**changed: object) -> tuple[tuple[str, ...], list[object]]:
    columns: dict[str, object] = {
        "id": PKS[0], "tenant_id": TENANTS[0], "owner_user_id": 1, "owner_agent_id": None, "collection_id": 2,
        "source_id": None, "facts_source_agent_id": None, "recorded_at": INSTANTS[0], "retired_at": None,
        "created_at": INSTANTS[0], "facts_agents": '[{"id": 3, "kind": "source"}]', "facts_resources": None,
        "value": "text",
    }
    columns.update(changed)
    return tuple(columns), list(columns.values())


def test_the_readers_rules_are_compiled_and_agree_with_refusal():
    """A person's visibility and a time filter are written into Python; an
    agent's reads its rows' linked agents, so it is interpreted, row by row,
    with the linked rows parsed as the row check parses them."""
    person = access.visibility_rule(caller=_caller("user", 1),
                                    audience=access.Audience(role_names=(), collection_ids=frozenset({2})),
                                    as_of=INSTANTS[1])
    narrowing = access.narrowing_rule(created_after=BASE - dt.timedelta(days=1))
    names, values = _row()
    assert access.compiled_check(And((person, narrowing)), names) is not None
    policy = _policy(person, narrowing)
    for changed in ({}, {"tenant_id": TENANTS[1]}, {"recorded_at": INSTANTS[2]}, {"retired_at": INSTANTS[1]},
                    {"owner_user_id": None}, {"owner_user_id": None, "collection_id": 3},
                    {"created_at": BASE - dt.timedelta(days=2)}):
        names, values = _row(**changed)
        assert policy.row_check(names)(values) == policy.refusal(access.FragmentValues.of_row(names, values))
    assert policy.row_check(names)(_row(tenant_id=TENANTS[1])[1]) == "other tenant"

    agent = access.visibility_rule(caller=_caller("agent", 4),
                                   audience=access.Audience(role_names=(), collection_ids=frozenset({2})),
                                   as_of=INSTANTS[1], named_agent_ids=frozenset({7}))
    assert access.compiled_check(agent, names) is None  # it reads the linked agents
    parsed: list[str] = []

    def convert(name: str, value: object) -> object:
        parsed.append(name)
        return __import__("json").loads(value) if isinstance(value, str) else value

    check = _policy(agent).row_check(names, row=lambda values: access.FragmentValues.of_row(
        names, values, later=("facts_agents", "facts_resources"), convert=convert))
    names, values = _row(owner_user_id=None)
    assert check(values) == "connected source not named in agents"  # a source's agent it does not name
    assert "facts_agents" in parsed
    names, values = _row(owner_user_id=None, facts_agents='[{"id": 7, "kind": "source"}]')
    assert check(values) is None


def test_what_it_cannot_write_is_interpreted():
    """A rule over the linked rows, a kind of rule it does not know (a
    subclass of one it knows included), a fact the row does not hold, an
    order of comparison it does not know: no compiled check; the policy's
    check then interprets the row as refusal does, and a row without a
    fact fails as it does; and a refusal that is not text, and a rule
    nested deeper than Python compiles, are interpreted too."""

    @dataclasses.dataclass(frozen=True)
    class Always(Eq):
        def holds(self, facts):  # type: ignore[no-untyped-def]
            return True

    names, values = _row()
    assert access.compiled_check(Always("tenant_id", TENANTS[1]), names) is None
    assert _policy(Always("tenant_id", TENANTS[1])).row_check(names)(values) is None
    assert access.compiled_check(Some("agent_links", Eq("agent_id", 3)), names) is None
    assert access.compiled_check(Compare("created_at", "gte", BASE), names) is None  # type: ignore[arg-type]
    assert access.compiled_check(Eq("nothing_of_a_row", 1), names) is None
    assert access.compiled_check(Nothing(label=5), names) is None  # type: ignore[arg-type]
    assert _policy(Nothing(label=5)).row_check(names)(values) == 5  # type: ignore[arg-type]
    assert _policy(Labelled(None, Nothing())).row_check(names)(values) is None  # type: ignore[arg-type]
    deep: access.Rule = IsNull("owner_agent_id")
    for _ in range(300):
        deep = Or((deep, Nothing()))
    assert access.compiled_check(Labelled("deep", deep), names) is None
    assert _policy(Labelled("deep", deep)).row_check(names)(values) is None
    assert _policy(Labelled("deep", deep)).row_check(names)(_row(owner_agent_id=3)[1]) == "deep"
    short = tuple(name for name in names if name != "retired_at")
    assert access.compiled_check(IsNull("retired_at"), short) is None
    assert access.compiled_check(IsNull("owner_agent_id"), short) is None  # a row without a fact is no row
    with pytest.raises(AttributeError):
        _policy(IsNull("retired_at")).row_check(short)([value for name, value in zip(names, values, strict=True)
                                                         if name != "retired_at"])


def test_the_words_and_values_of_a_rule_are_never_its_text():
    """A rule's values and refusals are named in the Python written for it,
    never spelled into it: any text comes back as it was, and rules of one
    shape share one compiled function whatever their values."""
    hostile = "'); import os; os._exit(1) #\n\"\"\""
    names, values = _row()
    check = access.compiled_check(Labelled(hostile, Eq("tenant_id", hostile)), names)
    assert check is not None and check(values) == hostile
    before = access._check_maker.cache_info()
    for tenant in TENANTS:
        check = access.compiled_check(Labelled("other tenant", Eq("tenant_id", tenant)), names)
        assert check is not None
        assert check(values) == (None if tenant == TENANTS[0] else "other tenant")
    after = access._check_maker.cache_info()
    assert after.misses - before.misses <= 1 and after.hits - before.hits >= 1


@dataclasses.dataclass(frozen=True)
class _Pk:
    pk: object


@dataclasses.dataclass(frozen=True)
class _Tenant:
    pk: object
