"""Health checks and statistics of a prism_memory schema, for ``prism-memory doctor`` / ``stats``.

Read-only: every function here only runs ``SELECT``\\s against the catalog and the tables, each a
named statement of :mod:`prism_memory.postgres.statements.catalog` run in one read-only unit of
the :class:`~prism_memory.postgres._executor.Executor` (its span, its error translation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..errors import ConfigurationError
from ._engine import create_engine
from ._executor import Executor, SessionUnit
from .migrate import head_revision
from .rls import row_security_status
from .statements import TableSql
from .statements.catalog import (
    EMBEDDING_TYPE,
    INDEX_NAMES,
    INVALID_INDEXES,
    RELATION_EXISTS,
    RELATION_SIZE,
    ROLE_SERIAL_PLANS,
    VECTOR_VERSION,
    SchemaSql,
)
from .tables import DEFAULT_SCHEMA, DEFAULT_TABLE, Names, build_metadata, names_for

__all__ = [
    "HNSW_SAFE_PGVECTOR",
    "Diagnosis",
    "SchemaStats",
    "diagnose",
    "pgvector_warning",
    "schema_stats",
]

_PINNED = re.compile(r"^vector\((\d+)\)$")
_VERSION_PART = re.compile(r"\d+")

HNSW_SAFE_PGVECTOR = (0, 8, 4)
"""The first pgvector release whose HNSW index survives concurrent ``INSERT`` and ``VACUUM``
(pgvector #988 and #993: before it, such an index can be corrupted). The RAG store's
corpus-wide queries use HNSW, on the host's own server."""


def pgvector_warning(version: str) -> str | None:
    """What ``doctor`` warns of a server's pgvector ``version`` (``"0.8.2"``): ``None`` from
    :data:`HNSW_SAFE_PGVECTOR` on, else a line naming the version and the fix. A version it
    cannot read (no leading number) is warned of too: it cannot be shown safe."""
    numbers = [_VERSION_PART.match(part) for part in version.split(".")[:3]]
    if all(numbers) and tuple(int(n[0]) for n in numbers if n) >= HNSW_SAFE_PGVECTOR:
        return None
    safe = ".".join(map(str, HNSW_SAFE_PGVECTOR))
    return (
        f"pgvector {version} is older than {safe}: an HNSW index can be corrupted by concurrent "
        f"INSERT and VACUUM (pgvector #988, #993). Install pgvector {safe} or later on "
        "the server, run ALTER EXTENSION vector UPDATE in each database, then REINDEX the HNSW "
        "indexes built before (the RAG store's)"
    )


@dataclass(slots=True)
class Diagnosis:
    """What :func:`diagnose` found: ``problems`` (one line each; empty when healthy),
    ``warnings`` (risks that are no fault of the schema: an outdated pgvector) and ``facts``."""

    problems: list[str] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


async def _scalar(unit: SessionUnit, sql: str, **params: object) -> object:
    return await unit.fetchval(sql, params)


def _executor(url: str) -> Executor:
    """An executor of its own over an unpooled engine made from ``url`` (closed with it)."""
    return Executor(create_engine(url, pooled=False), owns_engine=True)


async def diagnose(
    url: str,
    *,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
    embedder_width: int | None = None,
    max_pending_age_seconds: float = 600.0,
) -> Diagnosis:
    """Check the vector extension (and warn of a pgvector before :data:`HNSW_SAFE_PGVECTOR`), the
    version table, the pinned width against ``embedder_width``, every index the revisions create,
    and the pending and failed backlog."""
    names = names_for(schema, table)
    found = Diagnosis()
    executor = _executor(url)
    try:
        async with executor.unit("diagnosing the schema", writes=False) as unit:
            await _check(unit, names, found, embedder_width, max_pending_age_seconds)
    finally:
        await executor.close()
    return found


async def _check(
    unit: SessionUnit,
    names: Names,
    found: Diagnosis,
    embedder_width: int | None,
    max_pending_age_seconds: float,
) -> None:
    schema, table = names.schema, names.entries
    sql = SchemaSql(names)
    qualified = sql.entries

    version = await _scalar(unit, VECTOR_VERSION)
    if version is None:
        found.problems.append(
            "the vector extension is not installed in this database (CREATE EXTENSION vector)"
        )
    else:
        found.facts["pgvector"] = str(version)
        outdated = pgvector_warning(str(version))
        if outdated is not None:
            found.warnings.append(outdated)

    head = head_revision()
    has_version_table = await _scalar(unit, RELATION_EXISTS, name=sql.version_table)
    table_exists = await _scalar(unit, RELATION_EXISTS, name=qualified)
    if not has_version_table:
        if table_exists:  # a host's own Alembic history ran the revisions (docs/alembic.md)
            found.facts["revision"] = "(recorded in your own Alembic version table)"
        else:
            found.problems.append(
                f"no version table {schema}.{names.version_table}: run "
                f"`prism-memory migrate upgrade head` (or your Alembic's `upgrade heads`)"
            )
    else:
        current = [str(version) for version in await unit.column(sql.versions)]
        found.facts["revision"] = ", ".join(current) or "(none)"
        if current != [head]:
            found.problems.append(
                f"schema is at {found.facts['revision']}, the installed prism_memory's head is "
                f"{head}: run `prism-memory migrate upgrade head`"
            )

    if not table_exists:
        found.problems.append(f"table {schema}.{table} does not exist")
        return

    column_type = await _scalar(unit, EMBEDDING_TYPE, name=qualified)
    pinned_match = _PINNED.match(str(column_type or ""))
    pinned = int(pinned_match.group(1)) if pinned_match else None
    found.facts["embedding"] = str(column_type)
    if embedder_width is not None:
        found.facts["embedder width"] = str(embedder_width)
        if pinned is not None and pinned != embedder_width:
            found.problems.append(
                f"width mismatch: {schema}.{table}.embedding is vector({pinned}) but the "
                f"embedder is {embedder_width} wide"
            )
        elif pinned is None:
            stored = await _scalar(unit, TableSql.for_names(names).any_width)
            if stored is not None and int(str(stored)) != embedder_width:
                found.problems.append(
                    f"width mismatch: stored vectors are {stored} wide but the embedder is "
                    f"{embedder_width} wide"
                )

    expected = {
        str(index.name)
        for tbl in build_metadata(schema, names.table, pinned).metadata.tables.values()
        for index in tbl.indexes
    }
    present = set(await unit.column(INDEX_NAMES, {"schema": schema}))
    for missing in sorted(expected - present):
        found.problems.append(f"index {schema}.{missing} is missing")
    invalid = {"schema": schema, "tables": list(names.tables)}
    for name in await unit.column(INVALID_INDEXES, invalid):
        found.problems.append(
            f"index {schema}.{name} is invalid (a failed CONCURRENTLY build); "
            "`prism-memory migrate upgrade head` rebuilds it"
        )

    await _check_row_security(unit, names, found)
    await _check_pooled_reads(unit, found)

    (backlog,) = await unit.fetch(sql.backlog)
    found.facts["pending"] = str(backlog["pending"])
    found.facts["failed"] = str(backlog["failed"])
    if backlog["failed"]:
        found.problems.append(
            f"{backlog['failed']} entries failed to embed (see last_error; requeue with "
            "VectorStore.requeue_failed once the embedder is fixed)"
        )
    if backlog["oldest"] is not None:
        age = (datetime.now(UTC) - backlog["oldest"]).total_seconds()
        if age > max_pending_age_seconds:
            found.problems.append(
                f"{backlog['pending']} entries pending, the oldest for {age:.0f}s: is a worker "
                "running (`prism-memory worker`)?"
            )


async def _check_pooled_reads(unit: SessionUnit, found: Diagnosis) -> None:
    """How a read behind a transaction pooler goes for the connected role (docs/postgres.md,
    "Behind a connection pooler"): alone when the role or the database carries
    ``max_parallel_workers_per_gather = 0``, else with its ``set_config`` in the same flight."""
    serial = await _scalar(unit, ROLE_SERIAL_PLANS)
    found.facts["pooled reads"] = (
        "one statement each (max_parallel_workers_per_gather = 0 on the role or database)"
        if serial
        else "each with set_config in the same flight (ALTER ROLE ... SET "
        "max_parallel_workers_per_gather = 0 sends them alone)"
    )


async def _check_row_security(unit: SessionUnit, names: Names, found: Diagnosis) -> None:
    """Row-level security (docs/postgres.md): off is a fact (enabling it is the deploy's
    choice); once any table has it on, a table without the policy or not enabled and forced is a
    problem, and a connection it does not hold (a superuser, ``BYPASSRLS``) is warned of."""
    status = await row_security_status(unit, names)
    exempt = " (superuser)" if status.superuser else " (BYPASSRLS)" if status.bypassrls else ""
    found.facts["role"] = status.role + exempt
    if not status.partly_enabled:
        policies = all(t.has_policy for t in status.tables) and not status.missing
        found.facts["row-level security"] = (
            "off (`prism-memory rls enable` turns it on)" if policies else "off, no policies"
        )
        return
    found.facts["row-level security"] = "on" if status.enabled else "partly on"
    for line in status.problems():
        if "connected as" in line:
            found.warnings.append(line)
        else:
            found.problems.append(line)


@dataclass(slots=True)
class SchemaStats:
    """Row counts of one prism_memory schema (:func:`schema_stats`)."""

    by_status: dict[str, int]
    tenants: list[tuple[str, int, int, int]]  # tenant, entries, pending, failed (biggest first)
    tenant_count: int
    working_documents: int
    total_bytes: int


async def schema_stats(
    url: str, *, schema: str = DEFAULT_SCHEMA, table: str = DEFAULT_TABLE, top: int = 10
) -> SchemaStats:
    """Entries per status, the ``top`` tenants by size, working documents and the on-disk size."""
    names = names_for(schema, table)
    sql = SchemaSql(names)
    executor = _executor(url)
    try:
        async with executor.unit("reading statistics", writes=False) as unit:
            exists = await _scalar(unit, RELATION_EXISTS, name=sql.entries)
            if not exists:
                raise ConfigurationError(
                    f"table {schema}.{names.entries} does not exist: run "
                    "`prism-memory migrate upgrade head`"
                )
            by_status = {
                str(row["status"]): int(row["n"]) for row in await unit.fetch(sql.status_counts)
            }
            tenants = [
                (str(r["tenant_id"]), int(r["n"]), int(r["pending"]), int(r["failed"]))
                for r in await unit.fetch(sql.top_tenants, {"top": top})
            ]
            tenant_count = int(str(await _scalar(unit, sql.tenant_count)))
            working = int(str(await _scalar(unit, sql.working_count)))
            size = 0
            for name in names.tables:
                size += int(str(await _scalar(unit, RELATION_SIZE, n=sql.qualified(name))))
    finally:
        await executor.close()
    return SchemaStats(by_status, tenants, tenant_count, working, size)
