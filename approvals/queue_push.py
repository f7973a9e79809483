"""What a queue socket is sent after a change: the rows that changed since its last push, or
the whole queue (docs/reliability.md, "Fair sockets").

The whole queue is 55 KB with both sections full. Pushed to 300 sockets after every change, it
was 16 MB of sends, and as much for the browsers to parse again, to tell them of one new row.
Each render of a person's queue is compared with the one before it (``QueuePush.based_on``),
row by row: a socket that was sent that one gets only the difference, as htmx out-of-band
swaps by id — removed rows deleted, changed rows replaced, new rows added at the end of their
section — with the heads that carry the counts. Any other socket, one that has just connected
included, gets the whole queue. When the difference is not only that (rows in another order,
a section that empties or fills, more than ``CHANGED_ROWS_LIMIT`` rows to send), every socket
gets the whole queue.

A row is compared without its ``left`` text: the countdown script writes that from the row's
``data-expires`` and ``data-now``, which stay as the row was first sent while it is unchanged.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from weakref import WeakValueDictionary

from django.template.loader import render_to_string

from approvals.selectors.queue import Queue, QueueRow

# More rows to send than this, and the whole queue is sent instead (it is read as fast).
CHANGED_ROWS_LIMIT = 20
# How many earlier renders a render works out its changes from: sockets of one person are
# pushed at different moments (one connects, another's push waits for its interval), and one
# a few renders behind still gets only the difference.
RENDERS_KEPT = 4
TEMPLATE = "approvals/queue.html"
SECTIONS = ("mine", "others")
HEADS = ("queue-head", "mine-title", "others-title")

# A section's rows as compared: id and the row without its "left" text, in order.
Compared = tuple[tuple[uuid.UUID, QueueRow], ...]

_serials = itertools.count(1)
# Each person's latest render, while a socket holds it (renders of one person's queue run one
# at a time: approvals.fairness.shared).
_latest: WeakValueDictionary[int, QueuePush] = WeakValueDictionary()


@dataclass(frozen=True, eq=False)
class QueuePush:
    """One render of a person's queue: the whole of it, and the changes since each of the
    renders before it in ``changes`` (None where the whole must be sent)."""

    serial: int
    rows: tuple[Compared, Compared]  # mine, others
    whole: str
    changes: dict[int, str | None]  # by the serial of an earlier render
    # This render's and the ones before it, as compared, latest first: what the next
    # render works out its changes from.
    history: tuple[tuple[int, tuple[Compared, Compared]], ...]

    def text_after(self, shown: QueuePush | None) -> str | None:
        """What to send to a socket that was last sent ``shown``; None: nothing, it shows
        this render or a later one."""
        if shown is None:
            return self.whole
        if shown.serial >= self.serial:
            return None
        changes = self.changes.get(shown.serial)
        return self.whole if changes is None else changes


def queue_push(*, user_id: int, queue: Queue) -> QueuePush:
    """The render of ``queue`` for the person ``user_id``, with its changes since each of
    their ``RENDERS_KEPT`` previous ones."""
    previous = _latest.get(user_id)
    earlier = () if previous is None else previous.history
    rows = (_compared(queue.mine), _compared(queue.others))
    rendered: dict[uuid.UUID, str] = {}  # a row changed since several renders, rendered once
    serial = next(_serials)
    push = QueuePush(
        serial=serial,
        rows=rows,
        whole=ascii_html(render_to_string(f"{TEMPLATE}#queue", {"queue": queue, "oob": True})),
        changes={before: _changes(compared, rows, queue, rendered) for before, compared in earlier},
        history=((serial, rows), *earlier[: RENDERS_KEPT - 1]),
    )
    _latest[user_id] = push
    return push


def _compared(section: Sequence[QueueRow]) -> Compared:
    return tuple((row.id, replace(row, left="")) for row in section)


def _changes(
    before: tuple[Compared, Compared],
    after: tuple[Compared, Compared],
    queue: Queue,
    rendered: dict[uuid.UUID, str],
) -> str | None:
    """The out-of-band swaps that turn the page of ``before`` into that of ``after``; None
    when only the whole queue will do."""
    deleted: list[uuid.UUID] = []
    replaced: list[QueueRow] = []
    added: list[tuple[str, list[QueueRow]]] = []
    shown = dict(zip(SECTIONS, (queue.mine, queue.others), strict=True))
    for name, old, new in zip(SECTIONS, before, after, strict=True):
        if bool(old) != bool(new):
            return None  # the section's list appears or gives way to its "empty" line
        new_rows = dict(new)
        kept = [call_id for call_id, _ in old if call_id in new_rows]
        if [call_id for call_id, _ in new[: len(kept)]] != kept:
            return None  # an order the page cannot be brought to by deletes and appends
        old_rows = dict(old)
        deleted.extend(call_id for call_id, _ in old if call_id not in new_rows)
        section = shown[name]
        replaced.extend(
            section[i] for i, call_id in enumerate(kept) if old_rows[call_id] != new[i][1]
        )
        if len(new) > len(kept):
            added.append((name, list(section[len(kept) :])))
    if len(replaced) + sum(len(appended) for _, appended in added) > CHANGED_ROWS_LIMIT:
        return None
    parts = [f'<li id="call-{call_id}" hx-swap-oob="delete"></li>' for call_id in deleted]
    parts.extend(_row(row, queue, rendered) for row in replaced)
    for name, appended in added:
        inner = "".join(_row(row, queue, rendered) for row in appended)
        parts.append(f'<ol hx-swap-oob="beforeend:#{name}">{inner}</ol>')
    context = {"queue": queue, "swap": True}
    parts.extend(render_to_string(f"{TEMPLATE}#{head}", context) for head in HEADS)
    parts.extend(
        render_to_string(f"{TEMPLATE}#{name}-more", context)
        for name, new in zip(SECTIONS, after, strict=True)
        if new
    )
    return ascii_html("".join(parts))


def _row(row: QueueRow, queue: Queue, rendered: dict[uuid.UUID, str]) -> str:
    html = rendered.get(row.id)
    if html is None:
        html = rendered[row.id] = render_to_string(f"{TEMPLATE}#row", {"row": row, "queue": queue})
    return html


def ascii_html(html: str) -> str:
    """``html`` with every non-ASCII character written as a character reference, which every
    part of a pushed page decodes (text, attributes, ``textarea``; pushes hold no script).
    A push is rendered once and sent to every socket of its view, each send encoding it to
    UTF-8 again: an ASCII string is copied, any other transcoded, and with one "·" in a 55 KB
    queue that was 0.25 ms a socket, 75 ms for 300 of them."""
    return html if html.isascii() else html.encode("ascii", "xmlcharrefreplace").decode("ascii")
