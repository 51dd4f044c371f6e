"""The PostgreSQL vector store (its factories are :mod:`prism_memory.postgres.factories`).

:class:`PostgresVectorStore` is composed of objects, not mixins: one
:class:`~prism_memory.postgres._executor.Executor` (where every statement runs: the asyncpg driver
or a SQLAlchemy session, pooler mode, replica routing, retries, spans and error translation); the
repositories of :mod:`prism_memory.postgres.repositories`, the one API it calls for its tables;
the entry writes (:class:`~prism_memory.postgres._writes.EntryWriter`), the indexing ledger
(:class:`~prism_memory.postgres._ledger.IndexingLedger`) and the RAG store
(:class:`~prism_memory.postgres.rag_adapter.PostgresRagStore`), each of which it hands its calls
to. The SQL text itself is in :mod:`prism_memory.postgres.statements`; each call is one unit of
work, so it applies entirely or not at all and every driver error reaches the caller as a
:class:`~prism_memory.errors.PrismMemoryError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from .._windowed import OwnVector
from ..embedding import assert_finite_vector
from ..lexical import CorpusStats
from ..models import (
    IndexStatus,
    MemoryIdentity,
    MemoryRecord,
    ShareGrant,
    Vector,
    check_id_collection,
)
from ..stores.base import (
    ClaimedEntry,
    EntryKey,
    EntryLease,
    Generation,
    GenerationProgress,
    GovernanceChange,
    GovernanceResult,
    ImportRow,
    MetadataPatch,
    NewEntry,
    Promotion,
    RecallFilter,
    SearchRequest,
    SearchResult,
    StoredEntries,
    VectorGenerations,
    VectorStore,
    check_limit,
)
from ..stores.rag_base import RagOperations, RagStoreByCall
from ._engine import Pooling
from ._executor import Executor, ReadReplica
from ._generations import PostgresGenerations
from ._ledger import IndexingLedger
from ._writes import EntryWriter, VectorWidth
from .rag_adapter import PostgresRagStore
from .repositories import EntryRepository, ShareGrantRepository
from .tables import PrismTables

__all__ = ["PostgresVectorStore"]


class PostgresVectorStore(VectorStore, VectorGenerations, RagStoreByCall):
    """:class:`~prism_memory.stores.base.VectorStore`,
    :class:`~prism_memory.stores.base.VectorGenerations` and
    :class:`~prism_memory.stores.rag_base.RagStore` on PostgreSQL + pgvector.

    Open it with :func:`create_postgres_vector_store` or :func:`create_postgres_memory_stores`.
    The RAG operations (``upsert``, ``query``, ``lexical_query``, ``transaction()``, ...) work on
    ``<table>_rag_chunks``: they are :attr:`rag`'s (documented in
    :mod:`prism_memory.postgres.rag_store`).
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
        self.executor = Executor(
            engine,
            owns_engine=owns_engine,
            sets_plans=engine_sets_plans,
            pooling=pooling,
            replica=replica,
            owns_replica_engine=owns_replica_engine,
        )
        """Where every statement of this store runs."""
        self._tables = tables
        self._dimension = dimension
        self.vector_generations = PostgresGenerations(self.executor, tables, dimension)
        """The vector generations (``prism_memory_0011``); this store's calls of the role."""
        self._width = VectorWidth(dimension, self.vector_generations.width_of)
        self._entries = EntryRepository(self.executor, tables)
        self._grants = ShareGrantRepository(self.executor, tables)
        self._writer = EntryWriter(self.executor, tables, self._width)
        self._ledger = IndexingLedger(self.executor, tables, self._width)
        self.rag = PostgresRagStore(self.executor, tables, dimension)
        """The RAG store on the same tables and executor; this store's RAG calls are its."""

    def __repr__(self) -> str:
        names = self._tables.names
        return (
            f"PostgresVectorStore(schema={names.schema!r}, table={names.table!r}, "
            f"dimension={self._dimension})"
        )

    @property
    def engine(self) -> AsyncEngine:
        """The engine this store runs on."""
        return self.executor.engine

    @property
    def pooling(self) -> Pooling:
        """``"transaction"`` when this store runs behind a transaction-mode pooler."""
        return self.executor.pooling

    @property
    def tables(self) -> PrismTables:
        """The tables this store reads and writes."""
        return self._tables

    @property
    def read_replica(self) -> ReadReplica | None:
        """Where this store sends its reads, if not to the primary."""
        return self.executor.read_replica

    @property
    def dimension(self) -> int | None:
        """The pinned width of ``embedding`` (``vector(N)``), or ``None`` when unpinned."""
        return self._dimension

    @property
    def rag_exact_scan_max_rows(self) -> int | None:
        """Override of the RAG store's exact-scan thresholds (``None``:
        :func:`~prism_memory.postgres.rag_store.exact_scan_max_rows`; ``0`` sends every vector
        query down the HNSW path)."""
        return self.rag.exact_scan_max_rows

    @rag_exact_scan_max_rows.setter
    def rag_exact_scan_max_rows(self, value: int | None) -> None:
        self.rag.exact_scan_max_rows = value

    async def vector_width(self) -> int | None:
        """The pinned width, else the width of a stored vector (``None`` while there is none)."""
        return await self._width.known(self._entries)

    async def close(self) -> None:
        """Dispose of the engine if this store created it (a host's engine is left alone)."""
        await self.executor.close()

    @asynccontextmanager
    async def deferred_vector_index(self) -> AsyncIterator[None]:
        """For bulk loads: no index is deferred (the entries table has none to defer since
        revision ``prism_memory_0010``); the table is only analysed (``ANALYZE``) once the body is
        done, also when it raises, so recalls are planned on the loaded rows' statistics at once
        (not when autovacuum gathers them). The name is kept for compatibility."""
        try:
            yield
        finally:
            await self._entries.analyze()

    # ---- writes (EntryWriter) ------------------------------------------------------------------

    async def put_entries(
        self,
        scope: MemoryIdentity,
        entries: Sequence[NewEntry],
        *,
        now: datetime,
        lease: EntryLease | None = None,
        vectors: Sequence[OwnVector] | Vector | None = None,
        model: str | None = None,
    ) -> StoredEntries:
        """Insert the entries whose id is new, atomically (:meth:`EntryWriter.put_entries`)."""
        return await self._writer.put_entries(
            scope, entries, now=now, lease=lease, vectors=vectors, model=model
        )

    async def import_rows(self, rows: Sequence[ImportRow], *, now: datetime) -> tuple[int, int]:
        """A bulk import batch in one transaction (:meth:`EntryWriter.import_rows`)."""
        return await self._writer.import_rows(rows, now=now)

    async def merge_metadata(
        self, scope: MemoryIdentity, patches: Mapping[str, MetadataPatch]
    ) -> int:
        """Merge each patch into its entry's metadata in one statement (see
        :meth:`VectorStore.merge_metadata`)."""
        check_id_collection(list(patches), "patches")
        return await self._entries.merge_metadata(scope, patches)

    async def known_keys(
        self, keys: Sequence[tuple[MemoryIdentity, str]]
    ) -> set[tuple[MemoryIdentity, str]]:
        """Those ``(scope, id)`` of ``keys`` that exist, in one read."""
        return await self._entries.known_keys(keys)

    # ---- reads ---------------------------------------------------------------------------------

    async def get_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``ids`` that exist in scope, in the order of ``ids`` (each id once)."""
        check_id_collection(ids, "ids")
        return await self._entries.get(scope, ids)

    async def known_ids(self, scope: MemoryIdentity, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist in scope as entries (a forgotten id is not known)."""
        check_id_collection(ids, "ids")
        return await self._entries.known_ids(scope, ids)

    async def dependents(
        self, scope: MemoryIdentity, source_ids: Sequence[str], *, limit: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Up to ``limit`` entries whose lineage names any of ``source_ids``, ordered by id."""
        check_id_collection(source_ids, "source_ids")
        check_limit(limit)
        return await self._entries.dependents(scope, source_ids, limit)

    async def search(self, scope: MemoryIdentity, request: SearchRequest) -> SearchResult:
        """Exact per-thread candidates and statistics (:meth:`EntrySql.search`; ``model``)."""
        check_limit(request.limit)
        ranked = await self.vector_generations.vectors_of(request.model)
        if ranked is not None:
            width: int | None = ranked.width
            request = replace(request, model=ranked.model)
        else:
            width = await self._width.known(self._entries, request.model)
        query = assert_finite_vector(request.vector, "query vector", expected_length=width)
        if request.limit == 0:
            return SearchResult([], CorpusStats())
        found = await self._entries.search(
            scope, replace(request, vector=query), by_model=ranked is not None
        )
        self.vector_generations.observe(found.active_model)
        return found

    async def neighbors(
        self,
        scope: MemoryIdentity,
        ranges: Sequence[tuple[int, int]],
        recall_filter: RecallFilter,
    ) -> list[MemoryRecord]:
        """Recallable records of the thread whose sequence lies in any inclusive ``(low, high)``."""
        return await self._entries.neighbors(scope, ranges, recall_filter)

    async def list_by_thread(
        self,
        scope: MemoryIdentity,
        *,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records of the thread after ``(sequence, id)``, ordered by both."""
        check_limit(limit)
        return await self._entries.list_by_thread(scope, after, limit)

    async def count_by_thread(self, scope: MemoryIdentity) -> int:
        """How many entries the thread holds."""
        return await self._entries.count(scope)

    async def count_pending(self, scope: MemoryIdentity) -> int:
        """How many of the thread's entries still wait for their vector (one indexed count)."""
        return await self._entries.count(scope, "pending")

    async def embedding_models(self, scope: MemoryIdentity | None) -> set[str]:
        """The models whose vectors the thread's rows hold (rows without one left out); with
        ``scope=None``, every thread's (the all-scopes worker checks its embedder against it)."""
        return await self._entries.embedding_models(scope)

    async def embedding_models_of(
        self, scopes: Sequence[MemoryIdentity]
    ) -> dict[MemoryIdentity, set[str]]:
        """The recorded models of many threads in one read (:attr:`EntrySql.models_of`)."""
        return await self._entries.models_of(scopes)

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
        return await self._entries.list_oldest(scope, limit, occurred_before, include_held)

    # ---- the indexing ledger (IndexingLedger) --------------------------------------------------

    async def claim_pending(
        self,
        scope: MemoryIdentity | None,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease due pending rows (:meth:`IndexingLedger.claim_pending`)."""
        return await self._ledger.claim_pending(
            scope, limit=limit, worker_id=worker_id, lease_seconds=lease_seconds, now=now
        )

    async def claim_pending_in(
        self,
        scopes: Sequence[MemoryIdentity],
        *,
        limit: int,
        per_scope: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease due pending rows of many threads in one statement."""
        return await self._ledger.claim_pending_in(
            scopes,
            limit=limit,
            per_scope=per_scope,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
        )

    async def complete_indexing(
        self,
        items: Sequence[tuple[ClaimedEntry, OwnVector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Store vectors where the lease and revision still match; count them."""
        return await self._ledger.complete_indexing(
            items, worker_id=worker_id, now=now, model=model
        )

    async def fail_indexing(
        self,
        item: ClaimedEntry,
        *,
        worker_id: str,
        error: str,
        retry_at: datetime | None,
        now: datetime,
    ) -> None:
        """Record a failure while the lease matches."""
        await self._ledger.fail_indexing(
            item, worker_id=worker_id, error=error, retry_at=retry_at, now=now
        )

    async def release_claims(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds (expired ones included); count them."""
        return await self._ledger.release_claims(worker_id)

    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None = None) -> int:
        """Make ``failed`` entries pending again with attempts 0."""
        return await self._ledger.requeue_failed(scope, ids)

    async def index_status(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> dict[str, tuple[IndexStatus, str | None]]:
        """``id -> (status, last_error)`` for the ids that exist, at their current revision."""
        return await self._ledger.index_status(scope, ids)

    async def store_vectors(
        self,
        scope: MemoryIdentity,
        items: Sequence[tuple[str, int, OwnVector]],
        *,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Re-index: set ``(id, revision, vector)`` where the revision matches."""
        return await self._ledger.store_vectors(scope, items, now=now, model=model)

    # ---- vector generations (PostgresGenerations) ---------------------------------------------

    async def start_generation(
        self, *, primary: str, primary_width: int, model: str, width: int, now: datetime
    ) -> Generation:
        """Register ``model`` as the shadow generation beside ``primary``."""
        return await self.vector_generations.start_generation(
            primary=primary, primary_width=primary_width, model=model, width=width, now=now
        )

    async def generations(self) -> list[Generation]:
        """Every registered generation, the primary first."""
        return await self.vector_generations.generations()

    async def claim_generation(
        self,
        model: str,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
        after: EntryKey | None = None,
    ) -> list[ClaimedEntry]:
        """Lease entries without a current vector of the generation ``model``."""
        return await self.vector_generations.claim_generation(
            model,
            limit=limit,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
            after=after,
        )

    async def store_generation_vectors(
        self, model: str, items: Sequence[tuple[ClaimedEntry, Vector]], *, now: datetime
    ) -> int:
        """Store vectors of the generation ``model`` kept beside the entries (revision checked)."""
        return await self.vector_generations.store_generation_vectors(model, items, now=now)

    async def generation_progress(self, model: str, *, now: datetime) -> GenerationProgress:
        """How many indexed entries the generation ``model`` covers."""
        return await self.vector_generations.generation_progress(model, now=now)

    async def switch_generation(
        self, model: str, *, force: bool, now: datetime, max_lag_seconds: float = 0.0
    ) -> Generation:
        """Make ``model`` the generation recall answers from, in one statement."""
        return await self.vector_generations.switch_generation(
            model, force=force, now=now, max_lag_seconds=max_lag_seconds
        )

    async def promote_generation(self, model: str, *, limit: int, now: datetime) -> Promotion:
        """Move up to ``limit`` entries' vectors of the active generation ``model`` into their
        own; ``model`` becomes the primary once none is left."""
        return await self.vector_generations.promote_generation(model, limit=limit, now=now)

    async def drop_generation(self, model: str) -> int:
        """Delete the shadow generation ``model`` and its vectors."""
        return await self.vector_generations.drop_generation(model)

    # ---- governance and grants -----------------------------------------------------------------

    async def apply_governance(
        self, scope: MemoryIdentity, change: GovernanceChange, *, now: datetime
    ) -> GovernanceResult:
        """Apply ``change`` in one transaction, serialised with the thread's writers
        (:meth:`EntryWriter.apply_governance`)."""
        return await self._writer.apply_governance(scope, change, now=now)

    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant of ``(tenant, resource, parent, child)``."""
        return await self._grants.put(grant)

    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        """The grant, expired or not, or ``None``."""
        return await self._grants.get(tenant_id, resource_id, parent_thread_id, child_thread_id)

    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        """Delete the grant; return 1 if there was one, else 0."""
        return await self._grants.delete(tenant_id, resource_id, parent_thread_id, child_thread_id)

    # ---- the RAG store (PostgresRagStore) ------------------------------------------------------

    def transaction(self) -> AbstractAsyncContextManager[RagOperations]:
        """One PostgreSQL transaction for every RAG call made through the yielded object."""
        return self.rag.transaction()

    def _operations(
        self, action: str, *, write: bool, ranked: bool = False
    ) -> AbstractAsyncContextManager[RagOperations]:
        return self.rag._operations(action, write=write, ranked=ranked)
