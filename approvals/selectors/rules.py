"""The stored cap rules, parsed once per distinct line and process."""

from __future__ import annotations

import functools

import capcore
from approvals.models import CapRule

# A stored rule as the pages read it: its folded name, whether it is enabled (and enforced:
# a shadow rule never holds a call, so the pages show it only where it says so), the rule.
StoredRule = tuple[str, bool, capcore.Rule]


@functools.lru_cache(maxsize=4096)
def stored_rule(line: str) -> capcore.Rule | None:
    """A stored line's rule, or None when it no longer parses (e.g. after a table upgrade)."""
    try:
        return capcore.parse_rule(line)
    except capcore.RuleError:
        return None


def stored_rules() -> list[StoredRule]:
    """Every stored rule that parses, with its folded name and whether it is enabled and
    enforced (a shadow rule counts as not enabled)."""
    rows = CapRule.objects.order_by("pk").values_list("name_folded", "enabled", "shadow", "line")
    return [
        (folded, enabled and not shadow, rule)
        for folded, enabled, shadow, line in rows
        if (rule := stored_rule(line)) is not None
    ]
