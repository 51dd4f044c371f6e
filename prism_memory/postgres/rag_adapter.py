"""The mixin that makes :class:`~prism_memory.postgres.PostgresVectorStore` a
:class:`~prism_memory.stores.rag_base.RagStore`: each call one unit of work over a
:class:`~prism_memory.postgres.rag_store.RagSession`, or all of them in one
:meth:`~PostgresRagOperations.transaction`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncSession

from ..lexical import CorpusStats
from ..models import Vector
from ..rag_types import (
    Authorization,
    Chunk,
    JsonScalar,
    RagHit,
    RagScope,
    SourceAccess,
)
from ..stores.rag_base import RagOperations, RagStore
from .rag_store import RagSession
from .tables import PrismTables

__all__ = ["PostgresRagOperations"]


class PostgresRagOperations(RagStore):
    """Mixin: the RAG store over an adapter's engine (``_unit``, ``_tables``, ``_dimension``).

    Every method is one unit of work (its driver errors translated by the adapter's ``_unit``);
    :meth:`transaction` runs many in one.
    """

    _tables: PrismTables
    _dimension: int | None
    _rag_width: int | None = None
    rag_exact_scan_max_rows: int | None = None
    """Override of the exact-scan thresholds for this store (``None``: :func:`exact_scan_max_rows`;
    ``0`` sends every vector query down the HNSW path)."""

    if TYPE_CHECKING:

        def _unit(
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
        return self._rag_transaction()

    @asynccontextmanager
    async def _rag_transaction(self) -> AsyncIterator[RagOperations]:
        async with self._unit("RAG transaction", custom_plans=True) as session:
            yield self._rag(session)

    async def upsert(
        self, scope: RagScope, chunks: Sequence[Chunk], *, generation: int | None = None
    ) -> int:
        """Insert or replace ``chunks``, atomically."""
        async with self._unit("upsert") as session:
            return await self._rag(session).upsert(scope, chunks, generation=generation)

    async def get_by_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> list[Chunk]:
        """The chunks of ``source_id`` by index."""
        async with self._unit("get_by_source") as session:
            return await self._rag(session).get_by_source(scope, source_id, generation=generation)

    async def delete_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> int:
        """Delete the chunks of ``source_id``; count them."""
        async with self._unit("delete_source") as session:
            return await self._rag(session).delete_source(scope, source_id, generation=generation)

    async def delete_generation(self, scope: RagScope, generation: int) -> int:
        """Delete every chunk of ``generation``; count them."""
        async with self._unit("delete_generation") as session:
            return await self._rag(session).delete_generation(scope, generation)

    async def query(
        self,
        scope: RagScope,
        *,
        embedding: Vector | Sequence[float],
        top_k: int,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> list[RagHit]:
        """The ``top_k`` nearest authorised chunks, in one transaction (one snapshot)."""
        async with self._unit("query", custom_plans=True) as session:
            return await self._rag(session).query(
                scope,
                embedding=embedding,
                top_k=top_k,
                filter=filter,
                authorization=authorization,
                generation=generation,
            )

    async def lexical_query(
        self,
        scope: RagScope,
        *,
        text: str,
        top_k: int,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> list[RagHit]:
        """The best lexical matches among authorised chunks."""
        async with self._unit("lexical_query", custom_plans=True) as session:
            return await self._rag(session).lexical_query(
                scope,
                text=text,
                top_k=top_k,
                filter=filter,
                authorization=authorization,
                generation=generation,
            )

    async def lexical_stats(
        self,
        scope: RagScope,
        *,
        text: str,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> CorpusStats:
        """BM25 statistics of the chunks such a query may see."""
        async with self._unit("lexical_stats", custom_plans=True) as session:
            return await self._rag(session).lexical_stats(
                scope,
                text=text,
                filter=filter,
                authorization=authorization,
                generation=generation,
            )

    async def get_current_generation(self, scope: RagScope) -> int:
        """The scope's current generation (0 until set)."""
        async with self._unit("get_current_generation") as session:
            return await self._rag(session).get_current_generation(scope)

    async def set_current_generation(self, scope: RagScope, generation: int) -> None:
        """Make ``generation`` current."""
        async with self._unit("set_current_generation") as session:
            await self._rag(session).set_current_generation(scope, generation)

    async def set_source_access(
        self,
        scope: RagScope,
        source_id: str,
        *,
        principal_ids: Sequence[str] = (),
        group_ids: Sequence[str] = (),
        access_version: int,
    ) -> None:
        """Replace the grants of ``source_id``, atomically."""
        async with self._unit("set_source_access") as session:
            await self._rag(session).set_source_access(
                scope,
                source_id,
                principal_ids=principal_ids,
                group_ids=group_ids,
                access_version=access_version,
            )

    async def get_source_access(self, scope: RagScope, source_id: str) -> SourceAccess | None:
        """The grants of ``source_id``, or ``None``."""
        async with self._unit("get_source_access") as session:
            return await self._rag(session).get_source_access(scope, source_id)
