"""What a queue's watchers cost the store: linear in the rows watched.

After every batch the queue asked the store for the status of every watched row it neither held
nor had settled, so a large backlog of watched rows was read once per batch: quadratic (with
33,000 ids watched on PostgreSQL the worker loop stalled in ``index_status``). A watcher now
learns what the queue indexed from the batches, and asks the store about the rest on a backoff.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from prism_memory import (
    HashEmbedder,
    IndexingPolicy,
    InMemoryVectorStore,
    MemoryIdentity,
    create_memory,
)
from prism_memory.testing import GatedEmbedder

DIM = 8
BATCHES = 16
PER_CALL = 256  # Limits.remember_batch


class CountingStore(InMemoryVectorStore):
    """The in-memory store, counting the ids ``index_status`` is asked about."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def index_status(self, scope: MemoryIdentity, ids: Sequence[str]):  # type: ignore[override]
        self.asked += len(ids)
        return await super().index_status(scope, ids)


async def test_watching_many_rows_asks_the_store_about_each_row_a_bounded_number_of_times():
    store = CountingStore()
    gated = GatedEmbedder(HashEmbedder(DIM))
    # a long backoff: within the test, the store is asked about a row it does not hold once,
    # and about rows the batches let go unsettled (none here)
    policy = IndexingPolicy(busy_poll_seconds=30.0, idle_poll_seconds=60.0)
    async with create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=gated,
        vector_store=store,
        indexing=policy,
    ) as memory:
        results = [
            await memory.remember([{"text": f"note {b} {k}"} for k in range(PER_CALL)])
            for b in range(BATCHES)
        ]
        gated.release()
        reports = await asyncio.wait_for(asyncio.gather(*(r.done for r in results)), 60)
    watched = BATCHES * PER_CALL
    assert sum(len(report.indexed) for report in reports) == watched
    # asking about every unsettled watched row after each 128-row batch: ~16x the rows watched
    assert store.asked <= 2 * watched, (
        f"ids asked of the store for {watched} watched: {store.asked}"
    )
