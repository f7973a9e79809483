"""Template filters the list pages run for every row, made cheap.

The queue renders up to 100 rows, each with four or five truncated texts and three
timestamps. Django's ``truncatechars`` walks every character of its text (it counts
combining characters as nothing) through a lazy wrapper, and ``date:'c'`` goes through the
localisation machinery: together about a third of rendering the queue. These give the
same output, taking the short way when it is the same.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime

from django import template
from django.template.defaultfilters import truncatechars

register = template.Library()


@register.filter(is_safe=True)
def clip(value: object, length: int) -> str:
    """``truncatechars``: a text that needs no cutting (no longer than ``length``, already
    in the NFC form ``truncatechars`` returns) is returned as it is."""
    text = str(value)
    if length > 0 and len(text) <= length and unicodedata.is_normalized("NFC", text):
        return text
    return str(truncatechars(text, length))


@register.filter(expects_localtime=True)
def iso(moment: datetime | None) -> str:
    """``date:'c'``: ISO 8601, in the current time zone (UTC here)."""
    return "" if moment is None or moment == "" else moment.isoformat()
