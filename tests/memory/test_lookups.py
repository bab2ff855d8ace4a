"""Lookups compiled once (memoryhub.database.lookups): a credential's token
with its holder, and the caller it names (a person or an agent, by the
workspace's id or slug), read what the ORM reads, related rows included, in
one statement; compiled once per connection, with only
the values changing; a value used in several places, a key as a value, and
rows of values read whole (Rows, a union of them included); and a lookup
whose values cannot be placed is refused when it is compiled."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection, connections
from django.db.models import Model, Q, QuerySet, Value
from django.db.models.sql.compiler import SQLCompiler
from django.test.utils import CaptureQueriesContext
from oauth2_provider.models import AccessToken

from memoryhub import access
from memoryhub.database.lookups import Lookup, Rows
from memoryhub.models import Agent, Fragment, Tenant, User
from memoryhub.oauth import tokens
from memoryhub.oauth.policy import MCP_PATH, resource_url
from tests.support.rows import field_values
from tests.support.tokens import make_token, person_mcp_token


def _same_tree(read: Model | None, expected: Model | None, path: str) -> None:
    """`read` and `expected` hold the same values along `path`
    (select_related's form), and `read` holds each related row already."""
    assert (read is None) == (expected is None)
    if read is None or expected is None:
        return
    assert type(read) is type(expected) and field_values(read) == field_values(expected)
    name, _, rest = path.partition("__")
    if not name:
        return
    field = read._meta.get_field(name)
    assert field.is_cached(read), f"{name} was not read with {type(read).__name__}"  # type: ignore[union-attr]
    _same_tree(getattr(read, name, None), getattr(expected, name, None), rest)


def test_a_tokens_row_is_read_with_its_holder_as_the_orm_reads_it(people):
    raws = [person_mcp_token(people.bruno)[0],
            make_token(application=people.triage_bot.agent.application, user=None, scope="memory.read",
                       resource=[resource_url(MCP_PATH)])]
    for raw in raws:
        with CaptureQueriesContext(connection) as queries:
            row = tokens.access_token_row(raw)
            assert row is not None
            for path in access.TOKEN_HOLDER_RELATED:
                expected = access.one_row(AccessToken.objects.select_related(path).filter(
                    token_checksum=tokens.token_checksum(raw)))
                _same_tree(row, expected, path)
        # The lookup itself was one statement; every related row came with it.
        assert len(queries) == 1 + len(access.TOKEN_HOLDER_RELATED)
    assert tokens.access_token_row(raws[0] + "x") is None


def test_a_credentials_caller_is_found_in_one_statement_by_its_workspaces_id_or_slug(people):
    agent = people.triage_bot.agent
    for tenant in (str(people.acme.pk), people.acme.slug):
        with CaptureQueriesContext(connection) as queries:
            person = access.caller_from_principal(tenant=tenant, subject="user:bruno", kind="user",
                                                  client_id="desk")
            bot = access.caller_from_principal(tenant=tenant, subject=f"agent:{agent.name}", kind="agent",
                                               client_id=agent.application.client_id)
            # The person's membership and its workspace came with them.
            assert person.user is not None and person.user.membership.tenant == people.acme
        assert len(queries) == 2, queries.captured_queries
        assert (person.user, person.tenant, person.subject) == (people.bruno, people.acme, "user:bruno")
        assert person.user.membership == access.person_membership(people.bruno)
        assert (bot.agent, bot.tenant) == (agent, people.acme)


def test_the_callers_lookups_read_what_the_orm_reads(people):
    agent = people.triage_bot.agent
    # A person of the workspace without a membership (their row is read with none).
    loner = User.objects.create_user(username="loner", password="x", tenant=people.acme)
    for user in (people.bruno, people.ada, loner):
        expected = access.one_row(User.objects.select_related("membership__tenant").filter(
            tenant_id=people.acme.pk, username=user.username))
        for read in (access._PERSON_IN_WORKSPACE.by_id.first(people.acme.pk, user.username),
                     access._PERSON_IN_WORKSPACE.by_slug.first(people.acme.slug, user.username)):
            with CaptureQueriesContext(connection) as queries:
                _same_tree(read, expected, "membership__tenant")
            assert len(queries) == 0, queries.captured_queries
    expected_agent = access.one_row(Agent.objects.select_related("tenant").filter(
        tenant_id=people.acme.pk, application__client_id=agent.application.client_id, name=agent.name))
    for read_agent in (
            access._AGENT_IN_WORKSPACE.by_id.first(people.acme.pk, agent.application.client_id, agent.name),
            access._AGENT_IN_WORKSPACE.by_slug.first(people.acme.slug, agent.application.client_id, agent.name)):
        with CaptureQueriesContext(connection) as queries:
            _same_tree(read_agent, expected_agent, "tenant")
        assert len(queries) == 0
    # Another workspace's id or slug finds neither.
    assert access._PERSON_IN_WORKSPACE.first(str(people.globex.pk), "bruno") is None
    assert access._AGENT_IN_WORKSPACE.first(people.globex.slug, agent.application.client_id, agent.name) is None
    # Another workspace's name for the same person or agent finds nobody.
    for tenant in (str(people.globex.pk), people.globex.slug, str(uuid.uuid4()), "no-such-workspace"):
        with pytest.raises(access.PermissionDenied):
            access.caller_from_principal(tenant=tenant, subject="user:bruno", kind="user", client_id="desk")
        with pytest.raises(access.PermissionDenied):
            access.caller_from_principal(tenant=tenant, subject=f"agent:{agent.name}", kind="agent",
                                         client_id=agent.application.client_id)


def _by_name() -> Lookup[User]:
    return Lookup(lambda name: User.objects.select_related("membership__tenant").filter(username=name), str)


@pytest.fixture
def compiled(monkeypatch) -> list[type[Model]]:
    """The model of every statement Django compiles from here on, in order."""
    models: list[type[Model]] = []
    as_sql = SQLCompiler.as_sql

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        models.append(self.query.model)
        return as_sql(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "as_sql", counted)
    return models


def test_a_lookup_is_compiled_once_per_connection_and_runs_what_django_compiles(people, compiled):
    lookup = _by_name()
    for user in (people.bruno, people.cleo, people.carol):
        with CaptureQueriesContext(connection) as queries:
            assert lookup.first(user.username) == user
        # The statement Django compiles for the same queryset with this value, as it logs it.
        expected = User.objects.select_related("membership__tenant").filter(username=user.username)[:1]
        sql, params = expected.query.get_compiler(connection=connection).as_sql()
        assert [query["sql"] for query in queries] == [connection.ops.compose_sql(sql, params)]
    assert compiled.count(User) == 1 + 3  # the lookup's one, and the three expected statements above

    # Another thread has a connection of its own, and compiles there once.
    found = []

    def elsewhere() -> None:
        try:
            found.extend(lookup.first(name) for name in ("nobody", "nobody else"))
        finally:
            connections.close_all()

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert found == [None, None] and compiled.count(User) == 1 + 3 + 1


def test_a_value_is_a_parameter_whatever_it_holds(people):
    lookup = _by_name()
    for value in ("bruno' OR '1'='1", "bruno\\", "%", "bruno; DROP TABLE memoryhub_user", "\u00e9\U0001f600"):
        assert lookup.first(value) is None
    assert lookup.first("bruno") == people.bruno


@pytest.mark.django_db
def test_a_value_used_in_several_places_is_put_in_each(people):
    # A person found by their name or by their email: the one value in both places.
    people.cleo.email = "cleo@acme.test"
    people.cleo.save(update_fields=["email"])
    lookup: Lookup[User] = Lookup(lambda name: User.objects.filter(Q(username=name) | Q(email=name)), str)
    assert lookup.first("bruno") == people.bruno
    assert lookup.first("cleo@acme.test") == people.cleo
    assert lookup.first("nobody") is None
    compiled = connections["default"].__dict__["compiled_lookups"][lookup]
    assert len(compiled.places) == 1 and len(compiled.places[0]) == 2


def test_a_key_is_a_value_as_an_automatic_primary_keys_own(people):
    # A foreign key's value (an AutoField's) reaches the statement as the very int given.
    lookup: Lookup[Agent] = Lookup(lambda tenant, key: Agent.objects.filter(tenant_id=tenant, pk=key), uuid.UUID, int)
    agent = people.triage_bot.agent
    assert lookup.first(people.acme.pk, agent.pk) == agent
    assert lookup.first(people.globex.pk, agent.pk) is None
    assert lookup.first(people.acme.pk, 1 << 40) is None
    # An IntegerField's value is wrapped on its way (psycopg's Int4 for an integer): not placeable,
    # alone or beside the very value (another form of it).
    with pytest.raises(ValueError, match="found 0"):
        Lookup(lambda length: Fragment.objects.filter(search_length=length), int).first(3)
    with pytest.raises(ValueError, match="in another form"):
        Lookup(lambda key: Fragment.objects.filter(Q(owner_user=key) | Q(search_length=key)), int).first(3)
    with pytest.raises(TypeError, match="expected a value of type int"):
        lookup.first(people.acme.pk, True)
    # A key made a float by a FloatField's filter, or a name upper-cased, is in another form.
    with pytest.raises(ValueError, match="in another form"):
        Lookup(lambda key: Fragment.objects.filter(Q(owner_user=key) | Q(confidence=key)), int).first(3)
    with pytest.raises(ValueError, match="in another form"):
        Lookup(lambda name: User.objects.filter(Q(username=name) | Q(email=name.upper())), str).first("bruno")
    # A value also inside another parameter (a JSON value's list) is in another form.
    with pytest.raises(ValueError, match="in another form"):
        Lookup(lambda slug: Tenant.objects.filter(Q(slug=slug) | Q(blocked_terms__contains=[slug])), str).first("acme")
    # A key past a bigint's range is refused, not sent.
    with pytest.raises(ValueError, match="past its range"):
        lookup.first(people.acme.pk, 1 << 63)
    # A UUID also written without its dashes is in another form.
    with pytest.raises(ValueError, match="in another form"):
        Lookup(lambda tenant: Agent.objects.filter(Q(tenant_id=tenant) | Q(name=tenant.hex)), uuid.UUID
               ).first(people.acme.pk)
    # A key is sent as a bigint whatever its size: one prepared statement for every key.
    for key in (1, 40_000, 1 << 40, agent.pk):
        assert lookup.first(people.acme.pk, key) == (agent if key == agent.pk else None)
    with connection.cursor() as cursor:
        cursor.execute("SELECT parameter_types::text[] FROM pg_prepared_statements "
                       "WHERE statement LIKE '%%FROM \"memoryhub_agent\" WHERE%%' AND statement LIKE '%%.\"id\" = $%%'")
        assert cursor.fetchall() == [(["bigint", "uuid"],)]


def _names(tenant: uuid.UUID, name: str, email: str) -> QuerySet[User]:
    mine = User.objects.filter(tenant_id=tenant)
    by_name = mine.filter(username=name).annotate(part=Value(0)).values_list("pk", "username", "part")
    by_email = mine.filter(email=email).annotate(part=Value(1)).values_list("pk", "username", "part")
    return by_name.union(by_email, all=True).order_by("part", "username")


def test_rows_read_a_union_of_values_whole_as_the_orm_reads_it(people, monkeypatch):
    people.cleo.email = "cleo@acme.test"
    people.cleo.save(update_fields=["email"])
    rows = Rows(_names, uuid.UUID, str, str)
    cases = [(people.acme.pk, "bruno", "cleo@acme.test"), (people.acme.pk, "ada", "nobody@acme.test"),
             (people.globex.pk, "bruno", "cleo@acme.test"), (people.acme.pk, "cleo", "cleo@acme.test")]
    compilings = []
    real = Rows._compile
    monkeypatch.setattr(Rows, "_compile", lambda self, alias: compilings.append(alias) or real(self, alias))
    for case in cases:
        with CaptureQueriesContext(connection) as queries:
            read = rows.all(*case)
        assert len(queries) == 1
        assert read == [tuple(row) for row in _names(*case)]
    assert rows.all(*cases[0]) == [(people.bruno.pk, "bruno", 0), (people.cleo.pk, "cleo", 1)]
    assert rows.all(*cases[2]) == []
    assert rows.all(*cases[3]) == [(people.cleo.pk, "cleo", 0), (people.cleo.pk, "cleo", 1)]
    # Compiled once on this connection, whatever the values.
    assert compilings == ["default"]


@pytest.mark.django_db
def test_rows_refuse_what_is_not_a_queryset_of_values():
    for build in (lambda name: User.objects.filter(username=name),
                  lambda name: User.objects.filter(username=name).values_list("pk", flat=True),
                  lambda name: User.objects.filter(username=name).values_list("pk", named=True),
                  lambda name: User.objects.filter(username=name).values("pk"),
                  lambda name: User.objects.filter(username=name).values_list("pk").distinct()):
        with pytest.raises(ValueError, match="values_list"):
            Rows(build, str).all("bruno")
    # A union with a part that can match nothing, at any depth: Django would leave the part out.
    with pytest.raises(ValueError, match="EmptyResultSet"):
        Rows(lambda name: User.objects.filter(username=name).values_list("pk").union(
            User.objects.filter(pk__in=[]).values_list("pk")), str).all("bruno")
    with pytest.raises(ValueError, match="EmptyResultSet"):
        Rows(lambda name: User.objects.filter(username=name).values_list("pk").union(
            User.objects.filter(email=name).values_list("pk").union(User.objects.filter(pk__in=[]).values_list("pk"))),
            str).all("bruno")
    # A distinct part of a union, too.
    with pytest.raises(ValueError, match="values_list"):
        Rows(lambda name: User.objects.filter(username=name).values_list("pk").union(
            User.objects.filter(email=name).values_list("pk").distinct()), str).all("bruno")


@pytest.mark.django_db
def test_a_lookup_whose_values_cannot_be_placed_is_refused():
    # A value Django or the build changes on its way (contains: %value%; lowered, though the
    # marker is lower case already), one used as it is and again changed, one of a kind no
    # marker stands for, a queryset that is not of model instances.
    with pytest.raises(ValueError, match="found 0"):
        Lookup(lambda name: User.objects.filter(username__contains=name), str).first("bruno")
    with pytest.raises(ValueError, match="found 0"):
        Lookup(lambda name: User.objects.filter(username=name.lower()), str).first("bruno")
    with pytest.raises(ValueError, match="in another form"):
        Lookup(lambda name: User.objects.filter(Q(username=name) | Q(email__contains=name)), str).first("bruno")
    with pytest.raises(ValueError, match="plain model instances"):
        Lookup(lambda name: User.objects.filter(username=name).values("pk"), str).first("bruno")  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match="plain model instances"):
        Lookup(lambda name: User.objects.filter(username=name).prefetch_related("membership__roles"),
               str).first("bruno")
    with pytest.raises(TypeError, match="float"):
        Lookup(lambda pk: User.objects.filter(pk=pk), float)
    # Values are checked against the kinds given, and counted.
    lookup = _by_name()
    for wrong in (3, None, b"bruno"):
        with pytest.raises(TypeError, match="expected a value of type str"):
            lookup.first(wrong)
    with pytest.raises(TypeError, match="takes 1 values"):
        lookup.first("bruno", "cleo")
