"""Connected sources (decision 6): documents in, shared fragments out.

A connected source sends whole documents. Each document is split into
fragments (paragraphs packed up to CHUNK_MAX_CHARS, long paragraphs cut at
lines, then sentences, then words), and each fragment is stored in the
document's collection, attributed to the source as its agent, linked to the
document as its resource and dated with the source's own created_at.

A document is either text (split as above) or a conversation's `turns`
(speaker and text each): every turn is one fragment, "Speaker: text", in
order; a turn over the bound is cut like a paragraph, each piece keeping its
speaker. Every fragment keeps its place in its document (`position`) and a
searchable context (memoryhub.services.indexing: its date, the document's
title and, for a turn, the turn before it), searched but never served.

A document is all or nothing: it is validated whole before anything is
written, and written in one transaction.

- Upsert. The document's content hash (its text or turns, collection,
  created_at and the chunker's version) is compared with the stored one: the
  same document sent again changes nothing. Otherwise fragments whose text,
  place and context are unchanged are kept, the others are retired at this instant and the new ones recorded at
  the same instant, so an as-of read of the past still sees the old text and
  a read of now sees only the new. Title and URI live on the resource and are
  updated in place.
- Delete. Every live fragment of the document is retired ("forgotten") at this
  instant; the resource keeps its row, marked deleted.

Every change of content (and a deletion) starts a new ResourceVersion, so a
memory linked to the document can be judged stale or ungrounded as of any
instant (memoryhub.services.provenance). The document's own fragments never go
stale: the upsert that changes the document replaces them in its transaction.

Tier 1 is the commit itself: the fragments are in the full-text index at once.
Tier 2, the embedding, runs in Celery (memoryhub.services.enrichment) after
commit, in batches; its write only fills a vector that is still empty, so a redelivered
or duplicated task can never embed a fragment twice.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from django.db import connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from contract import limits
from memoryhub import access
from memoryhub.errors import InvalidArgument, NotFound
from memoryhub.models import Collection, Fragment, Resource, ResourceVersion, Source
from memoryhub.services.arguments import checked_instant, checked_text, has_control_character
from memoryhub.services.conflicts import one_at_a_time
from memoryhub.services.enrichment import embedding_enqueue, enrichment_enqueue
from memoryhub.services.indexing import fragment_context
from memoryhub.services.write import fact_hash, subject_of

logger = logging.getLogger("memoryhub.ingest")

# ---------------------------------------------------------------- limits

RESOURCE_ID_MAX_CHARS: Final = 512  # Resource.external_id, and memory_search's resource_ids items
TITLE_MAX_CHARS: Final = 500  # Resource.title
URI_MAX_CHARS: Final = 2000  # Resource.uri
COLLECTION_MAX_CHARS: Final = 64  # Collection.name
# 256 Ki characters: a long handbook chapter. Larger documents are split by the
# connector; the bound keeps one document's transaction (up to ~300 fragments)
# and its request body small.
TEXT_MAX_CHARS: Final = 256 * 1024
# A source's created_at may run ahead of our clock by this much (clock skew,
# time zones gone wrong); further ahead it is a mistake.
CREATED_AT_MAX_AHEAD: Final = dt.timedelta(hours=24)

# ---------------------------------------------------------------- chunking

# 1000 characters is at most 4000 bytes of UTF-8, so a fragment always fits
# the 4 KiB per-fragment budget unclipped, and about the 256 word pieces the
# embedder reads before it truncates.
CHUNK_MAX_CHARS: Final = 1000
# Part of the content hash: a new chunker re-splits documents on their next upsert.
# 2: fragments keep their position and context (turns, dates, titles).
CHUNKER_VERSION: Final = 2
# A conversation document: at most this many turns, each speaker named in at
# most SPEAKER_MAX_CHARS; speakers and texts together stay within TEXT_MAX_CHARS.
TURNS_MAX_ITEMS: Final = 5000
SPEAKER_MAX_CHARS: Final = 100

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")


def chunk_text(text: str, *, max_chars: int = CHUNK_MAX_CHARS) -> list[str]:
    """Fragments of `text`, in order, each at most `max_chars` characters.

    Paragraphs (blank-line separated; fenced code blocks count as one) are
    packed together up to the bound; a Markdown heading starts a new fragment
    so a section's title stays with its text. A paragraph over the bound is
    cut at line breaks, then sentence ends, then spaces, and only as a last
    resort inside a word. Repeated fragments are kept once.
    """
    chunks: list[str] = []
    current = ""
    current_is_heading = False
    for block, is_heading in _blocks(text.replace("\r\n", "\n").replace("\r", "\n")):
        for piece in _fit(block, max_chars, level=0):
            # A heading begins a new fragment, unless the current one is only headings.
            starts_section = is_heading and current and not current_is_heading
            if current and not starts_section and len(current) + 2 + len(piece) <= max_chars:
                current = f"{current}\n\n{piece}"
                current_is_heading = current_is_heading and is_heading
            else:
                if current:
                    chunks.append(current)
                current, current_is_heading = piece, is_heading
    if current:
        chunks.append(current)
    return list(dict.fromkeys(chunks))


def _blocks(text: str) -> Iterable[tuple[str, bool]]:
    """(paragraph, is_heading) in order."""
    lines: list[str] = []
    in_fence = False

    def flush() -> Iterable[tuple[str, bool]]:
        block = "\n".join(lines).strip()
        lines.clear()
        if block:
            yield block, False

    for line in text.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
            lines.append(line)
            continue
        if in_fence:
            lines.append(line)
            continue
        if not line.strip():
            yield from flush()
        elif _HEADING.match(line):
            yield from flush()
            yield line.strip(), True
        else:
            lines.append(line)
    yield from flush()


def _fit(text: str, max_chars: int, *, level: int) -> list[str]:
    """`text` cut into pieces of at most `max_chars`, at the coarsest boundary that works."""
    text = text.strip()
    if len(text) <= max_chars:
        return [text] if text else []
    if level == 0:
        parts, joiner = text.split("\n"), "\n"
    elif level == 1:
        parts, joiner = _SENTENCE_END.split(text), " "
    elif level == 2:
        parts, joiner = text.split(" "), " "
    else:
        return [text[i:i + max_chars] for i in range(0, len(text), max_chars)]
    pieces: list[str] = []
    for part in parts:
        pieces.extend(_fit(part, max_chars, level=level + 1))
    return _pack(pieces, joiner, max_chars)


def _pack(pieces: list[str], joiner: str, max_chars: int) -> list[str]:
    packed: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + len(joiner) + len(piece) <= max_chars:
            current = f"{current}{joiner}{piece}"
        else:
            if current:
                packed.append(current)
            current = piece
    if current:
        packed.append(current)
    return packed


def chunk_hash(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- documents

DOCUMENT_FIELDS: Final = ("resource_id", "title", "uri", "created_at", "collection", "text", "turns")
TURN_FIELDS: Final = ("speaker", "text")


@dataclass(frozen=True)
class Turn:
    speaker: str
    text: str


@dataclass(frozen=True)
class Document:
    """A validated document as a source sent it: text, or a conversation's turns."""

    resource_id: str
    title: str
    uri: str
    created_at: dt.datetime | None
    collection: str | None
    text: str
    turns: tuple[Turn, ...] = ()

    @property
    def content_hash(self) -> str:
        """What decides whether the fragments must change (title and URI do not)."""
        payload: dict[str, Any] = {
            "chunker": CHUNKER_VERSION,
            "collection": self.collection,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "text": self.text,
        }
        if self.turns:
            payload["turns"] = [[turn.speaker, turn.text] for turn in self.turns]
        return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@dataclass(frozen=True)
