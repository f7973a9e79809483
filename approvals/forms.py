"""Forms of the approver's pages."""

from __future__ import annotations

from django import forms

from approvals.models import Agent
from approvals.selectors.history import HISTORY_STATUSES, HistoryFilters


class HistoryFilterForm(forms.Form):
    """The history's filters, read from the query string; every field is optional."""

    status = forms.ChoiceField(
        required=False, choices=[("", "any status"), *((s, s) for s in HISTORY_STATUSES)]
    )
    agent = forms.ModelChoiceField(
        required=False, queryset=Agent.objects.order_by("name"), empty_label="any agent"
    )
    tool = forms.CharField(required=False, max_length=128, strip=True)
    principal = forms.CharField(required=False, max_length=200, strip=True)
    since = forms.DateField(required=False, label="From", widget=forms.DateInput({"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput({"type": "date"}))

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since > until:
            self.add_error("until", "The end date is before the start date.")
        return cleaned

    def filters(self) -> HistoryFilters:
        """The valid filters; a field that did not validate is left out."""
        self.is_valid()  # cleans once; an invalid field is absent from cleaned_data
        data = self.cleaned_data
        return HistoryFilters(
            status=data.get("status") or "",
            agent=data.get("agent"),
            tool=data.get("tool") or "",
            principal=data.get("principal") or "",
            since=data.get("since"),
            until=data.get("until"),
        )
