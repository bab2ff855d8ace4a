"""The REST admin API: a workspace's admins administer it with an OAuth token
carrying `workspace.admin` (memoryhub.api.authentication).

Each view parses its input, calls one caller-first service and renders the
result; the services ask memoryhub.access, as they do for the web admin and
the commands. Anything of another workspace is not found (404). Errors have
the ingestion API's shape, {"error": {"code", "message", "field"?}}. A
response carrying a client secret is never stored by a cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memoryhub.access import AGENT_SCOPES, Caller
from memoryhub.api.authentication import AdminTokenAuthentication
from memoryhub.api.views import BoundedJSONParser, ErrorOut, error_response
from memoryhub.errors import InvalidArgument
from memoryhub.models import Agent, Collection, Membership, Role, Source
from memoryhub.services import access_rules, agents, collections, members, roles, sources
from memoryhub.services.arguments import checked_strings, checked_text
from memoryhub.services.sources import SourceHealth

# The largest body here is a member's list of roles; 64 KiB is ample.
BODY_MAX_BYTES = 64 * 1024
NAME_MAX_CHARS = 64  # roles', collections', agents' and sources' names (the services' limits)
ROLES_MAX_ITEMS = 100


class AdminJSONParser(BoundedJSONParser):
    max_bytes = BODY_MAX_BYTES


class AdminAPIView(APIView):
    authentication_classes = [AdminTokenAuthentication]
    permission_classes = [IsAuthenticated]
    parser_classes = [AdminJSONParser]

    def get_exception_handler(self):  # type: ignore[no-untyped-def]
        return error_response


def _caller(request: Request) -> Caller:
    return request.user.caller


# ---------------------------------------------------------------- parsing


def _body(request: Request, *, required: Sequence[str] = (), optional: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON object sent, with only the named fields, the required ones present."""
    data = request.data
    if not isinstance(data, dict):
        raise InvalidArgument("The body must be a JSON object.")
    known = (*required, *optional)
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise InvalidArgument(f"Unknown field {unknown[0]!r}; this request takes {', '.join(known)}.",
                              field=unknown[0])
    missing = [name for name in required if data.get(name) is None]
    if missing:
        raise InvalidArgument(f"{missing[0]} is required.", field=missing[0])
    return data


def _name(data: dict, field: str = "name", *, required: bool = True) -> str:
    return checked_text(data.get(field), field=field, max_chars=NAME_MAX_CHARS, required=required)


def _names(data: dict, field: str) -> tuple[str, ...]:
    return checked_strings(data.get(field), field=field, max_items=ROLES_MAX_ITEMS, item_max_chars=NAME_MAX_CHARS)


def _flag(data: dict, field: str) -> bool | None:
    value = data.get(field)
    if value is not None and not isinstance(value, bool):
        raise InvalidArgument(f"{field} must be true or false.", field=field)
    return value


def _secret(response: Response) -> Response:
    response["Cache-Control"] = "no-store"
    return response


# ---------------------------------------------------------------- output


class MemberOut(serializers.Serializer):
    user_id = serializers.IntegerField()
    username = serializers.CharField()
    email = serializers.CharField()
    is_admin = serializers.BooleanField()
    active = serializers.BooleanField(help_text="Whether they can sign in and use their clients.")
    removed = serializers.BooleanField(help_text="Removed from the workspace (reactivating brings them back).")
    roles = serializers.ListField(child=serializers.CharField())


def _member(membership: Membership) -> dict:
    return {"user_id": membership.user_id, "username": membership.user.username, "email": membership.user.email,
            "is_admin": membership.is_admin, "active": membership.user.is_active,
            "removed": membership.removed_at is not None,
            "roles": sorted(role.name for role in membership.roles.all())}


class RoleOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()


def _role(role: Role) -> dict:
    return {"id": role.pk, "name": role.name, "description": role.description}


class CollectionOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()


