"""Roles of a workspace: what access rules grant collections to."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.db.models import Count, Q, QuerySet

from memoryhub import access
from memoryhub.access import Caller
from memoryhub.errors import Conflict, InvalidArgument, NotFound
from memoryhub.models import Role, Tenant
from memoryhub.services.arguments import checked_name, checked_text
from memoryhub.services.conflicts import created_once

ROLE_NAME_MAX_CHARS = 64
DESCRIPTION_MAX_CHARS = 200


def roles_list(*, caller: Caller) -> QuerySet[Role]:
    """The workspace's roles, each with how many people (not removed) and live
    agents hold it (`people_count`, `agent_count`) and its rules (`access_rules`)."""
    tenant = access.require_admin(caller)
    return (Role.objects.filter(tenant=tenant).prefetch_related("access_rules__collection")
            .annotate(people_count=Count("memberships", filter=Q(memberships__removed_at__isnull=True), distinct=True),
                      agent_count=Count("agents", filter=Q(agents__revoked_at__isnull=True), distinct=True))
            .order_by("name"))


def role_get(*, caller: Caller, role_id: int | None = None, name: str | None = None, lock: bool = False) -> Role:
    """A role of the caller's workspace, by id or by its name exactly as stored
    (any case; "ENGINEERING!!" is not "engineering"); NotFound otherwise."""
    tenant = access.require_admin(caller)
    roles = Role.objects.filter(tenant=tenant)
    if lock:
        roles = roles.select_for_update()
    if role_id is not None:
        role = roles.filter(pk=role_id).first()
    else:
        role = roles.filter(name=checked_text(name, field="role", max_chars=ROLE_NAME_MAX_CHARS).lower()).first()
    if role is None:
        raise NotFound(f"No role named {name!r} in this workspace." if role_id is None
                       else "No such role in this workspace.", field="role")
    return role


def role_name(name: str, *, field: str = "name") -> str:
    """The role's name as stored (lower case: letters, digits, hyphens and
    underscores); any other name, or one too long, is refused, not rewritten."""
    return checked_name(name, field=field, max_chars=ROLE_NAME_MAX_CHARS, what="A role")


@transaction.atomic
def role_create(*, caller: Caller, name: str, description: str = "", exist_ok: bool = False) -> Role:
    tenant = access.require_admin(caller)
    slug = role_name(name)
    return created_once(
        lambda: Role.objects.create(tenant=tenant, name=slug, description=checked_text(
            description, field="description", max_chars=DESCRIPTION_MAX_CHARS)),
        existing=lambda: Role.objects.filter(tenant=tenant, name=slug).first(),
        taken=Conflict(f"A role named {slug!r} already exists.", field="name"), exist_ok=exist_ok)


@transaction.atomic
def role_delete(*, caller: Caller, role_id: int | None = None, name: str | None = None) -> Role:
    """Remove a role (by id, or by its exact name): its access rules go with it,
    and nobody holds it any more."""
    # Locked: of two deletes at once, the second waits and then finds no role.
    role = role_get(caller=caller, role_id=role_id, name=name, lock=True)
    role.delete()
    return role


def roles_named(tenant: Tenant, names: Sequence[str]) -> list[Role]:
    """These roles of `tenant`, every one of which must exist (callers have
    passed `require_admin` for `tenant`)."""
    wanted = {role_name(name, field="roles") for name in names}
    roles = list(Role.objects.filter(tenant=tenant, name__in=wanted))
    unknown = wanted - {role.name for role in roles}
    if unknown:
        raise InvalidArgument(f"No role named {', '.join(sorted(unknown))} in this workspace.", field="roles")
    return roles
