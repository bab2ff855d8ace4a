"""People of a workspace: adding them, their roles and admin flag, passwords,
deactivating, reactivating and removing them.

Deactivating ends at once every credential the person holds: their web
session (Django refuses an inactive user's session on its next request), every
access token (deleted: the MCP endpoint refuses it on the next request, and
memoryhub.access.token_holder refuses any token of an inactive person anyway),
every refresh chain and every code not yet exchanged, with every client.
Removing also takes their roles and admin flag. A removed or deactivated
person's private memory is kept and nobody reads it through the product: they
cannot sign in, admins read nobody's private memory, and an admin cannot set a
deactivated person's password. An admin who sets an active person's temporary
password could sign in as them, so doing it ends every session and app of
theirs: they notice. An admin can erase the memory
(memoryhub.services.portability.memory_erase), which leaves tombstones the
receipts that served them still name.

Login names are unique within a workspace, not across workspaces (see
memoryhub.models.User), so adding someone never reveals whether the name is
used in another workspace.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from django.contrib.auth import password_validation
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import QuerySet
from django.db.models.functions import Length
from django.utils import timezone
from oauth2_provider.models import AccessToken, Grant, RefreshToken

from memoryhub import access
from memoryhub.access import ADMIN_SCOPE, Caller
from memoryhub.errors import Conflict, InvalidArgument, NotFound
from memoryhub.models import Membership, Tenant, User
from memoryhub.services.arguments import name_skeleton, passes_for_another, storable
from memoryhub.services.conflicts import one_at_a_time, unique_or_conflict
from memoryhub.services.roles import role_create, role_get, roles_named

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


def login_name(text: str) -> str:
    """A login name as it is stored and looked up: trimmed and composed (NFC),
    so "jose\u0301" and "jos\u00e9" are the same person."""
    return unicodedata.normalize("NFC", text.strip())


def member_get(*, caller: Caller, user_id: int | None = None, username: str | None = None) -> Membership:
    """A person of the caller's workspace, by id or login name; NotFound otherwise."""
    tenant = access.require_admin(caller)
    memberships = Membership.objects.filter(tenant=tenant, user__tenant=tenant).select_related("user")
    if user_id is not None:
        membership = memberships.filter(user_id=user_id).first()
    else:
        membership = memberships.filter(
            user__username__iexact=storable(login_name(username or ""), field="username")).first()
    if membership is None:
        raise NotFound("No such person in this workspace.")
    return membership


def _validated_password(password: str, user: User) -> str:
    storable(password, field="password")
    try:
        password_validation.validate_password(password, user)
    except ValidationError as exc:
        raise InvalidArgument(" ".join(exc.messages), field="password") from None
    return password


def _refuse_a_name_that_reads_as_a_member(tenant: Tenant, username: str) -> None:
    """An all-Cyrillic "\u0430\u0501\u0430" reads as "ada": refused while "ada" (or
    anyone who reads the same) is a member of the workspace, removed ones included."""
    skeleton = name_skeleton(username)
    same_length = User.objects.filter(tenant=tenant).annotate(length=Length("username")).filter(
        length=len(username)).values_list("username", flat=True)
    for other in same_length:
        if name_skeleton(other) == skeleton:
            raise Conflict(f"{ascii(username)} reads as {other!r}, who is already a member of this workspace.",
                           field="username")


@transaction.atomic
def member_add(
    *, caller: Caller, username: str, password: str | None, email: str = "", roles: Sequence[str] = (),
    is_admin: bool = False,
) -> User:
    """A new person in the caller's workspace, signing in with `password`
    (None: no usable password until one is set)."""
    tenant = access.require_admin(caller)
    username = login_name(username)
    if not _USERNAME.match(username):
        raise InvalidArgument("A username is 1-150 letters, digits or . @ + - _.", field="username")
    looks_like = passes_for_another(username)
    if looks_like:
        # Such a name can read as another person's ("\u0430da" as "ada") wherever it is shown.
        raise InvalidArgument(f"{ascii(username)} {looks_like}, so it could pass for another name.",
                              field="username")
    if len(email) > EMAIL_MAX_CHARS:
        raise InvalidArgument(f"An email address is at most {EMAIL_MAX_CHARS} characters.", field="email")
    storable(email, field="email")
    if email:
        # The pages' form checks this too; the command and the API reach here directly.
        try:
            validate_email(email)
        except ValidationError:
            raise InvalidArgument(f"{email!r} is not a valid email address.", field="email") from None
    # A name already taken is refused before the password is checked and hashed
    # (a deliberately slow hash, for nothing), and again in the workspace's turn.
    _refuse_a_taken_name(tenant, username)
    user = User(username=username, email=email, tenant=tenant)
    if password is None:
        user.set_unusable_password()
    else:
        user.set_password(_validated_password(password, user))
    granted = roles_named(tenant, roles)
    # No index can say that two names read the same ("ada", "\u0430\u0501\u0430"): people
    # are added to a workspace one at a time (the password hashed before, not in turn),
    # each checked against everyone added before.
    one_at_a_time("members", tenant.pk)
    _refuse_a_taken_name(tenant, username)
    # Someone may add the same name at the same moment: the unique index decides.
    with unique_or_conflict(Conflict(f"{username!r} is already a member of this workspace.", field="username")):
        user.save()
    membership = Membership.objects.create(tenant=tenant, user=user, is_admin=is_admin)
    membership.roles.set(granted)
    return user


