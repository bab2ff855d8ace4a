"""Signing in: people sign in with their workspace, login name and password.

Login names are unique within a workspace only (memoryhub.models.User), so the
workspace is part of who someone is. Accounts of no workspace (the deployment's
superusers) sign in with the workspace left empty, through Django's own
ModelBackend, which only ever finds those.
"""

from __future__ import annotations

from django import forms
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm

from memoryhub.models import User

WORKSPACE_COOKIE = "memoryhub_workspace"


class WorkspaceBackend(ModelBackend):
    """authenticate(request, workspace=..., username=..., password=...)."""

    def authenticate(self, request, username=None, password=None, workspace=None, **kwargs):  # type: ignore[no-untyped-def]
        if not workspace or username is None or password is None:
            return None
        user = User.objects.filter(tenant__slug=workspace, username__iexact=username).first()
        if user is None:
            # The same work as a real check, so timing does not tell whether the name exists.
            User().set_password(password)
            return None
        if user.check_password(password) and self.user_can_authenticate(user):
            return user
        return None


class SignInForm(AuthenticationForm):
    workspace = forms.SlugField(
        max_length=64, required=False, label="Workspace",
        widget=forms.TextInput(attrs={"autocomplete": "organization", "autocapitalize": "none",
                                      "spellcheck": "false"}),
        help_text="Your workspace's short name, e.g. acme.",
    )
    field_order = ["workspace", "username", "password"]

    def clean(self):  # type: ignore[no-untyped-def]
        workspace = (self.cleaned_data.get("workspace") or "").strip().lower()
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is not None and password:
            if workspace:
                self.user_cache = WorkspaceBackend().authenticate(
                    self.request, workspace=workspace, username=username, password=password)
                if self.user_cache is not None:
                    self.user_cache.backend = "memoryhub.oauth.signin.WorkspaceBackend"
            else:
                self.user_cache = ModelBackend().authenticate(self.request, username=username, password=password)
                if self.user_cache is not None:
                    self.user_cache.backend = "django.contrib.auth.backends.ModelBackend"
            if self.user_cache is None:
                raise self.get_invalid_login_error()
            self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data
