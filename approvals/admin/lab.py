"""The Rules lab (docs/policy-lab.md, "The Rules lab"): a draft rule set checked as it is
typed, one call tried against the current rules or the draft, and a backtest of the draft over
the recorded calls. Staff with ``approvals.change_caprule`` only; nothing here writes.

One page, one form; each part's button posts the form with its ``part``. An htmx request gets
that part's partial; a plain post gets the whole page with it. Messages name a line, a column,
a field or a count, never what was typed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse
from django.template.response import TemplateResponse

import capcore
from approvals.admin.caret import rule_line_caret
from approvals.api.submissions import TEXT_LIMITS, TOOL_NAME, principal_allowed
from approvals.models import Agent, CapRule
from approvals.selectors.backtest import (
    backtest_report,
    calls_backtest,
    calls_in_period_count,
    moment_parse,
)
from approvals.services.calls import Submission, call_evaluate_only
from approvals.services.rules import rules_export
from approvals.web.htmx import HtmxHttpRequest
from capcore.backtest import ReplayFailed
from capcore.rules import RuleLine, check_rules

LAB_PERMISSION = "approvals.change_caprule"
TEMPLATE = "admin/approvals/caprule/lab.html"
PARTS = {"validate": "validation", "try": "try-result", "backtest": "backtest-result"}
# A request replays at most this many calls; a longer period is manage.py backtest's (a
# documented choice: the page answers within a request's time).
BACKTEST_MAX_CALLS = 20_000
MAX_DRAFT_CHARS = 200_000
MAX_ARGUMENTS_CHARS = 65_536
CHANGES_SHOWN = 200

BAD_PART = "Unknown part of the Rules lab."
DRAFT_TOO_LONG = f"The draft is longer than {MAX_DRAFT_CHARS:,} characters: nothing was checked."
DRAFT_FAULTY = (
    "The draft has faulty lines (listed under it): fix them to use the draft here, or try "
    "the call against the current rules."
)
DRAFT_FAULTY_BACKTEST = (
    "The draft has faulty lines (listed under it): fix them to backtest the draft."
)
BAD_TOOL = "A tool name: letters, digits and _ . : / -, at most 128 characters."
NUL_CHARACTER = "Text fields and arguments must not contain U+0000."
PRINCIPAL_FORBIDDEN = "This agent may not act for that principal."
BAD_MOMENT = "Expected an ISO-8601 date or date and time, e.g. 2026-12-01T09:00:00Z."
EMPTY_PERIOD = "'Since' must be before 'until'."
TOO_MANY_CALLS = (
    "This period holds {count:,} recorded calls, more than the {limit:,} the lab replays in "
    "one request: choose a shorter period, or run manage.py backtest on the server, which "
    "has no limit."
)
REPLAY_FAILED = "Evaluating call {call} failed unexpectedly (logged): no report."
HELD = "held"


@dataclass(frozen=True, slots=True)
class DraftError:
    line: int
    column: int
    message: str
    caret: str  # the admin's own line with a caret under the column, escaped (rule_line_caret)


@dataclass(frozen=True, slots=True)
class DraftCheck:
    rules: tuple[capcore.Rule, ...] = ()
    errors: tuple[DraftError, ...] = ()
    too_long: bool = False

    @property
    def usable(self) -> bool:
        return not self.errors and not self.too_long

    @property
    def shadow(self) -> int:
        return sum(1 for rule in self.rules if rule.shadow)


def draft_check(text: str) -> DraftCheck:
    """Every rule of the draft and every faulty line, with its line and column (as
    ``rules_test`` and ``import_rules`` report them)."""
    if len(text) > MAX_DRAFT_CHARS:
        return DraftCheck(too_long=True)
    lines: list[RuleLine]
    lines, errors = check_rules(text)
    source = text.split("\n")
    faults = []
    for error in errors:
        assert error.line is not None  # check_rules numbers every refusal
        line = source[error.line - 1].removesuffix("\r")
        faults.append(
            DraftError(error.line, error.column, error.message, rule_line_caret(line, error.column))
        )
    return DraftCheck(rules=tuple(line.rule for line in lines), errors=tuple(faults))


class DraftForm(forms.Form):
    draft = forms.CharField(
        required=False,
        strip=False,  # the grammar decides which blanks are allowed
        label="Draft rules",
        widget=forms.Textarea(
            attrs={"rows": 14, "cols": 120, "spellcheck": "false", "autocomplete": "off"}
        ),
    )


class TryForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=Agent.objects.order_by("name"), empty_label=None)
    tool = forms.CharField(max_length=128, error_messages={"max_length": BAD_TOOL})
    arguments = forms.CharField(
        strip=False,
        initial="{}",
        max_length=MAX_ARGUMENTS_CHARS,
        help_text="The call's arguments as the agent sends them: a JSON object.",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80, "spellcheck": "false"}),
    )
    principal = forms.CharField(
        required=False,
        max_length=TEXT_LIMITS["principal"],
        help_text="Empty: the agent's own.",
    )
    run_id = forms.CharField(required=False, max_length=TEXT_LIMITS["run_id"], label="Run id")
    against = forms.ChoiceField(
        choices=[("draft", "the draft"), ("current", "the current rules")],
        initial="draft",
        widget=forms.RadioSelect,
        label="Against",
        # Django's own message quotes the value sent.
        error_messages={"invalid_choice": "Choose the draft or the current rules."},
    )

    def clean_tool(self) -> str:
        tool: str = self.cleaned_data["tool"]
        if not TOOL_NAME.fullmatch(tool):
            raise ValidationError(BAD_TOOL, code="tool")
        return tool

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        texts = [cleaned.get(name) or "" for name in ("arguments", "principal", "run_id")]
        if any("\x00" in text for text in texts):
            raise ValidationError(NUL_CHARACTER, code="nul")
        agent = cleaned.get("agent")
        if isinstance(agent, Agent):
            cleaned["principal"] = cleaned.get("principal") or agent.principal
            if not principal_allowed(agent=agent, principal=cleaned["principal"]):
                self.add_error("principal", ValidationError(PRINCIPAL_FORBIDDEN, code="principal"))
        return cleaned


class BacktestForm(forms.Form):
    since = forms.CharField(
        required=False,
        max_length=64,
        help_text="ISO-8601, UTC unless it says; empty: from the first call.",
    )
    until = forms.CharField(required=False, max_length=64, help_text="Excluded; empty: up to now.")

    def _moment(self, name: str) -> datetime | None:
        text: str = self.cleaned_data[name]
        if not text.strip():
            return None
        try:
            return moment_parse(text)
        except ValueError:
            raise ValidationError(BAD_MOMENT, code="moment") from None

    def clean_since(self) -> datetime | None:
        return self._moment("since")

    def clean_until(self) -> datetime | None:
        return self._moment("until")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        since, until = cleaned.get("since"), cleaned.get("until")
        if since is not None and until is not None and since >= until:
            raise ValidationError(EMPTY_PERIOD, code="period")
        return cleaned


@dataclass(frozen=True, slots=True)
class Tried:
    against: str
    status: str
    reasons: list[dict[str, str | None]]
    gates: tuple[str, ...]
    shadow: list[dict[str, str | None]]


def _tried(form: TryForm, check: DraftCheck) -> Tried | None:
    """The verdict on the form's call now, recording nothing; None with the form's errors."""
    if not form.is_valid():
        return None
    data = form.cleaned_data
    rules: tuple[capcore.Rule, ...] | None = None
    if data["against"] == "draft":
        if not check.usable:
            form.add_error(None, DRAFT_FAULTY)
            return None
        rules = check.rules
    submission = Submission(
        tool=data["tool"],
        arguments=data["arguments"],
        principal=data["principal"],
        run_id=data["run_id"],
    )
    evaluation = call_evaluate_only(agent=data["agent"], submission=submission, cap_rules=rules)
    verdict = evaluation.verdict
    return Tried(
        against=data["against"],
        status=HELD if verdict.status is capcore.Status.PENDING else verdict.status.value,
        reasons=[finding.as_reason() for finding in verdict.reasons],
        gates=verdict.gates,
        shadow=[finding.as_reason() for finding in evaluation.shadow],
    )


def _backtest(form: BacktestForm, check: DraftCheck) -> dict[str, Any] | None:
    """The draft replayed over the period's calls, as ``manage.py backtest --json`` reports
    it; None with the form's errors."""
    if not form.is_valid():
        return None
    if not check.usable:
        form.add_error(None, DRAFT_FAULTY_BACKTEST)
        return None
    since, until = form.cleaned_data["since"], form.cleaned_data["until"]
    count = calls_in_period_count(since=since, until=until)
    if count > BACKTEST_MAX_CALLS:
        form.add_error(None, TOO_MANY_CALLS.format(count=count, limit=BACKTEST_MAX_CALLS))
        return None
    try:
        result = calls_backtest(rules=check.rules, since=since, until=until)
    except ReplayFailed as failed:
        form.add_error(None, REPLAY_FAILED.format(call=failed.call))
        return None
    report = backtest_report(result, since=since, until=until)
    report["days"] = result.days
    report["changed_shown"] = report["changed"][:CHANGES_SHOWN]  # type: ignore[index]
    report["changed_more"] = max(len(result.changed) - CHANGES_SHOWN, 0)
    return report


