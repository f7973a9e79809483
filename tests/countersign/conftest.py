"""The client's live tests: their world on the test database, and a server to run it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.countersign.world import world_create
from tests.live import LiveServer, live_server


@pytest.fixture
def world(transactional_db: None) -> None:
    world_create()


@pytest.fixture
def server(world: None) -> Iterator[LiveServer]:
    with live_server() as running:
        yield running
