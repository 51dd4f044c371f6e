"""Whose Alembic history a prism_memory schema is in: prism_memory's own version table, or a host's.

A host that lists ``prism_memory.migrations:versions`` in its own ``version_locations`` runs the
revisions into its own version table (docs/alembic.md); prism_memory's own table,
``<table>_alembic_version``, then never exists. Upgrading such a schema through prism_memory's own
history would replay revision ``prism_memory_0001`` over the existing tables, so
:func:`check_own_history` refuses first and says to open the stores with ``skip_migrations=True``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import text

from ..errors import ConfigurationError
from .statements.catalog import SCHEMA_TABLES, VERSION_TABLES, SchemaSql, recorded_revisions
from .tables import Names

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = ["check_own_history", "describe_current", "host_revisions"]


def host_revisions(
    connection: Connection, names: Names, revision_ids: Sequence[str]
) -> list[tuple[str, str]]:
    """``(schema.table, revision)`` for each version table other than prism_memory's own that
    records one of ``revision_ids`` (a host's Alembic history that ran prism_memory's revisions)."""
    found: list[tuple[str, str]] = []
    for schema, table in connection.execute(text(VERSION_TABLES)).all():
        if (schema, table) == (names.schema, names.version_table):
            continue
        rows = connection.execute(
            text(recorded_revisions(schema, table)), {"ids": list(revision_ids)}
        )
        found.extend((f"{schema}.{table}", revision) for revision in rows.scalars())
    return found


def _own_state(connection: Connection, names: Names) -> tuple[bool, str | None]:
    """Whether the entries table exists, and the revision prism_memory's own table records."""
    tables = set(
        connection.execute(
            text(SCHEMA_TABLES),
            {"schema": names.schema, "names": [names.entries, names.version_table]},
        ).scalars()
    )
    revision: str | None = None
    if names.version_table in tables:
        recorded = list(connection.execute(text(SchemaSql(names).versions)).scalars())
        revision = recorded[0] if len(recorded) == 1 else None
    return names.entries in tables, revision


def _elsewhere(hosts: Sequence[tuple[str, str]]) -> str:
    if not hosts:
        # a host's revision that depends on prism_memory's head is all its version table records
        return (
            "no version table in this database records a prism_memory revision itself (a host's "
            "Alembic history whose revisions depend on prism_memory's records only its own head)"
        )
    listed = "; ".join(f"{table} records {revision}" for table, revision in hosts)
    return f"another Alembic history manages it ({listed})"


def check_own_history(connection: Connection, names: Names, revision_ids: Sequence[str]) -> None:
    """Raise :class:`ConfigurationError` when the entries table exists but prism_memory's own
    version table records no revision: the revisions would replay over existing tables."""
    exists, revision = _own_state(connection, names)
    hosts = host_revisions(connection, names, revision_ids) if exists and revision is None else []
    connection.rollback()  # the look ends its own transaction: Alembic begins the next
    if not exists or revision is not None:
        return
    raise ConfigurationError(
        f"{names.schema}.{names.entries} exists but prism_memory's own version table "
        f"{names.schema}.{names.version_table} records no revision: {_elsewhere(hosts)}. Nothing "
        "was changed. When a host's Alembic history manages this schema, run the upgrades there "
        "(`alembic upgrade heads`) and open the stores with skip_migrations=True"
    )


def describe_current(connection: Connection, names: Names, revision_ids: Sequence[str]) -> str:
    """What ``migrate current`` prints: the revision of prism_memory's own history, else a
    sentence saying where a revision is recorded, or that there is none."""
    exists, revision = _own_state(connection, names)
    if revision is not None:
        return revision
    hosts = host_revisions(connection, names, revision_ids)
    head = f"no prism_memory revision recorded in {names.schema}.{names.version_table}"
    if hosts:
        return f"{head}; {_elsewhere(hosts)} (open the stores with skip_migrations=True)"
    if exists:
        return (
            f"{head}; {names.schema}.{names.entries} exists without one ({_elsewhere(hosts)}; "
            "when a host's Alembic history manages it, open the stores with skip_migrations=True)"
        )
    return f"{head}; the schema is empty (`prism-memory migrate upgrade head` creates it)"