def rules_lab(request: HtmxHttpRequest, *, admin_site: admin.AdminSite) -> HttpResponse:
    """``/admin/approvals/caprule/lab/``: the page (GET), or one part's answer (POST)."""
    if not request.user.has_perm(LAB_PERMISSION):
        raise PermissionDenied
    context: dict[str, Any] = {
        **admin_site.each_context(request),
        "title": "Rules lab",
        "opts": CapRule._meta,
        "backtest_limit": f"{BACKTEST_MAX_CALLS:,}",
        # The draft and the report want the width the admin's side navigation would take.
        "is_nav_sidebar_enabled": False,
    }
    if request.method != "POST":
        draft = DraftForm(initial={"draft": rules_export()})
        context.update(
            draft_form=draft,
            check=draft_check(draft.initial["draft"]),
            try_form=TryForm(),
            backtest_form=BacktestForm(),
        )
        return TemplateResponse(request, TEMPLATE, context)
    part = request.POST.get("part", "")
    if part not in PARTS:
        return HttpResponse(BAD_PART, status=400, content_type="text/plain")
    draft = DraftForm(request.POST)
    text = request.POST.get("draft", "")
    check = draft_check(text)
    try_form, backtest_form = TryForm(request.POST), BacktestForm(request.POST)
    context.update(draft_form=draft, check=check, part=part)
    context.update(try_form=try_form if part == "try" else TryForm(initial=request.POST))
    context.update(
        backtest_form=backtest_form if part == "backtest" else BacktestForm(initial=request.POST)
    )
    if part == "try":
        context["tried"] = _tried(try_form, check)
    elif part == "backtest":
        context["report"] = _backtest(backtest_form, check)
    name = f"{TEMPLATE}#{PARTS[part]}" if request.htmx else TEMPLATE
    return TemplateResponse(request, name, context)
