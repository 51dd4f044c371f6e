"""The PostgreSQL vector store (its factories are :mod:`prism_memory.postgres.factories`).

:class:`PostgresVectorStore` is composed of objects, not mixins: one
:class:`~prism_memory.postgres._executor.Executor` (where every statement runs: the asyncpg driver
or a SQLAlchemy session, pooler mode, replica routing, retries, spans and error translation); the
repositories of :mod:`prism_memory.postgres.repositories`, the one API it calls for its tables;
its role objects -- the entries (:class:`~prism_memory.postgres._entries.PostgresEntries`), the
indexing ledger (:class:`~prism_memory.postgres._ledger.PostgresLedger`), governance
(:class:`~prism_memory.postgres._governance.PostgresGovernance`), share grants
(:class:`~prism_memory.postgres._grants.PostgresGrants`), the vector generations and the RAG store
(:class:`~prism_memory.postgres.rag_adapter.PostgresRagStore`) -- whose methods its own are. The SQL text itself is in :mod:`prism_memory.postgres.statements`; each call is one unit of
work, so it applies entirely or not at all and every driver error reaches the caller as a
:class:`~prism_memory.errors.PrismMemoryError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncEngine

from ..models import MemoryIdentity
from ..stores.backend import GenerationsOfRole, VectorStoreOfRoles
from ..stores.rag_base import RagOperations, RagStoreByCall
from ._engine import Pooling
from ._entries import PostgresEntries
from ._executor import Executor, ReadReplica
from ._generations import PostgresGenerations, VectorWidth
from ._governance import PostgresGovernance
from ._grants import PostgresGrants
from ._ledger import PostgresLedger
from .rag_adapter import PostgresRagStore
from .tables import PrismTables

__all__ = ["PostgresVectorStore"]


class PostgresVectorStore(VectorStoreOfRoles, GenerationsOfRole, RagStoreByCall):
    """:class:`~prism_memory.stores.base.VectorStore`,
    :class:`~prism_memory.stores.base.VectorGenerations` and
    :class:`~prism_memory.stores.rag_base.RagStore` on PostgreSQL + pgvector.

    Open it with :func:`create_postgres_vector_store` or :func:`create_postgres_memory_stores`.
    The PostgreSQL backend's role objects, on one executor, in one object for compatibility:
    :attr:`entries`, :attr:`ledger`, :attr:`governance`, :attr:`grants`,
    :attr:`vector_generations` and :attr:`rag`; every role method of this object is its role
    object's (:class:`~prism_memory.stores.backend.VectorStoreOfRoles`), and a memory made on
    it calls the role objects directly. The RAG operations (``upsert``, ``query``,
    ``lexical_query``, ``transaction()``, ...) work on ``<table>_rag_chunks``: they are
    :attr:`rag`'s (documented in :mod:`prism_memory.postgres.rag_store`).
    """

    entries: PostgresEntries
    ledger: PostgresLedger
    governance: PostgresGovernance
    grants: PostgresGrants
    vector_generations: PostgresGenerations
    _forwards = frozenset({"embedding_models"})

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
        """The vector generations (``prism_memory_0011``)."""
        width = VectorWidth(dimension, self.vector_generations)
        self.entries = PostgresEntries(self.executor, tables, width, self.vector_generations)
        """Entries: remember's writes, the bulk import and every read (recall's search)."""
        self.ledger = PostgresLedger(self.executor, tables, width)
        """The indexing ledger: claims, vectors, failures."""
        self.governance = PostgresGovernance(self.executor, tables, width)
        """Governance: one change per transaction under the thread's lock."""
        self.grants = PostgresGrants(self.executor, tables)
        """Share grants."""
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
    def rag_exact_scan_max_rows(self) -> int | None:
        """Override of the RAG store's exact-scan thresholds (``None``:
        :func:`~prism_memory.postgres.rag_store.exact_scan_max_rows`; ``0`` sends every vector
        query down the HNSW path)."""
        return self.rag.exact_scan_max_rows

    @rag_exact_scan_max_rows.setter
    def rag_exact_scan_max_rows(self, value: int | None) -> None:
        self.rag.exact_scan_max_rows = value

    async def close(self) -> None:
        """Dispose of the engine if this store created it (a host's engine is left alone)."""
        await self.executor.close()

    async def embedding_models(self, scope: MemoryIdentity | None) -> set[str]:
        """The models whose vectors the thread's rows hold; with ``scope=None``, every thread's
        (the all-scopes worker checks its embedder against it)."""
        return await self.entries.embedding_models(scope)

    @asynccontextmanager
    async def deferred_vector_index(self) -> AsyncIterator[None]:
        """For bulk loads: no index is deferred (the entries table has none to defer since
        revision ``prism_memory_0010``); the table is only analysed (``ANALYZE``) once the body is
        done, also when it raises, so recalls are planned on the loaded rows' statistics at once
        (not when autovacuum gathers them). The name is kept for compatibility."""
        try:
            yield
        finally:
            await self.entries.repository.analyze()

    # ---- the RAG store (PostgresRagStore) ------------------------------------------------------

    def transaction(self) -> AbstractAsyncContextManager[RagOperations]:
        """One PostgreSQL transaction for every RAG call made through the yielded object."""
        return self.rag.transaction()

    def _operations(
        self, action: str, *, write: bool, ranked: bool = False
    ) -> AbstractAsyncContextManager[RagOperations]:
        return self.rag._operations(action, write=write, ranked=ranked)
