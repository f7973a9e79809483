"""``clip`` and ``iso`` give exactly what ``truncatechars`` and ``date:'c'`` give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from django.template import Context, Template
from django.template.defaultfilters import date, truncatechars
from django.utils.safestring import mark_safe
from hypothesis import given
from hypothesis import strategies as st

from approvals.templatetags.text import clip, iso

# Combining marks, decomposed and composed letters, wide characters, and plain ASCII.
TEXTS = st.text(
    st.sampled_from("ae\u0301\u00e9\u0308\u0327c\u00e7\u4e2d\U0001f600 <&>\"'") | st.characters(),
    max_size=90,
)


@given(TEXTS, st.integers(min_value=-2, max_value=80))
def test_clip_is_truncatechars(text: str, length: int) -> None:
    assert clip(text, length) == truncatechars(text, length)


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(2200, 1, 1),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
    )
)
def test_iso_is_date_c(moment: datetime) -> None:
    rendered = Template("{% load text %}{{ moment|iso }}|{{ moment|date:'c' }}")
    mine, django = rendered.render(Context({"moment": moment})).split("|")
    assert mine == django
    assert iso(moment) == moment.isoformat()


def test_no_moment_is_no_text() -> None:
    assert iso(None) == "" == date(None, "c")


def test_clip_escapes_as_truncatechars_does() -> None:
    context = {"raw": "<b>&</b>", "short": "<i>", "safe": mark_safe("<i>x</i>")}
    mine = Template("{% load text %}{{ raw|clip:5 }} {{ short|clip:5 }} {{ safe|clip:9 }}")
    django = Template(
        "{{ raw|truncatechars:5 }} {{ short|truncatechars:5 }} {{ safe|truncatechars:9 }}"
    )
    assert mine.render(Context(context)) == django.render(Context(context))
    assert mine.render(Context(context)) == "&lt;b&gt;&amp;… &lt;i&gt; <i>x</i>"
