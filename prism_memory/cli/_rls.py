"""``prism-memory rls enable|disable|status``: PostgreSQL row-level security on the tenant-keyed
tables (docs/postgres.md, "Row-level security")."""

from __future__ import annotations

import asyncio

import typer

from .._defaults import DEFAULT_SCHEMA, DEFAULT_TABLE
from ._options import Schema, TableName, Url
from ._output import console

rls_app = typer.Typer(
    help="Row-level security on the tenant-keyed tables: enable, disable, status.",
    no_args_is_help=True,
)


def _run(url: str, schema: str, table: str, enable: bool | None) -> bool:
    """Apply ``enable`` (``None``: only report), print each table and the role; whether row-level
    security now protects every tenant-keyed table."""
    from ..postgres.rls import row_security_url

    status = asyncio.run(row_security_url(url, schema=schema, table=table, enable=enable))
    for line in status.describe():
        console.print(line, highlight=False)
    for problem in status.problems():
        print(f"problem: {problem}")
    return status.enabled


@rls_app.command()
def enable(
    url: Url = "", schema: Schema = DEFAULT_SCHEMA, table: TableName = DEFAULT_TABLE
) -> None:
    """Enable and force row-level security on every tenant-keyed table (as their owner)."""
    _run(url, schema, table, True)


@rls_app.command()
def disable(
    url: Url = "", schema: Schema = DEFAULT_SCHEMA, table: TableName = DEFAULT_TABLE
) -> None:
    """Disable row-level security on every tenant-keyed table (the policies stay)."""
    _run(url, schema, table, False)


@rls_app.command()
def status(
    url: Url = "", schema: Schema = DEFAULT_SCHEMA, table: TableName = DEFAULT_TABLE
) -> None:
    """Report each tenant-keyed table and the connected role; exits 1 unless every table has the
    policy enabled and forced."""
    if not _run(url, schema, table, None):
        raise typer.Exit(1)
