"""memoryhub's data model.

A tenant is a workspace; nothing reads across tenants. A fragment is either
private (owned by one person or one agent) or shared (in a collection that
access rules open to roles). Fragments are never updated in place: a change
retires the old row (retired_at + reason + successor) so as-of reads of the
past still see it.
"""

from __future__ import annotations

import secrets
import uuid

from django.conf import settings
from django.contrib.auth.models import AbstractUser, UserManager
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower, Now
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

# The writers' vector indexes (Fragment.Meta) hold each vector in a btree
# row, whose limit (2,704 bytes) a vector of more than about 660 dimensions
# would pass: an embedder that large needs those indexes rethought.
EMBEDDING_DIMENSIONS = 384
# The text search configuration the tsvector and every tsquery use.
TEXT_SEARCH_CONFIG = "english"


def new_receipt_id() -> str:
    # Receipt ids are unguessable: knowing one is not a right to it, but an
    # enumerable id would let a caller probe which receipts exist.
    return "rcpt_" + secrets.token_urlsafe(18)


def new_salt() -> str:
    """A salt for a keyed hash (32 hex digits)."""
    return secrets.token_hex(16)


class Tenant(models.Model):
    """A workspace."""

    class WritePolicy(models.TextChoices):
        OPEN = "open", "Store any fact that passes the privacy checks"
        BLOCKLIST = "blocklist", "Refuse facts that mention a blocked term"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    judgment_plane = models.BooleanField(
        default=False, help_text="Re-rank visible results for the caller's task and task tags."
    )
    relevance_floor = models.FloatField(
        default=0.0, help_text="Searches abstain when no visible fragment scores at or above this."
    )
    write_policy = models.CharField(max_length=16, choices=WritePolicy.choices, default=WritePolicy.OPEN)
    blocked_terms = models.JSONField(default=list, blank=True)

    class StalePolicy(models.TextChoices):
        SERVE = "serve", "Serve them, marked stale or ungrounded, with a note"
        WITHHOLD = "withhold", "Do not serve them"

    stale_policy = models.CharField(
        max_length=16, choices=StalePolicy.choices, default=StalePolicy.SERVE,
        help_text="Memories whose document changed or was deleted since they were linked to it.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name


class PersonManager(UserManager):
    def get_by_natural_key(self, username):  # type: ignore[no-untyped-def]
        # Login names are unique per workspace; Django's own sign-in paths (the
        # Django admin, createsuperuser) name accounts of no workspace only.
        # People sign in with their workspace (memoryhub.oauth.signin).
        return self.get(tenant__isnull=True, username=username)


class User(AbstractUser):
    """A person. Belongs to at most one workspace; superusers may belong to none.

    A login name is unique within its workspace (case-insensitively), not across
    workspaces: an admin adding "dana" learns nothing about other workspaces."""

    username = models.CharField(
        "username", max_length=150, validators=[UnicodeUsernameValidator()],
        help_text="Unique within the workspace. Letters, digits and @/./+/-/_ only.",
    )
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="users")

    objects = PersonManager()  # type: ignore[misc]

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"
        constraints = [
            models.UniqueConstraint(Lower("username"), "tenant", name="user_unique_login_per_workspace"),
            models.UniqueConstraint(Lower("username"), condition=Q(tenant__isnull=True),
                                    name="user_unique_login_without_workspace"),
        ]


class Role(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="roles")
    name = models.SlugField(max_length=64)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="role_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A person's place in their workspace: admin or not, and their roles."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership")
    is_admin = models.BooleanField(default=False)
    roles = models.ManyToManyField(Role, blank=True, related_name="memberships")
    created_at = models.DateTimeField(default=timezone.now)
    removed_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When an admin removed them: deactivated, no roles; their memory kept, readable by nobody.",
    )

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant}"


