"""``put_entries`` stores the same records on both backends: sequences, statuses, replays.

PostgreSQL assigns sequences inside one statement (window functions over the batch); the in-memory
store walks the batch in Python. Random batches mixing automatic and explicit sequences, repeated
ids, ids that exist already, with and without vectors, must come out identical.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from prism_memory import InMemoryVectorStore
from prism_memory.models import MemoryIdentity
from prism_memory.stores.base import NewEntry

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 6, 1, tzinfo=UTC)
FIELDS = ("id", "text", "sequence", "status", "revision", "embedding_model", "created_at")


def _batch(rng: random.Random, at: datetime) -> list[NewEntry]:
    return [
        NewEntry(
            id=f"e{rng.randint(0, 40)}",
            text=f"text {rng.randint(0, 10**6)}",
            role="user",
            metadata={},
            consent=None,
            sequence=rng.choice([None, None, None, rng.randint(-3, 60)]),
            occurred_at=at,
            importance=1.0,
            lineage=None,
        )
        for _ in range(rng.randint(1, 12))
    ]


@pytest.mark.parametrize("seed", range(6))
async def test_sequences_and_replays_match_the_reference_store(make_postgres_stores, seed):
    stores = await make_postgres_stores(dimension=4)
    backends = (stores.vector_store, InMemoryVectorStore(dimension=4))
    scope = MemoryIdentity(tenant_id="t", resource_id="r", thread_id=f"thread-{seed}")
    rng = random.Random(seed)
    vrng = np.random.default_rng(seed)
    for step in range(8):
        at = NOW + timedelta(minutes=step)
        batch = _batch(rng, at)
        vectors = (
            list(vrng.standard_normal((len(batch), 4)).astype(np.float32))
            if rng.random() < 0.5
            else None
        )
        results = [
            await store.put_entries(scope, batch, now=at, vectors=vectors, model="m")
            for store in backends
        ]
        shapes = [[tuple(getattr(r, f) for f in FIELDS) for r in result] for result in results]
        assert shapes[0] == shapes[1], f"step {step}: {batch}"
    listed = [await store.list_by_thread(scope, after=None, limit=1000) for store in backends]
    assert [tuple(getattr(r, f) for f in FIELDS) for r in listed[0]] == [
        tuple(getattr(r, f) for f in FIELDS) for r in listed[1]
    ]
