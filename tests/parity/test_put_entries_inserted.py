"""``put_entries`` names the rows it inserted (``StoredEntries.inserted``), the same on both backends.

The writer hands exactly those rows on (to its indexing worker, or as indexed at once), so the
answer must not depend on how a record looks: a row another call inserted at the same ``now``
has ``created_at == now`` and revision 1 too, and is not this call's.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from prism_memory import InMemoryVectorStore
from prism_memory.models import MemoryIdentity
from prism_memory.stores.base import NewEntry, StoredEntries

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _entry(entry_id: str, text: str = "words") -> NewEntry:
    return NewEntry(
        id=entry_id,
        text=text,
        role="user",
        metadata={},
        consent=None,
        sequence=None,
        occurred_at=NOW,
        importance=1.0,
        lineage=None,
    )


@pytest.fixture(params=["memory", "postgres"])
async def store(request, make_postgres_stores):
    if request.param == "memory":
        return InMemoryVectorStore(dimension=2)
    return (await make_postgres_stores(dimension=2)).vector_store


async def test_inserted_names_only_the_rows_this_call_wrote(store):
    scope = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="inserted")
    first = await store.put_entries(scope, [_entry("a"), _entry("b"), _entry("a", "x")], now=NOW)
    assert isinstance(first, StoredEntries)
    assert [r.id for r in first] == ["a", "b", "a"]
    assert first.inserted == {"a", "b"}
    # the same moment, a replay of b: created_at == now and revision 1, yet not inserted here
    again = await store.put_entries(scope, [_entry("b"), _entry("c")], now=NOW)
    assert [(r.id, r.created_at, r.revision) for r in again] == [("b", NOW, 1), ("c", NOW, 1)]
    assert again.inserted == {"c"}
    vectors = [np.ones(2, np.float32), np.ones(2, np.float32)]
    indexed = await store.put_entries(scope, [_entry("c"), _entry("d")], now=NOW, vectors=vectors)
    assert indexed.inserted == {"d"}
    assert [r.status for r in indexed] == ["pending", "indexed"]
    assert (await store.put_entries(scope, [], now=NOW)).inserted == frozenset()


@pytest.mark.parametrize("seed", range(4))
async def test_inserted_matches_the_reference_store(make_postgres_stores, seed):
    stores = await make_postgres_stores(dimension=2)
    backends = (stores.vector_store, InMemoryVectorStore(dimension=2))
    scope = MemoryIdentity(tenant_id="t", resource_id="r", thread_id=f"inserted-{seed}")
    rng = random.Random(seed)
    seen: set[str] = set()
    for step in range(6):
        at = NOW + timedelta(minutes=rng.choice([0, step]))  # some steps share a moment
        batch = [_entry(f"e{rng.randint(0, 20)}") for _ in range(rng.randint(1, 8))]
        results = [await store.put_entries(scope, batch, now=at) for store in backends]
        expected = {entry.id for entry in batch} - seen
        assert [result.inserted for result in results] == [expected, expected], f"step {step}"
        seen |= expected
