"""Fixtures of the MCP server tests (the helpers live in ``_support``)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import text

from prism_memory.postgres._engine import create_engine


@pytest.fixture
def database_args(request: pytest.FixtureRequest, backend: str) -> Iterator[list[str]]:
    """The ``prism-memory mcp`` options of the backend: none in memory; on PostgreSQL the test
    server's URL and a fresh schema, dropped after the test (shared by every server it starts)."""
    if backend == "memory":
        yield []
        return
    url = request.getfixturevalue("postgres_url")
    name = f"pm_mcp_{uuid.uuid4().hex[:12]}"
    yield ["--url", url, "--schema", name, "--dimension", "64"]

    async def drop() -> None:
        engine = create_engine(url, pooled=False)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        finally:
            await engine.dispose()

    # teardown of a sync fixture must not touch the test session's event loop
    worker = threading.Thread(target=asyncio.run, args=(drop(),))
    worker.start()
    worker.join()


StoreArgs = Callable[[], AbstractAsyncContextManager[Mapping[str, Any]]]


@pytest.fixture
def backend_stores(request: pytest.FixtureRequest, backend: str) -> StoreArgs:
    """``async with backend_stores() as stores``: the ``vector_store``/``working_store`` keyword
    arguments of a :class:`PrismMcpServer` on the backend (empty: in memory)."""

    @asynccontextmanager
    async def make() -> AsyncIterator[Mapping[str, Any]]:
        if backend == "memory":
            yield {}
            return
        factory = request.getfixturevalue("make_postgres_stores")
        stores = await factory(dimension=64)
        try:
            yield {"vector_store": stores.vector_store, "working_store": stores.working_store}
        finally:
            await stores.close()

    return make
