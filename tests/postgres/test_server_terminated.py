"""A server process that dies under a call is reported as what it is, and what it left is repaired.

A backend killed mid-statement (a crash such as SIGILL in an extension, an out-of-memory kill, an
administrator's ``pg_terminate_backend``) used to surface as SQLAlchemy's "Can't reconnect until
invalid transaction is rolled back", which hides the cause; and a ``CREATE INDEX CONCURRENTLY``
killed that way leaves an INVALID index that ``IF NOT EXISTS`` then skips for ever.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from prism_memory import HashEmbedder, StorageError, create_memory
from prism_memory.cli import main
from prism_memory.postgres import migrate
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres.ops import diagnose
from prism_memory.postgres.tables import names_for

pytestmark = pytest.mark.postgres


async def _pid(conn: AsyncConnection) -> int:
    return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def _terminate_what_waits_on(engine: AsyncEngine, blocker: int, call: Awaitable[Any]) -> Any:
    """Run ``call``, terminating every backend that waits on ``blocker``, until it fails.

    A read is retried once on a fresh connection, which waits again and is terminated again."""
    task = asyncio.ensure_future(call)
    terminated = 0
    async with engine.connect() as admin:
        for _ in range(600):
            if task.done():
                break
            victims = (
                await admin.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE :blocker = ANY(pg_blocking_pids(pid))"
                    ),
                    {"blocker": blocker},
                )
            ).scalars()
            terminated += len(list(victims))
            await admin.rollback()
            await asyncio.sleep(0.05)
        else:
            task.cancel()
            pytest.fail("the call neither waited on the blocking session nor ended")
    assert terminated >= 1
    with pytest.raises(StorageError) as caught:
        await task
    return caught.value


def _says_the_server_process_terminated(error: BaseException) -> None:
    message = str(error)
    assert "server process terminated" in message, message
    # 57P01 (admin_shutdown) when the server's notice arrives first, else the driver's 08003
    assert re.search(r"\(SQLSTATE (57P01|08003)\)", message), message
    assert "invalid transaction" not in message


async def test_a_terminated_migration_says_so(engine: AsyncEngine, schema: str) -> None:
    await migrate.upgrade(engine, schema=schema)
    key = f"prism_memory/{schema}/semantic_memory"  # the migration lock of migrations/env.py
    async with engine.connect() as holder:
        await holder.execute(text("SELECT pg_advisory_lock(hashtext(:key))"), {"key": key})
        error = await _terminate_what_waits_on(
            engine, await _pid(holder), migrate.upgrade(engine, schema=schema)
        )
        await holder.execute(text("SELECT pg_advisory_unlock(hashtext(:key))"), {"key": key})
    _says_the_server_process_terminated(error)


async def test_a_terminated_write_says_so(make_postgres_stores: Any, engine: AsyncEngine) -> None:
    stores = await make_postgres_stores(dimension=16)
    table = f'"{stores.vector_store.tables.names.schema}"."semantic_memory"'
    memory = create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=HashEmbedder(dimensions=16),
        vector_store=stores.vector_store,
        working_store=stores.working_store,
    )
    try:
        async with engine.connect() as holder:
            await holder.execute(text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
            error = await _terminate_what_waits_on(
                engine, await _pid(holder), memory.remember([{"text": "a fact"}], wait=True)
            )
            await holder.rollback()
        _says_the_server_process_terminated(error)
        # nothing half-done: the store still works and holds nothing from the failed call
        assert (await memory.recall("fact")).hits == ()
        await memory.remember([{"text": "a fact"}], wait=True)
        assert [hit.text for hit in (await memory.recall("fact")).hits] == ["a fact"]
    finally:
        await memory.aclose()
        await stores.close()


async def _validity(engine: AsyncEngine, schema: str, index: str) -> bool | None:
    async with engine.connect() as conn:
        found = (
            await conn.execute(
                text(
                    "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = :schema AND c.relname = :index"
                ),
                {"schema": schema, "index": index},
            )
        ).scalar_one_or_none()
    return None if found is None else bool(found)


async def test_an_index_left_invalid_is_named_by_doctor_and_rebuilt_by_upgrade(
    engine: AsyncEngine, schema: str, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await migrate.upgrade(engine, schema=schema)
    names = names_for(schema, "semantic_memory")
    index, qualified = names.ix_tsv, f'"{schema}"."{names.ix_tsv}"'
    async with engine.connect() as conn:
        definition = (
            await conn.execute(text("SELECT pg_get_indexdef(:ix ::regclass)"), {"ix": qualified})
        ).scalar_one()
        await conn.execute(text(f"DROP INDEX {qualified}"))
        await conn.commit()
    rebuild = str(definition).replace("CREATE INDEX", "CREATE INDEX CONCURRENTLY", 1)

    async def concurrent_build() -> None:
        build = create_engine(postgres_url, pooled=False)
        try:
            async with build.connect() as conn:
                auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                from prism_memory.postgres._errors import wrap_db_errors

                with wrap_db_errors("building the index"):
                    await auto.execute(text(rebuild))
        finally:
            await build.dispose()

    # A concurrent build waits for every older snapshot; killed while it waits, it leaves the
    # index in the catalog, INVALID -- as a build killed by a crash does.
    async with engine.connect() as holder:
        await holder.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        await holder.execute(text("SELECT 1"))
        error = await _terminate_what_waits_on(engine, await _pid(holder), concurrent_build())
        await holder.rollback()
    _says_the_server_process_terminated(error)
    assert await _validity(engine, schema, index) is False

    problems = (await diagnose(postgres_url, schema=schema)).problems
    assert [p for p in problems if index in p] == [
        f"index {schema}.{index} is invalid (a failed CONCURRENTLY build); "
        "`prism-memory migrate upgrade head` rebuilds it"
    ]

    upgrade = ["migrate", "upgrade", "head", "--url", postgres_url, "--schema", schema]
    assert await asyncio.to_thread(main, upgrade) == 0  # the operator's command, as the doc says
    capsys.readouterr()
    assert await _validity(engine, schema, index) is True
    assert not [p for p in (await diagnose(postgres_url, schema=schema)).problems if index in p]