class CollectionCountedOut(CollectionOut):
    live = serializers.IntegerField(help_text="Live fragments.")
    retired = serializers.IntegerField(help_text="Retired fragments (reads of the past still see them).")
    readable_by = serializers.ListField(child=serializers.CharField(), help_text="Roles an access rule grants it to.")


def _collection(collection: Collection) -> dict:
    return {"id": collection.pk, "name": collection.name, "description": collection.description}


def _collection_counted(collection: Any) -> dict:
    return {**_collection(collection), "live": collection.live, "retired": collection.retired,
            "readable_by": sorted(rule.role.name for rule in collection.access_rules.all())}


class RuleOut(serializers.Serializer):
    id = serializers.IntegerField()
    role = serializers.CharField()
    collection = serializers.CharField()


class GridCellOut(serializers.Serializer):
    collection = serializers.CharField()
    rule_id = serializers.IntegerField(allow_null=True, help_text="The rule granting it, or null.")


class GridRowOut(serializers.Serializer):
    role = serializers.CharField()
    cells = GridCellOut(many=True)


class GridOut(serializers.Serializer):
    collections = serializers.ListField(child=serializers.CharField())
    rows = GridRowOut(many=True)


class SourceOut(serializers.Serializer):
    name = serializers.CharField()
    display_name = serializers.CharField()
    kind = serializers.CharField()
    default_collection = serializers.CharField(allow_null=True)
    state = serializers.ChoiceField(choices=["active", "disabled", "revoked"])
    client_id = serializers.CharField(allow_null=True)


class SourceHealthOut(SourceOut):
    last_change = serializers.DateTimeField(allow_null=True)
    documents = serializers.IntegerField()
    deleted_documents = serializers.IntegerField()
    fragments = serializers.IntegerField()
    pending_embedding = serializers.IntegerField()
    last_error = serializers.CharField(help_text="What the ingestion API refused of it last.")
    last_error_at = serializers.DateTimeField(allow_null=True)


def _source(source: Source) -> dict:
    state = "revoked" if source.agent.revoked_at is not None else (
        "disabled" if source.disabled_at is not None else "active")
    return {"name": source.agent.name, "display_name": source.agent.display_name, "kind": source.kind,
            "default_collection": source.default_collection.name if source.default_collection else None,
            "state": state, "client_id": source.agent.application.client_id if source.agent.application else None}


def _source_health(health: SourceHealth) -> dict:
    return {**_source(health.source), "last_change": health.last_change, "documents": health.documents,
            "deleted_documents": health.deleted_documents, "fragments": health.fragments,
            "pending_embedding": health.pending_embedding, "last_error": health.source.last_error,
            "last_error_at": health.source.last_error_at}


class AgentOut(serializers.Serializer):
    name = serializers.CharField()
    display_name = serializers.CharField()
    scopes = serializers.ListField(child=serializers.CharField())
    roles = serializers.ListField(child=serializers.CharField())
    revoked = serializers.BooleanField()
    client_id = serializers.CharField(allow_null=True)


def _agent(agent: Agent) -> dict:
    return {"name": agent.name, "display_name": agent.display_name, "scopes": sorted(agent.scope_set),
            "roles": sorted(role.name for role in agent.roles.all()), "revoked": agent.revoked_at is not None,
            "client_id": agent.application.client_id if agent.application else None}


class CredentialsOut(serializers.Serializer):
    name = serializers.CharField()
    client_id = serializers.CharField()
    client_secret = serializers.CharField(help_text="Shown this once; only its hash is kept.")


def _credentials(credentials: agents.AgentCredentials) -> dict:
    return {"name": credentials.agent.name, "client_id": credentials.client_id,
            "client_secret": credentials.client_secret}


class SourceCreatedOut(serializers.Serializer):
    source = SourceOut()
    credentials = CredentialsOut()


class AgentCreatedOut(serializers.Serializer):
    agent = AgentOut()
    credentials = CredentialsOut()