class Piece:
    """One fragment a document splits into: its value, its place, its context."""

    value: str
    position: int
    context: str


def document_pieces(document: Document, *, created_at: dt.datetime) -> list[Piece]:
    """The fragments `document` splits into, in order."""
    if not document.turns:
        context = fragment_context(created_at=created_at, title=document.title)
        return [Piece(chunk, position, context) for position, chunk in enumerate(chunk_text(document.text))]
    pieces: list[Piece] = []
    before = ""
    for turn in document.turns:
        prefix = f"{turn.speaker}: "
        for part in _fit(turn.text, CHUNK_MAX_CHARS - len(prefix), level=0):
            value = prefix + part
            pieces.append(Piece(value, len(pieces),
                                fragment_context(created_at=created_at, title=document.title, before=before)))
            before = value
    return pieces


def resource_id_validated(value: Any) -> str:
    """An identifier: no control character (a line break in it made a document
    its source could write but never read or delete, no URL route carries it)."""
    resource_id = checked_text(value, field="resource_id", max_chars=RESOURCE_ID_MAX_CHARS, required=True)
    if has_control_character(resource_id):
        raise InvalidArgument("resource_id may not contain control characters (line breaks, tabs).",
                              field="resource_id")
    return resource_id


def uri_validated(value: Any) -> str:
    """A document's link: empty, or an absolute http(s) URL. Any other scheme
    (javascript:, data:, file:...) is refused: pages render it as a link."""
    uri = checked_text(value, field="uri", max_chars=URI_MAX_CHARS).strip()
    # A line break or another control character inside (a space is left to the
    # browser, which encodes it; the link is escaped wherever it is shown).
    if has_control_character(uri):
        raise InvalidArgument("uri must be an absolute http:// or https:// URL.", field="uri")
    if not uri:
        return ""
    try:
        parts = urlsplit(uri)
    except ValueError:
        parts = None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise InvalidArgument("uri must be an absolute http:// or https:// URL.", field="uri")
    return uri


