"""The shipped conformance suite, run on every backend (one test per check and backend)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from prism_memory import HashEmbedder, InMemoryVectorStore, InMemoryWorkingStore
from prism_memory.postgres import create_postgres_memory_stores
from prism_memory.postgres._engine import create_engine
from prism_memory.stores.base import VectorGenerations
from prism_memory.testing import CONFORMANCE_CHECKS, ConformanceKit, run_conformance_check


@pytest.fixture(params=["memory", "postgres", "postgres-pooled", "postgres-pgbouncer"])
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[ConformanceKit]:
    """The stores of one backend. ``postgres`` opens a fresh schema on a ``NullPool`` engine;
    ``postgres-pooled`` reopens that schema on a pooled engine as the URL factory makes it, where
    the stores keep connections between operations (``KeptConnections``); ``postgres-pgbouncer``
    reopens it through a real PgBouncer in transaction mode (``pooling="transaction"``)."""
    embedder = HashEmbedder(dimensions=64)
    if request.param == "memory":
        yield ConformanceKit(embedder, InMemoryVectorStore(), InMemoryWorkingStore())
        return
    make_postgres_stores = request.getfixturevalue("make_postgres_stores")
    stores = await make_postgres_stores(dimension=64)
    if request.param == "postgres":
        yield ConformanceKit(embedder, stores.vector_store, stores.working_store)
        return
    if request.param == "postgres-pgbouncer":
        url, pooling = request.getfixturevalue("pgbouncer_url"), "transaction"
    else:
        url, pooling = request.getfixturevalue("postgres_url"), "session"
    engine = create_engine(url, pooling=pooling)
    pooled = await create_postgres_memory_stores(
        engine=engine, schema=stores.vector_store.tables.names.schema, dimension=64
    )
    try:
        yield ConformanceKit(embedder, pooled.vector_store, pooled.working_store)
    finally:
        if request.param == "postgres-pgbouncer":
            # A check that leaves a memory open leaves its indexing task on the session's event
            # loop, which runs again only in a later async test: through a transaction pooler,
            # a claim it began then would sit in an open transaction while sync tests run, and
            # hold back their migrations' CREATE INDEX CONCURRENTLY. Stop them with the kit.
            await _stop_indexing_tasks()
        await pooled.close()
        await engine.dispose()


async def _stop_indexing_tasks() -> None:
    tasks = [
        task
        for task in asyncio.all_tasks()
        if task.get_name().startswith("prism-indexer-") and not task.done()
    ]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("check", list(CONFORMANCE_CHECKS))
async def test_conformance(kit: ConformanceKit, check: str) -> None:
    await run_conformance_check(check, lambda: kit)


async def test_every_backend_implements_vector_generations(kit: ConformanceKit) -> None:
    """The ``generations`` checks above pass without running on a store that is not a
    ``VectorGenerations`` (the role is optional for host adapters); the shipped backends must
    implement it, so the checks really ran on each of them."""
    assert isinstance(kit.vector_store, VectorGenerations)
