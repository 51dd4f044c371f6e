"""The factories that open the PostgreSQL stores, and :class:`PostgresMemoryStores`, the two
stores of one schema on one engine."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from ..stores.backend import MemoryBackend
from ._engine import Pooling, sets_plans
from ._executor import REPLICA_RETRY_SECONDS, REPLICA_TIMEOUT_SECONDS, ReadConsistency
from ._open import Opened, open_engine, open_replica
from .rls import open_row_security
from .store import PostgresVectorStore
from .tables import DEFAULT_SCHEMA, DEFAULT_TABLE
from .working_store import PostgresWorkingStore

__all__ = [
    "PostgresMemoryStores",
    "create_postgres_memory_stores",
    "create_postgres_vector_store",
]


@dataclass(slots=True)
class PostgresMemoryStores:
    """The two PostgreSQL stores of one schema, sharing one engine; :attr:`backend` is the same
    storage as a bundle of role objects (``create_memory(backend=stores.backend)``).

    ``close()`` disposes of the engine only when the factory created it from a URL.
    """

    vector_store: PostgresVectorStore
    working_store: PostgresWorkingStore
    engine: AsyncEngine
    owns_engine: bool

    @property
    def backend(self) -> MemoryBackend:
        """The PostgreSQL backend's role objects: entries, ledger, governance, grants, working,
        generations and RAG (the vector store's, and the working store)."""
        return self.vector_store.backend(self.working_store)

    async def close(self) -> None:
        """Dispose of the engine if the factory created it; a host's engine is left alone."""
        # the stores refuse statements from now on; their kept connections go back to the pool
        await self.vector_store.close()
        await self.working_store.close()
        if self.owns_engine:
            self.owns_engine = False
            await self.engine.dispose()

    async def __aenter__(self) -> PostgresMemoryStores:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


# ---- opening -----------------------------------------------------------------------------------


async def create_postgres_memory_stores(
    url: str | URL | None = None,
    *,
    engine: AsyncEngine | None = None,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
    dimension: int | None = None,
    skip_migrations: bool = False,
    engine_options: Mapping[str, Any] | None = None,
    pooling: Pooling | None = None,
    direct_url: str | URL | None = None,
    read_url: str | URL | None = None,
    read_engine: AsyncEngine | None = None,
    replica_wait_seconds: float = 0.25,
    read_consistency: ReadConsistency = "session",
    replica_timeout_seconds: float = REPLICA_TIMEOUT_SECONDS,
    replica_retry_seconds: float = REPLICA_RETRY_SECONDS,
    row_level_security: bool | None = None,
) -> PostgresMemoryStores:
    """Open the PostgreSQL vector and working stores of ``schema``/``table``.

    Pass ``url`` (``postgresql+asyncpg://…``; ``postgresql://`` and unix-socket ``?host=/dir`` URLs
    are normalised) or the host's own ``engine`` (then the host owns its lifetime). Unless
    ``skip_migrations``, the Alembic revisions run first (serialised by an advisory lock); either
    way the schema must then be at head, else :class:`~prism_memory.errors.ConfigurationError`.

    ``dimension`` pins ``vector(N)``. A table pinned to another width, or an unpinned table when a
    width is requested, raises :class:`~prism_memory.errors.DimensionMismatchError` before anything
    is changed. With ``dimension=None`` the table's own pin (if any) is adopted and reported by
    ``vector_store.dimension``.

    ``engine_options`` are keyword arguments for the engine made from ``url`` (SQLAlchemy's
    ``create_async_engine``: ``pool_size``, ``max_overflow``, ``pool_recycle``, ``connect_args``…);
    size the pool to the recalls you run at once — the default pool holds 5 connections, and
    connections beyond it are opened and closed under load. prism_memory's own server settings
    stay unless ``connect_args["server_settings"]`` names them.

    ``pooling="transaction"`` runs the stores behind a transaction-mode pooler such as PgBouncer
    (also ``?prism_pooling=transaction`` in ``url``, or ``PRISM_MEMORY_POOLING=transaction``):
    no start-up parameter a pooler refuses, nothing prepared for reuse, every statement inside a
    transaction. A host's ``engine`` must then be made with the driver settings
    docs/postgres.md names. The migrations cannot run through such a pooler: pass ``direct_url``
    (a URL that bypasses it; the migrations alone use it), or migrate beforehand -- a schema
    already at head opens without. See docs/postgres.md, "Behind a connection pooler".

    ``read_url`` (or a host's ``read_engine``) sends the vector store's reads -- recall, export,
    ``index_status``, counts and the RAG queries -- to a streaming replica, while every write and
    every governance change goes to the primary. A read waits up to ``replica_wait_seconds`` for
    the replica to replay the primary's WAL past this store's last write (``read_consistency=
    "strict"``: past everything the primary had committed when the read began), else it reads
    from the primary: a store's own writes, forgets and consent changes are visible to its next
    read. A replica read (its connection, its replay check, its statement) that takes longer
    than ``replica_timeout_seconds`` (3 s), or fails on the replica's side, goes to the primary,
    and reads avoid that replica for ``replica_retry_seconds`` (5 s, doubled for each failure in
    a row, up to a minute); when the primary fails too, the ``StorageError`` names the replica
    (host, port and database, never a credential). See docs/postgres.md, "Read replicas".

    ``row_level_security``: ``None`` (default) follows the database -- where revision 0014's
    tenant policies are enabled (``prism-memory rls enable``), every tenant-scoped statement sets
    its tenant transaction-locally, in its own round trip; ``True`` enables and forces them first
    where they are not (the tables' owner only); ``False`` never sets the tenant (for a role with
    ``BYPASSRLS``). See docs/postgres.md, "Row-level security".
    """
    vector_store, opened = await _open_vector_store(
        url,
        engine,
        schema,
        table,
        dimension,
        skip_migrations,
        engine_options,
        pooling=pooling,
        direct_url=direct_url,
        read_url=read_url,
        read_engine=read_engine,
        replica_wait_seconds=replica_wait_seconds,
        read_consistency=read_consistency,
        replica_timeout_seconds=replica_timeout_seconds,
        replica_retry_seconds=replica_retry_seconds,
        owns_engine=False,  # PostgresMemoryStores.close() disposes of it
        row_level_security=row_level_security,
    )
    working_store = PostgresWorkingStore(
        opened.engine,
        opened.tables,
        owns_engine=False,
        engine_sets_plans=sets_plans(opened.engine),
        pooling=opened.pooling,
    )
    working_store.executor.sets_tenant = vector_store.executor.sets_tenant
    working_store.executor.tenancy.held = vector_store.executor.tenancy.held
    return PostgresMemoryStores(
        vector_store=vector_store,
        working_store=working_store,
        engine=opened.engine,
        owns_engine=opened.owned,
    )


async def create_postgres_vector_store(
    url: str | URL | None = None,
    *,
    engine: AsyncEngine | None = None,
    schema: str = DEFAULT_SCHEMA,
    table: str = DEFAULT_TABLE,
    dimension: int | None = None,
    skip_migrations: bool = False,
    engine_options: Mapping[str, Any] | None = None,
    pooling: Pooling | None = None,
    direct_url: str | URL | None = None,
    read_url: str | URL | None = None,
    read_engine: AsyncEngine | None = None,
    replica_wait_seconds: float = 0.25,
    read_consistency: ReadConsistency = "session",
    replica_timeout_seconds: float = REPLICA_TIMEOUT_SECONDS,
    replica_retry_seconds: float = REPLICA_RETRY_SECONDS,
    row_level_security: bool | None = None,
) -> PostgresVectorStore:
    """Open the PostgreSQL vector store alone; same arguments as
    :func:`create_postgres_memory_stores`. Its ``close()`` disposes of an engine it created."""
    store, _ = await _open_vector_store(
        url,
        engine,
        schema,
        table,
        dimension,
        skip_migrations,
        engine_options,
        pooling=pooling,
        direct_url=direct_url,
        read_url=read_url,
        read_engine=read_engine,
        replica_wait_seconds=replica_wait_seconds,
        read_consistency=read_consistency,
        replica_timeout_seconds=replica_timeout_seconds,
        replica_retry_seconds=replica_retry_seconds,
        owns_engine=True,
        row_level_security=row_level_security,
    )
    return store


async def _open_vector_store(
    url: str | URL | None,
    engine: AsyncEngine | None,
    schema: str,
    table: str,
    dimension: int | None,
    skip_migrations: bool,
    engine_options: Mapping[str, Any] | None,
    *,
    pooling: Pooling | None,
    direct_url: str | URL | None,
    read_url: str | URL | None,
    read_engine: AsyncEngine | None,
    replica_wait_seconds: float,
    read_consistency: ReadConsistency,
    replica_timeout_seconds: float,
    replica_retry_seconds: float,
    owns_engine: bool,
    row_level_security: bool | None = None,
) -> tuple[PostgresVectorStore, Opened]:
    """The factories' common part: the replica's engine, the primary's (migrated and checked),
    and the vector store on both; it disposes of an engine made from a URL when ``owns_engine``."""
    replica, owns_replica = await open_replica(
        read_url,
        read_engine,
        pooling=pooling,
        wait_seconds=replica_wait_seconds,
        consistency=read_consistency,
        engine_options=engine_options,
        timeout_seconds=replica_timeout_seconds,
        retry_seconds=replica_retry_seconds,
    )
    try:
        opened = await open_engine(
            url,
            engine,
            schema,
            table,
            dimension,
            skip_migrations,
            engine_options,
            pooling=pooling,
            direct_url=direct_url,
        )
    except BaseException:
        if replica is not None and owns_replica:
            await replica.engine.dispose()
        raise
    store = PostgresVectorStore(
        opened.engine,
        opened.tables,
        dimension=opened.dimension,
        owns_engine=opened.owned and owns_engine,
        engine_sets_plans=sets_plans(opened.engine),
        pooling=opened.pooling,
        replica=replica,
        owns_replica_engine=owns_replica,
    )
    try:
        sets_tenant, held = await open_row_security(
            store.executor, opened.tables.names, row_level_security
        )
    except BaseException:
        await store.close()  # the replica engine too, when the store owns it
        if opened.owned and not owns_engine:
            await opened.engine.dispose()
        raise
    store.executor.sets_tenant, store.executor.tenancy.held = sets_tenant, held
    return store, opened