def turns_validated(value: Any) -> tuple[Turn, ...]:
    """A conversation's turns: a non-empty list of {speaker, text}; errors name
    the item (`turns[3].text`)."""
    if not isinstance(value, list) or not value:
        raise InvalidArgument("turns must be a non-empty list of {speaker, text} objects.", field="turns")
    if len(value) > TURNS_MAX_ITEMS:
        raise InvalidArgument(f"turns has {len(value)} items; the limit is {TURNS_MAX_ITEMS}.", field="turns")
    turns: list[Turn] = []
    total = 0
    for index, item in enumerate(value):
        where = f"turns[{index}]"
        if not isinstance(item, dict):
            raise InvalidArgument(f"{where} must be an object with speaker and text.", field=where)
        unknown = sorted(set(item) - set(TURN_FIELDS))
        if unknown:
            raise InvalidArgument(f"{where} has unknown field {unknown[0]!r}; a turn has speaker and text.",
                                  field=f"{where}.{unknown[0]}")
        speaker = checked_text(item.get("speaker"), field=f"{where}.speaker", max_chars=SPEAKER_MAX_CHARS,
                               required=True).strip()
        text = checked_text(item.get("text"), field=f"{where}.text", max_chars=TEXT_MAX_CHARS, required=True)
        total += len(speaker) + len(text)
        if total > TEXT_MAX_CHARS:
            raise InvalidArgument(
                f"turns hold more than {TEXT_MAX_CHARS} characters (speakers and texts together); split the "
                "conversation into documents.", field=where)
        turns.append(Turn(speaker, text.strip()))
    return tuple(turns)


