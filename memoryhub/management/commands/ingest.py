"""`manage.py ingest WORKSPACE SOURCE PATH`: feed a folder or an export into a
connected source's shared memory.

PATH is either
- a folder: every *.md, *.markdown and *.txt below it (hidden ones skipped) is
  a document whose resource id is its path relative to the folder; an optional
  front matter block (--- key: value ---) may set title, uri (an http(s)
  link), created_at (or date) and collection, else the title is the first
  heading or the file name, the document has no link and created_at is the
  file's modification time; or
- a JSON Lines file (*.jsonl, *.ndjson): one document per line with the
  ingestion API's fields (resource_id, title, uri, created_at, collection,
  text, or turns for a conversation), or {"resource_id": ..., "deleted": true}
  to delete one.

Idempotent and resumable: every document is written in its own transaction,
and a document already stored with the same content is skipped before any
transaction opens, so re-running after an interruption (or after success)
only does what is left. A document that is refused (over a limit, bad
created_at, unknown collection) is reported with its line or file and the run
goes on; the command then exits with an error.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from tqdm import tqdm

from memoryhub.celery import app as celery_app
from memoryhub.errors import MemoryhubError, NotFound
from memoryhub.management.answers import WorkspaceCommand
from memoryhub.models import Source
from memoryhub.services import enrichment, ingest
from memoryhub.services.sources import source_feeding

TEXT_SUFFIXES = (".md", ".markdown", ".txt")
# --wait queues the source's embedding again when nothing moved for this long.
REQUEUE_AFTER_SECONDS = 20.0
JSONL_SUFFIXES = (".jsonl", ".ndjson")
FRONT_MATTER_KEYS = {"title": "title", "uri": "uri", "url": "uri", "created_at": "created_at", "date": "created_at",
                     "created": "created_at", "collection": "collection"}


@dataclass
class Item:
    """One document of the input, or why it could not be read."""

    where: str  # file path or "line N", for messages
    fields: dict[str, Any] = field(default_factory=dict)
    delete: bool = False
    replaced: bool = False  # a later line of the export names the same document
    error: str = ""


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---\n", 4)
    if end < 0:
        return {}, text
    meta = {}
    for line in text[4:end].splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in FRONT_MATTER_KEYS:
            meta[FRONT_MATTER_KEYS[key.strip().lower()]] = value.strip().strip("\"'")
    return meta, text[end + 5:]


def _first_heading(text: str) -> str:
    for line in text.splitlines()[:40]:
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def folder_items(root: Path) -> Iterator[Item]:
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if not path.is_file() or path.suffix.lower() not in TEXT_SUFFIXES:
            continue
        if any(part.startswith(".") for part in relative.parts):
            continue
        try:
            raw = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            yield Item(where=str(relative), error=f"cannot be read as UTF-8 text ({exc})")
            continue
        meta, text = _front_matter(raw)
        modified = dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.UTC).replace(microsecond=0)
        yield Item(where=str(relative), fields={
            "resource_id": relative.as_posix(),
            "title": meta.get("title") or _first_heading(text) or path.stem,
            # No link unless the front matter gives one: a file:// URI of this machine
            # is no link for readers, and the service refuses it (only http(s) links).
            "uri": meta.get("uri") or "",
            "created_at": meta.get("created_at") or modified.isoformat(),
            "collection": meta.get("collection"),
            "text": text,
        })


def _last_lines(path: Path) -> dict[str, int]:
    """resource id -> the last line that names it: in an export, a later line
    replaces an earlier one, so only the last is applied (and a re-run of an
    export that creates then deletes a document changes nothing)."""
    last: dict[str, int] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and isinstance(data.get("resource_id"), str):
                last[data["resource_id"]] = number
    return last


def jsonl_items(path: Path) -> Iterator[Item]:
    last = _last_lines(path)
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            where = f"line {number}"
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError as exc:
                yield Item(where=where, error=f"is not valid JSON ({exc})")
                continue
            if not isinstance(data, dict):
                yield Item(where=where, error="is not a JSON object")
                continue
            delete = data.pop("deleted", False) is True
            unknown = sorted(set(data) - set(ingest.DOCUMENT_FIELDS))
            if unknown:
                yield Item(where=where, error=f"has unknown field {unknown[0]!r}")
                continue
            replaced = last.get(data.get("resource_id"), number) > number  # type: ignore[arg-type]
            yield Item(where=where, fields=data, delete=delete, replaced=replaced)


def _count(path: Path, is_folder: bool) -> int:
    if is_folder:
        return sum(1 for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


class Command(WorkspaceCommand):
    help = "Ingest a folder of Markdown/text files or a JSON Lines export into a connected source's memory."

    def add_operation_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("source", help="The connected source's name.")
        parser.add_argument("path", help="A folder, or a .jsonl/.ndjson file.")
        parser.add_argument("--collection", default=None,
                            help="For documents that name none (default: the source's default collection).")
        parser.add_argument("--delete-missing", action="store_true",
                            help="Folder only: delete this source's documents whose file is gone.")
        parser.add_argument("--wait", action="store_true",
                            help="After ingesting, wait for the Celery workers to embed everything.")
        parser.add_argument("--wait-timeout", type=float, default=600.0, metavar="SECONDS",
                            help="Give up waiting after this long, saying how many fragments are stuck and why.")
        parser.add_argument("--embed-here", action="store_true",
                            help="After ingesting, embed what is pending in this process (no worker needed).")
        parser.add_argument("--no-progress", action="store_true", help="No progress bar.")

    def handle(self, *args: Any, source: str, path: str, collection: str | None, delete_missing: bool, wait: bool,
               embed_here: bool, no_progress: bool, wait_timeout: float, **options: Any) -> None:
        root = Path(path)
        is_folder = root.is_dir()
        if not is_folder and not (root.is_file() and root.suffix.lower() in JSONL_SUFFIXES):
            raise CommandError(f"{path} is neither a folder nor a .jsonl/.ndjson file.")
        if delete_missing and not is_folder:
            raise CommandError("--delete-missing applies to a folder; a JSON Lines export says what it deletes.")
        self.json = options["json"]
        src = source_feeding(caller=self.caller(options), name=source)

        stored = ingest.source_documents(source=src)
        seen: set[str] = set()
        tally: Counter[str] = Counter()
        failures: list[str] = []
        items = folder_items(root) if is_folder else jsonl_items(root)
        # tqdm writes to the raw stream: OutputWrapper would end every redraw with a newline.
        bar = tqdm(items, total=_count(root, is_folder), unit="doc", disable=no_progress, file=self.stderr._out,
                   dynamic_ncols=True)
        for item in bar:
            outcome = self._one(src, item, stored, collection, seen, tally)
            if outcome:
                failures.append(f"{item.where}: {outcome}")
                tally["failed"] += 1
            bar.set_postfix(created=tally["created"], updated=tally["updated"], unchanged=tally["unchanged"],
                            failed=tally["failed"], refresh=False)
        bar.close()
        if delete_missing:
            for resource_id in sorted(set(stored) - seen):
                tally["retired"] += ingest.document_delete(source=src, resource_id=resource_id).retired
                tally["deleted"] += 1

        kinds = ("created", "updated", "unchanged", "deleted", "replaced", "failed")
        replaced = f", {tally['replaced']} replaced by a later line" if tally["replaced"] else ""
        summary = (
            f"{sum(tally[k] for k in kinds)} documents: "
            f"{tally['created']} created, {tally['updated']} updated, {tally['unchanged']} unchanged, "
            f"{tally['deleted']} deleted{replaced}, {tally['failed']} failed; "
            f"{tally['added']} fragments added, {tally['retired']} retired."
        )
        if not options["json"]:
            self.stdout.write(summary)
        if embed_here:
            self._embed_here(src, no_progress)
        elif wait:
            self._wait(src, no_progress, wait_timeout)
        if options["json"]:
            self.answer(options, {
                "source": src.agent.name, "documents": {kind: tally[kind] for kind in kinds},
                "fragments_added": tally["added"], "fragments_retired": tally["retired"],
                "pending_embedding": ingest.source_progress(source=src)["pending_embedding"],
                "refused": failures,
            }, summary)
        if failures:
            for line in failures[:50]:
                self.stderr.write(f"  {line}")
            raise CommandError(f"{len(failures)} documents were refused; fix them and run again "
                               "(everything else is stored and will be skipped).")

    def _one(self, src: Source, item: Item, stored: dict[str, tuple[str, str, str]], collection: str | None,
             seen: set[str], tally: Counter[str]) -> str:
        if item.error:
            return item.error
        if item.replaced:
            tally["replaced"] += 1
            return ""
        try:
            if item.delete:
                return self._delete(src, item, tally)
            fields = dict(item.fields)
            if fields.get("collection") is None and collection:
                fields["collection"] = collection
            document = ingest.document_validated(**fields)
            seen.add(document.resource_id)
            if ingest.document_unchanged(document=document, stored=stored.get(document.resource_id)):
                tally["unchanged"] += 1
                return ""
            upserted = ingest.document_upsert(source=src, document=document)
        except MemoryhubError as exc:
            return exc.message
        tally[upserted.status] += 1
        tally["added"] += upserted.added
        tally["retired"] += upserted.retired
        return ""

    def _delete(self, src: Source, item: Item, tally: Counter[str]) -> str:
        try:
            result = ingest.document_delete(source=src, resource_id=item.fields.get("resource_id"))
        except NotFound:
            # A tombstone for a document this source never sent: nothing to do.
            tally["unchanged"] += 1
            return ""
        tally["deleted" if result.status == "deleted" else "unchanged"] += 1
        tally["retired"] += result.retired
        return ""

    def _embed_here(self, src: Source, no_progress: bool) -> None:
        pending = ingest.source_progress(source=src)["pending_embedding"]
        with tqdm(total=pending, unit="fragment", desc="embedding", disable=no_progress,
                  file=self.stderr._out) as bar:
            while True:
                run = enrichment.fragments_embed_pending(source_id=src.pk, max_batches=1)
                bar.update(run.embedded)
                if not run.more:
                    break
        self.embedded_line()

    def _wait(self, src: Source, no_progress: bool, timeout: float) -> None:
        """Wait for the workers to embed what this source sent: progress, the
        embedding task queued again whenever nothing moved for a while (an
        earlier run may have queued it where no worker listened), and a deadline
        with the reason the rest is stuck."""
        started = time.monotonic()
        pending = ingest.source_progress(source=src)["pending_embedding"]
        enrichment.embedding_enqueue(source=src, again=True)
        moved = time.monotonic()
        with tqdm(total=pending, unit="fragment", desc="embedding (workers)", disable=no_progress,
                  file=self.stderr._out) as bar:
            while pending:
                if time.monotonic() - started > timeout:
                    raise CommandError(self._stuck(pending, timeout))
                time.sleep(0.5)
                now_pending = ingest.source_progress(source=src)["pending_embedding"]
                if now_pending < pending:
                    moved = time.monotonic()
                elif time.monotonic() - moved > REQUEUE_AFTER_SECONDS:
                    enrichment.embedding_enqueue(source=src, again=True)
                    moved = time.monotonic()
                bar.update(max(0, pending - now_pending))
                pending = now_pending
        self.embedded_line()

    def embedded_line(self) -> None:
        if not self.json:
            self.stdout.write("Every fragment is embedded.")

    @staticmethod
    def _stuck(pending: int, timeout: float) -> str:
        broker = settings.CELERY_BROKER_URL
        try:
            answered = celery_app.control.ping(timeout=1.0)
        except Exception:  # noqa: BLE001 - an unreachable broker is the answer
            answered = None
        if answered is None:
            why = f"the task broker ({broker}) cannot be reached"
        elif not answered:
            why = (f"no Celery worker answers on {broker}: start `./dev serve`, or `celery -A memoryhub worker` "
                   "with the same REDIS_URL")
        else:
            why = "workers answer but did not embed them; see their logs (failed embeddings are retried with backoff)"
        return (f"{pending} fragments are still waiting for their embedding after {timeout:g} s: {why}. They are "
                "stored and found by full-text search already; the sweep embeds them once a worker runs.")
