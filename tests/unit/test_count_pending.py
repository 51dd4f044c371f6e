"""The contract's default ``count_pending`` (for a host's adapter that does not override it) pages
through the thread and agrees with the reference store's own count."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from prism_memory import InMemoryVectorStore
from prism_memory.models import MemoryIdentity
from prism_memory.stores.base import NewEntry, VectorStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def entry(number: int) -> NewEntry:
    return NewEntry(
        id=f"e{number:04d}",
        text=f"entry {number}",
        role="user",
        metadata={},
        consent=None,
        sequence=None,
        occurred_at=NOW,
        importance=1.0,
        lineage=None,
    )


async def test_the_default_count_pages_past_256_rows_and_matches_the_override():
    store = InMemoryVectorStore()
    scope = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="c")
    other = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="other")
    await store.put_entries(scope, [entry(n) for n in range(300)], now=NOW)
    await store.put_entries(other, [entry(n) for n in range(5)], now=NOW)
    claimed = await store.claim_pending(scope, limit=40, worker_id="w", lease_seconds=60, now=NOW)

    await store.complete_indexing(
        [(item, np.ones(4, dtype=np.float32)) for item in claimed], worker_id="w", now=NOW
    )
    assert await store.count_pending(scope) == 260
    assert await VectorStore.count_pending(store, scope) == 260
    assert await VectorStore.count_pending(store, other) == 5
    empty = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="none")
    assert await VectorStore.count_pending(store, empty) == 0


async def test_the_reference_count_follows_every_status_change_per_thread():
    store = InMemoryVectorStore()
    scope = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="c")
    other = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="other")
    await store.put_entries(scope, [entry(n) for n in range(10)], now=NOW)
    await store.put_entries(other, [entry(n) for n in range(3)], now=NOW)
    assert (await store.count_pending(scope), await store.count_pending(other)) == (10, 3)

    first = await store.claim_pending(scope, limit=4, worker_id="w", lease_seconds=60, now=NOW)
    assert await store.count_pending(scope) == 10  # a lease does not change the status
    await store.complete_indexing(
        [(item, np.ones(4, dtype=np.float32)) for item in first[:3]], worker_id="w", now=NOW
    )
    await store.fail_indexing(first[3], worker_id="w", error="boom", retry_at=None, now=NOW)
    assert await store.count_pending(scope) == 6  # 3 indexed, 1 failed
    assert await store.requeue_failed(scope) == 1
    assert await store.count_pending(scope) == 7
    assert await store.delete_entries(scope, [entry(9).id, entry(0).id]) == 2  # pending, indexed
    assert await store.count_pending(scope) == 6
    await store.put_entries(scope, [entry(9)], now=NOW)  # the deleted id again: pending anew
    assert await store.count_pending(scope) == 7
    assert await store.count_pending(other) == 3
    for thread in (scope, other):
        assert await store.count_pending(thread) == await VectorStore.count_pending(store, thread)