class DeletedOut(serializers.Serializer):
    deleted = serializers.CharField(help_text="The name of what was deleted.")


class RetiredOut(serializers.Serializer):
    retired = serializers.IntegerField(help_text="Fragments retired now.")


# ---------------------------------------------------------------- schema-only input


class MemberIn(serializers.Serializer):
    roles = serializers.ListField(child=serializers.CharField(max_length=NAME_MAX_CHARS), required=False,
                                  max_length=ROLES_MAX_ITEMS, help_text="Every role they hold (replaces the old).")
    is_admin = serializers.BooleanField(required=False)


class NamedIn(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX_CHARS, help_text="Letters, digits and hyphens.")
    description = serializers.CharField(max_length=roles.DESCRIPTION_MAX_CHARS, required=False, allow_blank=True)


class RenameIn(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX_CHARS)


class ConfirmIn(serializers.Serializer):
    confirm = serializers.CharField(max_length=NAME_MAX_CHARS, help_text="The collection's name, exactly.")


class RuleIn(serializers.Serializer):
    role = serializers.CharField(max_length=NAME_MAX_CHARS)
    collection = serializers.CharField(max_length=NAME_MAX_CHARS)


class SourceIn(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX_CHARS)
    kind = serializers.CharField(max_length=sources.SOURCE_KIND_MAX_CHARS, required=False,
                                 help_text="documents, tickets, chat… Default: documents.")
    collection = serializers.CharField(max_length=NAME_MAX_CHARS, required=False, allow_null=True,
                                       help_text="The collection its documents go to by default.")


class AgentIn(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX_CHARS)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=list(AGENT_SCOPES)), min_length=1)
    roles = serializers.ListField(child=serializers.CharField(max_length=NAME_MAX_CHARS), required=False,
                                  max_length=ROLES_MAX_ITEMS)
    display_name = serializers.CharField(max_length=agents.DISPLAY_NAME_MAX_CHARS, required=False,
                                         allow_blank=True)


ERRORS = {
    400: OpenApiResponse(ErrorOut, description="A field is missing, malformed or over its limit; `field` names it."),
    401: OpenApiResponse(ErrorOut, description="No token, or an invalid or expired one, or one not issued for "
                                               "this API."),
    403: OpenApiResponse(ErrorOut, description="The token lacks workspace.admin (insufficient_scope), or its "
                                               "holder is not an admin of the workspace now."),
}
NOT_FOUND = {404: OpenApiResponse(ErrorOut, description="Nothing of that id or name in this workspace.")}
CONFLICT = {409: OpenApiResponse(ErrorOut, description="It conflicts with the workspace as it is now.")}


# ---------------------------------------------------------------- members


class MembersView(AdminAPIView):
    @extend_schema(operation_id="admin_members_list", summary="The workspace's people",
                   responses={200: MemberOut(many=True), **ERRORS})
    def get(self, request: Request) -> Response:
        return Response([_member(m) for m in members.members_list(caller=_caller(request))])


class MemberView(AdminAPIView):
    @extend_schema(operation_id="admin_member_update", summary="Set a person's roles or admin flag",
                   description="Roles replace the old ones and apply from their next read. A workspace keeps "
                               "at least one active admin.",
                   request=MemberIn, responses={200: MemberOut, **ERRORS, **NOT_FOUND, **CONFLICT})
    def patch(self, request: Request, user_id: int) -> Response:
        data = _body(request, optional=("roles", "is_admin"))
        membership = members.member_update(
            caller=_caller(request), user_id=user_id, is_admin=_flag(data, "is_admin"),
            roles=_names(data, "roles") if data.get("roles") is not None else None)
        return Response(_member(membership))


class MemberDeactivateView(AdminAPIView):
    @extend_schema(operation_id="admin_member_deactivate", summary="Deactivate a person",
                   description="They can no longer sign in, and every token and app of theirs ends now.",
                   request=None, responses={200: MemberOut, **ERRORS, **NOT_FOUND, **CONFLICT})
    def post(self, request: Request, user_id: int) -> Response:
        return Response(_member(members.member_deactivate(caller=_caller(request), user_id=user_id)))


