"""The topology fixtures are the real thing: PgBouncer pools per transaction, the replica streams.

Tests of prism_memory behind a transaction pooler or reading from a replica lean on these
fixtures (tests/topology_fixtures.py); these checks make sure a passing test there could not come
from a fixture that quietly pins sessions or a "replica" that is the primary.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from prism_memory.postgres._engine import create_engine

from ..topology_fixtures import PgBouncer, ReplicaPair

pytestmark = pytest.mark.postgres


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def test_pgbouncer_admin_console_reports_transaction_pooling(pgbouncer: PgBouncer) -> None:
    # The admin console speaks only the simple query protocol: psycopg without parameters uses it.
    with psycopg.connect(pgbouncer.admin_dsn, autocommit=True, connect_timeout=10) as admin:
        config = {row[0]: row[1] for row in admin.execute("SHOW CONFIG").fetchall()}
        assert config["pool_mode"] == "transaction"
        assert config["ignore_startup_parameters"] in {"", "extra_float_digits"}
        databases = [row[0] for row in admin.execute("SHOW DATABASES").fetchall()]
    assert make_url(pgbouncer.url).database in databases


async def test_pgbouncer_url_reaches_the_same_database(
    pgbouncer_url: str, postgres_url: str
) -> None:
    url = make_url(pgbouncer_url)
    assert (url.drivername, url.host) == ("postgresql+asyncpg", "127.0.0.1")
    direct = await asyncpg.connect(_libpq(postgres_url))
    pooled = await asyncpg.connect(_libpq(pgbouncer_url), statement_cache_size=0)
    try:
        marker = f"pm_topology_{uuid.uuid4().hex[:12]}"
        await direct.execute(f'CREATE TABLE "{marker}" (n int)')
        try:
            await pooled.execute(f'INSERT INTO "{marker}" VALUES (7)')
            assert await direct.fetchval(f'SELECT n FROM "{marker}"') == 7
        finally:
            await direct.execute(f'DROP TABLE "{marker}"')
    finally:
        await pooled.close()
        await direct.close()


async def test_pgbouncer_lends_backends_per_transaction(pgbouncer: PgBouncer) -> None:
    first = await asyncpg.connect(pgbouncer.dsn, statement_cache_size=0)
    second = await asyncpg.connect(pgbouncer.dsn, statement_cache_size=0)
    try:
        # Two clients connected at once run on one backend: a session pooler would pin each
        # client to a backend of its own for as long as it stays connected.
        shared = False
        for _ in range(5):
            pid = await first.fetchval("SELECT pg_backend_pid()")
            if await second.fetchval("SELECT pg_backend_pid()") == pid:
                shared = True
                break
        assert shared, "two connected clients never shared a backend: not transaction pooling"
        # A client inside a transaction keeps its backend; the other client gets another one.
        async with first.transaction():
            held = await first.fetchval("SELECT pg_backend_pid()")
            assert await second.fetchval("SELECT pg_backend_pid()") != held
            assert await first.fetchval("SELECT pg_backend_pid()") == held
    finally:
        await first.close()
        await second.close()


async def test_asyncpg_statement_cache_breaks_behind_transaction_pooling(
    pgbouncer: PgBouncer,
) -> None:
    """The failure mode a pooler-safe driver setup must avoid (PgBouncer 1.18 has no support for
    protocol-level prepared statements): asyncpg's named statement cache prepares on one backend
    and executes, next transaction, on another."""
    cached = await asyncpg.connect(pgbouncer.dsn)  # default statement cache
    other = await asyncpg.connect(pgbouncer.dsn, statement_cache_size=0)
    try:
        prepared_on = await cached.fetchval("SELECT pg_backend_pid()")
        async with other.transaction():
            # PgBouncer reuses the most recently released backend first: the one holding the
            # cached statement is now held by ``other``, so ``cached`` runs on another backend.
            assert await other.fetchval("SELECT pg_backend_pid()") == prepared_on
            with pytest.raises(asyncpg.InvalidSQLStatementNameError, match="pgbouncer"):
                await cached.fetchval("SELECT pg_backend_pid()")
    finally:
        await cached.close()
        await other.close()


@pytest.fixture
async def marker_table(replica_pair: ReplicaPair) -> AsyncIterator[str]:
    """A fresh table on the primary (already replayed on the replica), dropped after the test."""
    name = f"pm_topology_{uuid.uuid4().hex[:12]}"
    primary = await asyncpg.connect(replica_pair.primary_dsn)
    try:
        await primary.execute(f'CREATE TABLE "{name}" (n int)')
        await replica_pair.wait_caught_up()
        yield name
        if await replica_pair.replay_paused():
            await replica_pair.resume_replay()
        await primary.execute(f'DROP TABLE "{name}"')
    finally:
        await primary.close()


async def _replica_rows(pair: ReplicaPair, table: str) -> list[int]:
    engine = create_engine(pair.replica_url, pooled=False)  # the SQLAlchemy URL works as given
    try:
        async with engine.connect() as conn:
            result = await conn.execute(text(f'SELECT n FROM "{table}" ORDER BY n'))
            return [int(n) for n in result.scalars()]
    finally:
        await engine.dispose()


async def test_replica_is_a_streaming_hot_standby(replica_pair: ReplicaPair) -> None:
    replica = await asyncpg.connect(replica_pair.replica_dsn)
    primary = await asyncpg.connect(replica_pair.primary_dsn)
    try:
        assert await replica.fetchval("SELECT pg_is_in_recovery()") is True
        assert await primary.fetchval("SELECT pg_is_in_recovery()") is False
        assert await primary.fetchval(
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
        )
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            await replica.execute("CREATE TABLE pm_topology_never (n int)")
        assert await replica.fetchval("SELECT extname FROM pg_extension WHERE extname = 'vector'")
        served = replica_pair.primary
        assert (served.socket_dir / f".s.PGSQL.{served.port}").is_socket()
        assert (served.bin_dir / "pg_basebackup").is_file()
    finally:
        await replica.close()
        await primary.close()


async def test_replica_shows_primary_writes_unless_replay_is_paused(
    replica_pair: ReplicaPair, marker_table: str
) -> None:
    primary = await asyncpg.connect(replica_pair.primary_dsn)
    try:
        await primary.execute(f'INSERT INTO "{marker_table}" VALUES (1)')
        await replica_pair.wait_caught_up()
        assert await _replica_rows(replica_pair, marker_table) == [1]

        await replica_pair.pause_replay()
        await primary.execute(f'INSERT INTO "{marker_table}" VALUES (2)')
        await replica_pair.wait_received()  # the write is on the replica, not applied
        assert await _replica_rows(replica_pair, marker_table) == [1]
        with pytest.raises(RuntimeError, match="paused"):
            await replica_pair.wait_caught_up()

        await replica_pair.resume_replay()
        await replica_pair.wait_caught_up()
        assert await _replica_rows(replica_pair, marker_table) == [1, 2]
    finally:
        await primary.close()
