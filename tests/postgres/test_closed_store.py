"""A closed PostgreSQL store refuses every call with ``StoreClosedError`` and opens no connection
again (its engine, even disposed of, would reconnect on the next statement); a memory left open
over stores that closed stops its indexing queue instead of claiming forever."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest
from sqlalchemy import text

from prism_memory import HashEmbedder, IndexingError, StoreClosedError, create_memory
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres._engine import create_engine
from prism_memory.testing import GatedEmbedder

pytestmark = pytest.mark.postgres

SCOPE = {"tenant_id": "t-closed", "resource_id": "user-1", "thread_id": "thread-1"}
DIM = 8


@pytest.mark.parametrize("pooling", ["session", "transaction"])
async def test_closed_stores_refuse_every_call_and_open_no_connection(
    postgres_url: str, schema: str, pooling: Literal["session", "transaction"]
) -> None:
    """Also in the transaction-pooler mode, whose reads go through a reader of their own."""
    stores = await create_postgres_memory_stores(
        postgres_url, schema=schema, dimension=DIM, pooling=pooling, direct_url=postgres_url
    )
    embedder = HashEmbedder(DIM)
    try:
        memory = create_memory(
            **SCOPE,
            embedder=embedder,
            vector_store=stores.vector_store,
            working_store=stores.working_store,
        )
        await memory.remember([{"text": "before the close"}], wait=True)
        await memory.aclose()
    finally:
        await stores.close()
    reopened = create_memory(
        **SCOPE,
        embedder=embedder,
        vector_store=stores.vector_store,
        working_store=stores.working_store,
    )
    with pytest.raises(StoreClosedError):
        await reopened.recall("before")
    with pytest.raises(StoreClosedError):
        await reopened.remember([{"text": "after the close"}], wait=True)
    with pytest.raises(StoreClosedError):
        await reopened.get_working()
    await reopened.aclose()
    # the disposed engine opened nothing again: the calls were refused before any connection
    pool = stores.engine.pool
    assert (pool.checkedin(), pool.checkedout()) == (0, 0)


async def test_a_hosts_engine_outlives_stores_that_closed(postgres_url: str, schema: str) -> None:
    engine = create_engine(postgres_url)
    try:
        stores = await create_postgres_memory_stores(engine=engine, schema=schema, dimension=DIM)
        await stores.close()
        with pytest.raises(StoreClosedError):
            await stores.vector_store.embedding_models(None)
        async with engine.connect() as conn:  # the host's engine is the host's: still usable
            assert (await conn.execute(text("SELECT 1"))).scalar() == 1
    finally:
        await engine.dispose()


async def test_a_memory_left_open_stops_indexing_when_its_stores_close(
    postgres_url: str, schema: str
) -> None:
    stores = await create_postgres_memory_stores(postgres_url, schema=schema, dimension=DIM)
    embedder = GatedEmbedder(HashEmbedder(DIM))
    memory = create_memory(
        **SCOPE,
        embedder=embedder,
        vector_store=stores.vector_store,
        working_store=stores.working_store,
    )
    try:
        result = await memory.remember([{"text": "pending at the close"}])
        while embedder.calls == 0:  # noqa: ASYNC110 - the queue holds the row, waiting for its vector
            await asyncio.sleep(0.01)
        await stores.close()
        embedder.release()  # its vector can no longer be stored, nor anything claimed
        with pytest.raises(IndexingError, match="store closed"):
            await asyncio.wait_for(result.done, 30)
    finally:
        embedder.release()
        await memory.aclose()
        await stores.close()