class MemberReactivateView(AdminAPIView):
    @extend_schema(operation_id="admin_member_reactivate", summary="Reactivate a deactivated or removed person",
                   request=None, responses={200: MemberOut, **ERRORS, **NOT_FOUND})
    def post(self, request: Request, user_id: int) -> Response:
        return Response(_member(members.member_reactivate(caller=_caller(request), user_id=user_id)))


class MemberRemoveView(AdminAPIView):
    @extend_schema(operation_id="admin_member_remove", summary="Remove a person from the workspace",
                   description="Deactivated, every credential ended, no roles and no admin flag; their memory is "
                               "kept, readable by nobody.",
                   request=None, responses={200: MemberOut, **ERRORS, **NOT_FOUND, **CONFLICT})
    def post(self, request: Request, user_id: int) -> Response:
        return Response(_member(members.member_remove(caller=_caller(request), user_id=user_id)))


# ---------------------------------------------------------------- roles


class RolesView(AdminAPIView):
    @extend_schema(operation_id="admin_roles_list", summary="The workspace's roles",
                   responses={200: RoleOut(many=True), **ERRORS})
    def get(self, request: Request) -> Response:
        return Response([_role(role) for role in roles.roles_list(caller=_caller(request))])

    @extend_schema(operation_id="admin_role_create", summary="Create a role",
                   request=NamedIn, responses={201: RoleOut, **ERRORS, **CONFLICT})
    def post(self, request: Request) -> Response:
        data = _body(request, required=("name",), optional=("description",))
        role = roles.role_create(caller=_caller(request), name=_name(data), description=checked_text(
            data.get("description"), field="description", max_chars=roles.DESCRIPTION_MAX_CHARS))
        return Response(_role(role), status=201)


class RoleView(AdminAPIView):
    @extend_schema(operation_id="admin_role_delete", summary="Delete a role",
                   description="Its access rules go with it, and nobody holds it any more.",
                   responses={200: DeletedOut, **ERRORS, **NOT_FOUND})
    def delete(self, request: Request, role_id: int) -> Response:
        return Response({"deleted": roles.role_delete(caller=_caller(request), role_id=role_id).name})


# ---------------------------------------------------------------- collections


class CollectionsView(AdminAPIView):
    @extend_schema(operation_id="admin_collections_list", summary="Collections with their fragment counts",
                   responses={200: CollectionCountedOut(many=True), **ERRORS})
    def get(self, request: Request) -> Response:
        return Response([_collection_counted(c) for c in collections.collections_list(caller=_caller(request))])

    @extend_schema(operation_id="admin_collection_create", summary="Create a collection",
                   request=NamedIn, responses={201: CollectionOut, **ERRORS, **CONFLICT})
    def post(self, request: Request) -> Response:
        data = _body(request, required=("name",), optional=("description",))
        collection = collections.collection_create(
            caller=_caller(request), name=_name(data), description=checked_text(
                data.get("description"), field="description", max_chars=collections.DESCRIPTION_MAX_CHARS))
        return Response(_collection(collection), status=201)


class CollectionView(AdminAPIView):
    @extend_schema(operation_id="admin_collection_rename", summary="Rename a collection",
                   description="Connectors that send the old name are refused until they use the new one.",
                   request=RenameIn, responses={200: CollectionOut, **ERRORS, **NOT_FOUND, **CONFLICT})
    def patch(self, request: Request, collection_id: int) -> Response:
        data = _body(request, required=("name",))
        return Response(_collection(collections.collection_rename(
            caller=_caller(request), collection_id=collection_id, name=_name(data))))

    @extend_schema(operation_id="admin_collection_delete", summary="Delete a collection with nothing live in it",
                   description="Its access rules go; sources stop defaulting to it.",
                   responses={200: DeletedOut, **ERRORS, **NOT_FOUND, **CONFLICT})
    def delete(self, request: Request, collection_id: int) -> Response:
        return Response({"deleted": collections.collection_delete(caller=_caller(request),
                                                                  collection_id=collection_id)})