def _refuse_a_taken_name(tenant: Tenant, username: str) -> None:
    if User.objects.filter(tenant=tenant, username__iexact=username).exists():
        raise Conflict(f"{username!r} is already a member of this workspace.", field="username")
    _refuse_a_name_that_reads_as_a_member(tenant, username)


@transaction.atomic
def member_ensure(*, caller: Caller, username: str, password: str | None, email: str = "",
                  roles: Sequence[str] = (), is_admin: bool = False) -> Membership:
    """What `manage.py add_person` does, idempotent: the person is in the
    workspace with at least these roles (created when missing), an admin if
    asked (never demoted), and `password` when one is given."""
    for name in sorted(set(roles)):  # one order for everyone: two runs at once never wait on each other
        role_create(caller=caller, name=name, exist_ok=True)
    try:
        membership = member_get(caller=caller, username=username)
    except NotFound:
        return member_add(caller=caller, username=username, password=password, email=email, roles=roles,
                          is_admin=is_admin).membership
    held = [role.name for role in membership.roles.all()]
    membership = member_update(caller=caller, user_id=membership.user_id, roles=sorted({*held, *roles}),
                               is_admin=is_admin or membership.is_admin)
    if password:
        member_set_password(caller=caller, user_id=membership.user_id, password=password)
    return membership


@transaction.atomic
def member_update(*, caller: Caller, user_id: int | None = None, username: str | None = None,
                  roles: Sequence[str] | None = None, is_admin: bool | None = None) -> Membership:
    """Set a member's roles (replacing the old ones) and admin flag, or either
    (None keeps it). The roles apply to their next read: access rules are
    always today's. A removed member is reactivated first."""
    tenant, membership = _member_locked(caller, user_id, username,
                                        refuse_removed="giving them roles" if roles else "changing them")
    granted = roles_named(tenant, roles) if roles is not None else None
    if is_admin is not None:
        _set_admin(tenant, membership, is_admin)
    if granted is not None:
        membership.roles.set(granted)
    return membership


def _member_locked(caller: Caller, user_id: int | None, username: str | None,
                   *, refuse_removed: str = "") -> tuple[Tenant, Membership]:
    """The caller's member (by id or login name), locked after every admin's row
    (in that one order, so admins acting on each other wait instead of
    deadlocking). With `refuse_removed` (what the change is), a removed member
    is refused."""
    tenant = access.require_admin(caller)
    pk = member_get(caller=caller, user_id=user_id, username=username).pk
    _admins_locked(tenant)
    membership = Membership.objects.select_for_update().select_related("user").get(pk=pk)
    if refuse_removed and membership.removed_at is not None:
        raise Conflict(f"This person was removed; reactivate them before {refuse_removed}.", field="user")
    return tenant, membership


@transaction.atomic
def member_role_add(*, caller: Caller, role: str, user_id: int | None = None,
                    username: str | None = None) -> Membership:
    """Give a member one more role (by name), from their next read on; giving
    one they hold already changes nothing."""
    _, membership = _member_locked(caller, user_id, username, refuse_removed="giving them roles")
    membership.roles.add(role_get(caller=caller, name=role))
    return membership


@transaction.atomic
def member_role_remove(*, caller: Caller, role: str, user_id: int | None = None,
                       username: str | None = None) -> Membership:
    """Take one role (by name) from a member, from their next read on; one they
    do not hold changes nothing."""
    _, membership = _member_locked(caller, user_id, username, refuse_removed="changing their roles")
    membership.roles.remove(role_get(caller=caller, name=role))
    return membership


@transaction.atomic
def member_set_admin(*, caller: Caller, is_admin: bool, user_id: int | None = None,
                     username: str | None = None) -> Membership:
    """Make a member a workspace admin, or an ordinary member again (the
    workspace keeps an active admin)."""
    tenant, membership = _member_locked(caller, user_id, username, refuse_removed="changing their admin flag")
    _set_admin(tenant, membership, is_admin)
    return membership


