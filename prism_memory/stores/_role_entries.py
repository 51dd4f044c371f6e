"""The entries role of the store contract: :class:`EntryStore` (entries, recall's reads, the width).

What the facade writes and reads: ``remember`` and the bulk import write through it, recall,
context, export and retention read through it. Re-exported by :mod:`prism_memory.stores.base`,
the one import path an adapter uses.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime

from .._windowed import OwnVector
from ..errors import ConfigurationError
from ..models import MemoryIdentity, MemoryRecord, Vector
from ._records import (
    EntryLease,
    ImportRow,
    MetadataPatch,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SearchResult,
    StoredEntries,
)

__all__ = ["EntryStore", "every_record"]


class EntryStore(abc.ABC):
    """Semantic-memory entries and the reads recall, export and retention make of them.

    Eight abstract members: :attr:`dimension`, :meth:`put_entries`, :meth:`get_entries`,
    :meth:`dependents`, :meth:`search`, :meth:`neighbors`, :meth:`list_by_thread` and
    :meth:`list_oldest`. The defaults (:meth:`vector_width`, :meth:`known_ids`,
    :meth:`known_keys`, :meth:`import_rows`, :meth:`count_by_thread`, :meth:`count_pending`,
    :meth:`embedding_models`, :meth:`embedding_models_of`, :meth:`merge_metadata`) are built on
    them; an adapter may override each with one query. Every method is scoped: a row of another
    tenant, resource or thread is never read, written or deleted, whatever ids a caller passes.
    """

    @property
    @abc.abstractmethod
    def dimension(self) -> int | None:
        """The pinned vector width, or ``None`` when the store accepts any (consistent) width."""

    async def vector_width(self) -> int | None:
        """The width of the vectors this store holds: the pinned :attr:`dimension`, else the
        width of the first vector stored (``None`` while it holds none). A memory whose embedder
        has another width is refused before it writes. The default answers :attr:`dimension`;
        an unpinned adapter overrides it."""
        return self.dimension

    # ---- entries ---------------------------------------------------------------------------

    @abc.abstractmethod
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
        """Insert the ``entries`` whose id is new, atomically; return the stored records in input
        order, with :attr:`StoredEntries.inserted` naming the rows this call inserted.

        With ``lease``, the new rows it covers are stored leased to ``lease.worker_id`` until
        ``lease.until`` (as :meth:`IndexingLedger.claim_pending` would have leased them), so the
        writer's own indexing worker embeds them without a claim and no other worker takes them
        meanwhile.

        With ``vectors`` (one per entry, in the order of ``entries``: a sequence of vectors or a
        matrix with one row per entry), new rows are stored already
        ``indexed`` with their vector and ``model`` as their ``embedding_model``: one write per row,
        recallable at once, never leased. Every vector is checked first (finite, the store's width):
        a bad one raises and nothing is written. The vector of an id that exists is ignored.

        A new row is ``pending``, revision 1, ``created_at = written_at = now``, and any tombstones
        left on its id by an earlier (forgotten) entry are dropped. An id that exists is left
        exactly as stored (``ON CONFLICT DO NOTHING``): a retry or replay never changes consent,
        text, ``occurred_at`` or anything else a governance call decided. The first occurrence of an
        id within one call wins.

        Every lineage source an entry names must be one of ``entries`` or exist in the thread,
        checked in the same unit of work as the insert and serialised with
        :meth:`GovernanceStore.apply_governance` on the thread (:func:`check_lineage_sources`);
        otherwise :class:`~prism_memory.errors.ValidationError` and nothing is written. So an entry derived
        from a source that a concurrent governance call forgets is either found by that call's
        lineage walk or refused, never stored behind its back.
        """

    async def known_keys(
        self, keys: Sequence[tuple[MemoryIdentity, str]]
    ) -> set[tuple[MemoryIdentity, str]]:
        """Those ``(scope, id)`` of ``keys`` that exist as entries (:meth:`known_ids` across many
        scopes; the bulk import asks before embedding, so a re-import embeds nothing again).
        This default asks :meth:`known_ids` once per scope; a durable store overrides it with one
        statement."""
        by_scope: dict[MemoryIdentity, list[str]] = {}
        for scope, entry_id in keys:
            by_scope.setdefault(scope, []).append(entry_id)
        found: set[tuple[MemoryIdentity, str]] = set()
        for scope, ids in by_scope.items():
            found.update((scope, entry_id) for entry_id in await self.known_ids(scope, ids))
        return found

    async def import_rows(self, rows: Sequence[ImportRow], *, now: datetime) -> tuple[int, int]:
        """Insert the rows whose ``(scope, id)`` is new, all or nothing; return how many were, and
        how many of those were stored ``pending`` (without a vector).

        The bulk import's write (:func:`prism_memory.importing.import_entries`): rows of many
        scopes at once, each with :meth:`put_entries`' rules -- an existing id is left as stored,
        sequences are assigned per thread in input order, a row with a vector is stored
        ``indexed`` with its model, one without ``pending`` (unleased: any worker embeds it).
        ``rows`` hold each ``(scope, id)`` once, and their vectors one width.

        Lineage is checked, and the tombstones derived rows inherit from their sources are
        stored (:func:`~prism_memory.stores.rules.inherited_tombstones`), in the same unit of work
        as the insert, serialised with :meth:`GovernanceStore.apply_governance` on each thread,
        as :meth:`put_entries` does: a source forgotten meanwhile fails the batch, whole.

        This default calls :meth:`put_entries` once per scope and kind, the ones with vectors
        first, so a vector the store refuses (its width) fails the first call, before anything is
        written; a lineage source of another kind (a pending source of an indexed row) must be
        stored already. Both built-in stores override it: the in-memory one with one
        uninterrupted step, PostgreSQL with one transaction (a binary ``COPY`` into a staging
        table and one set-based ``INSERT``).
        """
        groups: dict[tuple[bool, MemoryIdentity, str | None], list[ImportRow]] = {}
        for row in rows:
            groups.setdefault((row.vector is None, row.scope, row.model), []).append(row)
        inserted = unindexed = 0
        for (pending, scope, model), group in sorted(groups.items(), key=lambda g: g[0][0]):
            ids = [row.entry.id for row in group]
            new = len(set(ids) - await self.known_ids(scope, ids))
            inserted += new
            unindexed += new if pending else 0
            vectors = None if pending else [row.vector for row in group if row.vector is not None]
            await self.put_entries(
                scope, [row.entry for row in group], now=now, vectors=vectors, model=model
            )
        return inserted, unindexed

    @abc.abstractmethod
    async def get_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``ids`` that exist in scope, in the order of ``ids``."""

    async def known_ids(self, scope: MemoryIdentity, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist in scope as entries (a forgotten id is not known).

        The default reads them with :meth:`get_entries`; adapters override it with a lighter read.
        """
        return {record.id for record in await self.get_entries(scope, ids)}

    @abc.abstractmethod
    async def dependents(
        self, scope: MemoryIdentity, source_ids: Sequence[str], *, limit: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Up to ``limit`` entries whose lineage names any of ``source_ids``: ``(id, sources)``.

        Ordered by id, so a caller can detect that a cap was exceeded by asking for one more.
        """

    # ---- reads -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def search(self, scope: MemoryIdentity, request: SearchRequest) -> SearchResult:
        """Candidate selection for recall, with the corpus statistics; see :class:`SearchRequest`."""

    @abc.abstractmethod
    async def neighbors(
        self,
        scope: MemoryIdentity,
        ranges: Sequence[tuple[int, int]],
        recall_filter: RecallFilter,
    ) -> list[MemoryRecord]:
        """Recallable records of the thread whose sequence lies in any inclusive ``(low, high)``."""

    @abc.abstractmethod
    async def list_by_thread(
        self,
        scope: MemoryIdentity,
        *,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records of the thread after ``(sequence, id)``, ordered by both.

        Every record, whatever its status or consent: callers filter.
        """

    async def count_by_thread(self, scope: MemoryIdentity) -> int:
        """How many entries the thread holds.

        The default pages through :meth:`list_by_thread`; adapters override it with one count.
        """
        return sum([1 async for _ in every_record(self, scope)])

    async def count_pending(self, scope: MemoryIdentity) -> int:
        """How many of the thread's entries are ``pending`` (not yet embedded).

        The default pages through :meth:`list_by_thread`; adapters override it with one count.
        """
        return sum([1 async for record in every_record(self, scope) if record.status == "pending"])

    async def embedding_models(self, scope: MemoryIdentity) -> set[str]:
        """The models (``embedding_model``) whose vectors the thread's rows hold; rows without a
        recorded model (written before models were recorded, or by an embedder without one)
        are left out.

        The default pages through :meth:`list_by_thread`; adapters override it with one query.
        """
        return {
            record.embedding_model
            async for record in every_record(self, scope)
            if record.embedding_model is not None
        }

    async def embedding_models_of(
        self, scopes: Sequence[MemoryIdentity]
    ) -> dict[MemoryIdentity, set[str]]:
        """:meth:`embedding_models` of many threads (the bulk import checks each thread of a
        batch once): the threads of ``scopes`` whose rows hold a recorded model, each with its
        models. This default asks :meth:`embedding_models` once per thread; a durable store
        overrides it with one statement."""
        found: dict[MemoryIdentity, set[str]] = {}
        for scope in dict.fromkeys(scopes):
            models = await self.embedding_models(scope)
            if models:
                found[scope] = models
        return found

    @abc.abstractmethod
    async def list_oldest(
        self,
        scope: MemoryIdentity,
        *,
        limit: int,
        occurred_before: datetime | None = None,
        include_held: bool = True,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records ordered by ``(occurred_at, sequence, id)`` ascending.

        ``occurred_before`` keeps only records that occurred strictly before it; ``include_held``
        false leaves out records under legal hold.
        """

    async def merge_metadata(
        self, scope: MemoryIdentity, patches: Mapping[str, MetadataPatch]
    ) -> int:
        """Set each patch's keys in the metadata of the entry its id names, in one statement,
        where that entry is still the version the patch names (``revision`` and ``written_at``)
        and is not under legal hold; return how many entries changed. Text, vector, consent,
        lineage, revision and ``written_at`` are kept: this writes bookkeeping a caller keeps
        beside an entry (the LangGraph store's TTL and per-field vectors), never the entry's
        content. This default refuses (:class:`~prism_memory.ConfigurationError`); both built-in
        stores implement it."""
        raise ConfigurationError(f"{type(self).__name__} cannot update entry metadata")


_EVERY_PAGE = 256
"""The page :func:`every_record` asks :meth:`EntryStore.list_by_thread` for."""


async def every_record(store: EntryStore, scope: MemoryIdentity) -> AsyncIterator[MemoryRecord]:
    """Every record of the thread, whatever its status or consent, page by page through
    :meth:`EntryStore.list_by_thread` in ``(sequence, id)`` order (the defaults' reader, and the
    facade's when a call names the whole thread)."""
    after: tuple[int, str] | None = None
    while True:
        page = await store.list_by_thread(scope, after=after, limit=_EVERY_PAGE)
        for record in page:
            yield record
        if len(page) < _EVERY_PAGE:
            return
        after = (page[-1].sequence, page[-1].id)