class CollectionRetireView(AdminAPIView):
    @extend_schema(operation_id="admin_collection_retire", summary="Retire every live fragment of a collection",
                   description="Send the collection's name as `confirm`. Reads of the past still see them; "
                               "nobody's read of now does.",
                   request=ConfirmIn, responses={200: RetiredOut, **ERRORS, **NOT_FOUND})
    def post(self, request: Request, collection_id: int) -> Response:
        data = _body(request, required=("confirm",))
        return Response({"retired": collections.collection_retire_fragments(
            caller=_caller(request), collection_id=collection_id, confirm=_name(data, "confirm"))})


# ---------------------------------------------------------------- access rules


def _grid(grid: access_rules.RuleGrid) -> dict:
    return {"collections": [collection.name for collection in grid.collections],
            "rows": [{"role": role.name, "cells": [
                {"collection": collection.name, "rule_id": rule.pk if rule is not None else None}
                for collection, rule in zip(grid.collections, cells, strict=True)]} for role, cells in grid.rows]}


class AccessRulesView(AdminAPIView):
    @extend_schema(operation_id="admin_access_rules_grid", summary="Access rules as a role × collection grid",
                   responses={200: GridOut, **ERRORS})
    def get(self, request: Request) -> Response:
        return Response(_grid(access_rules.access_rules_grid(caller=_caller(request))))

    @extend_schema(operation_id="admin_access_rule_grant", summary="Let holders of a role read a collection",
                   description="From their next read on.",
                   request=RuleIn, responses={201: RuleOut, **ERRORS, **NOT_FOUND, **CONFLICT})
    def post(self, request: Request) -> Response:
        data = _body(request, required=("role", "collection"))
        rule = access_rules.access_rule_grant(caller=_caller(request), role=_name(data, "role"),
                                              collection=_name(data, "collection"))
        return Response({"id": rule.pk, "role": rule.role.name, "collection": rule.collection.name}, status=201)


class AccessRuleView(AdminAPIView):
    @extend_schema(operation_id="admin_access_rule_revoke", summary="Revoke an access rule",
                   responses={200: RuleOut, **ERRORS, **NOT_FOUND})
    def delete(self, request: Request, rule_id: int) -> Response:
        rule = access_rules.access_rule_revoke(caller=_caller(request), rule_id=rule_id)
        return Response({"id": rule_id, "role": rule.role.name, "collection": rule.collection.name})


# ---------------------------------------------------------------- connected sources


class SourcesView(AdminAPIView):
    @extend_schema(operation_id="admin_sources_list", summary="Connected sources with their health",
                   responses={200: SourceHealthOut(many=True), **ERRORS})
    def get(self, request: Request) -> Response:
        return Response([_source_health(health) for health in sources.sources_health(caller=_caller(request))])

    @extend_schema(operation_id="admin_source_create", summary="Connect a source",
                   description="Its client credentials are in the response, shown this once.",
                   request=SourceIn, responses={201: SourceCreatedOut, **ERRORS, **NOT_FOUND, **CONFLICT})
    def post(self, request: Request) -> Response:
        data = _body(request, required=("name",), optional=("kind", "collection"))
        kind = checked_text(data.get("kind"), field="kind", max_chars=sources.SOURCE_KIND_MAX_CHARS)
        source, credentials = sources.source_register(
            caller=_caller(request), name=_name(data), kind=kind or "documents",
            collection=_name(data, "collection", required=False) or None)
        return _secret(Response({"source": _source(source), "credentials": _credentials(credentials)}, status=201))