class Agent(models.Model):
    """A headless principal bound to one workspace: an assistant registered by an
    admin (client credentials) or a connected source's identity."""

    class Kind(models.TextChoices):
        ASSISTANT = "assistant", "Headless agent"
        SOURCE = "source", "Connected source"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    name = models.SlugField(max_length=64, help_text="The name callers pass in `agents`.")
    display_name = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.ASSISTANT)
    application = models.OneToOneField(
        "oauth2_provider.Application", null=True, blank=True, on_delete=models.SET_NULL, related_name="agent"
    )
    scopes = models.CharField(max_length=200, default="memory.read", help_text="Space-separated scopes granted.")
    roles = models.ManyToManyField(Role, blank=True, related_name="agents")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="agent_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def scope_set(self) -> frozenset[str]:
        return frozenset(self.scopes.split())


class Collection(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="collections")
    name = models.SlugField(max_length=80)
    description = models.CharField(max_length=200, blank=True)
    deleted_at = models.DateTimeField(
        null=True, blank=True,
        help_text="Deleted with retired fragments still in it: hidden, no rules, its name freed (renamed).",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="collection_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Source(models.Model):
    """A connected source (document store, ticket system, chat export). It writes
    shared fragments into collections under its own agent identity."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="sources")
    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="source")
    kind = models.CharField(max_length=64, default="documents")
    default_collection = models.ForeignKey(
        Collection, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    disabled_at = models.DateTimeField(
        null=True, blank=True, help_text="While set, the ingestion API refuses it; its memory stays."
    )
    last_error = models.CharField(max_length=500, blank=True, help_text="The last request the ingestion API refused.")
    last_error_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.agent.name


class AccessRule(models.Model):
    """Members holding `role` may read fragments in `collection`."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="access_rules")
    role = models.ForeignKey(Role, on_delete=models.CASCADE, related_name="access_rules")
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="access_rules")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["role", "collection"], name="access_rule_unique")]

    def __str__(self) -> str:
        return f"{self.role} may read {self.collection}"


class Resource(models.Model):
    """A source document a fragment is about."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="resources")
    external_id = models.CharField(max_length=512)
    title = models.CharField(max_length=500, blank=True)
    uri = models.CharField(max_length=2000, blank=True)
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.SET_NULL, related_name="resources")
    created_at = models.DateTimeField(null=True, blank=True, help_text="The source's own creation time.")
    content_hash = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "external_id"], name="resource_unique_external_id")]

    def __str__(self) -> str:
        return self.title or self.external_id


class ResourceVersion(models.Model):
    """A document's content from `started_at` on (content_hash "" = deleted):
    the history that tells whether a fragment linked to it was still grounded
    at a read's instant."""

    resource = models.ForeignKey(Resource, on_delete=models.CASCADE, related_name="versions")
    content_hash = models.CharField(max_length=64, blank=True)
    started_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(name="resource_version_at", fields=["resource", "-started_at"])]

    def __str__(self) -> str:
        return f"{self.resource_id}@{self.started_at:%Y-%m-%dT%H:%M:%S}"


class SearchDocument(models.Func):
    """What full-text search indexes of a fragment: its own words (weight A)
    and its context (weight B), in the workspace's text search configuration."""

    output_field = SearchVectorField()

    def as_sql(self, compiler, connection, **extra):  # type: ignore[no-untyped-def]
        parts, params = [], []
        for expression, weight in zip(self.get_source_expressions(), "AB", strict=True):
            sql, more = compiler.compile(expression)
            parts.append(f"setweight(to_tsvector('{TEXT_SEARCH_CONFIG}'::regconfig, coalesce({sql}, '')), '{weight}')")
            params.extend(more)
        return " || ".join(parts), params


# The words of a search vector (each lexeme's positions), as an immutable SQL
# function a generated column may call; created by migration 0007.
TSVECTOR_WORDS_FUNCTION = """
CREATE OR REPLACE FUNCTION memoryhub_tsvector_words(tsvector) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT coalesce(sum(coalesce(array_length(positions, 1), 1)), 0)::integer FROM unnest($1) $$
"""


class FragmentManager(models.Manager["Fragment"]):
    """Fragments loaded through Fragment.objects (and a collection's or a
    person's fragments) leave their term counts (search_counts, read by the
    search statement alone) in the database; values() reads them."""

    def get_queryset(self) -> models.QuerySet[Fragment]:
        return super().get_queryset().defer("search_counts")


