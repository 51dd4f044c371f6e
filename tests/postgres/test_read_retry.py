"""A read whose pooled connection the server ended is retried once on a fresh connection; a
write never is (``Executor._fetch_on``; issue 47's mutation run), on the real PostgreSQL."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from prism_memory.errors import StorageError
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
