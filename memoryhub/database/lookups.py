"""Lookups every call repeats with other values, compiled once.

A credential's check reads its token with the six tables it takes its holder
from, and finding the caller reads a person with their membership and
workspace: each is one prepared statement (memoryhub.database.prepared),
and compiling it through the ORM took more of the lookup than running it.

A `Lookup` is a queryset written once as a function of its values. It is
compiled by Django on each connection the first time it runs there, with a
marker in each value's place; a run puts the values in those places of the
compiled parameters, runs the statement prepared, and builds its rows as
Django's ModelIterable builds them (select_related's related rows included).
`Rows` is the same for a queryset of values (`values_list()`, a union of
them included) read whole: a write's judgement reads three parts of the
writer's live memory in one statement. What Django compiles is what runs:
only the values change.
"""

from __future__ import annotations

import numbers
import secrets
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.core.exceptions import EmptyResultSet
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model, QuerySet
from django.db.models.query import ModelIterable, ValuesListIterable, get_related_populators
from django.db.models.sql.compiler import SQLCompiler
from psycopg.types.numeric import Int8

from memoryhub.database.base import prepared

M = TypeVar("M", bound=Model)

# The value types a lookup's marker can stand for. Django hands a str, a UUID
# or a key of an automatic primary key (a foreign key's value) to the
# statement as the same object, so each marker is found among the compiled
# parameters by identity: a value changed on its way (lowered, stripped,
# wrapped in %...%, or an int wrapped in the integer type of its column, as
# Django does for an IntegerField's) is a new object and is not found.
KINDS: tuple[type, ...] = (str, uuid.UUID, int)


def _marker(kind: type) -> Any:
    if kind is str:
        return f"memoryhub-lookup-marker-{secrets.token_hex(16)}"
    if kind is uuid.UUID:
        return uuid.uuid4()
    if kind is int:
        # Made at run time and past 2**30, so never one of the small ints
        # Python shares (a filter's own 1 or 0 could be that very object),
        # and within an AutoField's 32 bits (Django compiles a value past its
        # field's range into no statement at all).
        return (1 << 30) | secrets.randbits(30)
    raise TypeError(f"a lookup takes values of {', '.join(k.__name__ for k in KINDS)}, not {kind.__name__}")


def marker_places(params: Sequence[Any], marker: Any) -> list[int]:
    """Where `marker` (a value compiled in the place of one to come) is among
    a statement's parameters, found as the very object."""
    return [index for index, param in enumerate(params) if param is marker]


def marker_elsewhere(sql: str, params: Sequence[Any], marker: Any) -> bool:
    """Whether `marker` is also in the SQL, or in another parameter, or inside
    one (a list, a dict, a JSON value psycopg wraps): in another form (written
    inside a str, in any case, a UUID's also without its dashes; or an equal
    value that is not the very object, such as an int Django wrapped in the
    integer type of its column, or made a float)."""
    forms = [str(marker).casefold(), *([marker.hex] if isinstance(marker, uuid.UUID) else [])]

    def holds(value: Any) -> bool:
        """`value` (not the marker's own place) holds the marker in another form."""
        if value is marker:
            return False
        if isinstance(value, str):
            return any(form in value.casefold() for form in forms)
        if isinstance(value, dict):
            return any(within(item) for pair in value.items() for item in pair)
        if isinstance(value, list | tuple | set | frozenset):
            return any(within(item) for item in value)
        if hasattr(value, "obj") and not isinstance(value, numbers.Number | uuid.UUID):  # psycopg's Json, Jsonb
            return within(value.obj)
        return (isinstance(marker, numbers.Number | uuid.UUID) and not isinstance(value, bool)
                and isinstance(value, numbers.Number | uuid.UUID) and value == marker)

    def within(item: Any) -> bool:
        """Inside another value, even the very marker is another form of it."""
        return item is marker or holds(item)

    return any(holds(param) for param in params) or any(form in sql.casefold() for form in forms)


@dataclass(frozen=True)
class Compiled:
    """A statement compiled on one connection: its SQL and parameters, where
    its values go among them, and what converts its rows' values."""

    sql: str
    params: tuple[Any, ...]
    places: tuple[tuple[int, ...], ...]
    compiler: SQLCompiler
    converters: dict[int, Any]