def document_validated(
    *, resource_id: Any = None, text: Any = None, title: Any = None, uri: Any = None, created_at: Any = None,
    collection: Any = None, turns: Any = None, now: dt.datetime | None = None,
) -> Document:
    """Every field checked against its limit; InvalidArgument names the first one wrong."""
    now = now or timezone.now()
    instant = checked_instant(created_at, field="created_at")
    if instant is not None and instant > now + CREATED_AT_MAX_AHEAD:
        raise InvalidArgument(
            f"created_at {instant.isoformat()} is more than {CREATED_AT_MAX_AHEAD.total_seconds() / 3600:g} "
            "hours in the future.",
            field="created_at",
        )
    if collection is not None:
        collection = checked_text(collection, field="collection", max_chars=COLLECTION_MAX_CHARS, required=True)
    resource_id = resource_id_validated(resource_id)
    if turns is not None and text is not None:
        raise InvalidArgument("A document has text or turns, not both.", field="turns")
    if turns is None and text is None:
        raise InvalidArgument("A document needs its text, or a conversation's turns.", field="text")
    return Document(
        resource_id=resource_id,
        title=checked_text(title, field="title", max_chars=TITLE_MAX_CHARS).strip(),
        uri=uri_validated(uri),
        created_at=instant,
        collection=collection,
        text="" if turns is not None else checked_text(text, field="text", max_chars=TEXT_MAX_CHARS, required=True),
        turns=turns_validated(turns) if turns is not None else (),
    )


@dataclass(frozen=True)
class UpsertResult:
    resource_id: str
    status: Literal["created", "updated", "unchanged"]
    collection: str
    content_hash: str
    fragments: int  # live fragments of the document now
    added: int
    kept: int
    retired: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DeleteResult:
    resource_id: str
    status: Literal["deleted", "already_deleted"]
    retired: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _collection_for(source: Source, name: str | None) -> Collection:
    """The live collection a document goes to, held (FOR KEY SHARE, inside the
    caller's transaction) until the write commits, so it cannot be deleted or
    renamed under the write; concurrent writes into it do not wait on each other."""
    if name is None and source.default_collection_id is None:
        raise InvalidArgument("collection is required: this source has no default collection.", field="collection")
    collections = Collection.objects.filter(tenant_id=source.tenant_id, deleted_at__isnull=True)
    collection = (collections.filter(pk=source.default_collection_id or 0) if name is None
                  else collections.filter(name=name)).first()
    if collection is not None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM memoryhub_collection WHERE id = %s AND deleted_at IS NULL FOR KEY SHARE",
                           [collection.pk])
            if cursor.fetchone() is None:
                collection = None
    if collection is None:
        raise InvalidArgument(f"No collection named {name!r} in this workspace." if name is not None else
                              "collection is required: this source's default collection was deleted.",
                              field="collection")
    return collection


def _lock_document(source: Source, resource_id: str) -> None:
    """One writer per document at a time (two upserts of one new document would
    otherwise both create it)."""
    one_at_a_time("ingest", source.tenant_id, resource_id)


def _resource_of_source(source: Source, resource_id: str, *, for_update: bool = False) -> Resource | None:
    queryset = Resource.objects.filter(tenant_id=source.tenant_id, external_id=resource_id)
    if for_update:
        queryset = queryset.select_for_update()
    resource = queryset.first()
    access.require_document_of(source, resource)
    return resource


def _live_fragments(source: Source, resource: Resource):  # type: ignore[no-untyped-def]
    links = Fragment.resources.through.objects.filter(resource_id=resource.pk).values("fragment_id")
    return Fragment.objects.filter(source=source, pk__in=links, retired_at__isnull=True)


