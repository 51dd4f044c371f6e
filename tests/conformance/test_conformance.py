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
from prism_memory.testing._support import _Case


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


def _indexing_tasks() -> set[asyncio.Task[object]]:
    return {
        task
        for task in asyncio.all_tasks()
        if task.get_name().startswith("prism-indexer-") and not task.done()
    }


async def test_scopes_check_closes_every_memory_it_opens(kit: ConformanceKit) -> None:
    """``scopes_are_isolated`` closed its owner but not the three other scopes' memories: their
    indexing task outlived the check and kept claiming on the host's stores (on the full suite,
    after the stores' role was dropped, tracing its failed claims into another test)."""
    before = _indexing_tasks()
    await run_conformance_check("scopes_are_isolated", lambda: kit)
    assert _indexing_tasks() - before == set()


async def test_the_runner_closes_what_a_check_left_open(
    kit: ConformanceKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check (a host's own, or one that failed midway) that leaves a memory open does not leave
    its indexing task running after ``run_conformance_check``."""

    async def leaves_a_memory_open(kit: ConformanceKit) -> None:
        memory = _Case(kit).memory()
        await memory.remember([{"id": "x", "text": "left open"}])
        raise AssertionError("failed midway")

    monkeypatch.setitem(CONFORMANCE_CHECKS, "leaves_a_memory_open", leaves_a_memory_open)
    before = _indexing_tasks()
    with pytest.raises(AssertionError, match="failed midway"):
        await run_conformance_check("leaves_a_memory_open", lambda: kit)
    assert _indexing_tasks() - before == set()


async def test_every_backend_implements_vector_generations(kit: ConformanceKit) -> None:
    """The ``generations`` checks above pass without running on a store that is not a
    ``VectorGenerations`` (the role is optional for host adapters); the shipped backends must
    implement it, so the checks really ran on each of them."""
    assert isinstance(kit.vector_store, VectorGenerations)
