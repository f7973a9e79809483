"""What a queue socket is sent after a change: the rows that changed since its last push, or
the whole queue. Whatever series of queues a person's renders go through, a page that applies
each push as htmx does shows what the whole latest queue shows."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.realtime.queue_updates import CHANGED_ROWS_LIMIT, RENDERS_KEPT, QueuePush, queue_push
from approvals.web.queue_page import Queue, QueueRow
from tests.shown_queue import ShownQueue

IDS = [uuid.UUID(int=n + 1) for n in range(30)]
_people = itertools.count(1_000_000)  # each test's renders are a person's of their own


def row(n: int, version: int = 0, *, mine: bool = True) -> QueueRow:
    return QueueRow(
        id=IDS[n],
        may_decide=mine,
        decided_by_me=False,
        approvals=version,
        required=3,
        pick=f"{IDS[n]}:digest",
        tool=f"pay-{n}",
        agent="bot",
        principal="ops",
        run="",
        amounts=("USD 1,250.00",),
        unreadable="",
        held_by=("big",),
        progress=f"{version} of 3" if version else "",
        expires="2026-12-06T10:00:00+00:00",
        left="59m 00s",
    )


def queue(mine: list[QueueRow], others: list[QueueRow] = []) -> Queue:  # noqa: B006
    return Queue(
        mine=tuple(mine),
        others=tuple(others),
        mine_count=len(mine),
        others_count=len(others),
        now="2026-12-06T09:01:00+00:00",
        decider=True,
    )


def renders(*queues: Queue) -> list[QueuePush]:
    person = next(_people)
    return [queue_push(user_id=person, queue=q) for q in queues]


def sent(push: QueuePush, shown: QueuePush | None) -> str | None:
    """What a socket that was last sent ``shown`` is sent of ``push``."""
    return asyncio.run(push.text_after(shown))


def test_the_first_render_is_sent_whole() -> None:
    (first,) = renders(queue([row(0)]))
    assert sent(first, None) == first.whole()
    assert first.whole().lstrip().startswith('<section id="queue"')


def test_a_new_row_is_sent_alone_at_the_end_of_its_section() -> None:
    before, after = renders(queue([row(0)]), queue([row(0), row(1)]))
    text = sent(after, before)
    assert text is not None
    assert text != after.whole()
    assert f'<ol hx-swap-oob="beforeend:#mine">\n<li id="call-{IDS[1]}"' in text
    assert f"call-{IDS[0]}" not in text
    assert 'id="mine-count">2<' in text


def test_a_changed_row_is_replaced_and_a_gone_one_deleted() -> None:
    before, after = renders(queue([row(0), row(1), row(2)]), queue([row(1, 1), row(2)]))
    text = sent(after, before)
    assert text is not None
    assert f'<li id="call-{IDS[0]}" hx-swap-oob="delete"></li>' in text
    assert f'<li id="call-{IDS[1]}" data-decidable' in text
    assert "1 of 3" in text
    assert f"call-{IDS[2]}" not in text


def test_the_time_left_alone_is_no_change() -> None:
    before, after = renders(queue([row(0)]), queue([replace(row(0), left="58m 59s")]))
    text = sent(after, before)
    assert text is not None
    assert "call-" not in text
    assert 'id="queue-head"' in text


def test_the_whole_queue_when_the_difference_is_more_than_deletes_and_appends() -> None:
    reordered = renders(queue([row(1), row(2)]), queue([row(0), row(1), row(2)]))
    filled = renders(queue([row(0)]), queue([row(0)], [row(1, mine=False)]))
    emptied = renders(queue([row(0)]), queue([]))
    many = renders(queue([row(0)]), queue([row(n) for n in range(CHANGED_ROWS_LIMIT + 2)]))
    for before, after in (reordered, filled, emptied, many):
        assert sent(after, before) == after.whole()


def test_a_socket_that_shows_this_render_or_a_later_one_is_sent_nothing() -> None:
    first, second = renders(queue([row(0)]), queue([row(0), row(1)]))
    assert sent(second, second) is None
    assert sent(first, second) is None


def test_a_socket_further_behind_than_the_renders_kept_gets_the_whole_queue() -> None:
    pushes = renders(*(queue([row(n) for n in range(k + 1)]) for k in range(RENDERS_KEPT + 2)))
    latest = pushes[-1]
    assert sent(latest, pushes[-1 - RENDERS_KEPT]) != latest.whole()
    assert sent(latest, pushes[-2 - RENDERS_KEPT]) == latest.whole()


# A section's rows as (call, version), oldest (lowest) first, as the queue lists them.
differences: set[str | None] = set()  # what the property's examples sent, differences or not

_sections = st.lists(
    st.tuples(st.integers(0, 11), st.integers(0, 2)), unique_by=lambda r: r[0], max_size=8
).map(sorted)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_sections, _sections), min_size=2, max_size=6), st.data())
def test_every_page_shows_the_latest_queue_whatever_it_was_sent_before(
    states: list[tuple[list[tuple[int, int]], list[tuple[int, int]]]], data: st.DataObject
) -> None:
    """Sockets that were last sent any earlier render (or none) and apply what they are
    sent show the rows, in order, and the heads of the latest render's whole queue."""
    queues = []
    for mine, others in states:
        taken = {n for n, _ in mine}
        queues.append(
            queue(
                [row(n, v) for n, v in mine],
                [row(n + 12, v, mine=False) for n, v in others if n + 12 not in taken],
            )
        )
    pushes = renders(*queues)
    latest = pushes[-1]
    differences.update(latest.changes.values())
    expected = ShownQueue()
    expected.apply(latest.whole())
    for shown in pushes[:-1]:
        page = ShownQueue()
        page.apply(shown.whole())
        text = sent(latest, shown)
        assert text is not None
        page.apply(text)
        assert page.rows == expected.rows
        assert page.heads == expected.heads
    start = data.draw(st.integers(0, len(pushes) - 2))
    page = ShownQueue()
    page.apply(pushes[start].whole())
    for before, after in itertools.pairwise(pushes[start:]):
        text = sent(after, before)
        assert text is not None
        page.apply(text)
    assert page.rows == expected.rows


def test_the_property_saw_differences_and_whole_queues() -> None:
    """Its examples were not all sent the whole queue (or all not)."""
    test_every_page_shows_the_latest_queue_whatever_it_was_sent_before()
    assert None in differences
    assert len(differences - {None}) > 10
