"""The signed-in person as a caller of the services, for the pages and the
review console. Domain refusals become Django's: 403 and 404 pages
(memoryhub.pages.errors maps the rest once)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from memoryhub import access, errors
from memoryhub.access import Caller
from memoryhub.models import User


class SignedInRequest(HttpRequest):
    user: User  # login_required guarantees it


def person_caller(request: SignedInRequest) -> Caller:
    """The signed-in person; someone with no place in a workspace has no memory pages."""
    try:
        return access.caller_for_user(user=request.user)
    except errors.PermissionDenied:
        raise PermissionDenied("Your account is not part of a workspace.") from None


def admin_caller(request: SignedInRequest) -> Caller:
    """The signed-in person, when they administer their own workspace."""
    caller = person_caller(request)
    try:
        access.require_admin(caller)
    except errors.PermissionDenied:
        raise PermissionDenied("Only workspace admins can open this page.") from None
    return caller


__all__ = ["SignedInRequest", "admin_caller", "login_required", "person_caller"]
