"""`manage.py backup PATH` and `manage.py restore PATH` round trip: after a
restore, the counts, a person's search results and a receipt replay are what
they were when the backup was taken."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from memoryhub.models import Fragment, Receipt, Tenant, User
from memoryhub.services.fragments import fragment_write
from memoryhub.services.ingest import fragment_ingest
from memoryhub.services.receipts import receipt_replay
from memoryhub.services.search import fragments_search


def counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in (Tenant, User, Fragment, Receipt)}


def test_backup_and_restore_round_trip(live_people, tmp_path):
    people = live_people
    bruno = people.caller(people.bruno)
    fragment_write(caller=bruno, content="My standing desk is in room 4.")
    fragment_ingest(source=people.wiki, value="Standing desks are booked in the office app.")
    result = fragments_search(caller=bruno, query="standing desk")
    before = counts()
    served = result.served_ids
    archive = tmp_path / "memory.dump"

    out = io.StringIO()
    call_command("backup", str(archive), stdout=out)
    assert archive.stat().st_size > 0 and "backup written" in out.getvalue()

    # Things change after the backup…
    fragment_write(caller=bruno, content="My standing desk moved to room 9.")
    Receipt.objects.all().delete()
    Tenant.objects.filter(slug="globex").delete()
    assert counts() != before

    call_command("restore", str(archive), yes=True, stdout=io.StringIO())

    assert counts() == before
    bruno = people.caller(User.objects.get(username="bruno", tenant__slug="acme"))
    assert fragments_search(caller=bruno, query="standing desk").served_ids == served
    replay = receipt_replay(caller=bruno, receipt_id=result.receipt_id)
    assert replay.replayed and replay.served_now == served and replay.missing_now == []


def test_restore_refuses_a_missing_archive(db, tmp_path):
    with pytest.raises(CommandError, match="No backup archive"):
        call_command("restore", str(tmp_path / "none.dump"), yes=True)
