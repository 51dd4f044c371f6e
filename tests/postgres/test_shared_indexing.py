"""The shared indexing queue on PostgreSQL: the many-thread claim under concurrency, and two
processes' shared queues over the same threads."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from prism_memory import HashEmbedder, IndexingPolicy, create_memory
from prism_memory.models import MemoryIdentity
from prism_memory.stores.base import NewEntry

pytestmark = pytest.mark.postgres

DIM = 32


class CountingEmbedder:
    """Records every text it embeds; a little slow, so two queues interleave."""

    def __init__(self) -> None:
        self._inner = HashEmbedder(dimensions=DIM)
        self.texts: list[str] = []

    @property
    def dimensions(self) -> int:
        return DIM

    async def embed(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        await asyncio.sleep(0.005)
        return await self._inner.embed(texts)


async def test_concurrent_many_thread_claims_never_lease_a_row_twice(make_postgres_stores):
    schema = f"pm_claim_in_{uuid.uuid4().hex[:10]}"
    first = await make_postgres_stores(dimension=DIM, schema=schema)
    second = await make_postgres_stores(dimension=DIM, schema=schema)  # its own engine
    now = datetime.now(UTC)
    threads = [
        MemoryIdentity(tenant_id="t", resource_id="r", thread_id=f"th-{i}") for i in range(6)
    ]
    for scope in threads:
        entries = [
            NewEntry(
                id=f"{scope.thread_id}-{n}", text=f"row {n}", role="user", metadata={},
                consent=None, sequence=None, occurred_at=now, importance=1.0, lineage=None,
            )
            for n in range(40)
        ]  # fmt: skip
        await first.vector_store.put_entries(scope, entries, now=now)

    async def drain(store: Any, worker: str) -> list[str]:
        got: list[str] = []
        while True:
            claimed = await store.claim_pending_in(
                threads, limit=7, per_scope=3, worker_id=worker, lease_seconds=60, now=now
            )
            if not claimed:
                return got
            assert len(claimed) <= 7
            assert max(Counter(c.scope for c in claimed).values()) <= 3
            got.extend(f"{c.scope.thread_id}/{c.id}" for c in claimed)

    one, two = await asyncio.gather(
        drain(first.vector_store, "worker-1"), drain(second.vector_store, "worker-2")
    )
    assert not set(one) & set(two)  # SKIP LOCKED and the lease: never one row to both
    assert len(one) + len(two) == len(set(one) | set(two)) == 6 * 40
    assert one
    assert two


async def test_two_processes_of_shared_queues_embed_every_row_once(make_postgres_stores):
    schema = f"pm_shared_{uuid.uuid4().hex[:10]}"
    processes = [await make_postgres_stores(dimension=DIM, schema=schema) for _ in range(2)]
    embedders = [CountingEmbedder(), CountingEmbedder()]
    policy = IndexingPolicy(busy_poll_seconds=0.005, idle_poll_seconds=0.01)
    memories = [
        create_memory(
            tenant_id="t",
            resource_id="r",
            thread_id=f"thread-{i}",
            embedder=embedder,
            vector_store=stores.vector_store,
            working_store=stores.working_store,
            limits={"embed_batch": 2},
            indexing=policy,
        )
        for embedder, stores in zip(embedders, processes, strict=True)
        for i in range(8)
    ]

    def indexers() -> set[asyncio.Task[object]]:
        return {t for t in asyncio.all_tasks() if t.get_name().startswith("prism-indexer-")}

    before = indexers()  # another test's queue still winding down is not this test's
    for memory in memories:
        await memory.__aenter__()
    tasks = indexers() - before
    assert len(tasks) == 2  # one shared queue per store (process) and embedder
    writers = memories[:8]  # the first process writes; leases cover one claim's worth each
    results = await asyncio.gather(
        *(
            writer.remember([{"id": f"e{n}", "text": f"{i} entry {n}"} for n in range(30)])
            for i, writer in enumerate(writers)
        )
    )
    reports = await asyncio.wait_for(asyncio.gather(*(r.done for r in results)), timeout=60)
    assert all(len(report.indexed) == 30 and not report.failed for report in reports)
    for memory in memories:
        await memory.aclose()
    embedded = embedders[0].texts + embedders[1].texts
    assert Counter(embedded) == Counter(f"{i} entry {n}" for i in range(8) for n in range(30))
    assert embedders[1].texts, "the second process's shared queue took part"
    assert not {t for t in tasks if not t.done()}
