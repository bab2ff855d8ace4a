"""Access rules: holders of a role may read a collection. Edited only by a
workspace's admins, in the web admin, the REST admin API or a command; never
through MCP (decision 4). A change applies from the next read on."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet

from memoryhub import access
from memoryhub.access import Caller
from memoryhub.errors import Conflict, NotFound
from memoryhub.models import AccessRule, Collection, Role, Tenant
from memoryhub.services.collections import collection_get
from memoryhub.services.conflicts import created_once
from memoryhub.services.roles import role_get


def access_rules_list(*, caller: Caller) -> QuerySet[AccessRule]:
    tenant = access.require_admin(caller)
    return (
        AccessRule.objects.filter(tenant=tenant)
        .select_related("role", "collection")
        .order_by("collection__name", "role__name")
    )


def _named(caller: Caller, role: str, collection: str) -> tuple[Tenant, Role, Collection]:
    """The caller's workspace, and its role and collection of these names (NotFound otherwise)."""
    tenant = access.require_admin(caller)
    return tenant, role_get(caller=caller, name=role), collection_get(caller=caller, name=collection)


@transaction.atomic
def access_rule_grant(*, caller: Caller, role: str, collection: str, exist_ok: bool = False) -> AccessRule:
    """Holders of `role` may read `collection` (both by name), from their next read on."""
    tenant, role_obj, collection_obj = _named(caller, role, collection)
    return created_once(
        lambda: AccessRule.objects.create(tenant=tenant, role=role_obj, collection=collection_obj),
        existing=lambda: AccessRule.objects.filter(tenant=tenant, role=role_obj, collection=collection_obj).first(),
        taken=Conflict(f"{role_obj.name} may already read {collection_obj.name}."), exist_ok=exist_ok)


def access_rule_get(*, caller: Caller, role: str, collection: str) -> AccessRule:
    """The rule letting `role` read `collection` (both by name); NotFound when there is none."""
    tenant, role_obj, collection_obj = _named(caller, role, collection)
    rule = AccessRule.objects.filter(tenant=tenant, role=role_obj, collection=collection_obj).select_related(
        "role", "collection").first()
    if rule is None:
        raise NotFound(f"{role_obj.name} may not read {collection_obj.name}: there is no such rule.")
    return rule


@transaction.atomic
def access_rule_revoke(*, caller: Caller, rule_id: int | None = None, role: str | None = None,
                       collection: str | None = None) -> AccessRule:
    """Remove a rule, by id or by its role's and collection's names."""
    if rule_id is None:
        rule = access_rule_get(caller=caller, role=role or "", collection=collection or "")
    else:
        tenant = access.require_admin(caller)
        found = AccessRule.objects.filter(tenant=tenant, pk=rule_id).select_related("role", "collection").first()
        if found is None:
            raise NotFound("No such access rule in this workspace.")
        rule = found
    # Locked: of two revokes at once, the second waits and then finds no rule.
    if not AccessRule.objects.select_for_update().filter(pk=rule.pk).exists():
        raise NotFound("No such access rule in this workspace.")
    rule.delete()
    return rule


@dataclass(frozen=True)
class RuleGrid:
    """Every role × every collection, a rule or none in each cell."""

    collections: list[Collection]
    rows: list[tuple[Role, list[AccessRule | None]]]


def access_rules_grid(*, caller: Caller) -> RuleGrid:
    tenant = access.require_admin(caller)
    collections = list(Collection.objects.filter(tenant=tenant, deleted_at__isnull=True).order_by("name"))
    roles = list(Role.objects.filter(tenant=tenant).order_by("name"))
    rules = {(rule.role_id, rule.collection_id): rule for rule in AccessRule.objects.filter(tenant=tenant)}
    return RuleGrid(collections=collections, rows=[
        (role, [rules.get((role.pk, collection.pk)) for collection in collections]) for role in roles
    ])
