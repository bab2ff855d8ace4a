"""The writers' vector indexes' migration (0018): built concurrently, and run
again after a build that failed, it drops what that build left under the
index's name and builds the index anew."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

NAMES = ("fragment_live_user_vectors", "fragment_live_agent_vectors")


def _definitions() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT i.indexname, i.indexdef, x.indisvalid FROM pg_indexes AS i "
                       "JOIN pg_class AS c ON c.relname = i.indexname JOIN pg_index AS x ON x.indexrelid = c.oid "
                       "WHERE i.tablename = 'memoryhub_fragment' AND i.indexname = ANY(%s)", [list(NAMES)])
        return {name: f"{definition} valid={valid}" for name, definition, valid in cursor.fetchall()}


@pytest.mark.django_db(transaction=True)
def test_a_failed_builds_leftover_is_dropped_and_the_index_built_anew():
    built = _definitions()
    assert set(built) == set(NAMES)
    assert all("INCLUDE (id, embedding)" in text and "retired_at IS NULL" in text and text.endswith("valid=True")
               for text in built.values()), built
    with connection.cursor() as cursor:
        # A concurrent build waits for older transactions: none should be open, and none waits long.
        cursor.execute("SET statement_timeout = '120s'")
    try:
        call_command("migrate", "memoryhub", "0017", verbosity=0)
        assert _definitions() == {}
        # What an interrupted build leaves: an index under the name, not the one the model describes
        # (a concurrent build that fails leaves it marked invalid; this one stands for it).
        with connection.cursor() as cursor:
            cursor.execute("CREATE INDEX fragment_live_user_vectors ON memoryhub_fragment (created_at)")
    finally:
        call_command("migrate", "memoryhub", verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute("RESET statement_timeout")
    assert _definitions() == built