@dataclass(frozen=True)
class CompiledInstances(Compiled):
    """A Lookup's statement, with how its rows are built into instances."""

    init_list: tuple[str, ...]
    model_slice: slice
    populators: tuple[Any, ...]
    annotations: tuple[tuple[str, int], ...]


class _Statement:
    """A queryset written once as a function of its values, compiled once per
    connection (Lookup, Rows)."""

    def __init__(self, build: Callable[..., QuerySet[Any]], *kinds: type) -> None:
        self._build = build
        self._kinds = kinds
        for kind in kinds:
            _marker(kind)  # an unsupported type fails here, when the statement is written

    def sent(self, *values: Any, using: str | None = None) -> tuple[Compiled, list[Any]]:
        """What a run with `values` on `using` (the default database unless
        named) sends: the statement as that connection compiled it, and its
        parameters with the values in their places."""
        if len(values) != len(self._kinds):
            raise TypeError(f"this lookup takes {len(self._kinds)} values, not {len(values)}")
        for value, kind in zip(values, self._kinds, strict=True):
            # (A bool is an int to isinstance, and no key.)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise TypeError(f"expected a value of type {kind.__name__}, got a {type(value).__name__}")
            if isinstance(value, int) and not -(1 << 63) <= value < 1 << 63:
                raise ValueError("a key is a bigint: this one is past its range")
        alias = using or DEFAULT_DB_ALIAS
        wrapper = connections[alias]
        # Compiled on the thread's own connection wrapper, once.
        cache: dict[_Statement, Compiled] = wrapper.__dict__.setdefault("compiled_lookups", {})
        compiled = cache.get(self)
        if compiled is None:
            compiled = cache[self] = self._compile(alias)
        params = list(compiled.params)
        for places, value in zip(compiled.places, values, strict=True):
            # A key is sent as a bigint, whatever its size: psycopg would send a
            # small one as a smallint, and prepare the statement again for it.
            sent = Int8(value) if type(value) is int else value
            for place in places:
                params[place] = sent
        return compiled, params

    def _run(self, values: Sequence[Any], using: str | None, rows: int | None) -> tuple[Compiled, list[tuple]]:
        """The statement run with `values` on `using`: what it compiled to,
        and its rows, the first `rows` of them (all when None), converted."""
        compiled, params = self.sent(*values, using=using)
        alias = using or DEFAULT_DB_ALIAS
        with prepared(alias), connections[alias].cursor() as cursor:
            cursor.execute(compiled.sql, params)
            fetched = cursor.fetchall() if rows is None else cursor.fetchmany(rows)
        if compiled.converters and fetched:
            fetched = [tuple(row) for row in compiled.compiler.apply_converters(fetched, compiled.converters)]
        return compiled, fetched

    def _compile(self, alias: str) -> Compiled:
        raise NotImplementedError

    def _compiled(self, queryset: QuerySet[Any], markers: Sequence[Any], alias: str) -> tuple[
            SQLCompiler, str, tuple[Any, ...], tuple[tuple[int, ...], ...], dict[int, Any]]:
        try:
            # Each part of a union alone first, and theirs: Django leaves out of
            # a union a part that can match nothing (a value past its field's range).
            for part in _parts(queryset.query):
                part.get_compiler(using=alias).as_sql()
            compiler = queryset.query.get_compiler(using=alias)
            sql, params = compiler.as_sql()
        except EmptyResultSet as exc:
            raise ValueError("a lookup's queryset compiles to no statement (EmptyResultSet): "
                             "a value in it can match nothing") from exc
        places = []
        for marker in markers:
            found = marker_places(params, marker)
            if not found:
                raise ValueError("a lookup's value must be a parameter of its statement, as given: found 0")
            if marker_elsewhere(sql, params, marker):
                raise ValueError("a lookup's value is also in its statement in another form")
            places.append(tuple(found))
        # What results_iter would gather for every row, gathered once.
        converters = compiler.get_converters([column[0] for column in compiler.select[: compiler.col_count]])
        return compiler, sql, tuple(params), tuple(places), converters


