"""Where a fragment came from, as one reader may be told: the agents that
contributed it and the documents it is about.

A document's title and URI are shown only to a reader who may read that
document now (memoryhub.access.readable_documents): a shared fragment's own
documents (those its source sent with it) always, since reading the fragment is
reading part of the document; any other linked document only while the reader
may read a live fragment of it. Otherwise the reader sees the id the writer gave and nothing
else, exactly as for a document that does not exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from memoryhub import access
from memoryhub.access import Caller
from memoryhub.models import Fragment


@dataclass(frozen=True)
class DocumentRef:
    id: str
    title: str = ""
    uri: str = ""


@dataclass(frozen=True)
class Provenance:
    agents: tuple[str, ...] = ()
    documents: tuple[DocumentRef, ...] = ()


def provenance_for(
    reader: Caller, fragments: Iterable[Fragment], *, named_agent_ids: frozenset[int] = frozenset(),
    audience: access.Audience | None = None,
) -> dict[uuid.UUID, Provenance]:
    """Provenance of each fragment (loaded with access.with_access_facts) for
    `reader`; at most one query, for private fragments that link documents."""
    fragments = list(fragments)
    def own_document(fragment: Fragment, resource) -> bool:  # type: ignore[no-untyped-def]
        # A shared fragment's own documents: its source sent them with it.
        return fragment.collection_id is not None and resource.source_id == fragment.source_id

    private_links = {
        resource.pk for fragment in fragments for resource in fragment.resources.all()
        if not own_document(fragment, resource)
    }
    readable = access.readable_documents(reader, private_links, named_agent_ids=named_agent_ids,
                                         audience=audience) if private_links else frozenset()
    found = {}
    for fragment in fragments:
        agents = {agent.name for agent in fragment.agents.all()}
        if fragment.source is not None:
            agents.add(fragment.source.agent.name)
        linked = sorted(fragment.resources.all(), key=lambda resource: resource.external_id)
        shown = [r for r in linked if own_document(fragment, r) or r.pk in readable]
        if shown:
            documents = tuple(DocumentRef(id=r.external_id, title=r.title, uri=r.uri) for r in shown)
        elif fragment.resource_ref:
            # Named by the writer but not linked, or linked to a document this
            # reader may not read: the name the writer gave, nothing more.
            documents = (DocumentRef(id=fragment.resource_ref),)
        else:
            documents = ()
        found[fragment.pk] = Provenance(agents=tuple(sorted(a for a in agents if a)), documents=documents)
    return found
