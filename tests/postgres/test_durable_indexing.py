"""Deferred indexing on PostgreSQL survives a killed process and concurrent workers."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from prism_memory import HashEmbedder, IndexingPolicy, create_memory

pytestmark = pytest.mark.postgres

SCOPE = {"tenant_id": "t-durable", "resource_id": "user-1", "thread_id": "thread-1"}

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from prism_memory import IndexingPolicy, create_memory
    from prism_memory.postgres import create_postgres_memory_stores

    class NeverEmbeds:
        dimensions = 64
        async def embed(self, texts):
            await asyncio.Event().wait()

    async def main(url, schema, count):
        stores = await create_postgres_memory_stores(url, schema=schema, dimension=64)
        memory = create_memory(
            tenant_id="t-durable", resource_id="user-1", thread_id="thread-1",
            embedder=NeverEmbeds(), vector_store=stores.vector_store,
            working_store=stores.working_store, indexing=IndexingPolicy(lease_seconds=1),
        )
        entries = [{"id": f"k{i}", "text": f"durable entry number {i}"} for i in range(count)]
        result = await memory.remember(entries)
        print("stored", len(result.pending), flush=True)
        await asyncio.Event().wait()

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


class CountingEmbedder:
    """Records every text it embeds; optionally slow, so concurrent workers interleave."""

    def __init__(self, delay: float = 0.0) -> None:
        self._inner = HashEmbedder(dimensions=64)
        self._delay = delay
        self.texts: list[str] = []

    @property
    def dimensions(self) -> int:
        return 64

    async def embed(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        if self._delay:
            await asyncio.sleep(self._delay)
        return await self._inner.embed(texts)


async def test_killed_process_leaves_pending_rows_the_next_start_resumes(
    make_postgres_stores, postgres_url
):
    schema = f"pm_kill_{uuid.uuid4().hex[:10]}"
    stores = await make_postgres_stores(dimension=64, schema=schema)
    count = 25
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        postgres_url,
        schema,
        str(count),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    assert child.stderr is not None
    try:
        line = (await asyncio.wait_for(child.stdout.readline(), timeout=60)).decode()
        if not line:
            line = (await child.stderr.read()).decode()
        assert line.strip() == f"stored {count}", line
    finally:
        child.send_signal(signal.SIGKILL)
        await asyncio.wait_for(child.wait(), timeout=30)
    assert child.returncode == -signal.SIGKILL

    embedder = CountingEmbedder()
    memory = create_memory(
        **SCOPE,
        embedder=embedder,
        vector_store=stores.vector_store,
        working_store=stores.working_store,
    )
    statuses = await memory.index_status([f"k{i}" for i in range(count)])
    assert len(statuses) == count
    assert set(statuses.values()) == {"pending"}

    await asyncio.sleep(1.2)  # the dead worker's 1-second leases run out
    async with memory:
        assert await memory.resume_indexing() == count
        indexed_texts = list(embedder.texts)  # recall below embeds queries too
        statuses = await memory.index_status([f"k{i}" for i in range(count)])
        assert set(statuses.values()) == {"indexed"}
        for i in range(count):
            hits = (await memory.recall(f"durable entry number {i}", top_k=count)).hits
            ids = [hit.id for hit in hits]
            assert len(ids) == len(set(ids)) == count
            assert ids[0] == f"k{i}"
    assert sorted(indexed_texts) == sorted(f"durable entry number {i}" for i in range(count))


async def test_two_workers_on_one_database_embed_each_row_once(make_postgres_stores):
    schema = f"pm_two_{uuid.uuid4().hex[:10]}"
    first_stores = await make_postgres_stores(dimension=64, schema=schema)
    second_stores = await make_postgres_stores(dimension=64, schema=schema)  # its own engine
    policy = IndexingPolicy(busy_poll_seconds=0.005, idle_poll_seconds=0.005)
    embedders = [CountingEmbedder(delay=0.02), CountingEmbedder(delay=0.02)]
    memories = [
        create_memory(
            **SCOPE,
            embedder=embedder,
            vector_store=stores.vector_store,
            working_store=stores.working_store,
            limits={"embed_batch": 4},
            indexing=policy,
        )
        for embedder, stores in zip(embedders, (first_stores, second_stores), strict=True)
    ]
    count = 120
    async with memories[0] as writer, memories[1]:
        result = await writer.remember(
            [{"id": f"w{i}", "text": f"concurrent entry {i}"} for i in range(count)]
        )
        report = await asyncio.wait_for(result.done, timeout=60)
        assert len(report.indexed) == count
        assert not report.failed
    embedded = embedders[0].texts + embedders[1].texts
    assert sorted(embedded) == sorted(f"concurrent entry {i}" for i in range(count))
    assert embedders[0].texts, "the writer's worker took part"
    assert embedders[1].texts, "the second worker took part"
