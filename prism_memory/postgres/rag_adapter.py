"""The PostgreSQL RAG store as an object of its own: :class:`PostgresRagStore`, a
:class:`~prism_memory.stores.rag_base.RagStore` whose every call is one unit of the store's
:class:`~prism_memory.postgres._executor.Executor` over a
:class:`~prism_memory.postgres.rag_store.RagSession`, or all of them in one
:meth:`~PostgresRagStore.transaction`. :class:`~prism_memory.postgres.PostgresVectorStore` holds
one and hands its RAG calls to it (SPEC §6: the vector store is also the RAG store)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncSession

from ..stores.rag_base import RagOperations, RagStoreByCall
from ._executor import Executor
from .rag_store import RagSession
from .tables import PrismTables

__all__ = ["PostgresRagStore"]


class PostgresRagStore(RagStoreByCall):
    """The RAG store on ``<table>_rag_chunks`` (and its ACL and generation tables).

    Every call is one unit of work of the executor (its driver errors translated there) over a
    :class:`RagSession`; :meth:`transaction` runs many in one. Reads go to the read replica when
    there is one and it has replayed what it must.
    """

    def __init__(self, executor: Executor, tables: PrismTables, dimension: int | None) -> None:
        self._executor = executor
        self._tables = tables
        self._dimension = dimension
        self._width: int | None = None
        self.exact_scan_max_rows: int | None = None
        """Override of the exact-scan thresholds (``None``: :func:`exact_scan_max_rows`; ``0``
        sends every vector query down the HNSW path)."""

    @property
    def dimension(self) -> int | None:
        """The pinned width of the chunks' ``embedding`` column, or ``None``."""
        return self._dimension

    def _rag(self, session: AsyncSession) -> RagSession:
        return RagSession(
            session,
            self._tables,
            dimension=self._dimension,
            width=lambda: self._width if self._dimension is None else self._dimension,
            learn_width=self._learn_width,
            exact_max_rows=self.exact_scan_max_rows,
        )

    def _learn_width(self, width: int) -> None:
        if self._width is None:
            self._width = width

    def transaction(self) -> AbstractAsyncContextManager[RagOperations]:
        """One PostgreSQL transaction for every call made through the yielded object."""
        return self._operations("RAG transaction", write=True, ranked=True)

    @asynccontextmanager
    async def _operations(
        self, action: str, *, write: bool, ranked: bool = False
    ) -> AsyncIterator[RagOperations]:
        """One unit of work (a query's plans custom, as recall's are); a read goes to the read
        replica when there is one and it has replayed what it must."""
        async with self._executor.unit(action, read=not write, custom_plans=ranked) as unit:
            yield self._rag(unit.session)

    async def close(self) -> None:
        """Nothing of its own to close: the vector store that holds it closes the executor."""
