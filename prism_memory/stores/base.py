"""The storage contracts every backend implements.

The :class:`~prism_memory.Memory` facade talks to storage only through :class:`VectorStore` and
:class:`WorkingStore`. A backend subclasses them explicitly so mypy proves it conforms, and runs
:func:`prism_memory.testing.run_memory_conformance` to prove it behaves.

Division of labour
------------------
* Stores **select and persist**. They never rank: :meth:`VectorStore.search` returns candidates with
  their stored vectors, plus the corpus statistics of the recall scope, and
  :mod:`prism_memory.ranking` orders them, identically for every backend.
* Stores tokenize only with :func:`prism_memory.lexical.tokenize`, so a term, a document length and a
  document frequency mean the same on every backend.
* Stores **enforce the exclusion rules** of :class:`RecallFilter` inside the query (so SQL backends
  never ship excluded rows), using the rule :func:`prism_memory.stores.rules.is_recallable` states
  in Python.
* Every method is scoped: a row of another tenant, resource or thread is never read, written or
  deleted, whatever ids a caller passes.
* Times are timezone-aware and are passed in by the facade (``now``) so every backend agrees.
* Every write method is atomic: it applies entirely or not at all. A governance call's whole effect
  goes through one :meth:`VectorStore.apply_governance`, so its tombstones and its data change
  commit together (see the invariants in :mod:`prism_memory.stores.rules`).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..errors import ConfigurationError
from ..models import (
    IndexStatus,
    MemoryIdentity,
    MemoryRecord,
    ShareGrant,
    Vector,
    WorkingMemoryRecord,
)
from ._checks import (
    check_claim,
    check_entry_vectors,
    check_lease,
    check_limit,
    check_lineage_sources,
    lineage_source_ids,
)
from ._governance import (
    ConsentUpdate,
    DependentsOf,
    GovernanceChange,
    GovernanceResult,
    LineageWalk,
    expand_walk,
    walk_lineage,
)
from ._records import (
    ClaimedEntry,
    EntryLease,
    ImportRow,
    MetadataPatch,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SearchResult,
    SharedSource,
    StoredEntries,
    Tombstone,
)

__all__ = [
    "ClaimedEntry",
    "ConsentUpdate",
    "DependentsOf",
    "EntryLease",
    "GovernanceChange",
    "GovernanceResult",
    "ImportRow",
    "LineageWalk",
    "MetadataPatch",
    "NewEntry",
    "RecallFilter",
    "SearchRequest",
    "SearchResult",
    "SharedSource",
    "StoredEntries",
    "Tombstone",
    "VectorStore",
    "WorkingStore",
    "check_claim",
    "check_entry_vectors",
    "check_lease",
    "check_limit",
    "check_lineage_sources",
    "every_record",
    "expand_walk",
    "lineage_source_ids",
    "walk_lineage",
]


class WorkingStore(abc.ABC):
    """Versioned working-memory documents, one per ``(tenant, resource, thread or None)``."""

    @abc.abstractmethod
    async def get_working(
        self, tenant_id: str, resource_id: str, thread_id: str | None
    ) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` when none was written."""

    @abc.abstractmethod
    async def put_working(
        self,
        tenant_id: str,
        resource_id: str,
        thread_id: str | None,
        data: Mapping[str, Any],
        *,
        expected_version: int | None,
        now: datetime,
    ) -> WorkingMemoryRecord:
        """Write ``data`` as version ``current + 1`` (1 for the first write), atomically.

        With ``expected_version`` set, the write happens only if the current version equals it
        (``0`` means "no document yet"); otherwise :class:`~prism_memory.errors.ConflictError`.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources the store owns."""


