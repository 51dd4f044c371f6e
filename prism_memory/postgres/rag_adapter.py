"""The mixin that makes :class:`~prism_memory.postgres.PostgresVectorStore` a
:class:`~prism_memory.stores.rag_base.RagStore`: each call one unit of work over a
:class:`~prism_memory.postgres.rag_store.RagSession`, or all of them in one
:meth:`~PostgresRagOperations.transaction`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncSession

from ..stores.rag_base import RagOperations, RagStoreByCall
from .rag_store import RagSession
from .tables import PrismTables

__all__ = ["PostgresRagOperations"]


class PostgresRagOperations(RagStoreByCall):
    """Mixin: the RAG store over an adapter's engine (``_unit``, ``_tables``, ``_dimension``).

    Every call is one unit of work (its driver errors translated by the adapter's ``_unit``) over
    a :class:`RagSession`; :meth:`transaction` runs many in one.
    """

    _tables: PrismTables
    _dimension: int | None
    _rag_width: int | None = None
    rag_exact_scan_max_rows: int | None = None
    """Override of the exact-scan thresholds for this store (``None``: :func:`exact_scan_max_rows`;
    ``0`` sends every vector query down the HNSW path)."""

    if TYPE_CHECKING:

        def _unit(
            self, action: str, *, custom_plans: bool = False, writes: bool = True
        ) -> AbstractAsyncContextManager[AsyncSession]: ...

        def _read_unit(
            self, action: str, *, custom_plans: bool = False
        ) -> AbstractAsyncContextManager[AsyncSession]: ...

    def _rag(self, session: AsyncSession) -> RagSession:
        return RagSession(
            session,
            self._tables,
            dimension=self._dimension,
            width=lambda: self._rag_width if self._dimension is None else self._dimension,
            learn_width=self._learn_rag_width,
            exact_max_rows=self.rag_exact_scan_max_rows,
        )

    def _learn_rag_width(self, width: int) -> None:
        if self._rag_width is None:
            self._rag_width = width

    def transaction(self) -> AbstractAsyncContextManager[RagOperations]:
        """One PostgreSQL transaction for every call made through the yielded object."""
        return self._operations("RAG transaction", write=True, ranked=True)

    @asynccontextmanager
    async def _operations(
        self, action: str, *, write: bool, ranked: bool = False
    ) -> AsyncIterator[RagOperations]:
        """One unit of work (a query's plans custom, as recall's are); a read goes to the read
        replica when there is one and it has replayed what it must (``_read_unit``)."""
        unit = self._unit if write else self._read_unit
        async with unit(action, custom_plans=ranked) as session:
            yield self._rag(session)
