"""Alembic environment of prism_memory (async, schema- and table-name aware).

The host's names come from :func:`prism_memory.postgres.migrate.settings_from_config`
(``config.attributes["prism_memory"]``, ``-x schema=... -x table=... -x dimension=...``, or the ini
options ``prism_memory_schema`` / ``prism_memory_table`` / ``prism_memory_dimension``). The version
table is ``<table>_alembic_version`` in the host's schema, so prism_memory's history never mixes with
the host's. Autogenerate and ``alembic check`` compare only prism_memory's own tables.

Connection, in order: ``config.attributes["connection"]`` (a sync ``Connection``, as
:func:`prism_memory.postgres.migrate.upgrade` passes it), ``-x url=...``, the ``sqlalchemy.url``
option, the ``PRISM_MEMORY_DATABASE_URL`` environment variable.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from prism_memory.errors import ConfigurationError
from prism_memory.postgres._engine import create_engine
from prism_memory.postgres.migrate import repair_invalid_indexes, settings_from_config
from prism_memory.postgres.tables import build_metadata

config = context.config
settings = settings_from_config(config)
names = settings.names
target_metadata = build_metadata(settings.schema, settings.table, settings.dimension).metadata
_own_tables = set(names.tables)


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Reflect only prism_memory's schema and tables (never the host's, never a version table)."""
    if type_ == "schema":
        return name == settings.schema
    if type_ == "table":
        return name in _own_tables
    return True


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Compare only objects that belong to prism_memory's tables."""
    if type_ == "table":
        return name in _own_tables and getattr(obj, "schema", None) == settings.schema
    return True


def _configure(**kwargs: Any) -> None:
    context.configure(
        target_metadata=target_metadata,
        version_table=names.version_table,
        version_table_schema=settings.schema,
        include_schemas=True,
        include_name=include_name,
        include_object=include_object,
        compare_type=True,
        **kwargs,
    )


def _prologue() -> list[str]:
    return [
        "CREATE EXTENSION IF NOT EXISTS vector",
        f'CREATE SCHEMA IF NOT EXISTS "{settings.schema}"',
    ]


def run_migrations_offline() -> None:
    """Render the SQL instead of running it (``alembic upgrade head --sql``, ``build_memory_ddl``)."""
    _configure(
        url=config.get_main_option("sqlalchemy.url") or "postgresql+asyncpg://",
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        for statement in _prologue():
            context.execute(statement)
        context.run_migrations()


def do_run_migrations(connection: Connection) -> None:
    """Run the revisions on ``connection``, serialised by an advisory lock per schema and table."""
    lock_key = f"prism_memory/{settings.schema}/{settings.table}"
    connection.execute(text("SELECT pg_advisory_lock(hashtext(:key))"), {"key": lock_key})
    try:
        for statement in _prologue():
            connection.execute(text(statement))
        connection.commit()
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        # an index a crashed CONCURRENTLY build left INVALID is rebuilt, not skipped as existing
        repair_invalid_indexes(connection, settings.names)
    finally:
        if connection.in_transaction():
            connection.rollback()
        connection.execute(text("SELECT pg_advisory_unlock(hashtext(:key))"), {"key": lock_key})
        connection.commit()


def _url() -> str:
    x_url = context.get_x_argument(as_dictionary=True).get("url")
    url = (
        x_url
        or config.get_main_option("sqlalchemy.url")
        or os.environ.get("PRISM_MEMORY_DATABASE_URL")
    )
    if not url:
        raise ConfigurationError(
            "no database URL: pass -x url=postgresql://..., set sqlalchemy.url, "
            "or set PRISM_MEMORY_DATABASE_URL"
        )
    return url


async def run_async_migrations() -> None:
    """Connect with an adapter-style asyncpg engine and run the revisions."""
    engine = create_engine(_url(), pooled=False)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    """Run against the connection the caller passed, or connect on our own."""
    connection = config.attributes.get("connection")
    if connection is not None:
        do_run_migrations(connection)
    else:
        asyncio.run(run_async_migrations())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