def _set_admin(tenant: Tenant, membership: Membership, is_admin: bool) -> None:
    """Set the admin flag of a locked member. Someone who stops being an admin
    loses every REST admin API credential at once (tokens, refresh chains,
    pending codes), so being made one again later revives none of them."""
    if membership.is_admin and not is_admin:
        _keeps_an_admin(tenant, membership)
        now = timezone.now()
        RefreshToken.objects.filter(user_id=membership.user_id, access_token__scope=ADMIN_SCOPE,
                                    revoked__isnull=True).update(revoked=now)
        AccessToken.objects.filter(user_id=membership.user_id, scope=ADMIN_SCOPE).delete()
        Grant.objects.filter(user_id=membership.user_id, scope=ADMIN_SCOPE).delete()
    membership.is_admin = is_admin
    membership.save(update_fields=["is_admin"])


@transaction.atomic
def member_set_password(*, caller: Caller, password: str, user_id: int | None = None,
                        username: str | None = None) -> User:
    """An admin sets a member's password (a temporary one). Not a deactivated
    or removed person's: reactivate them first. Every app of theirs is
    disconnected and every session of theirs ends, so they learn of it; the
    operator (`manage.py add_person`) sets passwords as it always did."""
    membership = member_get(caller=caller, user_id=user_id, username=username)
    user = membership.user
    if caller.kind != "system" and (not user.is_active or membership.removed_at is not None):
        raise Conflict("This person is deactivated; reactivate them before setting a password.", field="user")
    user.set_password(_validated_password(password, user))
    user.save(update_fields=["password"])
    if caller.kind != "system":
        _credentials_end(user)
    return user


def _credentials_end(user: User) -> None:
    AccessToken.objects.filter(user=user).delete()
    RefreshToken.objects.filter(user=user, revoked__isnull=True).update(revoked=timezone.now())
    Grant.objects.filter(user=user).delete()


def _admins_locked(tenant) -> list[Membership]:  # type: ignore[no-untyped-def]
    """Every admin's row locked, always first and in one order, so two admins
    acting on each other at once wait instead of deadlocking."""
    return list(Membership.objects.select_for_update().filter(tenant=tenant, is_admin=True).order_by("pk"))


def _keeps_an_admin(tenant, membership: Membership) -> None:  # type: ignore[no-untyped-def]
    """The workspace keeps an active, not removed admin other than `membership`."""
    if not membership.is_admin:
        return
    others = Membership.objects.filter(tenant=tenant, is_admin=True, user__is_active=True,
                                       removed_at__isnull=True).exclude(pk=membership.pk)
    if not others.exists():
        raise Conflict("A workspace keeps at least one admin who is active; make someone else an admin first.",
                       field="user")


@transaction.atomic
def member_deactivate(*, caller: Caller, user_id: int | None = None, username: str | None = None) -> Membership:
    """Stop a person from signing in or using any client, at once."""
    tenant, membership = _member_locked(caller, user_id, username)
    if caller.user is not None and membership.user_id == caller.user.pk:
        raise Conflict("You cannot deactivate yourself; another admin can.", field="user")
    _keeps_an_admin(tenant, membership)
    user = membership.user
    user.is_active = False
    user.save(update_fields=["is_active"])
    _credentials_end(user)
    return membership


@transaction.atomic
def member_reactivate(*, caller: Caller, user_id: int | None = None, username: str | None = None) -> Membership:
    """Let a deactivated or removed person sign in again. Their clients must be
    authorised again; a removed person comes back with no roles."""
    _, membership = _member_locked(caller, user_id, username)
    membership.user.is_active = True
    membership.user.save(update_fields=["is_active"])
    if membership.removed_at is not None:
        membership.removed_at = None
        membership.save(update_fields=["removed_at"])
    return membership


@transaction.atomic
def member_remove(*, caller: Caller, user_id: int | None = None, username: str | None = None) -> Membership:
    """Remove a person from the workspace: deactivated, every credential ended,
    no roles and no admin flag; their name stays taken and their memory kept
    (readable by nobody) until an admin erases it."""
    membership = member_deactivate(caller=caller, user_id=user_id, username=username)
    membership.roles.clear()
    membership.is_admin = False
    membership.removed_at = timezone.now()
    membership.save(update_fields=["is_admin", "removed_at"])
    return membership


@transaction.atomic
def password_change(*, caller: Caller, old_password: str, new_password: str) -> User:
    """A person changes their own password, knowing the current one."""
    user = access.require_person(caller, what="change a password")
    if not user.check_password(old_password):
        raise InvalidArgument("That is not your current password.", field="old_password")
    user.set_password(_validated_password(new_password, user))
    user.save(update_fields=["password"])
    return user