def document_upsert(*, source: Source, document: Document, now: dt.datetime | None = None) -> UpsertResult:
    """Store `document` for `source`, or bring its fragments up to date; nothing
    changes when it is the same document again."""
    content_hash = document.content_hash
    with transaction.atomic():
        collection = _collection_for(source, document.collection)
        _lock_document(source, document.resource_id)
        now = now or timezone.now()
        resource = _resource_of_source(source, document.resource_id, for_update=True)
        live = list(_live_fragments(source, resource).only(
            "pk", "content_hash", "collection_id", "created_at", "position", "context")) if resource is not None else []
        if resource is not None and resource.deleted_at is None and resource.content_hash == content_hash:
            if (resource.title, resource.uri) == (document.title, document.uri):
                return UpsertResult(document.resource_id, "unchanged", collection.name, content_hash, len(live),
                                    added=0, kept=len(live), retired=0)
            if resource.title != document.title:
                _contexts_renew(live, document)
            resource.title, resource.uri, resource.updated_at = document.title, document.uri, now
            resource.save(update_fields=["title", "uri", "updated_at"])
            return UpsertResult(document.resource_id, "updated", collection.name, content_hash, len(live),
                                added=0, kept=len(live), retired=0)

        status: Literal["created", "updated"] = (
            "created" if resource is None or resource.deleted_at is not None else "updated"
        )
        if resource is None:
            resource = Resource(tenant_id=source.tenant_id, external_id=document.resource_id)
        resource.source = source
        resource.title, resource.uri, resource.created_at = document.title, document.uri, document.created_at
        resource.content_hash, resource.updated_at, resource.deleted_at = content_hash, now, None
        resource.save()
        ResourceVersion.objects.create(resource=resource, content_hash=content_hash, started_at=now)

        # What each place should hold now; a live fragment is kept when it holds
        # exactly that (its context dated with its own day: a document sent
        # without created_at keeps its unchanged fragments on a later day too).
        created_at = document.created_at or now
        pieces_at = {created_at: document_pieces(document, created_at=created_at)}
        pending = {piece.position: piece for piece in pieces_at[created_at]}
        keep: set = set()
        for fragment in live:
            same_home = fragment.collection_id == collection.pk and (
                document.created_at is None or fragment.created_at == document.created_at
            )
            expected = _piece_at(document, fragment, pieces_at)
            if not same_home or expected is None or fragment.position not in pending:
                continue
            if (fragment.content_hash, fragment.context) == (chunk_hash(expected.value), expected.context):
                keep.add(fragment.pk)
                pending.pop(fragment.position)
        if keep:  # unchanged pieces are part of the new version too
            Fragment.objects.filter(pk__in=keep).update(grounded_versions={str(resource.pk): content_hash})
        retire = [fragment.pk for fragment in live if fragment.pk not in keep]
        if retire:
            Fragment.objects.filter(pk__in=retire).update(
                retired_at=now, retired_reason=Fragment.Retired.SUPERSEDED
            )
        added = _fragments_create(
            source=source, resource=resource, collection=collection, pieces=list(pending.values()),
            created_at=document.created_at or now, now=now,
        )
        if any(fragment.embedding is None for fragment in added):
            embedding_enqueue(source=source)
    return UpsertResult(document.resource_id, status, collection.name, content_hash, len(keep) + len(added),
                        added=len(added), kept=len(keep), retired=len(retire))


def _contexts_renew(live: list[Fragment], document: Document) -> None:
    """A document's title changed, not its content: its fragments' contexts
    (which hold the title) follow, in place; a context is never served, so
    reads of the past are unaffected."""
    pieces_at: dict[dt.datetime, list[Piece]] = {}
    changed = []
    for fragment in live:
        expected = _piece_at(document, fragment, pieces_at)
        if expected is not None:
            fragment.context = expected.context
            changed.append(fragment)
    Fragment.objects.bulk_update(changed, ["context"])


def _piece_at(document: Document, fragment: Fragment, pieces_at: dict[dt.datetime, list[Piece]]) -> Piece | None:
    """What `fragment`'s place in `document` holds, dated with the fragment's
    own day (`pieces_at` keeps the document's pieces per day)."""
    if fragment.created_at not in pieces_at:
        pieces_at[fragment.created_at] = document_pieces(document, created_at=fragment.created_at)
    pieces = pieces_at[fragment.created_at]
    return pieces[fragment.position] if fragment.position is not None and fragment.position < len(pieces) else None


