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
What Django compiles is what runs: only the values change.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model, QuerySet
from django.db.models.query import ModelIterable, get_related_populators
from django.db.models.sql.compiler import SQLCompiler

from memoryhub.database.base import prepared

M = TypeVar("M", bound=Model)

# The value types a lookup's marker can stand for. Django hands a str or a
# UUID filter value to the statement as the same object, so each marker is
# found among the compiled parameters by identity: a value changed on its way
# (lowered, stripped, wrapped in %...%) is a new object and is not found.
KINDS: tuple[type, ...] = (str, uuid.UUID)


def _marker(kind: type) -> Any:
    if kind is str:
        return f"memoryhub-lookup-marker-{secrets.token_hex(16)}"
    if kind is uuid.UUID:
        return uuid.uuid4()
    raise TypeError(f"a lookup takes values of {', '.join(k.__name__ for k in KINDS)}, not {kind.__name__}")


def marker_places(params: Sequence[Any], marker: Any) -> list[int]:
    """Where `marker` (a value compiled in the place of one to come) is among
    a statement's parameters, found as the very object."""
    return [index for index, param in enumerate(params) if param is marker]


def marker_elsewhere(sql: str, params: Sequence[Any], marker: Any) -> bool:
    """Whether `marker` is also in the SQL, or inside another parameter: in another form."""
    return str(marker) in sql or any(isinstance(param, str) and param is not marker and str(marker) in param
                                     for param in params)


@dataclass(frozen=True)
class Compiled:
    """A lookup compiled on one connection: its SQL and parameters, where its
    values go among them, and how its rows are built."""

    sql: str
    params: tuple[Any, ...]
    places: tuple[int, ...]
    compiler: SQLCompiler
    converters: dict[int, Any]
    init_list: tuple[str, ...]
    model_slice: slice
    populators: tuple[Any, ...]
    annotations: tuple[tuple[str, int], ...]


class Lookup(Generic[M]):
    """`build(*values)`: the queryset, with each value used once, as it is,
    as a parameter (a filter's value); `kinds`: their types (KINDS). Compiling
    fails when a value is not found exactly once among the parameters as the
    very object given (a value Django or the build changes on its way), when
    it is also found inside another parameter or in the SQL, and for a
    queryset that is not a plain one of model instances. It runs on the
    default database unless `using` names another (the project has no
    database routers)."""

    def __init__(self, build: Callable[..., QuerySet[M]], *kinds: type) -> None:
        self._build = build
        self._kinds = kinds
        for kind in kinds:
            _marker(kind)  # an unsupported type fails here, when the module is imported

    def first(self, *values: Any, using: str | None = None) -> M | None:
        """The one row a lookup by a unique key finds (LIMIT 1), or None, on
        `using` (the default database unless named)."""
        if len(values) != len(self._kinds):
            raise TypeError(f"this lookup takes {len(self._kinds)} values, not {len(values)}")
        for value, kind in zip(values, self._kinds, strict=True):
            if not isinstance(value, kind):
                raise TypeError(f"expected a {kind.__name__}, got a {type(value).__name__}")
        alias = using or DEFAULT_DB_ALIAS
        wrapper = connections[alias]
        # Compiled on the thread's own connection wrapper, once.
        cache: dict[Lookup[Any], Compiled] = wrapper.__dict__.setdefault("compiled_lookups", {})
        compiled = cache.get(self)
        if compiled is None:
            compiled = cache[self] = self._compile(alias)
        params = list(compiled.params)
        for place, value in zip(compiled.places, values, strict=True):
            params[place] = value
        with prepared(alias), wrapper.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        if compiled.converters:
            row = next(compiled.compiler.apply_converters([row], compiled.converters))
        return _instance(compiled, row, alias)

    def _compile(self, alias: str) -> Compiled:
        markers = [_marker(kind) for kind in self._kinds]
        queryset = self._build(*markers)[:1]
        if (queryset._iterable_class is not ModelIterable
                or getattr(queryset, "_prefetch_related_lookups", None)
                or getattr(queryset, "_known_related_objects", None) or queryset.query.combinator):
            raise ValueError("a Lookup reads plain model instances (no values(), prefetch or combination)")
        compiler = queryset.query.get_compiler(using=alias)
        sql, params = compiler.as_sql()
        places = []
        for marker in markers:
            found = marker_places(params, marker)
            if len(found) != 1:
                raise ValueError(
                    f"a lookup's value must be one parameter of its statement, as given: found {len(found)}")
            if marker_elsewhere(sql, params, marker):
                raise ValueError("a lookup's value is also in its statement in another form")
            places.append(found[0])
        klass_info, select = compiler.klass_info, compiler.select
        fields = klass_info["select_fields"]
        model_slice = slice(fields[0], fields[-1] + 1)
        return Compiled(
            sql=sql, params=tuple(params), places=tuple(places), compiler=compiler,
            # What results_iter would gather for every row, gathered once.
            converters=compiler.get_converters([column[0] for column in select[: compiler.col_count]]),
            init_list=tuple(column[0].target.attname for column in select[model_slice]), model_slice=model_slice,
            # (Django 5.2's signature; the stubs describe a later one.)
            populators=tuple(get_related_populators(klass_info, select, alias)),  # type: ignore[call-arg]
            annotations=tuple((compiler.annotation_col_map or {}).items()),
        )


def _instance(compiled: Compiled, row: Sequence[Any], alias: str) -> Any:
    """A row built as Django's ModelIterable builds it."""
    klass = compiled.compiler.klass_info["model"]
    instance = klass.from_db(alias, compiled.init_list, row[compiled.model_slice])
    for populator in compiled.populators:
        populator.populate(row, instance)
    for name, position in compiled.annotations:
        setattr(instance, name, row[position])
    return instance


__all__ = ["Lookup", "marker_elsewhere", "marker_places"]
