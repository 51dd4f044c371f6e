"""``prism-memory migrate``: prism_memory's Alembic revisions, with explicit targets."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from .._defaults import DEFAULT_SCHEMA, DEFAULT_TABLE
from ._options import Dimension, Schema, TableName, Url
from ._output import console

migrate_app = typer.Typer(
    help="Run prism_memory's Alembic revisions (explicit targets; downgrades confirm).",
    no_args_is_help=True,
)


@migrate_app.command("upgrade")
def migrate_upgrade(
    target: Annotated[str, typer.Argument(help="`head`, or a prism_memory revision id")],
    url: Url = "",
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    dimension: Dimension = None,
) -> None:
    """Upgrade the schema to TARGET and say what changed."""
    from ..postgres import migrate

    async def run() -> tuple[str | None, str | None]:
        before = await migrate.current_revision(url, schema=schema, table=table)
        await migrate.upgrade(url, schema=schema, table=table, dimension=dimension, revision=target)
        return before, await migrate.current_revision(url, schema=schema, table=table)

    before, after = asyncio.run(run())
    if before == after:
        console.print(f"{schema}.{table} is already at {after}; nothing to do")
    else:
        console.print(f"upgraded {schema}.{table}: {before or '(empty)'} -> {after}")


@migrate_app.command("downgrade")
def migrate_downgrade(
    url: Url = "",
    target: Annotated[
        str | None,
        typer.Argument(help="a prism_memory revision id, or `base` to drop every table"),
    ] = None,
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
) -> None:
    """Downgrade the schema to TARGET (required; asks first unless --yes)."""
    from ..errors import ConfigurationError
    from ..postgres import migrate

    if target is None:
        raise ConfigurationError(
            "downgrade needs an explicit target: a revision id, or `base` to drop every "
            "prism_memory table (see `prism-memory migrate current`)"
        )
    before = asyncio.run(migrate.current_revision(url, schema=schema, table=table))
    if before is None:
        raise ConfigurationError(f"{schema}.{table} has no prism_memory revision to downgrade")
    warning = (
        "drops every prism_memory table and its data"
        if target == "base"
        else "runs the downgrade steps, which may drop columns, indexes or tables"
    )
    if not yes:
        typer.confirm(
            f"Downgrade {schema}.{table} from {before} to {target}? This {warning}.", abort=True
        )
    asyncio.run(migrate.downgrade(url, schema=schema, table=table, revision=target))
    after = asyncio.run(migrate.current_revision(url, schema=schema, table=table))
    console.print(f"downgraded {schema}.{table}: {before} -> {after or '(empty)'}")


@migrate_app.command("current")
def migrate_current(
    url: Url = "", schema: Schema = DEFAULT_SCHEMA, table: TableName = DEFAULT_TABLE
) -> None:
    """Print the revision the schema is at, or where one is recorded (a host's version table)."""
    from ..postgres import migrate

    print(asyncio.run(migrate.describe_current(url, schema=schema, table=table)))


@migrate_app.command("heads")
def migrate_heads() -> None:
    """Print the head revision of the installed prism_memory."""
    from ..postgres import migrate

    print(migrate.head_revision())


@migrate_app.command("sql")
def migrate_sql(
    schema: Schema = DEFAULT_SCHEMA,
    table: TableName = DEFAULT_TABLE,
    dimension: Dimension = None,
) -> None:
    """Print the DDL from an empty database to head (offline; connects nowhere)."""
    from ..postgres import migrate

    print(migrate.build_ddl(schema=schema, table=table, dimension=dimension))


@migrate_app.command("version-location")
def migrate_version_location() -> None:
    """Print the `version_locations` entry for a host's alembic.ini (a package resource)."""
    from ..postgres import migrate

    print(migrate.VERSION_LOCATION)


@migrate_app.command("ini-path")
def migrate_ini_path() -> None:
    """Print the path of the alembic.ini for prism_memory's own history."""
    from ..postgres import migrate

    print(migrate.ini_path())


@migrate_app.command("script-location")
def migrate_script_location() -> None:
    """Print the path of prism_memory's Alembic script directory."""
    from ..postgres import migrate

    print(migrate.migrations_dir())
