"""PostgreSQL adapters of the store contracts, and the factories that open them.

Each adapter method is one unit of work, inside
:func:`~prism_memory.postgres._errors.wrap_db_errors`, so a call applies entirely or not at all and
every driver error reaches the caller as a :class:`~prism_memory.errors.PrismMemoryError`. How a
unit executes -- the asyncpg driver for the named statements of the hot paths, a SQLAlchemy session
around repository calls for the rest -- is the rule of :mod:`prism_memory.postgres._adapter`; the
SQL text itself is in :mod:`prism_memory.postgres.statements`. :class:`PostgresVectorStore` is
assembled from mixins: the entry writes (:mod:`~prism_memory.postgres._writes`), the indexing
ledger (:mod:`~prism_memory.postgres._ledger`) and the RAG store
(:mod:`~prism_memory.postgres.rag_adapter`); its reads, governance and grants are here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from types import TracebackType
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from ..embedding import assert_finite_vector
from ..errors import NotFoundError
from ..lexical import CorpusStats
from ..models import (
    MemoryIdentity,
    MemoryRecord,
    ShareGrant,
    check_id_collection,
)
from ..stores.base import (
    GovernanceChange,
    GovernanceResult,
    RecallFilter,
    SearchRequest,
    SearchResult,
    VectorStore,
    check_limit,
    expand_walk,
)
from ._adapter import ReadConsistency, ReadReplica
from ._engine import Pooling, sets_plans
from ._errors import wrap_db_errors
from ._ledger import _IndexingLedger
from ._open import Opened, open_engine, open_replica
from ._writes import _EntryWrites
from .rag_adapter import PostgresRagOperations
from .repositories import (
    EntryRepository,
    ShareGrantRepository,
    TombstoneRepository,
)
from .rows import record_from_row, search_result
from .statements import EntrySql, neighbors_statement, search_statement
from .statements.catalog import SchemaSql
from .tables import DEFAULT_SCHEMA, DEFAULT_TABLE, PrismTables
from .working_store import PostgresWorkingStore

__all__ = [
    "PostgresMemoryStores",
    "PostgresVectorStore",
    "PostgresWorkingStore",
    "create_postgres_memory_stores",
    "create_postgres_vector_store",
]


class PostgresVectorStore(_EntryWrites, _IndexingLedger, VectorStore, PostgresRagOperations):
    """:class:`~prism_memory.stores.base.VectorStore` and
    :class:`~prism_memory.stores.rag_base.RagStore` on PostgreSQL + pgvector.

    Open it with :func:`create_postgres_vector_store` or :func:`create_postgres_memory_stores`.
    The RAG operations (``upsert``, ``query``, ``lexical_query``, ``transaction()``, ...) work on
    ``<table>_rag_chunks`` and are documented in :mod:`prism_memory.postgres.rag_store`.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        tables: PrismTables,
        *,
        dimension: int | None,
        owns_engine: bool,
        engine_sets_plans: bool = False,
        pooling: Pooling = "session",
        replica: ReadReplica | None = None,
        owns_replica_engine: bool = False,
    ) -> None:
        super().__init__(
            engine,
            tables,
            owns_engine=owns_engine,
            engine_sets_plans=engine_sets_plans,
            pooling=pooling,
            replica=replica,
            owns_replica_engine=owns_replica_engine,
        )
        self._dimension = dimension
        self._width = dimension

    def __repr__(self) -> str:
        names = self._tables.names
        return (
            f"PostgresVectorStore(schema={names.schema!r}, table={names.table!r}, "
            f"dimension={self._dimension})"
        )

    @property
    def dimension(self) -> int | None:
        """The pinned width of ``embedding`` (``vector(N)``), or ``None`` when unpinned."""
        return self._dimension

    async def vector_width(self) -> int | None:
        """The pinned width, else the width of a stored vector (``None`` while there is none)."""
        return self._width if self._width is not None else await self._read_width()

    async def close(self) -> None:
        """Dispose of the engine if this store created it (a host's engine is left alone)."""
        await self._dispose()

    @asynccontextmanager
    async def deferred_vector_index(self) -> AsyncIterator[None]:
        """For bulk loads: the table analysed (``ANALYZE``) once the body is done -- also when it
        raises -- so recalls are planned on statistics of the loaded rows from the first one on,
        not a minute or more later when autovacuum would gather them (until then the planner
        guesses: a recall that shares a parent thread's entries read the parent's whole range
        instead of its granted rows by key).

        There is no vector index to defer any more: the entries table has no HNSW index (memory
        recall is the exact per-scope path and never read it; revision ``prism_memory_0010``
        dropped the one ``prism_memory_0002`` built), so writes never pay for one.
        """
        try:
            yield
        finally:
            # on the driver, outside any transaction block
            with wrap_db_errors("analysing the loaded table"):
                async with self._driver() as driver:
                    await driver.execute(SchemaSql(self._tables.names).analyze_entries)

    async def get_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``ids`` that exist in scope, in the order of ``ids`` (each id once)."""
        check_id_collection(ids, "ids")
        async with self._unit("get_entries", writes=False) as session:
            return await EntryRepository(session, self._tables).get(scope, ids)

    async def known_ids(self, scope: MemoryIdentity, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist in scope as entries (a forgotten id is not known)."""
        check_id_collection(ids, "ids")
        async with self._unit("known_ids", writes=False) as session:
            return await EntryRepository(session, self._tables).known_ids(scope, ids)

    async def dependents(
        self, scope: MemoryIdentity, source_ids: Sequence[str], *, limit: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Up to ``limit`` entries whose lineage names any of ``source_ids``, ordered by id."""
        check_id_collection(source_ids, "source_ids")
        check_limit(limit)
        async with self._unit("dependents", writes=False) as session:
            return await EntryRepository(session, self._tables).dependents(scope, source_ids, limit)

    # ---- reads -----------------------------------------------------------------------------

    async def search(self, scope: MemoryIdentity, request: SearchRequest) -> SearchResult:
        """Exact per-thread candidate selection and statistics (see :meth:`EntrySql.search`)."""
        check_limit(request.limit)
        if self._direct_reads:
            width = self._width if self._width is not None else await self._read_width()
            query = assert_finite_vector(request.vector, "query vector", expected_length=width)
            if request.limit == 0:
                return SearchResult([], CorpusStats())
            sql = EntrySql.for_tables(self._tables)
            statement, params, terms = search_statement(sql, scope, replace(request, vector=query))
            return search_result(
                await self._fetch("search", statement, params, replica=True), terms
            )
        async with self._read_unit("search", custom_plans=True) as session:
            width = await self._known_width(session)
            query = assert_finite_vector(request.vector, "query vector", expected_length=width)
            if request.limit == 0:
                return SearchResult([], CorpusStats())
            return await EntryRepository(session, self._tables).search(
                scope, replace(request, vector=query)
            )

    async def neighbors(
        self,
        scope: MemoryIdentity,
        ranges: Sequence[tuple[int, int]],
        recall_filter: RecallFilter,
    ) -> list[MemoryRecord]:
        """Recallable records of the thread whose sequence lies in any inclusive ``(low, high)``."""
        if not ranges:
            return []
        if self._direct_reads:
            sql = EntrySql.for_tables(self._tables)
            statement, params = neighbors_statement(sql, scope, ranges, recall_filter)
            rows = await self._fetch("neighbors", statement, params, replica=True)
            return [record_from_row(row) for row in rows]
        async with self._read_unit("neighbors", custom_plans=True) as session:
            return await EntryRepository(session, self._tables).neighbors(
                scope, ranges, recall_filter
            )

    async def list_by_thread(
        self,
        scope: MemoryIdentity,
        *,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records of the thread after ``(sequence, id)``, ordered by both."""
        check_limit(limit)
        async with self._read_unit("list_by_thread") as session:
            return await EntryRepository(session, self._tables).list_by_thread(scope, after, limit)

    async def count_by_thread(self, scope: MemoryIdentity) -> int:
        """How many entries the thread holds."""
        async with self._read_unit("count_by_thread") as session:
            return await EntryRepository(session, self._tables).count(scope)

    async def count_pending(self, scope: MemoryIdentity) -> int:
        """How many of the thread's entries still wait for their vector (one indexed count)."""
        async with self._read_unit("count_pending") as session:
            return await EntryRepository(session, self._tables).count(scope, "pending")

    async def embedding_models(self, scope: MemoryIdentity | None) -> set[str]:
        """The models whose vectors the thread's rows hold (rows without one left out); with
        ``scope=None``, every thread's (the all-scopes worker checks its embedder against it)."""
        async with self._unit("embedding_models", writes=False) as session:
            return await EntryRepository(session, self._tables).embedding_models(scope)

    async def embedding_models_of(
        self, scopes: Sequence[MemoryIdentity]
    ) -> dict[MemoryIdentity, set[str]]:
        """The recorded models of many threads in one read (:attr:`EntrySql.models_of`)."""
        unique = list(dict.fromkeys(scopes))
        if not unique:
            return {}
        rows = await self._fetch(
            "embedding_models_of",
            EntrySql.for_tables(self._tables).models_of,
            {
                "tenants": [scope.tenant_id for scope in unique],
                "resources": [scope.resource_id for scope in unique],
                "threads": [scope.thread_id for scope in unique],
            },
        )
        found: dict[MemoryIdentity, set[str]] = {}
        for row in rows:
            found.setdefault(unique[int(row["ord"]) - 1], set()).add(str(row["embedding_model"]))
        return found

    async def list_oldest(
        self,
        scope: MemoryIdentity,
        *,
        limit: int,
        occurred_before: datetime | None = None,
        include_held: bool = True,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records ordered by ``(occurred_at, sequence, id)`` ascending."""
        check_limit(limit)
        async with self._unit("list_oldest", writes=False) as session:
            return await EntryRepository(session, self._tables).list_oldest(
                scope, limit, occurred_before, include_held
            )

    # ---- governance and grants ------------------------------------------------------------

    async def apply_governance(
        self, scope: MemoryIdentity, change: GovernanceChange, *, now: datetime
    ) -> GovernanceResult:
        """Apply ``change`` in one transaction, serialised with the thread's writers.

        See :meth:`VectorStore.apply_governance`; a failure (or a lost connection) at any step
        rolls every step back.
        """
        async with self._unit("apply_governance") as session:
            entries = EntryRepository(session, self._tables)
            tombstones = TombstoneRepository(session, self._tables)
            await entries.lock_thread(scope)
            # the lineage walk runs under the lock, so no writer can add a dependent meanwhile
            change, dependents = await expand_walk(
                change,
                lambda ids, limit: entries.dependents(scope, ids, limit),
                lambda ids: entries.get(scope, ids),
                now,
            )
            await tombstones.upsert(scope, change.tombstones)
            record: MemoryRecord | None = None
            width: int | None = None
            if change.consent is not None:
                entry_id, consent = change.consent
                record = await entries.set_consent(scope, entry_id, consent)
                if record is None:
                    raise NotFoundError("the entry does not exist in this scope")
            if change.text is not None:
                entry_id, new_text, vector = change.text
                width = await self._known_width(session)
                (checked,), width = self._check_vectors([(vector, "the new text's vector")], width)
                record = await entries.replace_text(
                    scope, entry_id, new_text, checked, now, change.text_model
                )
                if record is None:
                    raise NotFoundError("the entry does not exist in this scope")
            held = await entries.set_legal_hold(scope, change.hold)
            deleted = await entries.delete(scope, change.delete)
            if change.untombstone is not None:
                await tombstones.remove(scope, *change.untombstone)
        self._remember_width(width)
        return GovernanceResult.after_walk(
            record, held=held, deleted=deleted, dependents=dependents
        )

    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant of ``(tenant, resource, parent, child)``."""
        async with self._unit("put_share_grant") as session:
            return await ShareGrantRepository(session, self._tables).put(grant)

    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        """The grant, expired or not, or ``None``."""
        async with self._unit("get_share_grant", writes=False) as session:
            return await ShareGrantRepository(session, self._tables).get(
                tenant_id, resource_id, parent_thread_id, child_thread_id
            )

    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        """Delete the grant; return 1 if there was one, else 0."""
        async with self._unit("delete_share_grant") as session:
            return await ShareGrantRepository(session, self._tables).delete(
                tenant_id, resource_id, parent_thread_id, child_thread_id
            )


@dataclass(slots=True)
class PostgresMemoryStores:
    """The two PostgreSQL stores of one schema, sharing one engine.

    ``close()`` disposes of the engine only when the factory created it from a URL.
    """

    vector_store: PostgresVectorStore
    working_store: PostgresWorkingStore
    engine: AsyncEngine
    owns_engine: bool

    async def close(self) -> None:
        """Dispose of the engine if the factory created it; a host's engine is left alone."""
        # the connections the stores keep between operations go back to the pool first
        await self.vector_store._close_replica()
        await self.vector_store._kept.close()
        await self.working_store._kept.close()
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
    read. See docs/postgres.md, "Read replicas".
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
        owns_engine=False,  # PostgresMemoryStores.close() disposes of it
    )
    return PostgresMemoryStores(
        vector_store=vector_store,
        working_store=PostgresWorkingStore(
            opened.engine,
            opened.tables,
            owns_engine=False,
            engine_sets_plans=sets_plans(opened.engine),
            pooling=opened.pooling,
        ),
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
        owns_engine=True,
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
    owns_engine: bool,
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
    return store, opened
