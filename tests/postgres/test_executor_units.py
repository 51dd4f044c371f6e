"""The executor's two kinds of unit answer alike (``prism_memory.postgres._executor``; issue 47's
mutation run): rows, the first value, a column and a changed-row count, on the asyncpg driver
(:meth:`Executor.transaction`) and in a SQLAlchemy session (:meth:`Executor.unit`), on the real
PostgreSQL."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from prism_memory.errors import StorageError
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres._executor import Executor, ReadReplica, Unit

pytestmark = pytest.mark.postgres


@pytest.fixture
async def executor(postgres_url: str) -> AsyncIterator[Executor]:
    made = Executor(create_engine(postgres_url), owns_engine=True, sets_plans=True)
    try:
        yield made
    finally:
        await made.close()


def _unit(executor: Executor, kind: str) -> AbstractAsyncContextManager[Unit]:
    return executor.transaction("probe") if kind == "driver" else executor.unit("probe")


@pytest.mark.parametrize("kind", ["driver", "session"])
async def test_a_unit_reads_and_counts(executor: Executor, kind: str) -> None:
    async with _unit(executor, kind) as unit:
        assert (
            await unit.execute("CREATE TEMPORARY TABLE probe (n int, s text) ON COMMIT DROP") == 0
        )
        insert = "INSERT INTO probe SELECT g, 'n' || g FROM generate_series(1, CAST(:n AS int)) g"
        assert await unit.execute(insert, {"n": 3}) == 3
        assert await unit.execute("UPDATE probe SET s = 'x' WHERE n > 1") == 2
        assert (
            await unit.fetchval("SELECT s FROM probe WHERE n = CAST(:n AS int)", {"n": 1}) == "n1"
        )
        assert await unit.fetchval("SELECT s FROM probe WHERE n > 9") is None
        assert await unit.column("SELECT s FROM probe ORDER BY n DESC") == ["x", "x", "n1"]
        rows = await unit.fetch(
            "SELECT n, s FROM probe WHERE n < CAST(:n AS int) ORDER BY n", {"n": 3}
        )
        assert [(row["n"], row["s"]) for row in rows] == [(1, "n1"), (2, "x")]


async def test_a_driver_unit_copies_into_a_temporary_table(executor: Executor) -> None:
    async with executor.transaction("probe") as unit:
        await unit.execute("CREATE TEMPORARY TABLE copied (n int, s text) ON COMMIT DROP")
        await unit.copy("copied", [(7, "seven"), (8, "eight")], ["n", "s"])
        assert await unit.column("SELECT s FROM copied ORDER BY n") == ["seven", "eight"]


async def test_single_statements_on_the_executor(executor: Executor) -> None:
    assert await executor.fetchval("probe", "SELECT CAST(:v AS int) + 1", {"v": 41}) == 42
    assert await executor.fetchval("probe", "SELECT 1 WHERE false") is None
    assert await executor.write("probe", "SELECT g FROM generate_series(1, 4) g", count=True) == [4]


async def test_close_disposes_the_engines_it_owns_once(postgres_url: str) -> None:
    engine, replica_engine = create_engine(postgres_url), create_engine(postgres_url)
    try:
        # told it owns a replica's engine but given no replica: nothing to dispose there
        lent = Executor(engine, owns_engine=False, owns_replica_engine=True)
        await lent.fetch("probe", "SELECT 1")
        await lent.close()
        assert engine.pool.checkedin() == 1  # its kept connection is back in a pool that lives on
        borrower = Executor(engine, owns_engine=False, replica=ReadReplica(replica_engine))
        await borrower.fetch("probe", "SELECT 1", replica=True)
        await borrower.close()
        assert replica_engine.pool.checkedin() == 1  # a replica's engine is not its own either

        owner = Executor(
            engine,
            owns_engine=True,
            replica=ReadReplica(replica_engine),
            owns_replica_engine=True,
        )
        await owner.fetch("probe", "SELECT 1")
        await owner.fetch("probe", "SELECT 1", replica=True)
        assert replica_engine.pool.checkedin() == 0  # kept by the executor
        await owner.close()
        assert (engine.pool.checkedin(), replica_engine.pool.checkedin()) == (0, 0)  # disposed

        # the engines serve their next users; closing the owner again disposes nothing again
        for used in (engine, replica_engine):
            other = Executor(used, owns_engine=False)
            await other.fetch("probe", "SELECT 1")
            await other.close()  # not its engine: its kept connection goes back
        await owner.close()
        assert (engine.pool.checkedin(), replica_engine.pool.checkedin()) == (1, 1)
    finally:
        await engine.dispose()
        await replica_engine.dispose()


async def test_a_read_unit_goes_to_the_primary_when_the_replica_cannot_connect(
    postgres_url: str,
) -> None:
    nobody = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/replica")  # refused
    executor = Executor(
        create_engine(postgres_url),
        owns_engine=True,
        sets_plans=True,
        replica=ReadReplica(nobody),
        owns_replica_engine=True,
    )
    try:
        async with executor.unit("probe", read=True, writes=False) as unit:
            assert await unit.fetchval("SELECT CAST(:v AS int)", {"v": 7}) == 7
    finally:
        await executor.close()


async def test_a_replica_unit_that_succeeds_resets_the_back_off(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # the same server stands in for the replica; a unit that loses its connection there fails
    executor = Executor(
        create_engine(postgres_url),
        owns_engine=True,
        sets_plans=True,
        replica=ReadReplica(create_engine(postgres_url), retry_seconds=10.0),
        owns_replica_engine=True,
    )
    replica = executor._replica
    assert replica is not None

    async def fail() -> None:
        with pytest.raises(StorageError, match="on the read replica"):
            async with executor.unit("probe", read=True, writes=False) as unit:
                await unit.fetch("SELECT pg_terminate_backend(pg_backend_pid())")

    try:
        with caplog.at_level(logging.WARNING, logger="prism_memory.postgres"):
            await fail()
            assert "reads go to the primary for 10 s" in caplog.text
            replica.down_until = 0.0  # the back-off is over
            async with executor.unit("probe", read=True, writes=False) as unit:
                assert await unit.fetchval("SELECT 1") == 1
            caplog.clear()
            await fail()
            # the success before reset the count: 10 s again, not doubled
            assert "reads go to the primary for 10 s" in caplog.text
    finally:
        await executor.close()
