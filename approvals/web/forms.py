"""Forms of the approver's pages, and what each of their query parameters may be."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.http import QueryDict

from approvals.api.errors import QUERY_CHOICES, QUERY_RANGE, QUERY_TEXT
from approvals.api.submissions import TEXT_LIMITS
from approvals.models import Agent
from approvals.web.history_page import (
    HISTORY_FIRST_DAY,
    HISTORY_LAST_DAY,
    HISTORY_STATUSES,
    HistoryFilters,
)
from approvals.web.querystring import BadQuery, bad_parameter

TOOL_LIMIT = 128  # as the submission's tool pattern allows
PRINCIPAL_LIMIT = TEXT_LIMITS["principal"]
AGENT_ID = re.compile(r"[1-9][0-9]{0,17}", re.ASCII)
DATE_FORMAT = "%Y-%m-%d"  # what a browser's date input sends

HISTORY_DATES = f"a date YYYY-MM-DD from {HISTORY_FIRST_DAY} to {HISTORY_LAST_DAY}"
# What each of the history's parameters may be, for the 400 that names one. An empty value is
# the same as none.
HISTORY_EXPECTED = {
    "status": QUERY_CHOICES.format(choices=", ".join(HISTORY_STATUSES)),
    "agent": "the id of an agent",
    "tool": QUERY_TEXT.format(most=TOOL_LIMIT),
    "principal": QUERY_TEXT.format(most=PRINCIPAL_LIMIT),
    "since": HISTORY_DATES,
    "until": f"{HISTORY_DATES}, not before since",
}
PAGE_NUMBER = re.compile(r"[0-9]{1,10}", re.ASCII)


if TYPE_CHECKING:
    _AgentChoice = forms.ModelChoiceField[Agent]
else:  # generic only in django-stubs
    _AgentChoice = forms.ModelChoiceField


class AgentField(_AgentChoice):
    """An agent by its id, in decimal digits only: ``int()`` would also take ``" 1_0 "``, and
    anything else need not reach the database."""

    def to_python(self, value: Any) -> Agent | None:
        if value not in self.empty_values and not (
            isinstance(value, str) and AGENT_ID.fullmatch(value)
        ):
            raise ValidationError(self.error_messages["invalid_choice"], code="invalid_choice")
        return super().to_python(value)


def _date_field(label: str) -> forms.DateField:
    return forms.DateField(
        required=False,
        label=label,
        input_formats=[DATE_FORMAT],
        validators=[MaxValueValidator(HISTORY_LAST_DAY)],
        widget=forms.DateInput({"type": "date"}, format=DATE_FORMAT),
    )


class HistoryFilterForm(forms.Form):
    """The history's filters, read from the query string; every field is optional."""

    status = forms.ChoiceField(
        required=False, choices=[("", "any status"), *((s, s) for s in HISTORY_STATUSES)]
    )
    agent = AgentField(
        required=False, queryset=Agent.objects.order_by("name"), empty_label="any agent"
    )
    tool = forms.CharField(required=False, max_length=TOOL_LIMIT, strip=True)
    principal = forms.CharField(required=False, max_length=PRINCIPAL_LIMIT, strip=True)
    since = _date_field("From")
    until = _date_field("To")

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since > until:
            self.add_error("until", "The end date is before the start date.")
        return cleaned

    def filters(self) -> HistoryFilters:
        """The filters; ``BadQuery`` naming each field that did not validate."""
        if not self.is_valid():
            raise BadQuery(
                bad_parameter(name, HISTORY_EXPECTED[name])
                for name in self.fields
                if name in self.errors
            )
        data = self.cleaned_data
        return HistoryFilters(
            status=data["status"],
            agent=data["agent"],
            tool=data["tool"],
            principal=data["principal"],
            since=data["since"],
            until=data["until"],
        )


def posted_arguments(data: QueryDict) -> str | None:
    """The call's arguments as an approver edited them on the approve form: None when the
    form sent no ``arguments`` field (no edit). A browser sends a textarea's line breaks as
    CRLF; they are read back as LF, which changes only blanks between JSON tokens (a raw
    line break inside a JSON string is not strict JSON either way), so an untouched field is
    byte-identical to the arguments it was filled with. Nothing else is changed: the
    service reads the text strictly."""
    text = data.get("arguments")
    return None if text is None else text.replace("\r\n", "\n")


def history_page(raw: str | None, *, pages: int) -> int:
    """The page number asked for (the first when none is), or ``BadQuery`` naming ``page``
    when it is not one of the ``pages``."""
    if not raw:
        return 1
    if not PAGE_NUMBER.fullmatch(raw) or not 1 <= int(raw) <= pages:
        raise BadQuery([bad_parameter("page", QUERY_RANGE.format(low=1, high=pages))])
    return int(raw)