class SourceDisableView(AdminAPIView):
    @extend_schema(operation_id="admin_source_disable", summary="Disable a source",
                   description="The ingestion API refuses it from its next request; what it sent stays.",
                   request=None, responses={200: SourceOut, **ERRORS, **NOT_FOUND})
    def post(self, request: Request, name: str) -> Response:
        return Response(_source(sources.source_set_enabled(caller=_caller(request), name=name, enabled=False)))


class SourceEnableView(AdminAPIView):
    @extend_schema(operation_id="admin_source_enable", summary="Enable a disabled source again",
                   request=None, responses={200: SourceOut, **ERRORS, **NOT_FOUND})
    def post(self, request: Request, name: str) -> Response:
        return Response(_source(sources.source_set_enabled(caller=_caller(request), name=name, enabled=True)))


class SourceRotateView(AdminAPIView):
    @extend_schema(operation_id="admin_source_rotate", summary="A new client secret for a source",
                   description="Shown this once; the old secret and its tokens stop working now.",
                   request=None, responses={200: CredentialsOut, **ERRORS, **NOT_FOUND})
    def post(self, request: Request, name: str) -> Response:
        return _secret(Response(_credentials(sources.source_rotate_secret(caller=_caller(request), name=name))))


class SourceRevokeView(AdminAPIView):
    @extend_schema(operation_id="admin_source_revoke", summary="Revoke a source for good",
                   description="Its client and tokens are deleted; what it contributed stays, governed by the "
                               "access rules.",
                   request=None, responses={200: SourceOut, **ERRORS, **NOT_FOUND})
    def post(self, request: Request, name: str) -> Response:
        return Response(_source(sources.source_revoke(caller=_caller(request), name=name)))


# ---------------------------------------------------------------- agents


class AgentsView(AdminAPIView):
    @extend_schema(operation_id="admin_agents_list", summary="Headless agents",
                   responses={200: AgentOut(many=True), **ERRORS})
    def get(self, request: Request) -> Response:
        return Response([_agent(agent) for agent in agents.agents_list(caller=_caller(request))])

    @extend_schema(operation_id="admin_agent_register", summary="Register an agent",
                   description="Its client credentials are in the response, shown this once. Agents may be "
                               "granted memory.read and memory.write (never memory.audit or workspace.admin).",
                   request=AgentIn, responses={201: AgentCreatedOut, **ERRORS, **CONFLICT})
    def post(self, request: Request) -> Response:
        data = _body(request, required=("name", "scopes"), optional=("roles", "display_name"))
        credentials = agents.agent_register(
            caller=_caller(request), name=_name(data),
            scopes=checked_strings(data.get("scopes"), field="scopes", max_items=len(AGENT_SCOPES) + 1,
                                   item_max_chars=NAME_MAX_CHARS),
            roles=_names(data, "roles"),
            display_name=checked_text(data.get("display_name"), field="display_name",
                                      max_chars=agents.DISPLAY_NAME_MAX_CHARS))
        return _secret(Response({"agent": _agent(credentials.agent), "credentials": _credentials(credentials)},
                                status=201))


class AgentRotateView(AdminAPIView):
    @extend_schema(operation_id="admin_agent_rotate", summary="A new client secret for an agent",
                   description="Shown this once; the old secret and every token minted with it stop working now.",
                   request=None, responses={200: CredentialsOut, **ERRORS, **NOT_FOUND})
    def post(self, request: Request, name: str) -> Response:
        return _secret(Response(_credentials(agents.agent_rotate_secret(caller=_caller(request), name=name))))


class AgentRevokeView(AdminAPIView):
    @extend_schema(operation_id="admin_agent_revoke", summary="Revoke an agent for good",
                   description="Its client and tokens are deleted; what it wrote stays attributed to it.",
                   request=None, responses={200: AgentOut, **ERRORS, **NOT_FOUND})
    def post(self, request: Request, name: str) -> Response:
        return Response(_agent(agents.agent_revoke(caller=_caller(request), name=name)))
