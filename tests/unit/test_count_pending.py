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
