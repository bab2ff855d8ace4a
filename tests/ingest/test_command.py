"""`manage.py ingest`: a folder or a JSON Lines export, idempotent and resumable."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from memoryhub.models import Fragment, Resource
from memoryhub.services import ingest, sources

MTIME = dt.datetime(2026, 2, 1, 12, 0, tzinfo=dt.UTC)


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("ingest", "acme", "wiki", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.utime(path, (MTIME.timestamp(), MTIME.timestamp()))


@pytest.fixture
def folder(tmp_path) -> Path:
    root = tmp_path / "wiki"
    write(root, "oncall.md", "# On-call handbook\n\nThe rotation changes every Monday at 10:00.")
    write(root, "teams/billing.markdown",
          "---\ntitle: Billing team\nuri: https://wiki.example.com/teams/billing\n"
          "created_at: 2025-11-03T08:00:00Z\ncollection: incidents\n---\n"
          "Billing owns invoices and the payment processor integration.")
    write(root, "notes/standup.txt", "Standup is at 09:30 in the small room.")
    for i in range(5):
        write(root, f"runbooks/service-{i}.md", f"# Service {i}\n\nRestart service {i} with the deploy tool.")
    write(root, ".drafts/secret.md", "A hidden draft is not ingested.")
    write(root, "diagram.png", "not text")
    return root


def state() -> set[tuple]:
    return set(Fragment.objects.values_list("pk", "value", "retired_at", "collection__name", "created_at"))


def test_a_folder_becomes_documents_with_their_metadata(people, folder):
    out, err = run(str(folder), "--no-progress")
    assert "8 documents: 8 created, 0 updated, 0 unchanged, 0 deleted, 0 failed; 8 fragments added" in out
    assert set(Resource.objects.values_list("external_id", flat=True)) == {
        "oncall.md", "teams/billing.markdown", "notes/standup.txt", *(f"runbooks/service-{i}.md" for i in range(5)),
    }
    oncall = Resource.objects.get(external_id="oncall.md")
    assert (oncall.title, oncall.created_at, oncall.source) == ("On-call handbook", MTIME, people.wiki)
    # A file of this machine is no link for readers: without a front matter uri a document has none.
    assert oncall.uri == ""
    billing = Resource.objects.get(external_id="teams/billing.markdown")
    assert (billing.title, billing.created_at) == ("Billing team", dt.datetime(2025, 11, 3, 8, tzinfo=dt.UTC))
    assert billing.uri == "https://wiki.example.com/teams/billing"
    fragment = Fragment.objects.get(resources=billing)
    assert fragment.collection.name == "incidents"
    assert fragment.value == "Billing owns invoices and the payment processor integration."
    assert Resource.objects.get(external_id="notes/standup.txt").title == "standup"


def test_running_it_again_changes_nothing(people, folder):
    run(str(folder), "--no-progress")
    before = state()
    out, _ = run(str(folder), "--no-progress")
    assert "8 documents: 0 created, 0 updated, 8 unchanged" in out
    assert state() == before

    write(folder, "oncall.md", "# On-call handbook\n\nThe rotation changes every Tuesday at 10:00.")
    out, _ = run(str(folder), "--no-progress")
    assert "1 updated, 7 unchanged" in out and "1 fragments added, 1 retired" in out


def test_an_interrupted_run_resumes_where_it_stopped(people, folder, monkeypatch):
    real_upsert = ingest.document_upsert
    calls = []

    def upsert_then_die(**kwargs):  # type: ignore[no-untyped-def]
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(kwargs["document"].resource_id)
        return real_upsert(**kwargs)

    monkeypatch.setattr(ingest, "document_upsert", upsert_then_die)
    with pytest.raises(KeyboardInterrupt):
        run(str(folder), "--no-progress")
    assert set(Resource.objects.values_list("external_id", flat=True)) == set(calls)

    monkeypatch.setattr(ingest, "document_upsert", real_upsert)
    out, _ = run(str(folder), "--no-progress")
    assert "8 documents: 5 created, 0 updated, 3 unchanged" in out
    assert Resource.objects.count() == 8 and Fragment.objects.filter(retired_at__isnull=True).count() == 8


def test_delete_missing_retires_documents_whose_file_is_gone(people, folder):
    run(str(folder), "--no-progress")
    (folder / "notes/standup.txt").unlink()
    out, _ = run(str(folder), "--no-progress", "--delete-missing")
    assert "7 unchanged, 1 deleted" in out
    assert Resource.objects.get(external_id="notes/standup.txt").deleted_at is not None


def test_a_front_matter_link_that_is_not_http_is_refused_and_the_rest_goes_on(people, folder):
    write(folder, "unsafe.md", "---\nuri: javascript:alert(1)\n---\nA page with a dangerous link.")
    write(folder, "local.md", "---\nurl: file:///srv/wiki/local.md\n---\nA page that links a local file.")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="2 documents were refused"):
        call_command("ingest", "acme", "wiki", str(folder), "--no-progress", stdout=out, stderr=err)
    assert "10 documents: 8 created, 0 updated, 0 unchanged, 0 deleted, 2 failed" in out.getvalue()
    for name in ("unsafe.md", "local.md"):
        assert f"{name}: uri must be an absolute http:// or https:// URL." in err.getvalue()
    assert not Resource.objects.filter(external_id__in=["unsafe.md", "local.md"]).exists()


def test_it_shows_a_progress_bar(people, folder):
    _, err = run(str(folder))
    assert "8/8" in err and "doc" in err


def test_embed_here_leaves_nothing_pending(people, folder):
    out, _ = run(str(folder), "--no-progress", "--embed-here")
    assert "Every fragment is embedded." in out
    assert ingest.source_progress(source=people.wiki)["pending_embedding"] == 0


def test_a_json_lines_export_with_deletions_and_bad_lines(people, tmp_path):
    export = tmp_path / "export.jsonl"
    lines = [
        {"resource_id": "T-1", "title": "Outage", "created_at": "2026-01-02T03:04:05Z", "collection": "incidents",
         "text": "The January outage was caused by an expired certificate."},
        {"resource_id": "T-2", "title": "x" * (ingest.TITLE_MAX_CHARS + 1), "text": "Too long a title."},
        {"resource_id": "T-3", "text": "Tickets are triaged every morning.", "created_at": "last week"},
        {"resource_id": "T-4", "text": "A ticket that is deleted below."},
        {"resource_id": "T-4", "deleted": True},
        {"resource_id": "T-5", "text": "Has a field we do not know.", "owner": "x"},
        {"resource_id": "never-sent", "deleted": True},
    ]
    export.write_text("\n".join(json.dumps(line) for line in lines) + "\n{broken json\n\n", encoding="utf-8")

    with pytest.raises(CommandError, match="4 documents were refused"):
        out, err = run(str(export), "--no-progress")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError):
        call_command("ingest", "acme", "wiki", str(export), "--no-progress", stdout=out, stderr=err)
    assert "line 2: title is 501 characters long; the limit is 500." in err.getvalue()
    assert "line 3: created_at must be an RFC 3339 date-time." in err.getvalue()
    assert "line 6: has unknown field 'owner'" in err.getvalue()
    assert "line 8: is not valid JSON" in err.getvalue()
    # The second run changed nothing: every good line was already done, and T-4's
    # creation is replaced by its later deletion.
    assert "0 created, 0 updated, 3 unchanged, 0 deleted, 1 replaced by a later line, 4 failed" in out.getvalue()

    outage = Fragment.objects.get(resources__external_id="T-1")
    assert (outage.collection.name, outage.created_at) == ("incidents", dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC))
    # Created, then deleted later in the same export: the last line wins, so it never appears.
    assert not Resource.objects.filter(external_id__in=["T-2", "T-3", "T-4", "T-5"]).exists()

    export.write_text(json.dumps({"resource_id": "T-1", "deleted": True}) + "\n", encoding="utf-8")
    out, _ = run(str(export), "--no-progress")
    assert "1 documents: 0 created, 0 updated, 0 unchanged, 1 deleted, 0 failed; 0 fragments added, 1 retired." in out
    assert Resource.objects.get(external_id="T-1").deleted_at is not None


def test_unknown_workspace_source_or_path_is_a_clear_error(people, tmp_path):
    with pytest.raises(CommandError, match="No connected source named 'nope'"):
        call_command("ingest", "acme", "nope", str(tmp_path), "--no-progress")
    # Another workspace's source is not one of this workspace's.
    with pytest.raises(CommandError, match="No connected source named 'globex-wiki'"):
        call_command("ingest", "acme", "globex-wiki", str(tmp_path), "--no-progress")
    with pytest.raises(CommandError, match="No workspace named"):
        call_command("ingest", "nowhere", "wiki", str(tmp_path), "--no-progress")
    with pytest.raises(CommandError, match="neither a folder nor a .jsonl"):
        call_command("ingest", "acme", "wiki", str(tmp_path / "missing.csv"), "--no-progress")


def test_it_acts_as_the_admin_it_names(people, folder):
    out = io.StringIO()
    call_command("ingest", "acme", "wiki", str(folder), "--no-progress", "--as", "ada", stdout=out)
    assert "8 documents: 8 created" in out.getvalue()
    for acting_as, message in (("bruno", "Only a workspace admin can do this."),
                               ("olga", "No person named 'olga' in this workspace.")):
        with pytest.raises(CommandError, match=message):
            call_command("ingest", "acme", "wiki", str(folder), "--no-progress", "--as", acting_as)


def test_a_revoked_source_cannot_be_fed(people, folder):
    sources.source_revoke(caller=people.system(), name="wiki")
    with pytest.raises(CommandError, match="The source 'wiki' has been revoked."):
        call_command("ingest", "acme", "wiki", str(folder), "--no-progress")
    assert not Resource.objects.exists()


def test_a_json_lines_export_of_conversations(people, tmp_path):
    export = tmp_path / "chats.jsonl"
    lines = [
        {"resource_id": "chat-1", "title": "Standup", "created_at": "2026-01-05T09:00:00Z",
         "turns": [{"speaker": "Ana", "text": "The deploy is blocked."}, {"speaker": "Ben", "text": "On what?"}]},
        {"resource_id": "chat-2", "turns": [{"speaker": "Ana", "text": "hi", "mood": "ok"}]},
        {"resource_id": "chat-3", "text": "both", "turns": [{"speaker": "Ana", "text": "hi"}]},
    ]
    export.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="2 documents were refused"):
        call_command("ingest", "acme", "wiki", str(export), "--no-progress", stdout=out, stderr=err)
    assert "line 2: turns[0] has unknown field 'mood'" in err.getvalue()
    assert "line 3: A document has text or turns, not both." in err.getvalue()
    values = list(Fragment.objects.filter(resources__external_id="chat-1").order_by("position")
                  .values_list("value", flat=True))
    assert values == ["Ana: The deploy is blocked.", "Ben: On what?"]
