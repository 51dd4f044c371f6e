"""Which engines keep connections between operations, and how many (``KeptConnections`` in
``prism_memory.postgres._engine``; issue 47's mutation run), on the real PostgreSQL: a kept
connection is checked out of the pool, a returned one is checked in."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from prism_memory.postgres._engine import create_engine
from prism_memory.postgres._executor import Executor

pytestmark = pytest.mark.postgres


async def _checked_in_after_reads(engine: AsyncEngine, reads: int) -> int:
    """How many connections are back in the pool after ``reads`` overlapping reads."""
    executor = Executor(engine, owns_engine=False)
    try:
        await asyncio.gather(
            *(executor.fetch("probe", "SELECT pg_sleep(0.2)") for _ in range(reads))
        )
        return engine.pool.checkedin()
    finally:
        await executor.close()
        await engine.dispose()


async def test_an_engine_of_ours_keeps_two(postgres_url: str) -> None:
    assert (
        await _checked_in_after_reads(create_engine(postgres_url), 3) == 1
    )  # KEPT_CONNECTIONS: 2 kept


async def test_a_hosts_engine_keeps_none(postgres_url: str) -> None:
    assert await _checked_in_after_reads(create_async_engine(postgres_url), 1) == 1


async def test_an_engine_that_pings_on_every_checkout_keeps_none(postgres_url: str) -> None:
    engine = create_engine(postgres_url, pool_pre_ping=True)  # its pool pings: nothing kept
    assert await _checked_in_after_reads(engine, 1) == 1