class Fragment(models.Model):
    class Retired(models.TextChoices):
        SUPERSEDED = "superseded", "Superseded"
        MERGED = "merged", "Merged"
        FORGOTTEN = "forgotten", "Forgotten"
        # Its value destroyed by a workspace admin (memoryhub.services.portability.memory_erase).
        ERASED = "erased", "Erased"

    class Grounding(models.TextChoices):
        GROUNDED = "grounded", "Grounded in a source document"
        STATED = "stated", "Stated in conversation"
        UNVERIFIED = "unverified", "Unverified"
        # Judged when served (memoryhub.services.provenance), never stored:
        # a document it was linked to changed, or was deleted, by the read's instant.
        STALE = "stale", "Its document changed since"
        UNGROUNDED = "ungrounded", "Its document was deleted"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="fragments")
    # Exactly one of the three: private to a person, private to an agent, or shared.
    owner_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="fragments"
    )
    owner_agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="owned_fragments"
    )
    collection = models.ForeignKey(
        Collection, null=True, blank=True, on_delete=models.PROTECT, related_name="fragments"
    )
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.PROTECT, related_name="fragments")
    value = models.TextField()
    subject_key = models.CharField(max_length=200, blank=True, help_text="What the fact is about, normalised.")
    confidence = models.FloatField(default=1.0)
    grounding_status = models.CharField(max_length=16, choices=Grounding.choices, default=Grounding.STATED)
    created_at = models.DateTimeField(help_text="The source's time (backdated facts keep theirs).")
    recorded_at = models.DateTimeField(default=timezone.now, help_text="System time the row became memory.")
    retired_at = models.DateTimeField(null=True, blank=True)
    retired_reason = models.CharField(max_length=16, choices=Retired.choices, blank=True)
    successor = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    agents = models.ManyToManyField(Agent, blank=True, related_name="contributed_fragments")
    resources = models.ManyToManyField(Resource, blank=True, related_name="fragments")
    session_id = models.CharField(max_length=128, blank=True)
    client_id = models.CharField(max_length=255, blank=True, help_text="OAuth client that wrote it.")
    resource_ref = models.CharField(
        max_length=512, blank=True, help_text="The source document the writer named; enrichment links it."
    )
    content_hash = models.CharField(max_length=64)
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedded_at = models.DateTimeField(null=True, blank=True)
    linked_at = models.DateTimeField(
        null=True, blank=True, help_text="When tier 2 decided the link of resource_ref (linked or not)."
    )
    value_salt = models.CharField(
        max_length=36, default=new_salt, db_default=models.Func(function="gen_random_uuid",
                                                                         output_field=models.CharField()),
        help_text="Keys the hash a receipt keeps of the value (HMAC), so the hash confirms no guess; wiped by an "
                  "erasure.",
    )
    grounded_versions = models.JSONField(
        default=dict, blank=True, db_default=models.Value({}, output_field=models.JSONField()),
        help_text="For each linked document that is not its own source's (Resource id): the document's content "
                  "hash when it was linked, so a later change shows as stale.",
    )
    context = models.TextField(
        blank=True, default="", db_default="",
        help_text="Where the fragment sits (its date, its document's title, the turn before it): searched, never "
                  "served.",
    )
    position = models.PositiveIntegerField(
        null=True, blank=True, help_text="Its place in its document (turn or chunk order), when it came from one."
    )
    # The fragment's own words weigh A, its context B (the lexical ranker reads the weights).
    search_vector = models.GeneratedField(
        expression=SearchDocument(models.F("value"), models.F("context")),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    # How many words the search vector holds (the lexical ranker's document length).
    search_length = models.GeneratedField(
        expression=models.Func(SearchDocument(models.F("value"), models.F("context")),
                               function="memoryhub_tsvector_words", output_field=models.IntegerField()),
        output_field=models.IntegerField(),
        db_persist=True,
    )
    # Each lexeme's counts as an own word and as context, {"lexeme": [own, context]} (null for a
    # lexeme stored without positions): the lexical ranker's term frequencies, looked up instead of
    # unnested from every match's vector. memoryhub_tsvector_counts is made by migration 0017;
    # replacing it does not recompute stored rows, so a change to it needs a migration that drops
    # and adds this column again.
    search_counts = models.GeneratedField(
        expression=models.Func(SearchDocument(models.F("value"), models.F("context")),
                               function="memoryhub_tsvector_counts", output_field=models.JSONField()),
        output_field=models.JSONField(),
        db_persist=True,
    )

    objects = FragmentManager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                name="fragment_exactly_one_home",
                condition=(
                    Q(owner_user__isnull=False, owner_agent__isnull=True, collection__isnull=True)
                    | Q(owner_user__isnull=True, owner_agent__isnull=False, collection__isnull=True)
                    | Q(owner_user__isnull=True, owner_agent__isnull=True, collection__isnull=False)
                ),
            ),
            models.CheckConstraint(
                name="fragment_retired_has_reason",
                condition=Q(retired_at__isnull=True, retired_reason="") | Q(retired_at__isnull=False)
                & ~Q(retired_reason=""),
            ),
        ]
        indexes = [
            HnswIndex(
                name="fragment_embedding_hnsw", fields=["embedding"], m=16, ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            GinIndex(name="fragment_search_vector_gin", fields=["search_vector"]),
            models.Index(name="fragment_live_owner_user", fields=["tenant", "owner_user"],
                         condition=Q(retired_at__isnull=True, owner_user__isnull=False)),
            models.Index(name="fragment_owner_agent", fields=["tenant", "owner_agent"],
                         condition=Q(owner_agent__isnull=False)),
            # A write's judgement finds the writer's nearest facts by their ids
            # and vectors alone, from these (an index-only scan): a writer's
            # live vectors, each held again here (about 1.6 KB an entry).
            models.Index(name="fragment_live_user_vectors", fields=["tenant", "owner_user"],
                         include=["id", "embedding"],
                         condition=Q(retired_at__isnull=True, owner_user__isnull=False, embedding__isnull=False)),
            models.Index(name="fragment_live_agent_vectors", fields=["tenant", "owner_agent"],
                         include=["id", "embedding"],
                         condition=Q(retired_at__isnull=True, owner_agent__isnull=False, embedding__isnull=False)),
            models.Index(name="fragment_collection", fields=["tenant", "collection"],
                         condition=Q(collection__isnull=False)),
            models.Index(name="fragment_tenant_recorded", fields=["tenant", "recorded_at"]),
            models.Index(name="fragment_tenant_created", fields=["tenant", "created_at"]),
            models.Index(name="fragment_retired_at", fields=["retired_at"], condition=Q(retired_at__isnull=False)),
            models.Index(name="fragment_content_hash", fields=["tenant", "content_hash"]),
            models.Index(name="fragment_subject", fields=["tenant", "subject_key"]),
            models.Index(name="fragment_unembedded", fields=["recorded_at"], condition=Q(embedding__isnull=True)),
        ]

    def __str__(self) -> str:
        return self.value[:60]


# A fragment's home, as FragmentTally keys it: its workspace and exactly one
# of its collection, its owning person or its owning agent.
TALLY_HOME = ("tenant_id", "collection_id", "owner_user_id", "owner_agent_id")


def home_name(collection_id: int | None, owner_user_id: int | None, owner_agent_id: int | None) -> str:
    """'collection 7', 'person 3' or 'agent 2': a home as an operator reads it."""
    if collection_id is not None:
        return f"collection {collection_id}"
    return f"person {owner_user_id}" if owner_user_id is not None else f"agent {owner_agent_id}"


class FragmentTally(models.Model):
    """How many live fragments (not retired) one home holds, and their search
    lengths: the statistics BM25 reads for a reader (memoryhub.services.search,
    "the reader's statistics") without counting every row the reader may see.

    A fragment's home is its workspace and exactly one of its collection, its
    owning person or its owning agent (fragment_exactly_one_home). The rows are
    written only by PostgreSQL: triggers on the fragment table (migration 0015)
    add, for every statement that inserts, updates or deletes fragments, one
    row per home it changed, holding the change, in the same transaction. So a
    reader's snapshot sees the tallies and the fragments at the same point.
    A home's live figures are the sums of its rows; `fold_tallies` folds each
    home's rows into one from time to time. No foreign keys: a workspace's
    deletion writes its last changes here as its fragments go. A change no
    trigger sees (a TRUNCATE of the fragments alone, triggers disabled, a
    migration that changes how search_length is computed) needs
    `manage.py tallies --recount` (services/tallies.py)."""

    tenant_id = models.UUIDField()
    collection_id = models.BigIntegerField(null=True)
    owner_user_id = models.BigIntegerField(null=True)
    owner_agent_id = models.BigIntegerField(null=True)
    fragments = models.BigIntegerField(help_text="Live fragments added (negative: removed).")
    words = models.BigIntegerField(help_text="The sum of their search lengths.")
    measured = models.BigIntegerField(help_text="How many of them have a search length (the mean's divisor).")
    added_at = models.DateTimeField(db_default=Now(), help_text="When the row was written (a change, or a fold).")

    class Meta:
        indexes = [models.Index(name="fragment_tally_tenant", fields=["tenant_id"])]

    def __str__(self) -> str:
        home = home_name(self.collection_id, self.owner_user_id, self.owner_agent_id)
        return f"{home}: {self.fragments:+d} fragments, {self.words:+d} words"


class Proposal(models.Model):
    """An agent's write, parked until a workspace admin decides it."""

    class State(models.TextChoices):
        PENDING = "pending", "Awaiting review"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="proposals")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="proposals")
    content = models.TextField()
    session_id = models.CharField(max_length=128, blank=True)
    resource = models.CharField(max_length=512, blank=True)
    client_id = models.CharField(max_length=255, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decision_reason = models.TextField(blank=True)
    edited_content = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True, help_text="What the write pipeline did on approval.")

    class Meta:
        indexes = [models.Index(name="proposal_queue", fields=["tenant", "state", "created_at"])]
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.agent}: {self.content[:60]}"


