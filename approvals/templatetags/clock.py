"""Time left before a deadline, as text the countdown script keeps current."""

from __future__ import annotations

from datetime import datetime

from django import template

register = template.Library()


@register.filter
def time_left(deadline: datetime | None, now: datetime) -> str:
    """``2d 03h``, ``1h 04m``, ``12m 05s``, ``40s``; ``expiring`` once the deadline has
    passed (the sweep ends the call within a second). ``static/js/countersign.js`` writes
    the same format as it counts down."""
    if deadline is None:
        return ""
    seconds = int((deadline - now).total_seconds())
    if seconds <= 0:
        return "expiring"
    return duration_text(seconds)


def duration_text(seconds: int) -> str:
    """A length of time in the countdown's format: ``2d 03h``, ``1h 04m``, ``12m 05s``,
    ``40s``."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {seconds:02d}s"
    return f"{seconds}s"
