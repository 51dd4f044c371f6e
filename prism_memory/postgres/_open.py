"""Opening a PostgreSQL store: the engine, the migrations, and the schema checked at head with
the width reconciled (fail closed: a drifted request changes nothing)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import ConfigurationError, DimensionMismatchError
from ._engine import Pooling, create_engine, install_vector_codec, normalize_url, pooling_of
from ._executor import (
    REPLICA_RETRY_SECONDS,
    REPLICA_TIMEOUT_SECONDS,
    Executor,
    ReadConsistency,
    ReadReplica,
)
from ._pipelined import one_flight, require_psycopg
from .statements.catalog import EMBEDDING_TYPMOD, SCHEMA_TABLES, SchemaSql
from .tables import Names, PrismTables, build_metadata, names_for, validate_dimension

__all__ = ["Opened", "open_engine", "open_replica"]


@dataclass(frozen=True, slots=True)
class Opened:
    """What :func:`open_engine` hands the store factories."""

    engine: AsyncEngine
    owned: bool
    """Whether the engine was made here (from a URL), so the stores dispose of it."""
    tables: PrismTables
    dimension: int | None
    """The effective width: the requested one, or the table's own pin."""
    pooling: Pooling


@dataclass(frozen=True, slots=True)
class _SchemaState:
    tables: frozenset[str]
    pinned: int | None
    """``atttypmod`` of ``embedding``: the pinned width, or ``None`` when unpinned or absent."""
    version_table: bool
    version: str | None


async def _schema_state(engine: AsyncEngine, names: Names) -> _SchemaState:
    schema_sql = SchemaSql(names)
    executor = Executor(engine, owns_engine=False)
    async with executor.unit("inspect_schema", writes=False) as unit:
        wanted = {"schema": names.schema, "names": [*names.tables, names.version_table]}
        tables = frozenset(await unit.column(SCHEMA_TABLES, wanted))
        pinned: int | None = None
        if names.entries in tables:
            typmod = await unit.fetchval(EMBEDDING_TYPMOD, {"relation": schema_sql.entries})
            pinned = int(typmod) if typmod is not None and int(typmod) > 0 else None
        version: str | None = None
        has_version_table = names.version_table in tables
        if has_version_table:
            versions = await unit.column(schema_sql.versions)
            version = versions[0] if len(versions) == 1 else None
    return _SchemaState(
        tables=tables - {names.version_table},
        pinned=pinned,
        version_table=has_version_table,
        version=version,
    )


def _reconcile_dimension(requested: int | None, pinned: int | None, names: Names) -> int | None:
    """The effective pinned width, or :class:`DimensionMismatchError` (fail closed)."""
    where = f'"{names.schema}"."{names.entries}".embedding'
    if pinned is None:
        if requested is not None:
            raise DimensionMismatchError(
                f"{where} is not pinned to a dimension but dimension={requested} was requested; "
                "prism_memory does not re-type an existing column: pin it with a migration of your "
                "own (ALTER COLUMN embedding TYPE vector(N)) or pass "
                "dimension=None"
            )
        return None
    if requested is not None and requested != pinned:
        raise DimensionMismatchError(
            f"{where} is pinned to vector({pinned}) but dimension={requested} was requested"
        )
    return pinned