def _fragments_create(
    *, source: Source, resource: Resource, collection: Collection, pieces: list[Piece], created_at: dt.datetime,
    now: dt.datetime,
) -> list[Fragment]:
    if not pieces:
        return []
    hashes = list({chunk_hash(piece.value) for piece in pieces})
    # The same text embedded before for this source (a moved or re-dated
    # document, a restored one, shared boilerplate) takes that vector: an
    # embedding is keyed by the content hash.
    known = dict(
        Fragment.objects.filter(source=source, content_hash__in=hashes, embedding__isnull=False)
        .order_by("content_hash").distinct("content_hash").values_list("content_hash", "embedding")
    )
    application = source.agent.application if source.agent.application_id else None
    fragments = [
        Fragment(
            tenant_id=source.tenant_id,
            collection=collection,
            source=source,
            value=piece.value,
            context=piece.context,
            position=piece.position,
            confidence=1.0,
            grounding_status=Fragment.Grounding.GROUNDED,
            created_at=created_at,
            recorded_at=now,
            client_id=application.client_id if application else "",
            content_hash=digest,
            embedding=known.get(digest),
            embedded_at=now if digest in known else None,
            # The version of its document it came from.
            grounded_versions={str(resource.pk): resource.content_hash},
        )
        for piece in pieces
        for digest in [chunk_hash(piece.value)]
    ]
    Fragment.objects.bulk_create(fragments)
    Fragment.agents.through.objects.bulk_create(
        [Fragment.agents.through(fragment_id=fragment.pk, agent_id=source.agent_id) for fragment in fragments]
    )
    Fragment.resources.through.objects.bulk_create(
        [Fragment.resources.through(fragment_id=fragment.pk, resource_id=resource.pk) for fragment in fragments]
    )
    return fragments


def document_delete(*, source: Source, resource_id: Any, now: dt.datetime | None = None) -> DeleteResult:
    """Retire every live fragment of the document at this instant."""
    resource_id = resource_id_validated(resource_id)
    with transaction.atomic():
        _lock_document(source, resource_id)
        now = now or timezone.now()
        resource = _resource_of_source(source, resource_id, for_update=True)
        if resource is None or resource.source_id is None:
            raise NotFound(f"This source has sent no document with resource id {resource_id!r}.",
                           field="resource_id")
        if resource.deleted_at is not None:
            return DeleteResult(resource_id, "already_deleted", retired=0)
        retired = _live_fragments(source, resource).update(retired_at=now, retired_reason=Fragment.Retired.FORGOTTEN)
        resource.deleted_at, resource.updated_at, resource.content_hash = now, now, ""
        resource.save(update_fields=["deleted_at", "updated_at", "content_hash"])
        ResourceVersion.objects.create(resource=resource, content_hash="", started_at=now)
    return DeleteResult(resource_id, "deleted", retired=retired)


# ---------------------------------------------------------------- selectors


def document_status(*, source: Source, resource_id: Any) -> dict[str, Any]:
    """One document as memory holds it now: its metadata and how much of it is searchable."""
    resource_id = resource_id_validated(resource_id)
    resource = _resource_of_source(source, resource_id)
    if resource is None or resource.source_id is None:
        raise NotFound(f"This source has sent no document with resource id {resource_id!r}.", field="resource_id")
    live = _live_fragments(source, resource)
    counts = live.aggregate(fragments=Count("pk"), pending=Count("pk", filter=Q(embedding__isnull=True)))
    collection = live.values_list("collection__name", flat=True).first()
    return {
        "resource_id": resource.external_id,
        "title": resource.title,
        "uri": resource.uri,
        "created_at": resource.created_at,
        "collection": collection,
        "content_hash": resource.content_hash,
        "deleted": resource.deleted_at is not None,
        "updated_at": resource.updated_at,
        "fragments": counts["fragments"],
        "pending_embedding": counts["pending"],
    }


