"""Forms of the review console: they parse input; the services decide."""

from __future__ import annotations

import uuid

from django import forms

from contract import limits
from memoryhub.models import Proposal
from memoryhub.services.proposals import AGE_FILTERS, REASON_MAX_CHARS


def set_choices(field: forms.Field, choices: list) -> None:
    assert isinstance(field, forms.ChoiceField)
    field.choices = choices


def _agent_choices(agents: list[str]) -> list[tuple[str, str]]:
    return [("", "Any agent"), *((name, name) for name in agents)]


class QueueFilterForm(forms.Form):
    agent = forms.ChoiceField(required=False)
    age = forms.ChoiceField(
        required=False, label="Waiting",
        choices=[("", "Any time"), *((key, label) for key, (label, _) in AGE_FILTERS.items())],
    )

    def __init__(self, *args, agents: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        set_choices(self.fields["agent"], _agent_choices(agents))


class HistoryFilterForm(forms.Form):
    agent = forms.ChoiceField(required=False)
    state = forms.ChoiceField(
        required=False, label="Decision",
        choices=[("", "Any decision"), (Proposal.State.APPROVED, "Approved"), (Proposal.State.REJECTED, "Rejected")],
    )

    def __init__(self, *args, agents: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        set_choices(self.fields["agent"], _agent_choices(agents))


class ApproveForm(forms.Form):
    # Present only when the admin edited the proposal before approving it.
    content = forms.CharField(required=False, strip=False, max_length=limits.CONTENT_MAX_CHARS,
                              widget=forms.Textarea(attrs={"rows": 6}))


class RejectForm(forms.Form):
    reason = forms.CharField(max_length=REASON_MAX_CHARS, label="Reason for rejecting",
                             error_messages={"required": "Say why you reject it; the history keeps the reason."})


class ProposalIdsField(forms.Field):
    """Proposal ids from checkboxes. Whether each is pending in the admin's own
    workspace is the service's answer, given per proposal."""

    widget = forms.MultipleHiddenInput
    MAX = 200

    def to_python(self, value):
        ids = []
        for item in value or []:
            try:
                ids.append(uuid.UUID(str(item)))
            except ValueError:
                raise forms.ValidationError("Not a proposal id.") from None
        if len(ids) > self.MAX:
            raise forms.ValidationError(f"Decide at most {self.MAX} proposals at once.")
        return list(dict.fromkeys(ids))


class BulkForm(forms.Form):
    action = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    proposals = ProposalIdsField(error_messages={"required": "Select at least one proposal."})
    reason = forms.CharField(required=False, max_length=REASON_MAX_CHARS)

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("action") == "reject" and not (cleaned.get("reason") or "").strip():
            self.add_error("reason", "Say why you reject them; the history keeps the reason.")
        return cleaned
