"""The tallies of live fragments per home (models.FragmentTally), kept small
and kept true.

PostgreSQL's triggers add one row per home for every statement that changes
fragments; BM25 sums a reader's rows (memoryhub.services.search,
reader_totals_sql), so the fewer rows, the cheaper the sum. The beat folds each
home's rows into one.

What no trigger sees cannot be tallied: a TRUNCATE of the fragments alone,
triggers disabled (`session_replication_role = replica`, `ALTER TABLE ...
DISABLE TRIGGER`, a data-only restore), or a migration that changes how
`search_length` is computed (a table rewrite fires no trigger). After any of
them the operator recounts (`manage.py tallies --recount`); `manage.py tallies`
alone says whether the tallies and the fragments agree.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import connection, transaction

from memoryhub import access
from memoryhub.access import Operator
from memoryhub.models import TALLY_HOME, Fragment, FragmentTally, home_name

FOLD_TASK = "memoryhub.tasks.fold_tallies"

_FIGURES = ("fragments", "words", "measured")
# Each home's live fragments, counted: what its tallies must sum to.
_COUNTED = (f"SELECT {', '.join(TALLY_HOME)}, count(*) AS fragments, coalesce(sum(search_length), 0) AS words, "  # noqa: S608
            f"count(search_length) AS measured FROM {Fragment._meta.db_table} WHERE retired_at IS NULL "
            f"GROUP BY {', '.join(TALLY_HOME)}")


def _same_home(left: str, right: str) -> str:
    # A home has exactly one of its three ids; ids are positive, so 0 stands for
    # "none" and the comparison is a plain (hashable) equality.
    return " AND ".join(f"coalesce({left}.{name}, 0) = coalesce({right}.{name}, 0)" if name != "tenant_id"
                        else f"{left}.{name} = {right}.{name}" for name in TALLY_HOME)


def fold_tallies() -> int:
    """Fold every home's tally rows into one (into none when they sum to
    nothing), in one statement; returns how many rows it folded away.

    A reader sees the tallies from before the statement or from after it,
    with the same sums. Rows a write adds while it runs are not in its snapshot
    and stay as they are. Two folds at once fold each row once: the second
    skips the rows the first deleted, and adds nothing for them."""
    table = FragmentTally._meta.db_table
    home = ", ".join(TALLY_HOME)
    sums = ", ".join(f"sum({name})" for name in _FIGURES)
    some = " OR ".join(f"sum({name}) <> 0" for name in _FIGURES)
    with connection.cursor() as cursor:
        cursor.execute(f"""
            WITH crowded AS (
                SELECT {home} FROM {table} GROUP BY {home} HAVING count(*) > 1 OR NOT ({some})
            ), folded AS (
                DELETE FROM {table} AS t USING crowded AS c WHERE {_same_home("t", "c")}
                RETURNING {", ".join(f"t.{name}" for name in (*TALLY_HOME, *_FIGURES))}
            ), kept AS (
                INSERT INTO {table} ({home}, {", ".join(_FIGURES)})
                SELECT {home}, {sums} FROM folded GROUP BY {home} HAVING {some}
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM folded) - (SELECT count(*) FROM kept)
        """)  # noqa: S608
        return int(cursor.fetchone()[0])


def tallies_unfolded(*, older_than: dt.timedelta) -> int:
    """How many homes hold tally rows that have waited longer than
    `older_than` to be folded: searches slow down as they pile up (the beat
    folds them; `/readyz` asks this)."""
    home = ", ".join(TALLY_HOME)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM (SELECT 1 FROM {FragmentTally._meta.db_table} GROUP BY {home} "  # noqa: S608
                       f"HAVING count(*) > 1 AND min(added_at) < now() - %s * interval '1 second') AS waiting",
                       [older_than.total_seconds()])
        return int(cursor.fetchone()[0])


@dataclass(frozen=True)
class Drift:
    """A home whose tallies do not sum to its live fragments."""

    tenant_id: str
    home: str
    counted: tuple[int, int, int]  # fragments, words, measured
    tallied: tuple[int, int, int]


def tallies_drift(*, caller: Operator) -> list[Drift]:
    """Every home whose tallies and live fragments disagree (none when the
    triggers saw every change). One statement, over the whole table."""
    access.require_operator(caller)
    table = FragmentTally._meta.db_table
    home = ", ".join(TALLY_HOME)
    with connection.cursor() as cursor:
        cursor.execute(f"""
            WITH counted AS ({_COUNTED}),
                 tallied AS (SELECT {home}, {", ".join(f"sum({name}) AS {name}" for name in _FIGURES)}
                               FROM {table} GROUP BY {home})
            SELECT {", ".join(f"coalesce(c.{name}, t.{name})" for name in TALLY_HOME)},
                   ARRAY[{", ".join(f"c.{name}" for name in _FIGURES)}],
                   ARRAY[{", ".join(f"t.{name}" for name in _FIGURES)}]
              FROM counted AS c FULL JOIN tallied AS t ON {_same_home("c", "t")}
             WHERE ({", ".join(f"c.{name}" for name in _FIGURES)})
                   IS DISTINCT FROM ({", ".join(f"t.{name}" for name in _FIGURES)})
               AND NOT (c.fragments IS NULL AND {" AND ".join(f"t.{name} = 0" for name in _FIGURES)})
             ORDER BY 1, 2, 3, 4
        """)  # noqa: S608
        rows = cursor.fetchall()
    return [Drift(tenant_id=str(tenant), home=home_name(collection, user, agent),
                  counted=_figures(counted), tallied=_figures(tallied))
            for tenant, collection, user, agent, counted, tallied in rows]


def _figures(values: list | None) -> tuple[int, int, int]:
    return tuple(int(value or 0) for value in (values or (0, 0, 0)))  # type: ignore[return-value]


def tallies_recount(*, caller: Operator) -> int:
    """Count every home's live fragments again, in place of its tallies; returns
    how many homes hold fragments. Writes of fragments and folds wait while it
    runs (reads go on), so no change falls between the count and the tallies,
    and no fold's row is left beside the count. The locks are taken in the
    order a write takes them (fragments, then tallies)."""
    access.require_operator(caller)
    table = FragmentTally._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {Fragment._meta.db_table} IN SHARE ROW EXCLUSIVE MODE")
        cursor.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE")
        cursor.execute(f"DELETE FROM {table}")  # noqa: S608
        cursor.execute(f"INSERT INTO {table} ({', '.join((*TALLY_HOME, *_FIGURES))}) {_COUNTED}")  # noqa: S608
        return cursor.rowcount
