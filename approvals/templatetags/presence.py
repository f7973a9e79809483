"""``{% waiting row.waiting %}``: ``approvals/waiting.html`` for a list of rows, rendered once
per distinct value in a page.

The queue says on each of up to 100 rows whether an agent waits for it, and an
``{% include %}`` for each cost about a twelfth of the page. The text depends on the value
alone (``approvals.presence.Waiting`` is frozen), and the rows mostly share one: nobody
waits, or an agent does.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.template import Context
from django.utils.safestring import SafeString

from approvals.presence import Waiting

register = template.Library()

TEMPLATE = "approvals/waiting.html"


@register.simple_tag(takes_context=True)
def waiting(context: Context, waiting: Waiting) -> SafeString:
    # The bottom of the render context lasts the whole page (an include caches its template
    # there too); each row's partial is rendered on a layer of its own above it.
    bottom: dict[Any, Any] = context.render_context.dicts[0]  # the stubs say str values only
    rendered: dict[Waiting, SafeString] = bottom.setdefault(TEMPLATE, {})
    if waiting not in rendered:
        assert context.template is not None
        page = context.template.engine.get_template(TEMPLATE)
        rendered[waiting] = page.render(context.new({"waiting": waiting}))
    return rendered[waiting]
