"""Issue 6, item 6: a failing poll logs one short line, never a driver statement or traceback."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from prism_memory import HashEmbedder, IndexingPolicy, InMemoryVectorStore, StorageError
from prism_memory.indexing import IndexingQueue
from prism_memory.models import MemoryIdentity

SCOPE = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="th")


class BrokenClaims(InMemoryVectorStore):
    """Every claim fails like a driver error whose text carries a huge statement."""

    def __init__(self) -> None:
        super().__init__()
        self.claims = 0

    async def claim_pending(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.claims += 1
        raise StorageError("claim_pending failed: " + "SELECT x FROM t WHERE id IN (...) " * 5000)


async def test_a_failing_poll_logs_one_short_line(caplog: pytest.LogCaptureFixture) -> None:
    store = BrokenClaims()
    queue = IndexingQueue(
        store=store,
        embedder=HashEmbedder(dimensions=8),
        scope=SCOPE,
        batch_size=4,
        clock=lambda: datetime.now(UTC),
        policy=IndexingPolicy(busy_poll_seconds=0.005, idle_poll_seconds=0.005),
    )
    with caplog.at_level(logging.WARNING, logger="prism_memory.indexing"):
        await queue.start()
        for _ in range(2000):  # the worker retries every 5 ms; at most 10 s
            if store.claims >= 3:
                break
            await asyncio.sleep(0.005)
        await queue.aclose(drain=False)
    assert store.claims >= 3
    records = [r for r in caplog.records if r.name == "prism_memory.indexing"]
    assert records
    assert all(r.exc_info is None for r in records)  # no traceback, so no chained statement
    assert all(len(r.getMessage()) <= 600 for r in records)
