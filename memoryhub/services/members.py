"""People of a workspace: adding them, their roles and admin flag, passwords.

Login names are unique within a workspace, not across workspaces (see
memoryhub.models.User), so adding someone never reveals whether the name is
used in another workspace.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from django.contrib.auth import password_validation
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from memoryhub import access
from memoryhub.access import Caller
from memoryhub.errors import Conflict, InvalidArgument, NotFound
from memoryhub.models import Membership, User
from memoryhub.services.roles import roles_named

_USERNAME = re.compile(r"^[\w.@+-]{1,150}$")
EMAIL_MAX_CHARS = 254


def members_list(*, caller: Caller) -> QuerySet[Membership]:
    tenant = access.require_admin(caller)
    return (
        Membership.objects.filter(tenant=tenant, user__tenant=tenant)
        .select_related("user")
        .prefetch_related("roles")
        .order_by("user__username")
    )


def member_get(*, caller: Caller, user_id: int | None = None, username: str | None = None) -> Membership:
    """A person of the caller's workspace, by id or login name; NotFound otherwise."""
    tenant = access.require_admin(caller)
    memberships = Membership.objects.filter(tenant=tenant, user__tenant=tenant).select_related("user")
    if user_id is not None:
        membership = memberships.filter(user_id=user_id).first()
    else:
        membership = memberships.filter(user__username__iexact=username or "").first()
    if membership is None:
        raise NotFound("No such person in this workspace.")
    return membership


def _validated_password(password: str, user: User) -> str:
    try:
        password_validation.validate_password(password, user)
    except ValidationError as exc:
        raise InvalidArgument(" ".join(exc.messages), field="password") from None
    return password


@transaction.atomic
def member_add(
    *, caller: Caller, username: str, password: str | None, email: str = "", roles: Sequence[str] = (),
    is_admin: bool = False,
) -> User:
    """A new person in the caller's workspace, signing in with `password`
    (None: no usable password until one is set)."""
    tenant = access.require_admin(caller)
    username = username.strip()
    if not _USERNAME.match(username):
        raise InvalidArgument("A username is 1-150 letters, digits or . @ + - _.", field="username")
    if len(email) > EMAIL_MAX_CHARS:
        raise InvalidArgument(f"An email address is at most {EMAIL_MAX_CHARS} characters.", field="email")
    if User.objects.filter(tenant=tenant, username__iexact=username).exists():
        raise Conflict(f"{username!r} is already a member of this workspace.", field="username")
    user = User(username=username, email=email, tenant=tenant)
    if password is None:
        user.set_unusable_password()
    else:
        user.set_password(_validated_password(password, user))
    granted = roles_named(tenant, roles)
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError:
        # Someone added the same name a moment ago (the unique index decided).
        raise Conflict(f"{username!r} is already a member of this workspace.", field="username") from None
    membership = Membership.objects.create(tenant=tenant, user=user, is_admin=is_admin)
    membership.roles.set(granted)
    return user


@transaction.atomic
def member_update(*, caller: Caller, user_id: int, roles: Sequence[str], is_admin: bool) -> Membership:
    """Set a member's roles (replacing the old ones) and admin flag. The roles
    apply to their next read: access rules are always today's."""
    tenant = access.require_admin(caller)
    membership = member_get(caller=caller, user_id=user_id)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    if membership.is_admin and not is_admin:
        # Locked rows of every admin: two admins demoting each other at once
        # must not leave the workspace with none.
        admins = list(Membership.objects.select_for_update().filter(tenant=tenant, is_admin=True, user__is_active=True))
        if len(admins) <= 1:
            raise Conflict("A workspace keeps at least one admin; make someone else an admin first.",
                           field="is_admin")
    membership.roles.set(roles_named(tenant, roles))
    membership.is_admin = is_admin
    membership.save(update_fields=["is_admin"])
    return membership


@transaction.atomic
def member_set_password(*, caller: Caller, user_id: int, password: str) -> User:
    """An admin sets a member's password (for example a temporary one)."""
    user = member_get(caller=caller, user_id=user_id).user
    user.set_password(_validated_password(password, user))
    user.save(update_fields=["password"])
    return user
