"""A read replica that hangs or stops never hangs a read (issue 46, item 3).

Against the real standby of ``replica_pair``: its every process stopped with SIGSTOP (the sockets
still accept, nothing answers -- a hung host), or the server stopped. A read then goes to the
primary within the replica's time bound, the replica is avoided for a while (one warning, not
one timeout per call), and when the primary fails too the error names the replica. The fixture
is shared by the session: every test gives the replica back running and caught up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import unquote

import pytest
from sqlalchemy import event

from prism_memory import HashEmbedder, IndexingPolicy, create_memory
from prism_memory.errors import StorageError
from prism_memory.memory import Memory
from prism_memory.postgres import PostgresMemoryStores, create_postgres_memory_stores
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres.embedded import start_embedded_postgres

pytestmark = pytest.mark.postgres

WIDTH = 16
EMBEDDER = HashEmbedder(dimensions=WIDTH)
BOUND = 1.0  # replica_timeout_seconds in these tests
PATIENCE = 20.0  # a read that takes longer than this hangs (the bug waited > 100 s)
WARNING = "read replica"


@pytest.fixture
async def schema(replica_pair) -> str:
    """A schema migrated on the primary and replayed by the replica."""
    name = f"pm_replica_fault_{uuid.uuid4().hex[:12]}"
    stores = await create_postgres_memory_stores(
        replica_pair.primary_url, schema=name, dimension=WIDTH
    )
    await stores.close()
    await replica_pair.wait_caught_up()
    return name


@asynccontextmanager
async def opened(
    primary_url: str, replica_url: str, schema: str
) -> AsyncIterator[PostgresMemoryStores]:
    stores = await create_postgres_memory_stores(
        primary_url,
        schema=schema,
        dimension=WIDTH,
        read_url=replica_url,
        skip_migrations=True,
        replica_timeout_seconds=BOUND,
        replica_retry_seconds=60.0,
    )
    try:
        yield stores
    finally:
        await asyncio.wait_for(stores.close(), PATIENCE)


def memory_on(stores: PostgresMemoryStores) -> Memory:
    return create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="thread-1",
        embedder=EMBEDDER,
        vector_store=stores.vector_store,
        working_store=stores.working_store,
        indexing=IndexingPolicy(busy_poll_seconds=0.01, idle_poll_seconds=0.05),
    )


async def _recalled(memory: Memory, query: str) -> list[str]:
    result = await asyncio.wait_for(memory.recall(query, top_k=5), PATIENCE)
    return [hit.id for hit in result.hits]


def _replica_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(WARNING)]


async def test_a_hung_replica_sends_reads_to_the_primary_within_the_bound(
    replica_pair, schema, caplog
):
    caplog.set_level(logging.WARNING, logger="prism_memory.postgres")
    async with (
        opened(replica_pair.primary_url, replica_pair.replica_url, schema) as stores,
        memory_on(stores) as memory,
    ):
        await memory.remember({"id": "a", "text": "apples grow on trees"}, wait=True)
        await replica_pair.wait_caught_up()
        assert await _recalled(memory, "apples") == ["a"]  # a replica connection is open
        with replica_pair.replica_frozen():
            # the open replica connection hangs: the read goes to the primary in time
            assert await _recalled(memory, "apples") == ["a"]
            status = await asyncio.wait_for(memory.index_status(["a"]), PATIENCE)
            assert status == {"a": "indexed"}
            # a store opened now, while the replica hangs, reads from the primary too: an
            # export (a unit of work in a session, its connection opened within the bound)
            # and a recall
            async with (
                opened(replica_pair.primary_url, replica_pair.replica_url, schema) as fresh,
                memory_on(fresh) as other,
            ):
                page = await asyncio.wait_for(
                    other.export_memory(identity=other.identity), PATIENCE
                )
                assert list(page.entries) == []  # "a" has no explicit consent to export
                assert await _recalled(other, "apples") == ["a"]
            warned = _replica_warnings(caplog)
            # each store paid the bound once, then avoided the replica
            assert len(warned) == 2, warned
            assert all("no answer within 1 s" in line for line in warned), warned
            assert all("postgres:" not in line and "@" not in line for line in warned)
    await replica_pair.wait_caught_up()


async def test_a_stopped_replica_sends_reads_to_the_primary(replica_pair, schema, caplog):
    caplog.set_level(logging.WARNING, logger="prism_memory.postgres")
    async with (
        opened(replica_pair.primary_url, replica_pair.replica_url, schema) as stores,
        memory_on(stores) as memory,
    ):
        await memory.remember({"id": "b", "text": "bananas are yellow"}, wait=True)
        await replica_pair.wait_caught_up()
        assert await _recalled(memory, "bananas") == ["b"]
        replica_pair.stop_replica()
        try:
            assert await _recalled(memory, "bananas") == ["b"]
            assert await _recalled(memory, "bananas") == ["b"]
            assert len(_replica_warnings(caplog)) == 1, _replica_warnings(caplog)
        finally:
            replica_pair.start_replica()
    await replica_pair.wait_caught_up()


async def test_when_the_primary_fails_too_the_error_names_the_replica(replica_pair, schema):
    """A primary of its own (stopped below) with the fixture's standby as its "replica",
    stopped too: the recall's error says which replica failed, and how, without a credential.
    The reading store wrote nothing, so its read goes to the replica first."""
    primary = start_embedded_postgres()
    try:
        writer = await create_postgres_memory_stores(primary.url, schema=schema, dimension=WIDTH)
        try:
            async with memory_on(writer) as memory:
                await memory.remember({"id": "c", "text": "cherries are red"}, wait=True)
        finally:
            await writer.close()
        async with (
            opened(primary.url, replica_pair.replica_url, schema) as reader,
            memory_on(reader) as memory,
        ):
            await replica_pair.wait_caught_up()
            await _recalled(memory, "cherries")  # the store has read what it reads once
            replica_pair.stop_replica()
            try:
                primary.close()
                with pytest.raises(StorageError) as raised:
                    await _recalled(memory, "cherries")
            finally:
                replica_pair.start_replica()
    finally:
        primary.close()
    message = str(raised.value)
    socket_dir = unquote(replica_pair.replica_url.split("host=", 1)[1].split("&", 1)[0])
    assert f"read replica {socket_dir}:" in message, message
    assert "and then on the primary" in message, message
    assert "postgres@" not in message, message
    await replica_pair.wait_caught_up()


async def test_closing_the_stores_while_the_replica_hangs_returns(replica_pair, schema):
    """Disposing of the replica engine closes its pooled connections; a graceful close waits
    for the server's answer, which a hung standby never sends."""
    stores = await create_postgres_memory_stores(
        replica_pair.primary_url,
        schema=schema,
        dimension=WIDTH,
        read_url=replica_pair.replica_url,
        skip_migrations=True,
        replica_timeout_seconds=BOUND,
    )
    try:
        async with memory_on(stores) as memory:
            assert await _recalled(memory, "anything") == []  # a replica connection is pooled
        with replica_pair.replica_frozen():
            await asyncio.wait_for(stores.close(), PATIENCE)
    finally:
        await stores.close()
    await replica_pair.wait_caught_up()


