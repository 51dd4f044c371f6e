"""The entries role of the PostgreSQL backend: :class:`PostgresEntries`, the writes of
:class:`~prism_memory.postgres._writes.EntryWriter` and the reads (recall's search among them),
each a call of :class:`~prism_memory.postgres.repositories.EntryRepository`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from ..embedding import assert_finite_vector
from ..lexical import CorpusStats
from ..models import MemoryIdentity, MemoryRecord, check_id_collection
from ..stores.base import (
    EntryStore,
    MetadataPatch,
    RecallFilter,
    SearchRequest,
    SearchResult,
    check_limit,
)
from ._executor import Executor
from ._generations import PostgresGenerations, VectorWidth
from ._writes import EntryWriter
from .repositories import EntryRepository
from .tables import PrismTables

__all__ = ["PostgresEntries"]


class PostgresEntries(EntryWriter, EntryStore):
    """The :class:`~prism_memory.stores.base.EntryStore` of the PostgreSQL backend: remember's
    ``put_entries`` and the bulk import (:class:`EntryWriter`), and every read of the entries."""

    def __init__(
        self,
        executor: Executor,
        tables: PrismTables,
        width: VectorWidth,
        generations: PostgresGenerations,
    ) -> None:
        super().__init__(executor, tables, width)
        self._generations = generations

    @property
    def dimension(self) -> int | None:
        """The pinned width of ``embedding`` (``vector(N)``), or ``None`` when unpinned."""
        return self._width.dimension

    @property
    def repository(self) -> EntryRepository:
        """The entries' repository (each call its own unit of work)."""
        return self._entries

    async def vector_width(self) -> int | None:
        """The pinned width, else the width of a stored vector (``None`` while there is none)."""
        return await self._width.known(self._entries)

    async def merge_metadata(
        self, scope: MemoryIdentity, patches: Mapping[str, MetadataPatch]
    ) -> int:
        """Merge each patch into its entry's metadata in one statement (see
        :meth:`~prism_memory.stores.base.EntryStore.merge_metadata`)."""
        check_id_collection(list(patches), "patches")
        return await self._entries.merge_metadata(scope, patches)

    async def known_keys(
        self, keys: Sequence[tuple[MemoryIdentity, str]]
    ) -> set[tuple[MemoryIdentity, str]]:
        """Those ``(scope, id)`` of ``keys`` that exist, in one read."""
        return await self._entries.known_keys(keys)

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
        width, model, by_model = await self._width.for_search(self._entries, request.model)
        query = assert_finite_vector(request.vector, "query vector", expected_length=width)
        if request.limit == 0:
            return SearchResult([], CorpusStats())
        found = await self._entries.search(
            scope, replace(request, vector=query, model=model), by_model=by_model
        )
        self._generations.observe(found.active_model)
        return found

    async def neighbors(
        self,
        scope: MemoryIdentity,
        ranges: Sequence[tuple[int, int]],
        recall_filter: RecallFilter,
    ) -> list[MemoryRecord]:
        """Recallable records of the thread whose sequence lies in any inclusive ``(low, high)``
        (no round trip for no range)."""
        if not ranges:
            return []
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
