"""Reads on a streaming replica, with read-your-writes (issue 36, item 2).

A dedicated embedded primary and a hot standby made from it with ``pg_basebackup -R``
(``tests/topology_fixtures.py``). Pausing the standby's replay (``pg_wal_replay_pause()``) makes
it lag for as long as a test needs: a store must then never serve its own stale read -- not a
write it made, and never an entry it forgot or revoked -- on the memory path and the RAG path,
while a read with nothing to wait for does go to the replica (proved by what only the stale
replica still shows).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from prism_memory import HashEmbedder, IndexingPolicy, create_memory
from prism_memory.memory import Memory
from prism_memory.postgres import PostgresMemoryStores, create_postgres_memory_stores
from prism_memory.rag import AccessConstraint, RagScope, hybrid_query, ingest

pytestmark = pytest.mark.postgres

WIDTH = 64
EMBEDDER = HashEmbedder(dimensions=WIDTH)
FAST = IndexingPolicy(
    retry_base_seconds=0.02, retry_max_seconds=0.1, busy_poll_seconds=0.01, idle_poll_seconds=0.05
)


@pytest.fixture
async def schema(replica_pair) -> AsyncIterator[str]:
    """A schema migrated on the primary and replayed by the replica."""
    name = f"pm_replica_{uuid.uuid4().hex[:12]}"
    stores = await create_postgres_memory_stores(
        replica_pair.primary_url, schema=name, dimension=WIDTH
    )
    await stores.close()
    await replica_pair.wait_caught_up()
    yield name
    if await replica_pair.replay_paused():
        await replica_pair.resume_replay()


@asynccontextmanager
async def opened(pair, schema: str, **options) -> AsyncIterator[PostgresMemoryStores]:
    stores = await create_postgres_memory_stores(
        pair.primary_url,
        schema=schema,
        dimension=WIDTH,
        **{
            "read_url": pair.replica_url,
            "replica_wait_seconds": 0.2,
            "skip_migrations": True,
            **options,
        },
    )
    try:
        yield stores
    finally:
        await stores.close()


def memory_on(stores: PostgresMemoryStores, thread: str = "thread-1") -> Memory:
    return create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id=thread,
        embedder=EMBEDDER,
        vector_store=stores.vector_store,
        working_store=stores.working_store,
        indexing=FAST,
    )


async def exported(memory: Memory) -> list[str]:
    page = await memory.export_memory(identity=memory.identity)
    return [entry["id"] for entry in page.entries]


async def _ids(memory: Memory, query: str) -> list[str]:
    return [hit.id for hit in (await memory.recall(query, top_k=5)).hits]


async def test_reads_go_to_the_replica_when_nothing_is_to_wait_for(replica_pair, schema):
    async with opened(replica_pair, schema) as reader, opened(replica_pair, schema) as writer:
        async with memory_on(writer) as memory:
            await memory.remember({"id": "old", "text": "apples grow on trees"}, wait=True)
        await replica_pair.wait_caught_up()
        await replica_pair.pause_replay()
        async with memory_on(writer) as memory:  # another store (another process, say) writes
            await memory.remember({"id": "new", "text": "apples in the new orchard"}, wait=True)
        async with memory_on(reader) as memory:
            # the reader wrote nothing: its recall reads the paused replica, which lacks "new"
            assert await _ids(memory, "apples") == ["old"]
            # the indexing status is the ledger's: read from the primary (issue 46, item 13)
            assert await memory.index_status(["new"]) == {"new": "indexed"}
        async with (
            opened(replica_pair, schema, read_consistency="strict") as strict,
            memory_on(strict) as memory,
        ):
            # strict: past what the primary had committed, so from the primary here
            assert sorted(await _ids(memory, "apples")) == ["new", "old"]


async def test_behind_a_transaction_pooler_a_read_is_not_counted_as_a_write(replica_pair, schema):
    """Behind a transaction pooler each read runs in a transaction of its own; its ``COMMIT`` is
    not a write. Counted as one, every read made the next replica read wait for the primary's WAL
    and then fall back to the primary: the replica served a pooled store's first read only."""
    async with (
        opened(replica_pair, schema, pooling="transaction") as reader,
        opened(replica_pair, schema) as writer,
    ):
        async with memory_on(writer) as memory:
            await memory.remember({"id": "old", "text": "pears ripen slowly"}, wait=True)
        await replica_pair.wait_caught_up()
        await replica_pair.pause_replay()
        async with memory_on(writer) as memory:
            await memory.remember({"id": "new", "text": "pears from the new orchard"}, wait=True)
        async with memory_on(reader) as memory:
            for _ in range(3):  # every read from the paused replica, which lacks "new"
                assert await _ids(memory, "pears") == ["old"]