class Receipt(models.Model):
    """A serving receipt: who read, under which roles, what they asked, when, and what was served."""

    id = models.CharField(primary_key=True, max_length=40, default=new_receipt_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="receipts")
    # PROTECT: deleting a reader would delete their receipts and break the workspace's chain.
    reader_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="receipts"
    )
    reader_agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.PROTECT, related_name="receipts")
    principal_kind = models.CharField(max_length=16)
    subject = models.CharField(max_length=255)
    client_id = models.CharField(max_length=255, blank=True)
    roles = models.JSONField(default=list, help_text="Role audience at the moment of the read.")
    request = models.JSONField(help_text="The full search request as the caller sent it.")
    as_of = models.DateTimeField()
    as_of_explicit = models.BooleanField(default=False)
    served = models.JSONField(default=list, help_text="Fragment ids served, in rank order.")
    abstained = models.BooleanField(default=False)
    budget = models.CharField(
        max_length=32, blank=True,
        help_text="The result budget the served list was cut to (e.g. the MCP tool result's); a replay applies it.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    ranking = models.JSONField(
        default=dict, blank=True, db_default=models.Value({}, output_field=models.JSONField()),
        help_text="The ranking that ordered what was served (memoryhub.services.search.ranking_record), so a replay "
                  "ranks the same way; empty for reads made before receipts kept it. Not part of the chain.",
    )
    # Its entry in the workspace's hash chain (contract/receipt_chain.py).
    served_hashes = models.JSONField(
        default=list, help_text="The keyed hash (HMAC under the fragment's salt; plain SHA-256 in version 1 records) "
                                "of each served fragment's stored value, in the order of `served`."
    )
    record_version = models.PositiveSmallIntegerField(
        default=2, help_text="The chain record's format (memoryhub.services.receipt_chain.record_of)."
    )
    request_salt = models.CharField(
        max_length=36, default=new_salt, blank=True,
        help_text="Keys the request's hash in the chain (HMAC); shown to the reader only.",
    )
    chain_seq = models.BigIntegerField()
    chain_prev = models.CharField(max_length=64)
    chain_hash = models.CharField(max_length=64)

    class Meta:
        indexes = [models.Index(name="receipt_reader", fields=["tenant", "subject", "created_at"])]
        constraints = [
            models.CheckConstraint(
                name="receipt_one_reader",
                condition=Q(reader_user__isnull=False, reader_agent__isnull=True)
                | Q(reader_user__isnull=True, reader_agent__isnull=False),
            ),
            models.UniqueConstraint(fields=["tenant", "chain_seq"], name="receipt_chain_place"),
        ]

    def __str__(self) -> str:
        return self.id


