"""A read whose pooled connection the server ended is retried once on a fresh connection; a
write never is (``Executor._fetch_on``; issue 47's mutation run), on the real PostgreSQL."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from prism_memory.errors import PrismMemoryError, StorageError
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres._executor import Executor

pytestmark = pytest.mark.postgres

PID = "SELECT pg_backend_pid() AS pid"


async def _terminate(postgres_url: str, pid: int) -> None:
    dsn = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await conn.close()


async def test_a_read_on_a_connection_the_server_ended_is_retried_once(postgres_url: str) -> None:
    executor = Executor(create_engine(postgres_url), owns_engine=True, sets_plans=True)
    try:
        [first] = await executor.fetch("probe", PID)
        await _terminate(postgres_url, first["pid"])
        [second] = await executor.fetch("probe", PID)  # the kept connection is dead: retried
        assert second["pid"] != first["pid"]
        await _terminate(postgres_url, second["pid"])
        with pytest.raises(StorageError):  # a write is never retried
            await executor.write("probe", PID)
        [third] = await executor.fetch("probe", PID)
        assert third["pid"] not in (first["pid"], second["pid"])
    finally:
        await executor.close()


async def test_a_read_that_loses_its_connection_twice_fails_as_a_storage_error(
    postgres_url: str,
) -> None:
    executor = Executor(create_engine(postgres_url), owns_engine=True, sets_plans=True)
    try:
        # the read ends its own server connection: on the first try and on the retry
        with pytest.raises(StorageError):
            await executor.fetch("probe", "SELECT pg_terminate_backend(pg_backend_pid())")
        assert await executor.fetchval("probe", "SELECT 1") == 1  # a fresh connection answers
    finally:
        await executor.close()


async def test_a_read_that_fails_on_a_sound_connection_is_not_retried(postgres_url: str) -> None:
    executor = Executor(create_engine(postgres_url), owns_engine=True, sets_plans=True)
    try:
        [first] = await executor.fetch("probe", PID)
        with pytest.raises(PrismMemoryError):
            await executor.fetch("probe", "SELECT 1 / CAST(:zero AS int)", {"zero": 0})
        # not retried: the connection was not dropped (nor the pool disposed), the next read has it
        [second] = await executor.fetch("probe", PID)
        assert second["pid"] == first["pid"]
    finally:
        await executor.close()


async def test_a_failed_transaction_is_rolled_back_and_its_connection_kept(
    postgres_url: str,
) -> None:
    executor = Executor(create_engine(postgres_url), owns_engine=True, sets_plans=True)
    try:
        [first] = await executor.fetch("probe", PID)
        with pytest.raises(PrismMemoryError):
            async with executor.transaction("probe") as unit:
                await unit.fetch("SELECT 1 / CAST(:zero AS int)", {"zero": 0})
        # rolled back, so not left in a transaction: kept, not dropped
        [second] = await executor.fetch("probe", PID)
        assert second["pid"] == first["pid"]
    finally:
        await executor.close()


async def test_a_read_cancelled_midway_drops_its_connection(postgres_url: str) -> None:
    executor = Executor(create_engine(postgres_url), owns_engine=True, sets_plans=True)
    try:
        [first] = await executor.fetch("probe", PID)  # the connection kept for the next read
        reading = asyncio.create_task(executor.fetch("probe", "SELECT pg_sleep(30)"))
        await _until_running(postgres_url, first["pid"])
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        # never handed on with a statement perhaps still running on it: the next read has another
        [second] = await executor.fetch("probe", PID)
        assert second["pid"] != first["pid"]
    finally:
        await executor.close()


async def _until_running(postgres_url: str, pid: int) -> None:
    """Until the server runs ``pg_sleep`` on the backend ``pid``."""
    dsn = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        query = "SELECT query FROM pg_stat_activity WHERE pid = $1 AND state = 'active'"
        for _ in range(3000):  # polls for up to a minute
            if "pg_sleep" in (await conn.fetchval(query, pid) or ""):
                return
            await asyncio.sleep(0.02)
        raise AssertionError("the read never started")
    finally:
        await conn.close()