async def test_a_paused_replica_never_serves_a_stores_own_stale_read(replica_pair, schema):
    async with opened(replica_pair, schema) as stores, memory_on(stores) as memory:
        consent = {"scope": "thread"}  # explicit consent: exportable
        await memory.remember(
            [
                {"id": "keep", "text": "bicycles need oil", "consent": consent},
                {"id": "gone", "text": "bicycles with a bell", "consent": consent},
                {"id": "private", "text": "bicycles in the shed", "consent": consent},
            ],
            wait=True,
        )
        assert sorted(await exported(memory)) == ["gone", "keep", "private"]
        await replica_pair.wait_caught_up()
        await replica_pair.pause_replay()
        await replica_pair.wait_received()
        # its own new write: recallable at once although the replica cannot replay it
        await memory.remember({"id": "fresh", "text": "bicycles with new tyres"}, wait=True)
        assert "fresh" in await _ids(memory, "bicycles")
        assert await memory.index_status(["fresh"]) == {"fresh": "indexed"}
        # forgotten and revoked: never returned, the paused replica still holds both
        await memory.forget(ids=["gone"])
        await memory.set_consent("private", visible=False)
        for _ in range(3):
            found = await _ids(memory, "bicycles")
            assert "gone" not in found
            assert "private" not in found
            assert {"keep", "fresh"} <= set(found)
        assert sorted(await exported(memory)) == ["keep"]  # "fresh" has no explicit consent
        # another memory on the same store sees the store's changes too
        async with memory_on(stores) as other:
            assert "gone" not in await _ids(other, "bicycles")


async def test_rag_reads_follow_the_same_rule(replica_pair, schema):
    scope = RagScope("t", "intranet")
    everyone = AccessConstraint("ada", group_ids=("staff",), access_version=1)
    async with opened(replica_pair, schema) as writer, opened(replica_pair, schema) as reader:
        for source, text in (("badges", "Badges open every door"), ("lunch", "Lunch at noon")):
            await ingest(writer.vector_store, scope, source, text, embedder=EMBEDDER)
            await writer.vector_store.set_source_access(
                scope, source, group_ids=["staff"], access_version=1
            )
        await replica_pair.wait_caught_up()
        await replica_pair.pause_replay()

        async def sources(stores: PostgresMemoryStores, text: str) -> set[str]:
            lexical = await stores.vector_store.lexical_query(
                scope, text=text, top_k=5, authorization=everyone
            )
            hybrid = await hybrid_query(
                stores.vector_store,
                scope,
                text=text,
                embedder=EMBEDDER,
                top_k=5,
                authorization=everyone,
            )
            found = {hit.source_id for hit in lexical}
            assert found <= {hit.source_id for hit in hybrid}  # both legs read one snapshot
            return found

        await writer.vector_store.delete_source(scope, "badges")
        await ingest(
            writer.vector_store, scope, "parking", "Parking behind the door", embedder=EMBEDDER
        )
        await writer.vector_store.set_source_access(
            scope, "parking", group_ids=["staff"], access_version=1
        )
        # the writer: its delete and its new source, although the replica has neither
        assert await sources(writer, "door") == {"parking"}
        # a store that wrote nothing reads the paused replica: still the deleted source
        assert await sources(reader, "door") == {"badges"}
        await replica_pair.resume_replay()
        await replica_pair.wait_caught_up()
        assert await sources(reader, "door") == {"parking"}


async def test_concurrent_writers_each_read_their_own_write(replica_pair, schema):
    """Eight memories on one store at once, interleaved on the event loop while the replica
    lags: each recalls its own new entry, and never one it just forgot."""
    async with opened(replica_pair, schema, replica_wait_seconds=0.05) as stores:
        await replica_pair.pause_replay()

        async def one(i: int) -> None:
            async with memory_on(stores, f"racer-{i}") as memory:
                for step in range(4):
                    entry = f"r{i}-{step}"
                    await memory.remember({"id": entry, "text": f"harps {step}"}, wait=True)
                    assert entry in await _ids(memory, "harps")
                    await memory.forget(ids=[entry])
                    assert entry not in await _ids(memory, "harps")

        await asyncio.gather(*(one(i) for i in range(8)))


async def test_a_worker_only_memorys_done_reads_the_status_from_the_primary(replica_pair, schema):
    """Issue 46, item 13: a worker-only memory's ``done`` polls ``index_status``. Read from the
    replica it waited for the standby to replay the worker's update (for as long as replay
    lagged; the primary said ``indexed``). The indexing status is the ledger's own state, so it
    is read from the primary: ``done`` resolves while replay is paused."""
    async with (
        opened(replica_pair, schema) as reader,
        opened(replica_pair, schema, read_url=None) as worker_stores,
    ):
        watching = create_memory(
            tenant_id="t",
            resource_id="r",
            thread_id="worker-only",
            embedder=EMBEDDER,
            vector_store=reader.vector_store,
            working_store=reader.working_store,
            indexing=IndexingPolicy(in_process=False, busy_poll_seconds=0.01),
        )
        async with watching:
            written = await watching.remember(
                [{"id": f"w{k}", "text": f"note {k}"} for k in range(5)]
            )
            await replica_pair.wait_caught_up()
            await replica_pair.pause_replay()
            try:
                worker = create_memory(
                    tenant_id="t",
                    resource_id="r",
                    thread_id="worker-only",
                    embedder=EMBEDDER,
                    vector_store=worker_stores.vector_store,
                    working_store=worker_stores.working_store,
                    indexing=FAST,
                )
                async with worker:  # another process's worker, say: it writes to the primary
                    await worker.resume_indexing()
                report = await asyncio.wait_for(written.done, 10)
                assert report.indexed == tuple(f"w{k}" for k in range(5))
                assert await watching.index_status(["w0"]) == {"w0": "indexed"}
            finally:
                await replica_pair.resume_replay()
