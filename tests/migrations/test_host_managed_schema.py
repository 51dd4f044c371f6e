"""A schema whose revisions a host's own Alembic history ran (docs/alembic.md's walk-through).

prism_memory's own version table never exists there; the host's records the revision. Opening the
stores without ``skip_migrations=True`` must say so (typed, nothing changed) rather than replay
``prism_memory_0001`` into ``relation "semantic_memory" already exists``, and ``migrate current``
must say where the revision is recorded rather than print an empty line.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from prism_memory.errors import ConfigurationError
from prism_memory.postgres import create_postgres_memory_stores, migrate

pytestmark = pytest.mark.postgres


@pytest.fixture
async def host_managed(engine: AsyncEngine, schema: str) -> AsyncIterator[str]:
    """``schema`` at head, its revision recorded in ``<schema>_host.alembic_version`` (a host's
    version table) and not in prism_memory's own; yields the host table's name."""
    host = f"{schema}_host"
    await migrate.upgrade(engine, schema=schema, dimension=384)
    async with engine.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA "{host}"'))
        await conn.execute(
            text(f'ALTER TABLE "{schema}".semantic_memory_alembic_version SET SCHEMA "{host}"')
        )
        await conn.execute(
            text(f'ALTER TABLE "{host}".semantic_memory_alembic_version RENAME TO alembic_version')
        )
    yield f"{host}.alembic_version"
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{host}" CASCADE'))


async def _tables(engine: AsyncEngine, schema: str) -> set[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": schema}
        )
        return set(rows.scalars())


async def test_the_default_factory_says_to_skip_migrations_and_changes_nothing(
    postgres_url: str, engine: AsyncEngine, schema: str, host_managed: str
) -> None:
    before = await _tables(engine, schema)
    with pytest.raises(ConfigurationError) as refused:
        await create_postgres_memory_stores(postgres_url, schema=schema, dimension=384)
    message = str(refused.value)
    assert "skip_migrations=True" in message
    assert f"{host_managed} records {migrate.head_revision()}" in message
    assert "already exists" not in message
    assert await _tables(engine, schema) == before  # no version table of its own was made

    stores = await create_postgres_memory_stores(
        postgres_url, schema=schema, dimension=384, skip_migrations=True
    )
    await stores.close()


async def test_an_upgrade_of_unrecorded_tables_names_no_host_and_changes_nothing(
    engine: AsyncEngine, schema: str, host_managed: str
) -> None:
    async with engine.begin() as conn:  # the host's record gone too: tables nobody accounts for
        await conn.execute(text(f"DROP TABLE {host_managed}"))
    with pytest.raises(
        ConfigurationError,
        match="no version table in this database records a prism_memory revision itself",
    ):
        await migrate.upgrade(engine, schema=schema)
    assert "semantic_memory_alembic_version" not in await _tables(engine, schema)


async def test_migrate_current_says_where_the_revision_is_recorded(
    postgres_url: str, schema: str, host_managed: str
) -> None:
    head = migrate.head_revision()
    said = await migrate.describe_current(postgres_url, schema=schema)
    assert said.startswith(
        f"no prism_memory revision recorded in {schema}.semantic_memory_alembic_version; "
    )
    assert f"{host_managed} records {head}" in said
    env = {k: v for k, v in os.environ.items() if k != "PRISM_MEMORY_DATABASE_URL"}
    for command in (
        [sys.executable, "-m", "prism_memory", "migrate", "current"],
        [sys.executable, "-m", "prism_memory.postgres.migrate", "current"],
    ):
        done = await asyncio.to_thread(
            subprocess.run,
            [*command, "--url", postgres_url, "--schema", schema],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == said + "\n"


async def test_migrate_current_of_an_empty_schema_says_so(postgres_url: str, schema: str) -> None:
    said = await migrate.describe_current(postgres_url, schema=schema)
    assert said.endswith("the schema is empty (`prism-memory migrate upgrade head` creates it)")
    await migrate.upgrade(postgres_url, schema=schema)
    assert await migrate.describe_current(postgres_url, schema=schema) == migrate.head_revision()
