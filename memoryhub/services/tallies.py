"""The tallies of live fragments per home (models.FragmentTally), kept small.

PostgreSQL's triggers add one row per home for every statement that changes
fragments; BM25 sums a reader's rows (memoryhub.services.search,
reader_totals_sql), so the fewer rows, the cheaper the sum. The beat folds each
home's rows into one.
"""

from __future__ import annotations

from django.db import connection

from memoryhub.models import FragmentTally

FOLD_TASK = "memoryhub.tasks.fold_tallies"

_HOME = ("tenant_id", "collection_id", "owner_user_id", "owner_agent_id")
_FIGURES = ("fragments", "words", "measured")


def fold_tallies() -> int:
    """Fold every home's tally rows into one (into none when they sum to
    nothing), in one statement; returns how many rows it folded away.

    A reader sees the tallies from before the statement or from after it,
    with the same sums. Rows a write adds while it runs are not in its snapshot
    and stay as they are. Two folds at once fold each row once: the second
    skips the rows the first deleted, and adds nothing for them."""
    table = FragmentTally._meta.db_table
    home = ", ".join(_HOME)
    same_home = " AND ".join(f"t.{name} IS NOT DISTINCT FROM c.{name}" for name in _HOME)
    sums = ", ".join(f"sum({name})" for name in _FIGURES)
    some = " OR ".join(f"sum({name}) <> 0" for name in _FIGURES)
    with connection.cursor() as cursor:
        cursor.execute(f"""
            WITH crowded AS (
                SELECT {home} FROM {table} GROUP BY {home} HAVING count(*) > 1 OR NOT ({some})
            ), folded AS (
                DELETE FROM {table} AS t USING crowded AS c WHERE {same_home}
                RETURNING {", ".join(f"t.{name}" for name in (*_HOME, *_FIGURES))}
            ), kept AS (
                INSERT INTO {table} ({home}, {", ".join(_FIGURES)})
                SELECT {home}, {sums} FROM folded GROUP BY {home} HAVING {some}
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM folded) - (SELECT count(*) FROM kept)
        """)  # noqa: S608
        return int(cursor.fetchone()[0])