class ReceiptChain(models.Model):
    """The head of a workspace's receipt chain. Appending updates this one row
    (memoryhub.services.receipt_chain.receipt_append), which orders concurrent
    searches of a workspace at their commit."""

    tenant = models.OneToOneField(Tenant, primary_key=True, on_delete=models.CASCADE, related_name="receipt_chain")
    seq = models.BigIntegerField()
    prev = models.CharField(max_length=64)
    head = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"{self.tenant_id}@{self.seq}"


class ReceiptCheckpoint(models.Model):
    """A chain head signed with the deployment's Ed25519 key."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="receipt_checkpoints")
    seq = models.BigIntegerField()
    head = models.CharField(max_length=64)
    signed_at = models.DateTimeField()
    key_id = models.CharField(max_length=16)
    signature = models.CharField(max_length=128)

    class Meta:
        indexes = [models.Index(name="checkpoint_latest", fields=["tenant", "-seq"])]

    def __str__(self) -> str:
        return f"{self.tenant_id}@{self.seq}"


class Erasure(models.Model):
    """A person's memory erased by an admin: who, by whom, when, and which
    fragments (their rows stay as tombstones with no value, so the receipts
    that served them still name them and the receipt chain still verifies)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="erasures")
    subject = models.CharField(max_length=255, help_text="Whose memory: user:<username>.")
    erased_by = models.CharField(max_length=255)
    erased_at = models.DateTimeField(default=timezone.now)
    fragment_ids = models.JSONField(default=list)
    storage_cleaned_at = models.DateTimeField(
        null=True, blank=True, help_text="When the old row versions and index entries left the storage."
    )

    def __str__(self) -> str:
        return f"{self.subject} erased at {self.erased_at:%Y-%m-%dT%H:%M:%S}"


