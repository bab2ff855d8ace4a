"""Forms of the people's and admins' pages: they parse input; the services
decide (and refuse with a field named, which the views put on the form)."""

from __future__ import annotations

from django import forms

from contract import limits
from memoryhub.access import AGENT_SCOPES
from memoryhub.errors import MemoryhubError
from memoryhub.models import Tenant


def set_choices(field: forms.Field, choices: list) -> None:
    assert isinstance(field, forms.ChoiceField)
    field.choices = choices


def form_error(form: forms.Form, exc: MemoryhubError) -> None:
    """A service's refusal, on the field it names (or the whole form)."""
    form.add_error(exc.field if exc.field in form.fields else None, exc.message)


# --------------------------------------------------------------------------- a person's memory


class SearchForm(forms.Form):
    q = forms.CharField(label="Search your memory", max_length=limits.QUERY_MAX_CHARS, required=False)
    as_of = forms.DateTimeField(
        label="As of (UTC)", required=False,
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}),
        help_text="What your memory looked like at that moment (as_of): facts recorded later, or forgotten "
                  "before it, are left out. Leave empty for now.",
    )
    limit = forms.IntegerField(label="At most", min_value=limits.LIMIT_MIN, max_value=limits.LIMIT_MAX,
                               required=False, widget=forms.NumberInput(attrs={"inputmode": "numeric"}))


# --------------------------------------------------------------------------- workspace administration


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150, help_text="What they sign in with, in this workspace.",
                               widget=forms.TextInput(attrs={"autocomplete": "off", "autocapitalize": "none"}))
    email = forms.EmailField(required=False)
    password = forms.CharField(widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}), strip=False,
                               help_text="At least 10 characters; they can change it later.")
    roles = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    is_admin = forms.BooleanField(required=False, label="Workspace admin")

    def __init__(self, *args, roles: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        set_choices(self.fields["roles"], [(name, name) for name in roles])


class MemberForm(forms.Form):
    roles = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    is_admin = forms.BooleanField(required=False, label="Workspace admin")

    def __init__(self, *args, roles: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        set_choices(self.fields["roles"], [(name, name) for name in roles])


# What a name may be is the services' to say (services.arguments.checked_name,
# as for the commands and the REST API): the form only reads it.
NAME_HELP = "Letters, digits, hyphens or underscores; a space is written as a hyphen."


class NamedForm(forms.Form):
    name = forms.CharField(help_text=NAME_HELP)
    description = forms.CharField(max_length=200, required=False)


class AccessRuleForm(forms.Form):
    role = forms.ChoiceField()
    collection = forms.ChoiceField()

    def __init__(self, *args, roles: list[str], collections: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        set_choices(self.fields["role"], [(name, name) for name in roles])
        set_choices(self.fields["collection"], [(name, name) for name in collections])


class SourceForm(forms.Form):
    name = forms.CharField(help_text=f"{NAME_HELP} Agents name it in `agents` to read what it contributed.")
    kind = forms.CharField(max_length=64, initial="documents", help_text="documents, tickets, chat…")
    collection = forms.ChoiceField(required=False, label="Default collection")

    def __init__(self, *args, collections: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        set_choices(self.fields["collection"],
                    [("", "None (it names one with each document)")] + [(name, name) for name in collections])


SCOPE_LABELS = {
    "memory.read": "memory.read: search the memory its roles can see",
    "memory.write": "memory.write: propose facts (each waits for an admin's approval)",
}


class AgentForm(forms.Form):
    name = forms.CharField(help_text=f"{NAME_HELP} Callers name it in `agents`.")
    display_name = forms.CharField(max_length=200, required=False)
    scopes = forms.MultipleChoiceField(
        choices=[(scope, SCOPE_LABELS[scope]) for scope in AGENT_SCOPES],
        widget=forms.CheckboxSelectMultiple,
        initial=["memory.read"],
    )
    roles = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)

    def __init__(self, *args, roles: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        set_choices(self.fields["roles"], [(name, name) for name in roles])


class SettingsForm(forms.Form):
    judgment_plane = forms.BooleanField(
        required=False, label="Judgment plane",
        help_text="When on, a search that says what it is for (its task and task tags) gets the results "
                  "best for that task first. It only changes the order: it never shows anyone a fact they could not "
                  "already see, nor hides one.",
    )
    relevance_floor = forms.FloatField(
        min_value=0.0, max_value=1.0, label="Relevance floor",
        widget=forms.NumberInput(attrs={"step": "0.01", "inputmode": "decimal"}),
        help_text="How closely a fact must match a search to be shown at all, from 0 (anything) to 1 "
                  "(only a near-exact match). Each result's score says how closely it matched; when none reaches "
                  "this floor the search shows nothing and says so (it abstains) rather than offer poor matches.",
    )
    write_policy = forms.ChoiceField(choices=Tenant.WritePolicy.choices, label="Write policy")
    stale_policy = forms.ChoiceField(
        choices=Tenant.StalePolicy.choices, label="Memories whose document changed or was deleted", required=False,
        help_text="A person's or agent's memory linked to a document that has changed since is stale; one whose "
                  "document was deleted is ungrounded.",
    )
    blocked_terms = forms.CharField(
        required=False, label="Blocked terms", widget=forms.Textarea(attrs={"rows": 5}),
        help_text="One per line. With the blocklist policy, facts mentioning one are dropped (policy_drop).",
    )


class ConfirmForm(forms.Form):
    """The name of what is about to be ended for good, typed again."""

    confirm = forms.CharField(max_length=200, strip=True)


class EraseForm(forms.Form):
    confirm = forms.CharField(label="Type the person's username to confirm", max_length=150, strip=True)


class PasswordSetForm(forms.Form):
    password = forms.CharField(label="Temporary password", strip=False, max_length=256,
                               widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))


class PasswordChangeForm(forms.Form):
    old_password = forms.CharField(label="Current password", strip=False, max_length=256,
                                   widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}))
    new_password = forms.CharField(label="New password", strip=False, max_length=256,
                                   help_text="At least 10 characters, not a common one.",
                                   widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))
    again = forms.CharField(label="New password again", strip=False, max_length=256,
                            widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))

    def clean(self):  # type: ignore[no-untyped-def]
        data = super().clean()
        if data.get("new_password") and data.get("again") and data["new_password"] != data["again"]:
            self.add_error("again", "The two new passwords differ.")
        return data
