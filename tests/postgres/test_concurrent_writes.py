"""Concurrent writers of one thread on separate connections: the advisory lock serialises them, so
overlapping batches store every id once, never fail on each other's rows, and take gap-free
sequences."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from prism_memory.models import MemoryIdentity
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres._engine import SERVER_SETTINGS, create_engine
from prism_memory.postgres.statements import thread_lock_key, thread_lock_literal
from prism_memory.stores.base import NewEntry

pytestmark = pytest.mark.postgres

NOW = datetime(2026, 6, 1, tzinfo=UTC)
SCOPE = MemoryIdentity(tenant_id="t", resource_id="r", thread_id="busy")


def _entry(i: int) -> NewEntry:
    return NewEntry(
        id=f"e{i:03d}",
        text=f"note {i}",
        role="user",
        metadata={},
        consent=None,
        sequence=None,
        occurred_at=NOW,
        importance=1.0,
        lineage=None,
    )


@pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
async def test_overlapping_batches_store_each_id_once_in_gap_free_order(
    make_postgres_stores, postgres_url, isolation
):
    made = await make_postgres_stores(dimension=4)
    # a server whose default isolation is stricter: the write still reads after the lock
    settings = {**SERVER_SETTINGS, "default_transaction_isolation": isolation}
    engine = create_engine(postgres_url, pooled=False, connect_args={"server_settings": settings})
    stores = await create_postgres_memory_stores(
        engine=engine, schema=made.vector_store.tables.names.schema, dimension=4
    )
    store = stores.vector_store
    rng = np.random.default_rng(3)
    batches = [[_entry(i) for i in range(start, start + 30)] for start in range(0, 100, 10)]

    async def write(batch: list[NewEntry], with_vectors: bool) -> None:
        vectors = rng.standard_normal((len(batch), 4)).astype(np.float32) if with_vectors else None
        await store.put_entries(SCOPE, batch, now=NOW, vectors=vectors, model="m")

    await asyncio.gather(*(write(batch, n % 2 == 0) for n, batch in enumerate(batches)))
    rows = await store.list_by_thread(SCOPE, after=None, limit=1000)
    assert sorted(r.id for r in rows) == [f"e{i:03d}" for i in range(120)]
    assert sorted(r.sequence for r in rows) == list(range(120))
    await engine.dispose()


@pytest.mark.parametrize("conforming", ["on", "off"])
async def test_the_inlined_lock_key_is_the_bound_one(make_postgres_stores, conforming):
    """The write takes the thread lock in the same simple-query message as ``BEGIN``, its key
    inlined as a literal: it must hash exactly as the bound key other writers (governance) use,
    whatever the key holds and however the server reads backslashes in plain literals."""
    stores = await make_postgres_stores(dimension=4)
    scopes = [
        SCOPE,
        MemoryIdentity(tenant_id="it's", resource_id="back\\slash", thread_id="\\'; --"),
        MemoryIdentity(tenant_id="ünï\\\\cödé ✓", resource_id="E'x'", thread_id="''"),
    ]
    async with stores.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        await driver.execute(f"SET standard_conforming_strings = {conforming}")
        for scope in scopes:
            same = await driver.fetchval(
                f"SELECT hashtextextended({thread_lock_literal(scope)}, 0) "
                "= hashtextextended($1, 0)",
                thread_lock_key(scope),
            )
            assert same, scope
        await driver.execute("RESET standard_conforming_strings")


async def test_a_write_cancelled_while_waiting_for_the_lock_leaves_nothing_behind(
    make_postgres_stores,
):
    """A write cancelled while it waits for the thread's lock (BEGIN already sent) writes nothing,
    and its connection never goes back to the pool inside that transaction: the next writes on
    the same store succeed, and no prism connection is left idle in a transaction."""
    stores = await make_postgres_stores(dimension=4)
    store = stores.vector_store
    tenant = f"t-cancel-{uuid.uuid4().hex[:10]}"
    scope = MemoryIdentity(tenant_id=tenant, resource_id="r", thread_id="held")
    vectors = np.ones((3, 4), dtype=np.float32)
    waiting = (  # the write's backend, waiting for the lock this session holds
        "SELECT pid FROM pg_stat_activity WHERE pg_blocking_pids(pid) @> ARRAY[pg_backend_pid()]"
    )
    async with stores.engine.connect() as holder:
        driver = (await holder.get_raw_connection()).driver_connection
        await driver.execute("BEGIN")
        write: asyncio.Future[Any] | None = None
        blocked = None
        try:
            await driver.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", thread_lock_key(scope)
            )
            write = asyncio.ensure_future(
                store.put_entries(scope, [_entry(i) for i in range(3)], now=NOW, vectors=vectors)
            )
            for _ in range(3000):  # until the write's backend waits for the lock (or 30 s)
                # inside a transaction pg_stat_activity is read once and cached: a first poll made
                # before the write's backend waited would be all this loop ever saw
                await driver.execute("SELECT pg_stat_clear_snapshot()")
                pids = [row["pid"] for row in await driver.fetch(waiting)]
                if pids:
                    (blocked,) = pids
                    break
                if write.done():
                    break
                await asyncio.sleep(0.01)
            assert blocked is not None, (
                "the write never waited for the thread's lock",
                write.done() and (write.exception() or write.result()),
            )
            write.cancel()
            with pytest.raises(asyncio.CancelledError):
                await write
        finally:
            if write is not None and not write.done():
                write.cancel()
            await driver.execute("COMMIT")
    assert await store.list_by_thread(scope, after=None, limit=10) == []
    for _ in range(3):  # every pooled connection is usable and outside any transaction
        stored = await store.put_entries(
            scope, [_entry(i) for i in range(4)], now=NOW, vectors=np.ones((4, 4), np.float32)
        )
        assert [r.sequence for r in stored] == [0, 1, 2, 3]
    async with stores.engine.connect() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        stuck = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state <> 'idle'"
        for _ in range(3000):  # the cancelled write's backend: gone, or idle outside a transaction
            if not await driver.fetchval(stuck, blocked):
                break
            await asyncio.sleep(0.01)
        assert await driver.fetchval(stuck, blocked) == 0
