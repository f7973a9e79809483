"""``{% waiting %}`` gives what including ``approvals/waiting.html`` gives, rendering it once
per distinct value in a page."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.template import Context, Template
from django.test.signals import template_rendered

from approvals.presence import Waiting

SINCE = datetime(2026, 12, 4, 9, 30, 15, tzinfo=UTC)
VALUES = [
    Waiting(now=False),
    Waiting(now=True),
    Waiting(now=False, since=SINCE),
    Waiting(now=False),
    Waiting(now=True),
    Waiting(now=False, since=SINCE),
    Waiting(now=False, since=SINCE.replace(hour=10)),
]


@pytest.fixture
def renders() -> Iterator[list[str]]:
    """The names of the templates rendered meanwhile (the test runner reports each)."""
    names: list[str] = []

    def seen(sender: Any, template: Template, **kwargs: Any) -> None:
        names.append(str(template.name))

    template_rendered.connect(seen)
    yield names
    template_rendered.disconnect(seen)


def test_it_is_the_include_rendered_once_per_distinct_value(renders: list[str]) -> None:
    rows = "{% for w in values %}<li>{% waiting w %}</li>{% endfor %}"
    included = (
        "{% for w in values %}<li>"
        "{% include 'approvals/waiting.html' with waiting=w %}"
        "</li>{% endfor %}"
    )
    expected = Template(included).render(Context({"values": VALUES}))
    assert renders.count("approvals/waiting.html") == len(VALUES)
    del renders[:]

    page = Template("{% load presence %}" + rows).render(Context({"values": VALUES}))

    assert page == expected
    assert "agent waiting" in page
    assert "no agent waiting since 09:30" in page
    assert renders.count("approvals/waiting.html") == len(set(VALUES)) == 4
    # A page of its own renders it again.
    Template("{% load presence %}" + rows).render(Context({"values": VALUES[:1]}))
    assert renders.count("approvals/waiting.html") == 5