class Lookup(_Statement, Generic[M]):
    """`build(*values)`: the queryset, with each value used as it is, as a
    parameter (a filter's value), once or in several places; `kinds`: their
    types (KINDS). Compiling fails when a value is not found among the
    parameters as the very object given (a value Django or the build changes
    on its way), when it is also in the statement in another form
    (marker_elsewhere), when the queryset compiles to no statement, and for a
    queryset that is not a plain one of model instances. It runs on the
    default database unless `using` names another (the project has no
    database routers)."""

    def __init__(self, build: Callable[..., QuerySet[M]], *kinds: type) -> None:
        super().__init__(build, *kinds)  # (typed here: the model read is the queryset's)

    def first(self, *values: Any, using: str | None = None) -> M | None:
        """The one row a lookup by a unique key finds (LIMIT 1), or None, on
        `using` (the default database unless named)."""
        compiled, fetched = self._run(values, using, rows=1)
        if not fetched:
            return None
        assert isinstance(compiled, CompiledInstances)
        return _instance(compiled, fetched[0], using or DEFAULT_DB_ALIAS)

    def _compile(self, alias: str) -> CompiledInstances:
        markers = [_marker(kind) for kind in self._kinds]
        queryset = self._build(*markers)[:1]
        if (queryset._iterable_class is not ModelIterable
                or getattr(queryset, "_prefetch_related_lookups", None)
                or getattr(queryset, "_known_related_objects", None) or queryset.query.combinator):
            raise ValueError("a Lookup reads plain model instances (no values(), prefetch or combination)")
        compiler, sql, params, places, converters = self._compiled(queryset, markers, alias)
        klass_info, select = compiler.klass_info, compiler.select
        fields = klass_info["select_fields"]
        model_slice = slice(fields[0], fields[-1] + 1)
        return CompiledInstances(
            sql=sql, params=params, places=places, compiler=compiler, converters=converters,
            init_list=tuple(column[0].target.attname for column in select[model_slice]), model_slice=model_slice,
            # (Django 5.2's signature; the stubs describe a later one.)
            populators=tuple(get_related_populators(klass_info, select, alias)),  # type: ignore[call-arg]
            annotations=tuple((compiler.annotation_col_map or {}).items()),
        )


class Rows(_Statement):
    """Rows of values, written once as a function of its values as a Lookup
    is: `build(*values)` is a `values_list()` queryset (not flat or named,
    not distinct), or a union of them, read whole; its rows are tuples of the
    converted values, in the queryset's order. The same rules for its values
    as a Lookup's."""

    def all(self, *values: Any, using: str | None = None) -> list[tuple[Any, ...]]:
        return self._run(values, using, rows=None)[1]

    def _compile(self, alias: str) -> Compiled:
        markers = [_marker(kind) for kind in self._kinds]
        queryset = self._build(*markers)
        if (queryset._iterable_class is not ValuesListIterable
                or any(part.distinct for part in (queryset.query, *_parts(queryset.query)))
                or getattr(queryset, "_prefetch_related_lookups", None)):
            # (A distinct one may select more than it returns, to order by.)
            raise ValueError("Rows reads a values_list() queryset (not flat or named, not distinct, no prefetch), "
                             "or a union of them")
        compiler, sql, params, places, converters = self._compiled(queryset, markers, alias)
        return Compiled(sql=sql, params=params, places=places, compiler=compiler, converters=converters)


def _parts(query: Any) -> list[Any]:
    """A combined query's parts, theirs included."""
    return [found for part in query.combined_queries for found in (part, *_parts(part))]


def _instance(compiled: CompiledInstances, row: Sequence[Any], alias: str) -> Any:
    """A row built as Django's ModelIterable builds it."""
    klass = compiled.compiler.klass_info["model"]
    instance = klass.from_db(alias, compiled.init_list, row[compiled.model_slice])
    for populator in compiled.populators:
        populator.populate(row, instance)
    for name, position in compiled.annotations:
        setattr(instance, name, row[position])
    return instance


__all__ = ["Lookup", "Rows", "marker_elsewhere", "marker_places"]
