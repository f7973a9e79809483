"""``manage.py backtest RULES [--since ISO-8601] [--until ISO-8601] [--json]``: the recorded
calls of a period replayed with a draft rule file in place of the cap rules, and what would
have changed (docs/policy-lab.md, "Backtest a rule set"). Reads only. Exit status 0 with the
report, 1 when evaluating a call failed unexpectedly, 2 when the rule file or a date is
malformed or unreadable."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from django.core.management.base import CommandParser

from approvals.management.text_files import TextFileCommand, plain
from approvals.selectors.backtest import (
    WORD,
    backtest_report,
    calls_backtest,
    moment_iso,
    moment_parse,
)
from capcore.backtest import Backtest, ReplayFailed
from capcore.rules import check_rules

logger = logging.getLogger(__name__)

EXIT_FAILED = 1
EXIT_MALFORMED = 2
REPLAY_FAILED = "evaluating call {call} failed unexpectedly (logged); no report"
BAD_MOMENT = "{option}: expected an ISO-8601 date or date and time, e.g. 2026-12-01T09:00:00Z"
EMPTY_PERIOD = "--since must be before --until"
CHANGES_SHOWN = 50


def report_lines(
    result: Backtest, *, path: str, since: datetime | None, until: datetime | None
) -> list[str]:
    """The report for people: the counts side by side, each rule's, and the changed calls."""
    period = f"from {moment_iso(since) or 'the first call'} to {moment_iso(until) or 'now'}"
    plural = "" if result.calls == 1 else "s"
    lines = [f"Backtest of {path}: {result.calls} call{plural} created {period}", ""]
    lines.append(f"{'':8}" + "".join(f"{WORD[status]:>9}" for status in WORD))
    for label, counts in (("actual", result.actual), ("replay", result.replay)):
        row = "".join(f"{counts[status]:>9}" for status in WORD)
        lines.append(f"{label:8}{row}")
    lines += ["", "Calls the replay holds or refuses with each rule among the reasons:"]
    width = max((len(name) for name in result.rules), default=0)
    for name, count in result.rules.items():
        lines.append(f"  {name:<{width}}  held {count.held:>7}  refused {count.refused:>7}")
    if not result.rules:
        lines.append("  (the rule file has no rules)")
    days = "day" if result.days == 1 else "days"
    lines += [
        "",
        f"Holds per day over {result.days} {days}: mean {result.holds_per_day_mean}, "
        f"max {result.holds_per_day_max}",
        "",
        f"Changed: {len(result.changed)} call{'' if len(result.changed) == 1 else 's'}",
    ]
    for change in result.changed[:CHANGES_SHOWN]:
        rules = ", ".join(change.rules) or "no rule of the file"
        lines.append(f"  {change.call}  {WORD[change.actual]} -> {WORD[change.replay]}  ({rules})")
    if len(result.changed) > CHANGES_SHOWN:
        more = len(result.changed) - CHANGES_SHOWN
        lines.append(f"  … and {more} more (--json lists every one)")
    return lines


class Command(TextFileCommand):
    help = (
        "Replay the recorded calls created in a period, in creation order, with the rules of "
        "a rule file in place of the current cap rules (everything else as configured now; "
        "run counters and ledgers recomputed from empty), and report what would have "
        "changed. Reads only. --json prints one object. Exit status 0; 1 when evaluating a call "
        "failed unexpectedly; 2 for a malformed rule file or date (FILE:LINE:COLUMN: message "
        "on stderr)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("rules", help="the draft rule file, one rule per line (docs/rules.md)")
        parser.add_argument(
            "--since", help="the first moment replayed (ISO-8601, UTC unless it says)"
        )
        parser.add_argument(
            "--until", help="the moment the replay stops, excluded (ISO-8601, UTC unless it says)"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def _moment(self, option: str, text: str | None) -> datetime | None:
        """An ISO-8601 date (its UTC midnight) or date and time (UTC when it names no
        offset); the text is never echoed."""
        if text is None:
            return None
        try:
            return moment_parse(text)
        except ValueError:
            self.refuse([BAD_MOMENT.format(option=option)], status=EXIT_MALFORMED)

    def handle(self, *args: Any, **options: Any) -> None:
        path: str = options["rules"]
        since = self._moment("--since", options["since"])
        until = self._moment("--until", options["until"])
        if since is not None and until is not None and since >= until:
            self.refuse([EMPTY_PERIOD], status=EXIT_MALFORMED)
        rule_lines, rule_errors = check_rules(self.read_text(path, status=EXIT_MALFORMED))
        if rule_errors:
            self.refuse(
                [f"{path}:{bad.line}:{bad.column}: {bad.message}" for bad in rule_errors],
                status=EXIT_MALFORMED,
            )
        rules = [line.rule for line in rule_lines]
        try:
            result = calls_backtest(rules=rules, since=since, until=until)
        except ReplayFailed as failed:
            logger.error("backtest: %s", failed, exc_info=failed.__cause__)
            self.stderr.write(REPLAY_FAILED.format(call=failed.call), style_func=plain)
            raise SystemExit(EXIT_FAILED) from None
        if options["json"]:
            text = json.dumps(backtest_report(result, since=since, until=until), ensure_ascii=False)
            self.stdout.write(text, style_func=plain)
            return
        for line in report_lines(result, path=path, since=since, until=until):
            self.stdout.write(line, style_func=plain)