class VectorStore(abc.ABC):
    """Semantic-memory entries, their vectors, tombstones, share grants and the indexing ledger.

    An adapter implements the abstract methods -- what the facade, the indexing queue and the
    importer call -- and may override the defaults (:meth:`known_ids`, :meth:`count_by_thread`,
    :meth:`count_pending`, :meth:`embedding_models`, :meth:`claim_pending_in`,
    :meth:`known_keys`, :meth:`import_rows`), which are built on them. An adapter without
    transactions may take :meth:`apply_governance` from
    :class:`~prism_memory.stores.primitives.GovernancePrimitives` instead, by writing six
    smaller primitives.
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
        vectors: Sequence[Vector] | Vector | None = None,
        model: str | None = None,
    ) -> StoredEntries:
        """Insert the ``entries`` whose id is new, atomically; return the stored records in input
        order, with :attr:`StoredEntries.inserted` naming the rows this call inserted.

        With ``lease``, the new rows it covers are stored leased to ``lease.worker_id`` until ``lease.until``
        (as :meth:`claim_pending` would have leased them), so the writer's own indexing worker
        embeds them without a claim and no other worker takes them meanwhile.

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
        :meth:`apply_governance` on the thread (:func:`check_lineage_sources`); otherwise
        :class:`~prism_memory.errors.ValidationError` and nothing is written. So an entry derived
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
        as the insert, serialised with :meth:`apply_governance` on each thread, as
        :meth:`put_entries` does: a source forgotten meanwhile fails the batch, whole.

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

    # ---- governance and grants -------------------------------------------------------------

    @abc.abstractmethod
    async def apply_governance(
        self, scope: MemoryIdentity, change: GovernanceChange, *, now: datetime
    ) -> GovernanceResult:
        """Apply ``change`` all-or-nothing, in one unit of work serialised with the thread's
        writes (:meth:`put_entries`); :class:`~prism_memory.errors.NotFoundError` (nothing
        changed) if its ``consent`` or ``text`` entry is absent.

        The one write path of every governance call (forget, hold, consent, correct): resolve the
        change with :func:`expand_walk` -- its lineage walk and its consent update, read in that
        same unit of work -- then, in :class:`GovernanceChange`'s order, add its tombstones
        (keyed by ``(entry_id, cause_id, reason)``, an existing one takes the new time), replace
        the ``consent`` (no re-embed) or the ``text`` with its vector (revision + 1, ``indexed``,
        ``written_at = now``, ``text_model`` as its ``embedding_model``; consent, lineage,
        sequence and metadata kept), set legal hold on ``hold``, delete ``delete``, and remove
        the tombstones ``untombstone`` names. Return :class:`GovernanceResult` with the changed
        record, the counts and the walk's dependents (``walked``: a walk ran).
        """

    @abc.abstractmethod
    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant of ``(tenant, resource, parent, child)``."""

    @abc.abstractmethod
    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        """The grant, expired or not, or ``None``."""

    @abc.abstractmethod
    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        """Delete the grant; return 1 if there was one, else 0."""

    # ---- indexing ledger -------------------------------------------------------------------

    @abc.abstractmethod
    async def claim_pending(
        self,
        scope: MemoryIdentity | None,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease up to ``limit`` pending entries due for (re)trying, ordered by sequence then id.

        ``scope=None`` claims across all scopes. A row leased by another worker whose lease has not
        run out is never returned, so concurrent workers never embed a row twice.
        """

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
        """Lease up to ``limit`` due pending entries of ``scopes``, at most ``per_scope`` of each.

        The scopes are served in the order given (a worker shared by many threads rotates it, so
        no thread's backlog starves another's); within a scope rows come ordered by sequence then
        id, as :meth:`claim_pending` leases them. One call for many threads: a store should answer
        it in one round trip (this default claims scope by scope).
        """
        check_claim(limit, lease_seconds, per_scope)
        claimed: list[ClaimedEntry] = []
        for scope in dict.fromkeys(scopes):
            room = min(per_scope, limit - len(claimed))
            if room <= 0:
                break
            claimed.extend(
                await self.claim_pending(
                    scope, limit=room, worker_id=worker_id, lease_seconds=lease_seconds, now=now
                )
            )
        return claimed

    @abc.abstractmethod
    async def complete_indexing(
        self,
        items: Sequence[tuple[ClaimedEntry, Vector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Store vectors and mark ``indexed`` where the lease and revision still match; count them.

        The lease matches while ``worker_id`` holds it, it has not run out at ``now`` and it is
        the very lease the claim set (:attr:`ClaimedEntry.lease_until`): a vector is stored only
        under the current lease, never by a worker whose lease ran out meanwhile.
        ``model`` is recorded as each stored record's ``embedding_model``.
        """

    @abc.abstractmethod
    async def fail_indexing(
        self,
        item: ClaimedEntry,
        *,
        worker_id: str,
        error: str,
        retry_at: datetime | None,
        now: datetime,
    ) -> None:
        """Record a failure: attempts + 1 and the error; due again at ``retry_at``, or ``failed`` if None.

        Applies only while the lease and revision match; the lease is released either way.
        """

    @abc.abstractmethod
    async def release_claims(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds, so others may claim those rows; count them."""

    @abc.abstractmethod
    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None = None) -> int:
        """Make ``failed`` entries (all of the thread's, or ``ids``) pending again with attempts 0."""

    @abc.abstractmethod
    async def index_status(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> dict[str, tuple[IndexStatus, str | None]]:
        """``id -> (status, last_error)`` for the ids that exist, at their current revision."""

    @abc.abstractmethod
    async def store_vectors(
        self,
        scope: MemoryIdentity,
        items: Sequence[tuple[str, int, Vector]],
        *,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Re-index: set ``(id, revision, vector)`` and mark indexed where the revision matches.

        ``model`` is recorded as each stored record's ``embedding_model``.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources the store owns."""


_EVERY_PAGE = 256
"""The page :func:`every_record` asks :meth:`VectorStore.list_by_thread` for."""


async def every_record(store: VectorStore, scope: MemoryIdentity) -> AsyncIterator[MemoryRecord]:
    """Every record of the thread, whatever its status or consent, page by page through
    :meth:`VectorStore.list_by_thread` in ``(sequence, id)`` order (the defaults' reader, and the
    facade's when a call names the whole thread)."""
    after: tuple[int, str] | None = None
    while True:
        page = await store.list_by_thread(scope, after=after, limit=_EVERY_PAGE)
        for record in page:
            yield record
        if len(page) < _EVERY_PAGE:
            return
        after = (page[-1].sequence, page[-1].id)