def source_progress(*, source: Source) -> dict[str, Any]:
    """What a source has contributed and how much of it is semantically searchable yet."""
    documents = Resource.objects.filter(source=source).aggregate(
        live=Count("pk", filter=Q(deleted_at__isnull=True)), deleted=Count("pk", filter=Q(deleted_at__isnull=False))
    )
    fragments = Fragment.objects.filter(source=source, retired_at__isnull=True).aggregate(
        live=Count("pk"), pending=Count("pk", filter=Q(embedding__isnull=True))
    )
    return {
        "source": source.agent.name,
        "documents": documents["live"],
        "deleted_documents": documents["deleted"],
        "fragments": fragments["live"],
        "pending_embedding": fragments["pending"],
    }


def source_documents(*, source: Source) -> dict[str, tuple[str, str, str]]:
    """resource id -> (content hash, title, uri) of every live document of the
    source: a bulk import skips what is unchanged without opening a transaction."""
    rows = Resource.objects.filter(source=source, deleted_at__isnull=True).values_list(
        "external_id", "content_hash", "title", "uri"
    )
    return {external_id: (content_hash, title, uri) for external_id, content_hash, title, uri in rows}


def document_unchanged(*, document: Document, stored: tuple[str, str, str] | None) -> bool:
    return stored == (document.content_hash, document.title, document.uri)


# ---------------------------------------------------------------- single fragments


def fragment_ingest(
    *,
    source: Source,
    value: str,
    collection: Collection | None = None,
    created_at: dt.datetime | None = None,
    resources: Sequence[dict[str, Any]] = (),
    confidence: float = 1.0,
) -> tuple[Fragment, bool]:
    """A connected source contributes one shared fragment as it is, unsplit
    (decision 6): into a collection, attributed to the source's agent, with its
    documents and the source's own created_at. Returns (fragment, created); the
    same live text in the same collection from the same source is not stored
    twice. The demo workspace and tests use it; connectors send whole
    documents (`document_upsert`)."""
    collection = collection or source.default_collection
    if collection is None or collection.tenant_id != source.tenant_id:
        raise InvalidArgument("A source's fragment needs a collection of its own workspace.", field="collection")
    value = checked_text(value, field="value", max_chars=limits.CONTENT_MAX_CHARS, required=True).strip()
    now = timezone.now()
    with transaction.atomic():
        existing = Fragment.objects.filter(
            tenant_id=source.tenant_id, collection=collection, source=source, content_hash=fact_hash(value),
            retired_at__isnull=True,
        ).first()
        if existing is not None:
            return existing, False
        fragment = Fragment.objects.create(
            tenant_id=source.tenant_id,
            collection=collection,
            source=source,
            value=value,
            context=fragment_context(created_at=created_at or now),
            subject_key=subject_of(value),
            confidence=confidence,
            grounding_status=Fragment.Grounding.GROUNDED if resources else Fragment.Grounding.UNVERIFIED,
            created_at=created_at or now,
            recorded_at=now,
            content_hash=fact_hash(value),
        )
        fragment.agents.add(source.agent)
        titled = ""
        for item in resources:
            external_id = resource_id_validated(item.get("id"))
            # A source links its own documents only (another source's is a Conflict).
            resource = _resource_of_source(source, external_id, for_update=True)
            if resource is None:
                resource = Resource.objects.create(
                    tenant_id=source.tenant_id, external_id=external_id, source=source,
                    title=checked_text(item.get("title"), field="title", max_chars=TITLE_MAX_CHARS),
                    uri=uri_validated(item.get("uri")), created_at=item.get("created_at") or created_at,
                )
            fragment.resources.add(resource)
            if resource.title and not titled:
                titled = resource.title
        if titled:
            # Its document's title is searchable with it, as for a document's own fragments.
            fragment.context = fragment_context(created_at=fragment.created_at, title=titled)
            fragment.save(update_fields=["context"])
        enrichment_enqueue(fragment_ids=[str(fragment.pk)])
    return fragment, True