async def open_engine(
    url: str | URL | None,
    engine: AsyncEngine | None,
    schema: str,
    table: str,
    dimension: int | None,
    skip_migrations: bool,
    engine_options: Mapping[str, Any] | None = None,
    *,
    pooling: Pooling | None = None,
    direct_url: str | URL | None = None,
) -> Opened:
    from . import migrate

    names = names_for(schema, table)
    dimension = validate_dimension(dimension)
    if (url is None) == (engine is None):
        raise ConfigurationError("pass exactly one of url= or engine=")
    if engine is not None:
        if engine_options is not None:
            raise ConfigurationError("engine_options= configure an engine made from url=")
        if not isinstance(engine, AsyncEngine):
            raise ConfigurationError("engine must be a SQLAlchemy AsyncEngine (postgresql+asyncpg)")
        install_vector_codec(engine)
        owned = False
    else:
        assert url is not None
        try:
            engine = create_engine(url, pooling=pooling, **_engine_options(engine_options))
        except (TypeError, ValueError, ArgumentError) as exc:
            raise ConfigurationError(f"cannot make an engine with these options: {exc}") from exc
        owned = True
    try:
        mode = pooling_of(engine, pooling)
        if one_flight(engine, mode):
            require_psycopg()  # the pooled mode's reads (the "pooled" extra)
        before = await _schema_state(engine, names)
        if names.entries in before.tables:
            # Fail closed before any revision runs: a drifted request changes nothing.
            _reconcile_dimension(dimension, before.pinned, names)
        if not skip_migrations:
            if direct_url is not None:
                await migrate.upgrade(
                    normalize_url(direct_url), schema=schema, table=table, dimension=dimension
                )
            elif mode == "session":
                await migrate.upgrade(engine, schema=schema, table=table, dimension=dimension)
            elif before.version != migrate.head_revision():
                raise ConfigurationError(
                    "the prism_memory migrations cannot run through a transaction pooler (they "
                    "hold a session lock and build indexes CONCURRENTLY): pass direct_url= (a URL "
                    "that bypasses the pooler), or run `prism-memory migrate upgrade head` on "
                    "one and open the stores with skip_migrations=True"
                )
        after = await _schema_state(engine, names)
        missing = sorted(set(names.tables) - after.tables)
        if after.version_table:
            head = migrate.head_revision()
            if after.version != head:
                raise ConfigurationError(
                    f'"{schema}" is at revision {after.version!r}, not {head!r}: run the '
                    "prism_memory migrations (or drop skip_migrations=True)"
                )
        elif missing:
            raise ConfigurationError(
                f'"{schema}" lacks {", ".join(missing)}: run the prism_memory migrations '
                "(or drop skip_migrations=True)"
            )
        effective = _reconcile_dimension(dimension, after.pinned, names)
        tables = build_metadata(schema, table, effective)
    except BaseException:
        if owned:
            await engine.dispose()
        raise
    return Opened(engine, owned, tables, effective, mode)


def _engine_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise ConfigurationError("engine_options must be a mapping of keyword arguments")
    return dict(options)


async def open_replica(
    read_url: str | URL | None,
    read_engine: AsyncEngine | None,
    *,
    pooling: Pooling | None,
    wait_seconds: float,
    consistency: ReadConsistency,
    engine_options: Mapping[str, Any] | None,
    timeout_seconds: float = REPLICA_TIMEOUT_SECONDS,
    retry_seconds: float = REPLICA_RETRY_SECONDS,
) -> tuple[ReadReplica | None, bool]:
    """The read replica the factories were given (``read_url`` or ``read_engine``), and whether
    its engine was made here (so the stores dispose of it). An engine made here opens a connection
    and runs a statement within ``timeout_seconds`` (asyncpg's ``timeout`` and
    ``command_timeout``, unless ``engine_options``' ``connect_args`` name them)."""
    if read_url is not None and read_engine is not None:
        raise ConfigurationError("pass at most one of read_url= or read_engine=")
    _check_seconds(wait_seconds, "replica_wait_seconds", 0, 60)
    _check_seconds(timeout_seconds, "replica_timeout_seconds", 0.05, 600)
    _check_seconds(retry_seconds, "replica_retry_seconds", 0, 3600)
    if consistency not in ("session", "strict"):
        raise ConfigurationError("read_consistency must be 'session' or 'strict'")
    if read_url is None and read_engine is None:
        return None, False
    owned = read_engine is None
    if read_engine is None:
        assert read_url is not None
        options = _engine_options(engine_options)
        connect_args = dict(options.pop("connect_args", None) or {})
        connect_args.setdefault("timeout", float(timeout_seconds))
        connect_args.setdefault("command_timeout", float(timeout_seconds))
        try:
            read_engine = create_engine(
                read_url, pooling=pooling, connect_args=connect_args, **options
            )
        except (TypeError, ValueError, ArgumentError) as exc:
            raise ConfigurationError(f"cannot make an engine with these options: {exc}") from exc
    elif not isinstance(read_engine, AsyncEngine):
        raise ConfigurationError(
            "read_engine must be a SQLAlchemy AsyncEngine (postgresql+asyncpg)"
        )
    else:
        install_vector_codec(read_engine)
    replica = ReadReplica(
        read_engine,
        float(wait_seconds),
        consistency,
        timeout_seconds=float(timeout_seconds),
        retry_seconds=float(retry_seconds),
    )
    return replica, owned


def _check_seconds(value: Any, name: str, low: float, high: float) -> None:
    """``value`` is a number of seconds from ``low`` to ``high``, else :class:`ConfigurationError`
    (naming the setting and its range, never the value)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a number of seconds")
    if not low <= value <= high or value != value:
        raise ConfigurationError(f"{name} must be between {low:g} and {high:g}")