async def test_a_replica_that_hangs_inside_a_unit_fails_it_naming_the_replica(replica_pair, schema):
    """A unit of several statements (an export page) that checked its replica connection out
    in time cannot be replayed on the primary once the standby hangs under its statement: the
    call fails with the replica named (its statement bounded by ``command_timeout``), and the
    next call goes to the primary."""
    read_engine = create_engine(replica_pair.replica_url, connect_args={"command_timeout": BOUND})
    frozen: list[contextlib.AbstractContextManager[None]] = []

    def freeze_once(*_: object) -> None:
        if not frozen:  # the standby hangs as the unit's first statement goes out
            frozen.append(replica_pair.replica_frozen())
            frozen[0].__enter__()

    stores = await create_postgres_memory_stores(
        replica_pair.primary_url,
        schema=schema,
        dimension=WIDTH,
        read_engine=read_engine,
        skip_migrations=True,
        replica_timeout_seconds=BOUND,
    )
    try:
        async with memory_on(stores) as memory:
            event.listen(read_engine.sync_engine, "before_cursor_execute", freeze_once)
            try:
                with pytest.raises(StorageError) as raised:
                    await asyncio.wait_for(memory.export_memory(identity=memory.identity), PATIENCE)
                page = await asyncio.wait_for(
                    memory.export_memory(identity=memory.identity), PATIENCE
                )
                assert list(page.entries) == []  # from the primary
            finally:
                event.remove(read_engine.sync_engine, "before_cursor_execute", freeze_once)
                for block in frozen:
                    block.__exit__(None, None, None)
    finally:
        await stores.close()
        await read_engine.dispose()
    assert "on the read replica" in str(raised.value), raised.value
    assert len(frozen) == 1
    await replica_pair.wait_caught_up()
