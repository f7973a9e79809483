"""What a queue socket is sent after a change: the rows that changed since its last push, or
the whole queue (docs/reliability.md, "Fair sockets").

The whole queue is large with both sections full, and sending it to every open page after
every change would make each browser parse it all again to learn of one new row. Each render
of a person's queue is compared, row by row, with each of the ``RENDERS_KEPT`` renders before
it (``QueuePush.changes``): a socket that was sent one of them gets only the difference, as
htmx out-of-band swaps by id — removed rows deleted, changed rows replaced, new rows added at
the end of their section — with the heads that carry the counts (the queue template's
``changes`` partial, around its ``row`` and head partials).
Any other socket, one that has just connected included, gets the whole queue, and so does
every socket when the difference is not only that (rows in another order, a section that
empties or fills, more than ``CHANGED_ROWS_LIMIT`` rows to send).

A row is compared without its ``left`` text: the countdown script writes that from the row's
``data-expires`` and ``data-now``, which stay as the row was first sent while it is unchanged.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Sequence
from dataclasses import replace
from weakref import WeakValueDictionary

from django.template.loader import render_to_string
from django.utils.safestring import SafeString

from approvals.realtime.hub import page_database
from approvals.web.queue_page import Queue, QueueRow

# More rows to send than this, and the whole queue is sent instead (it is read as fast).
CHANGED_ROWS_LIMIT = 20
# How many earlier renders a render works out its changes from. A person's sockets are pushed
# at different moments (one connects, each waits out its own interval), so a render can come
# several after the one a socket was last sent: a busy queue renders several times within one
# push interval (approvals.realtime.hub.PAGE_PUSH_INTERVAL).
RENDERS_KEPT = 16
TEMPLATE = "approvals/queue.html"
SECTIONS = ("mine", "others")
HEADS = ("queue-head", "mine-title", "others-title")

# A section's rows as compared: id and the row without its "left" text, in order.
Compared = tuple[tuple[uuid.UUID, QueueRow], ...]

_serials = itertools.count(1)
# Each person's latest render, while a socket holds it (renders of one person's queue run one
# at a time: approvals.realtime.hub.shared).
_latest: WeakValueDictionary[int, QueuePush] = WeakValueDictionary()


class QueuePush:
    """One render of a person's queue: the changes since each of the renders before it
    (``changes``, None where the whole queue must be sent), and the whole queue, rendered
    only when a socket needs it (one that has just connected, or was pushed too long ago)."""

    __slots__ = ("__weakref__", "_queue", "_whole", "changes", "history", "serial")

    def __init__(
        self,
        *,
        serial: int,
        queue: Queue,
        changes: dict[int, str | None],
        history: tuple[tuple[int, tuple[Compared, Compared]], ...],
    ) -> None:
        self.serial = serial
        self.changes = changes  # by the serial of an earlier render
        # This render's rows and those of the ones before it, latest first: what the next
        # render works out its changes from.
        self.history = history
        self._queue = queue
        self._whole: asyncio.Future[str] | None = None

    async def text_after(self, shown: QueuePush | None) -> str | None:
        """What to send to a socket that was last sent ``shown``; None: nothing, it shows
        this render or a later one."""
        if shown is not None:
            if shown.serial >= self.serial:
                return None
            changes = self.changes.get(shown.serial)
            if changes is not None:
                return changes
        if self._whole is None:
            # On the pages' threads, once for every socket that needs it, so that the
            # agents' sockets never wait behind it on the event loop.
            self._whole = asyncio.ensure_future(_whole_async(self))
        return await asyncio.shield(self._whole)

    def whole(self) -> str:
        """The whole queue, rendered."""
        context = {"queue": self._queue, "oob": True}
        return ascii_html(render_to_string(f"{TEMPLATE}#queue", context))


_whole_async = page_database(QueuePush.whole)


def queue_push(*, user_id: int, queue: Queue) -> QueuePush:
    """The render of ``queue`` for the person ``user_id``, with its changes since each of
    their ``RENDERS_KEPT`` previous ones."""
    previous = _latest.get(user_id)
    earlier = () if previous is None else previous.history
    rows = (_compared(queue.mine), _compared(queue.others))
    parts = _Parts(queue)
    serial = next(_serials)
    push = QueuePush(
        serial=serial,
        queue=queue,
        changes={before: _changes(compared, rows, parts) for before, compared in earlier},
        history=((serial, rows), *earlier[: RENDERS_KEPT - 1]),
    )
    _latest[user_id] = push
    return push


class _Parts:
    """The pieces of one render's changes, each rendered once for all the earlier renders
    it is compared with."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.sections = dict(zip(SECTIONS, (queue.mine, queue.others), strict=True))
        self._rows: dict[uuid.UUID, SafeString] = {}
        self._heads: list[SafeString] | None = None

    def row(self, row: QueueRow) -> SafeString:
        html = self._rows.get(row.id)
        if html is None:
            context = {"row": row, "queue": self.queue}
            html = self._rows[row.id] = render_to_string(f"{TEMPLATE}#row", context)
        return html

    def heads(self) -> list[SafeString]:
        """The heads with the counts, and the "shown of" line of each section with rows."""
        if self._heads is None:
            context = {"queue": self.queue, "swap": True}
            names = [*HEADS, *(f"{name}-more" for name, rows in self.sections.items() if rows)]
            self._heads = [render_to_string(f"{TEMPLATE}#{name}", context) for name in names]
        return self._heads


def _compared(section: Sequence[QueueRow]) -> Compared:
    return tuple((row.id, replace(row, left="")) for row in section)


def _changes(
    before: tuple[Compared, Compared], after: tuple[Compared, Compared], parts: _Parts
) -> str | None:
    """The out-of-band swaps that turn the page of ``before`` into that of ``after``; None
    when only the whole queue will do."""
    deleted: list[uuid.UUID] = []
    replaced: list[QueueRow] = []
    added: list[tuple[str, list[QueueRow]]] = []
    for name, old, new in zip(SECTIONS, before, after, strict=True):
        if bool(old) != bool(new):
            return None  # the section's list appears or gives way to its "empty" line
        new_rows = dict(new)
        kept = [call_id for call_id, _ in old if call_id in new_rows]
        if [call_id for call_id, _ in new[: len(kept)]] != kept:
            return None  # an order the page cannot be brought to by deletes and appends
        old_rows = dict(old)
        deleted.extend(call_id for call_id, _ in old if call_id not in new_rows)
        section = parts.sections[name]
        replaced.extend(
            section[i] for i, call_id in enumerate(kept) if old_rows[call_id] != new[i][1]
        )
        if len(new) > len(kept):
            added.append((name, list(section[len(kept) :])))
    if len(replaced) + sum(len(appended) for _, appended in added) > CHANGED_ROWS_LIMIT:
        return None
    context = {
        "deleted": deleted,
        "replaced": [parts.row(row) for row in replaced],
        "added": [(name, [parts.row(row) for row in appended]) for name, appended in added],
        "heads": parts.heads(),
    }
    return ascii_html(render_to_string(f"{TEMPLATE}#changes", context))


def ascii_html(html: str) -> str:
    """``html`` with every non-ASCII character written as a character reference, which every
    part of a pushed page decodes (text, attributes, ``textarea``; pushes hold no script).
    A push is rendered once and sent to every socket of its view, each send encoding it to
    UTF-8 again: an ASCII string is only copied, any other transcoded whole."""
    return html if html.isascii() else html.encode("ascii", "xmlcharrefreplace").decode("ascii")