class IdempotencyRecord(models.Model):
    """The first answer to a write, kept for 24 hours under its idempotency key."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    principal = models.CharField(max_length=300, help_text="kind:subject of the writer.")
    key = models.CharField(max_length=255)
    payload_hash = models.CharField(max_length=64)
    response = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "principal", "key"], name="idempotency_unique_key")
        ]
        indexes = [models.Index(name="idempotency_created", fields=["created_at"])]

    def __str__(self) -> str:
        return f"{self.principal} {self.key}"


class EnforcementAlarm(models.Model):
    """A row the index query returned but the row check refused: evidence that the
    two layers disagree. Should never exist; the admin shows any that do."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    fragment_id = models.UUIDField()
    subject = models.CharField(max_length=255)
    principal_kind = models.CharField(max_length=16)
    reason = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.reason} ({self.fragment_id})"


class RedeemedCode(models.Model):
    """An authorization code already exchanged for tokens, remembered for a day:
    presenting it again revokes what it issued (RFC 6749 §4.1.2). Only checksums
    are kept, as for the tokens themselves."""

    code_checksum = models.CharField(max_length=64, unique=True)
    application = models.ForeignKey("oauth2_provider.Application", on_delete=models.CASCADE, related_name="+")
    token_family = models.UUIDField(null=True, blank=True)
    access_token_checksum = models.CharField(max_length=64)
    # The PKCE challenge the code was bound to: only its verifier's holder can revoke by replaying.
    code_challenge = models.CharField(max_length=128, blank=True)
    redeemed_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"code redeemed {self.redeemed_at:%Y-%m-%d %H:%M}"
