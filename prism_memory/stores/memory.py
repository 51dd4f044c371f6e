"""In-memory reference adapters: the library default and the behaviour every backend is held to.

:class:`InMemoryVectorStore` keeps each thread's rows, tombstones and a lazily built search index in
plain dictionaries on the *instance* (nothing lives on the class), so two stores never share data.
Every method finishes without awaiting, so each call is atomic with respect to the event loop; write
methods also validate all their input before they change anything, so a call that raises leaves the
store as it was.

Search is exact: cosine over a per-thread numpy matrix of the rows that pass the static part of
:func:`~prism_memory.stores.rules.is_recallable`, with the per-request parts (consent requirement
and retention window) applied as vectorised masks.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from .._windowed import OwnVector
from ..errors import ConflictError
from ..models import (
    IndexStatus,
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    ShareGrant,
    TombstoneReason,
    Vector,
    WorkingMemoryRecord,
    check_id_collection,
)
from ._memory_generations import _DelegatedGenerations, _InMemoryGenerations
from ._memory_ledger import _InMemoryLedger
from ._memory_reads import _EntryReads
from ._memory_rows import _export, _InMemoryState, _key, _Row
from ._memory_writes import _EntryWrites
from .base import (
    ClaimedEntry,
    EntryLease,
    GovernanceChange,
    GovernanceResult,
    ImportRow,
    MetadataPatch,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SearchResult,
    StoredEntries,
    Tombstone,
    WorkingStore,
    expand_walk,
)
from .primitives import GovernancePrimitives

__all__ = ["InMemoryVectorStore", "InMemoryWorkingStore"]

_WorkingKey = tuple[str, str, str | None]


class InMemoryVectorStore(GovernancePrimitives, _DelegatedGenerations):
    """The reference :class:`VectorStore`: exact, per-instance and process-local; with vector
    generations (:class:`~prism_memory.stores.base.VectorGenerations`).

    ``dimension`` pins the vector width; when it is ``None`` the first stored vector fixes the width
    and a later vector of another width raises :class:`~prism_memory.errors.DimensionMismatchError`.

    Composed of objects over one state (:class:`_InMemoryState`): its writes
    (:class:`_EntryWrites`), reads (:class:`_EntryReads`) and indexing ledger
    (:class:`_InMemoryLedger`, an :class:`~prism_memory.stores.base.IndexingLedger` of its own)
    and vector generations (:class:`_InMemoryGenerations`, whose methods
    :class:`_DelegatedGenerations` hands on); entries, governance and share grants are its own
    methods.
    """

    def __init__(self, *, dimension: int | None = None) -> None:
        self._state = _InMemoryState(dimension=dimension)
        self._writes = _EntryWrites(self._state)
        self._reads = _EntryReads(self._state)
        self._ledger = _InMemoryLedger(self._state)
        self._generations = _InMemoryGenerations(self._state)

    def __repr__(self) -> str:
        return f"InMemoryVectorStore(dimension={self._state.dimension})"

    @property
    def dimension(self) -> int | None:
        """The pinned width given at construction (``None``: the first vector stored fixes it)."""
        return self._state.dimension

    async def vector_width(self) -> int | None:
        """The width new own vectors are written at: the primary vector generation's once one is
        registered, else the pinned width, else the width of the first vector stored (``None``
        before it)."""
        return self._state.own_width()

    # ---- entries ---------------------------------------------------------------------------

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
        """Insert the entries whose id is new, atomically (see :meth:`EntryStore.put_entries`)."""
        return await self._writes.put_entries(
            scope, entries, now=now, lease=lease, vectors=vectors, model=model
        )

    async def import_rows(self, rows: Sequence[ImportRow], *, now: datetime) -> tuple[int, int]:
        """A bulk import batch, all or nothing, in one uninterrupted step."""
        return await self._writes.import_rows(rows, now=now)

    async def get_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``ids`` that exist in scope, in the order of ``ids`` (each id once)."""
        check_id_collection(ids, "ids")
        thread = self._state.thread(_key(scope))
        if thread is None:
            return []
        rows = (thread.rows.get(entry_id) for entry_id in dict.fromkeys(ids))
        return [_export(row.record) for row in rows if row is not None]

    async def known_ids(self, scope: MemoryIdentity, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist in scope as entries (a forgotten id is not known)."""
        check_id_collection(ids, "ids")
        thread = self._state.thread(_key(scope))
        if thread is None:
            return set()
        return {i for i in ids if i in thread.rows}

    async def set_consent(
        self, scope: MemoryIdentity, entry_id: str, consent: MemoryConsent, *, now: datetime
    ) -> MemoryRecord:
        """Replace an entry's consent (no re-embed); :class:`NotFoundError` if absent."""
        key, thread, row = self._state.row(scope, entry_id)
        updated = replace(row, record=replace(row.record, consent=consent))
        self._state.set_row(key, thread, updated)
        return _export(updated.record)

    async def replace_text(
        self,
        scope: MemoryIdentity,
        entry_id: str,
        text: str,
        vector: OwnVector,
        *,
        now: datetime,
        model: str | None = None,
    ) -> MemoryRecord:
        """Set new text and its vector at once: revision + 1, ``indexed``, ``written_at = now``.

        Consent, lineage, sequence and metadata are kept. :class:`NotFoundError` if absent.
        """
        key, thread, row = self._state.row(scope, entry_id)
        (checked,), width = self._state.check_vectors([(vector, "the new text's vector")], model)
        record = replace(
            row.record,
            text=text,
            written_at=now,
            revision=row.record.revision + 1,
            status="indexed",
            attempts=0,
            last_error=None,
            embedding_model=model,
        )
        self._state.width = width
        self._state.set_row(key, thread, _Row.of(record, checked))
        return _export(record)

    async def set_legal_hold(self, scope: MemoryIdentity, ids: Sequence[str], hold: bool) -> int:
        """Set or clear legal hold on the ``ids`` that exist; return how many exist."""
        return await self._writes.set_legal_hold(scope, ids, hold)

    async def merge_metadata(
        self, scope: MemoryIdentity, patches: Mapping[str, MetadataPatch]
    ) -> int:
        """Set each patch's keys on its entry while it is the version the patch names and not
        under legal hold (see :meth:`VectorStore.merge_metadata`); one uninterrupted step."""
        return await self._writes.merge_metadata(scope, patches)

    async def delete_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> int:
        """Really delete the ``ids`` that exist in scope, their vectors of every generation with
        them; return how many rows went."""
        return await self._writes.delete_entries(scope, ids)

    async def dependents(
        self, scope: MemoryIdentity, source_ids: Sequence[str], *, limit: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Up to ``limit`` entries whose lineage names any of ``source_ids``, ordered by id."""
        return await self._reads.dependents(scope, source_ids, limit=limit)

    # ---- tombstones and grants -------------------------------------------------------------

    async def add_tombstones(self, scope: MemoryIdentity, tombstones: Sequence[Tombstone]) -> None:
        """Insert tombstones; an existing ``(entry_id, cause_id, reason)`` takes the new time."""
        if not tombstones:
            return
        thread = self._state.thread_for_write(_key(scope))
        for tombstone in tombstones:
            key = (tombstone.cause_id, tombstone.reason)
            thread.tombstones.setdefault(tombstone.entry_id, {})[key] = tombstone
        thread.tombstoned(tombstone.entry_id for tombstone in tombstones)

    async def remove_tombstones(
        self, scope: MemoryIdentity, cause_id: str, reason: TombstoneReason
    ) -> int:
        """Delete the tombstones ``cause_id`` caused with ``reason``; return how many."""
        thread = self._state.thread(_key(scope))
        if thread is None:
            return 0
        lifted: list[str] = []
        for entry_id, by_cause in list(thread.tombstones.items()):
            if by_cause.pop((cause_id, reason), None) is not None:
                lifted.append(entry_id)
                if not by_cause:
                    del thread.tombstones[entry_id]
        if lifted:
            thread.tombstoned(lifted)
        return len(lifted)

    async def apply_governance(
        self, scope: MemoryIdentity, change: GovernanceChange, *, now: datetime
    ) -> GovernanceResult:
        """Apply ``change`` all-or-nothing: everything that can fail is checked first, then the
        primitives run without yielding to the event loop (see :meth:`VectorStore.apply_governance`).
        """
        for target in (change.consent, change.text):
            if target is not None:
                self._state.row(scope, target[0])  # NotFoundError before anything changed
        if change.text is not None:
            self._state.check_vectors([(change.text[2], "the new text's vector")])
        # the lineage walk reads the rows as they are now, within this same uninterrupted call
        change, dependents = await expand_walk(
            change,
            lambda ids, limit: self.dependents(scope, ids, limit=limit),
            lambda ids: self.get_entries(scope, ids),
            now,
        )
        result = await super().apply_governance(scope, change, now=now)
        return replace(result, dependents=dependents or (), walked=dependents is not None)

    # ---- reads (the store's _EntryReads) ----------------------------------------------------

    async def search(self, scope: MemoryIdentity, request: SearchRequest) -> SearchResult:
        """Candidate selection for recall; see :class:`~prism_memory.stores.base.SearchRequest`."""
        return await self._reads.search(scope, request)

    async def neighbors(
        self,
        scope: MemoryIdentity,
        ranges: Sequence[tuple[int, int]],
        recall_filter: RecallFilter,
    ) -> list[MemoryRecord]:
        """Recallable records of the thread whose sequence lies in any inclusive ``(low, high)``."""
        return await self._reads.neighbors(scope, ranges, recall_filter)

    async def list_by_thread(
        self,
        scope: MemoryIdentity,
        *,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records of the thread after ``(sequence, id)``, ordered by both."""
        return await self._reads.list_by_thread(scope, after=after, limit=limit)

    async def count_by_thread(self, scope: MemoryIdentity) -> int:
        """How many entries the thread holds."""
        return await self._reads.count_by_thread(scope)

    async def count_pending(self, scope: MemoryIdentity) -> int:
        """How many of the thread's entries still wait for their vector."""
        return await self._reads.count_pending(scope)

    async def embedding_models(self, scope: MemoryIdentity) -> set[str]:
        """The models whose vectors the thread's rows hold (rows without one left out)."""
        return await self._reads.embedding_models(scope)

    async def list_oldest(
        self,
        scope: MemoryIdentity,
        *,
        limit: int,
        occurred_before: datetime | None = None,
        include_held: bool = True,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records ordered by ``(occurred_at, sequence, id)`` ascending."""
        return await self._reads.list_oldest(
            scope, limit=limit, occurred_before=occurred_before, include_held=include_held
        )

    # ---- indexing ledger (the store's _InMemoryLedger) --------------------------------------

    async def claim_pending(
        self,
        scope: MemoryIdentity | None,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease up to ``limit`` pending entries due for (re)trying, ordered by sequence then id."""
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
        """Lease up to ``limit`` due entries of ``scopes`` (at most ``per_scope`` each), in one pass over the pending rows; the scopes are served in the order given."""
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
        """Store vectors and mark ``indexed`` where the lease and revision still match; count them."""
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
        """Record a failure: attempts + 1 and the error; due at ``retry_at``, or ``failed`` if None."""
        return await self._ledger.fail_indexing(
            item, worker_id=worker_id, error=error, retry_at=retry_at, now=now
        )

    async def release_claims(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds (expired ones included); count them."""
        return await self._ledger.release_claims(worker_id)

    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None = None) -> int:
        """Make ``failed`` entries (all of the thread's, or ``ids``) pending again with attempts 0."""
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
        """Re-index: set ``(id, revision, vector)`` and mark indexed where the revision matches."""
        return await self._ledger.store_vectors(scope, items, now=now, model=model)

    # ---- share grants ----------------------------------------------------------------------

    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant of ``(tenant, resource, parent, child)``."""
        stored = replace(grant, source_ids=tuple(grant.source_ids))
        key = (grant.tenant_id, grant.resource_id, grant.parent_thread_id, grant.child_thread_id)
        self._state.grants[key] = stored
        return stored

    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        """The grant, expired or not, or ``None``."""
        return self._state.grants.get((tenant_id, resource_id, parent_thread_id, child_thread_id))

    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        """Delete the grant; return 1 if there was one, else 0."""
        key = (tenant_id, resource_id, parent_thread_id, child_thread_id)
        return 0 if self._state.grants.pop(key, None) is None else 1


class InMemoryWorkingStore(WorkingStore):
    """The reference :class:`WorkingStore`: versioned documents held by this instance.

    Data is deep-copied on the way in and out, so callers never share state with the store.
    """

    def __init__(self) -> None:
        self._documents: dict[_WorkingKey, WorkingMemoryRecord] = {}

    def __repr__(self) -> str:
        return "InMemoryWorkingStore()"

    async def get_working(
        self, tenant_id: str, resource_id: str, thread_id: str | None
    ) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` when none was written."""
        document = self._documents.get((tenant_id, resource_id, thread_id))
        return None if document is None else _copy_document(document)

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
        key = (tenant_id, resource_id, thread_id)
        current = self._documents.get(key)
        version = 0 if current is None else current.version
        if expected_version is not None and expected_version != version:
            raise ConflictError(
                f"working memory is at version {version}, expected {expected_version}"
            )
        document = WorkingMemoryRecord(
            version=version + 1, data=copy.deepcopy(dict(data)), updated_at=now
        )
        self._documents[key] = document
        return _copy_document(document)


def _copy_document(document: WorkingMemoryRecord) -> WorkingMemoryRecord:
    return replace(document, data=copy.deepcopy(dict(document.data)))
