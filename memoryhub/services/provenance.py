"""Where a fragment came from, as one reader may be told: the agents that
contributed it and the documents it is about.

A document's title and URI are shown only to a reader who may read that
document now (memoryhub.access.readable_documents): a shared fragment's own
documents (those its source sent with it) always, since reading the fragment is
reading part of the document; any other linked document only while the reader
may read a live fragment of it. Otherwise the reader sees the id the writer gave and nothing
else, exactly as for a document that does not exist.

Grounding is judged here too, as of the read's instant: a memory linked to a
document that has changed since is `stale`, one whose document was deleted is
`ungrounded` (each with a note), told under the same rule as the title.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.utils import timezone

from memoryhub import access
from memoryhub.access import Caller
from memoryhub.models import Fragment, Resource, ResourceVersion

GROUNDING_NOTES = {
    Fragment.Grounding.STALE: "The document {documents} changed after this memory was linked to it; check the "
                              "document before relying on this.",
    Fragment.Grounding.UNGROUNDED: "The document {documents} this memory rests on was deleted.",
}
# The statuses a workspace may choose not to serve (Tenant.stale_policy).
NOT_GROUNDED = frozenset({Fragment.Grounding.STALE, Fragment.Grounding.UNGROUNDED})


@dataclass(frozen=True)
class DocumentRef:
    id: str
    title: str = ""
    uri: str = ""


@dataclass(frozen=True)
class Provenance:
    agents: tuple[str, ...] = ()
    documents: tuple[DocumentRef, ...] = ()
    # The grounding status as of the read's instant, and why when it is not the stored one.
    grounding: str = ""
    grounding_note: str | None = None


def _own_document(fragment: Fragment, resource: Resource) -> bool:
    # A shared fragment's own documents: its source sent them with it.
    return fragment.collection_id is not None and resource.source_id == fragment.source_id


def provenance_for(
    reader: Caller, fragments: Iterable[Fragment], *, named_agent_ids: frozenset[int] = frozenset(),
    audience: access.Audience | None = None, instant: dt.datetime | None = None,
) -> dict[uuid.UUID, Provenance]:
    """Provenance of each fragment (loaded with access.with_access_facts) for
    `reader`, its grounding judged as of `instant` (default now); one query for
    private fragments that link documents, and one more only when a linked
    document changed since or a read of the past needs its history."""
    fragments = list(fragments)
    # Each fragment's documents read once (they were read two or three
    # times): every read of a relation makes its manager anew.
    documents_of = {fragment.pk: list(fragment.resources.all()) for fragment in fragments}

    private_links = {
        resource.pk for fragment in fragments for resource in documents_of[fragment.pk]
        if not _own_document(fragment, resource)
    }
    readable = access.readable_documents(reader, private_links, named_agent_ids=named_agent_ids,
                                         audience=audience) if private_links else frozenset()
    groundings = _groundings(reader, fragments, documents_of, instant or timezone.now(),
                             named_agent_ids=named_agent_ids, audience=audience)
    found = {}
    for fragment in fragments:
        agents = {agent.name for agent in fragment.agents.all()}
        if fragment.source is not None:
            agents.add(fragment.source.agent.name)
        linked = sorted(documents_of[fragment.pk], key=lambda resource: resource.external_id)
        shown = [r for r in linked if _own_document(fragment, r) or r.pk in readable]
        if shown:
            documents = tuple(DocumentRef(id=r.external_id, title=r.title, uri=r.uri) for r in shown)
        elif fragment.resource_ref:
            # Named by the writer but not linked, or linked to a document this
            # reader may not read: the name the writer gave, nothing more.
            documents = (DocumentRef(id=fragment.resource_ref),)
        else:
            documents = ()
        grounding, note = groundings.get(fragment.pk, (fragment.grounding_status, None))
        found[fragment.pk] = Provenance(agents=tuple(sorted(a for a in agents if a)), documents=documents,
                                        grounding=grounding, grounding_note=note)
    return found


def _groundings(
    reader: Caller, fragments: list[Fragment], documents_of: dict[uuid.UUID, list[Resource]], instant: dt.datetime,
    *, named_agent_ids: frozenset[int], audience: access.Audience | None,
) -> dict[uuid.UUID, tuple[str, str]]:
    """The fragments that are no longer grounded at `instant`: a document they
    were linked to (not their own source's) holds other content by then
    (stale) or was deleted by then (ungrounded).

    Who is told is memoryhub.access.document_history_told's decision; anyone
    else is told the stored status, exactly as if the document had not
    changed: its history is the document's, not theirs. `documents_of`:
    each fragment's linked documents, by the fragment's id."""
    links = []
    for fragment in fragments:
        versions = fragment.grounded_versions or {}
        if not versions or (fragment.linked_at is not None and instant < fragment.linked_at):
            continue
        for resource in documents_of[fragment.pk]:
            recorded = versions.get(str(resource.pk))
            if recorded is not None and not _own_document(fragment, resource):
                links.append((fragment, resource, recorded))
    if not links:
        return {}
    # A document's state at `instant`: its content hash while it exists, or the
    # instant it was deleted; None when nothing is known of it then.
    past = sorted({resource.pk for _, resource, _ in links if instant < resource.updated_at})
    history = {
        version.resource_id: (version.content_hash, version.started_at)
        for version in ResourceVersion.objects.filter(resource_id__in=past, started_at__lte=instant)
        .order_by("resource_id", "-started_at").distinct("resource_id")
    } if past else {}

    def state(resource: Resource) -> tuple[str, dt.datetime | None] | None:
        if resource.pk in past:
            version = history.get(resource.pk)
            if version is None:
                return None
            content, since = version
            return ("", since) if content == "" else (content, None)  # a version row with no content: a deletion
        if resource.deleted_at is not None:
            return "", resource.deleted_at
        # No content known (a document a source named without sending it): nothing to compare.
        return (resource.content_hash, None) if resource.content_hash else None

    states = {resource.pk: state(resource) for _, resource, _ in links}
    changed = {resource.pk for _, resource, recorded in links
               if (at := states[resource.pk]) is not None and at[1] is None and recorded and at[0] != recorded}
    deleted = {pk: at[1] for pk, at in states.items() if at is not None and at[1] is not None}
    told = access.document_history_told(reader, changed=changed, deleted=deleted, instant=instant,
                                        named_agent_ids=named_agent_ids, audience=audience)
    stale: dict[uuid.UUID, list[str]] = {}
    gone: dict[uuid.UUID, list[str]] = {}
    for fragment, resource, _ in links:
        if resource.pk not in told:
            continue
        if resource.pk in deleted:
            gone.setdefault(fragment.pk, []).append(resource.external_id)
        elif resource.pk in changed:
            stale.setdefault(fragment.pk, []).append(resource.external_id)
    judged = {}
    for status, found in ((Fragment.Grounding.STALE, stale), (Fragment.Grounding.UNGROUNDED, gone)):
        for pk, documents in found.items():
            named = ", ".join(f"“{name}”" for name in sorted(documents))
            judged[pk] = (status.value, GROUNDING_NOTES[status].format(documents=named))
    return judged
