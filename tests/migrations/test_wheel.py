"""``alembic upgrade head`` from an installed wheel, alone and inside a host's Alembic.

Builds the wheel, installs it (no dependencies) into a fresh virtualenv that borrows this
environment's already-installed dependencies through a ``.pth`` file, and runs Alembic there from an
unrelated working directory -- so only the files the wheel ships can be used.
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from prism_memory.postgres import migrate
from prism_memory.postgres.tables import names_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


async def _tables(engine: AsyncEngine, schema: str) -> set[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": schema}
        )
        return set(rows.scalars())


async def _drop(engine: AsyncEngine, *schemas: str, tables: tuple[str, ...] = ()) -> None:
    async with engine.begin() as conn:
        for name in schemas:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        for table in tables:
            await conn.execute(text(f'DROP TABLE IF EXISTS "{table}"'))


async def test_alembic_upgrade_head_from_installed_wheel(
    run: Callable[..., str],
    wheel_python: Path,
    postgres_url: str,
    engine: AsyncEngine,
    tmp_path: Path,
) -> None:
    schema = f"pm_whl_{uuid.uuid4().hex[:10]}"
    try:
        ini = run(
            [str(wheel_python), "-m", "prism_memory.postgres.migrate", "ini-path"], cwd=tmp_path
        ).strip()
        assert ini.endswith("/prism_memory/migrations/alembic.ini")
        assert str(REPO) not in ini
        alembic = [str(wheel_python), "-m", "alembic", "-c", ini]
        xs = ["-x", f"url={postgres_url}", "-x", f"schema={schema}", "-x", "dimension=16"]
        run([*alembic, *xs, "upgrade", "head"], cwd=tmp_path)
        names = names_for(schema, "semantic_memory")
        assert await _tables(engine, schema) == {*names.tables, names.version_table}
        assert await migrate.current_revision(engine, schema=schema) == migrate.head_revision()
        run([*alembic, *xs, "check"], cwd=tmp_path)
        run([*alembic, *xs, "downgrade", "base"], cwd=tmp_path)
        assert await _tables(engine, schema) == {names.version_table}
        # the module CLI does the same without an ini path
        cli = [str(wheel_python), "-m", "prism_memory.postgres.migrate", "upgrade"]
        run([*cli, "--url", postgres_url, "--schema", schema, "--dimension", "16"], cwd=tmp_path)
        assert await migrate.current_revision(engine, schema=schema) == migrate.head_revision()
    finally:
        await _drop(engine, schema)


async def test_prism_memory_head_inside_a_hosts_alembic(
    run: Callable[..., str],
    wheel_python: Path,
    postgres_url: str,
    engine: AsyncEngine,
    tmp_path: Path,
) -> None:
    schema = f"pm_host_{uuid.uuid4().hex[:10]}"
    version_table = f"host_version_{uuid.uuid4().hex[:8]}"
    versions = run(
        [str(wheel_python), "-m", "prism_memory.postgres.migrate", "script-location"], cwd=tmp_path
    ).strip()
    host = tmp_path / "host_migrations"
    (host / "versions").mkdir(parents=True)
    (host / "env.py").write_text(
        textwrap.dedent(
            f"""
            import asyncio
            from alembic import context
            from sqlalchemy.ext.asyncio import create_async_engine

            def run(connection):
                context.configure(connection=connection, version_table={version_table!r})
                with context.begin_transaction():
                    context.run_migrations()

            async def main():
                url = context.get_x_argument(as_dictionary=True)["url"]
                engine = create_async_engine(url)
                async with engine.connect() as connection:
                    await connection.run_sync(run)
                    await connection.commit()
                await engine.dispose()

            asyncio.run(main())
            """
        )
    )
    ini = tmp_path / "host.ini"
    ini.write_text(
        textwrap.dedent(
            f"""
            [alembic]
            script_location = {host}
            version_locations = {host / "versions"} {versions}/versions
            path_separator = space
            prism_memory_schema = {schema}
            prism_memory_dimension = 8
            """
        )
    )
    try:
        run(
            [
                str(wheel_python),
                "-m",
                "alembic",
                "-c",
                str(ini),
                "-x",
                f"url={postgres_url}",
                "upgrade",
                "prism_memory@head",
            ],
            cwd=tmp_path,
        )
        names = names_for(schema, "semantic_memory")
        assert await _tables(engine, schema) == set(names.tables)
        async with engine.connect() as conn:
            found = await conn.execute(text(f'SELECT version_num FROM "{version_table}"'))
            assert list(found.scalars()) == [migrate.head_revision()]
    finally:
        await _drop(engine, schema, tables=(version_table,))
