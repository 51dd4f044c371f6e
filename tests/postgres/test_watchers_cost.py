"""What a queue's watchers ask of PostgreSQL: each watched row a bounded number of times.

After every batch the queue asked ``index_status`` about every watched row it neither held nor
had settled: with 33,000 ids watched the worker loop stalled there (issue 46, item 2). The same
check as ``tests/unit/test_indexing_waiters.py``, on the real store.
"""

from __future__ import annotations

import asyncio

import pytest

from prism_memory import HashEmbedder, IndexingPolicy, create_memory
from prism_memory.testing import GatedEmbedder

pytestmark = pytest.mark.postgres

BATCHES = 8
PER_CALL = 256  # Limits.remember_batch


async def test_watching_many_rows_asks_postgres_about_each_a_bounded_number_of_times(
    make_postgres_stores,
):
    stores = await make_postgres_stores(dimension=8)
    store = stores.vector_store
    asked: list[int] = []
    status = store.index_status

    async def counted(scope, ids):
        asked.append(len(ids))
        return await status(scope, ids)

    store.index_status = counted  # the queue asks the store it was given
    gated = GatedEmbedder(HashEmbedder(8))
    policy = IndexingPolicy(busy_poll_seconds=30.0, idle_poll_seconds=60.0)
    async with create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=gated,
        vector_store=store,
        working_store=stores.working_store,
        indexing=policy,
    ) as memory:
        results = [
            await memory.remember([{"text": f"note {b} {k}"} for k in range(PER_CALL)])
            for b in range(BATCHES)
        ]
        gated.release()
        reports = await asyncio.wait_for(asyncio.gather(*(r.done for r in results)), 120)
    watched = BATCHES * PER_CALL
    assert sum(len(report.indexed) for report in reports) == watched
    assert sum(asked) <= 2 * watched, f"ids asked for {watched} watched: {sum(asked)}"
