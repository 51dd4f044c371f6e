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
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..errors import ConflictError
from ..models import (
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    ShareGrant,
    TombstoneReason,
    Vector,
    WorkingMemoryRecord,
    check_id_collection,
)
from ._memory_ledger import _InMemoryLedger
from ._memory_reads import _InMemoryReads
from ._memory_rows import _export, _key, _Row, _ScopeKey
from .base import (
    EntryLease,
    GovernanceChange,
    GovernanceResult,
    ImportRow,
    MetadataPatch,
    NewEntry,
    StoredEntries,
    Tombstone,
    WorkingStore,
    check_entry_vectors,
    check_limit,
    check_lineage_sources,
    expand_walk,
    lineage_source_ids,
)
from .primitives import GovernancePrimitives
from .rules import inherited_tombstones

__all__ = ["InMemoryVectorStore", "InMemoryWorkingStore"]

_WorkingKey = tuple[str, str, str | None]


class InMemoryVectorStore(_InMemoryReads, _InMemoryLedger, GovernancePrimitives):
    """The reference :class:`VectorStore`: exact, per-instance and process-local.

    ``dimension`` pins the vector width; when it is ``None`` the first stored vector fixes the width
    and a later vector of another width raises :class:`~prism_memory.errors.DimensionMismatchError`.
    """

    def __repr__(self) -> str:
        return f"InMemoryVectorStore(dimension={self._dimension})"

    @property
    def dimension(self) -> int | None:
        """The pinned width given at construction (``None``: the first vector stored fixes it)."""
        return self._dimension

    async def vector_width(self) -> int | None:
        """The pinned width, else the width of the first vector stored (``None`` before it)."""
        return self._width

    # ---- entries ---------------------------------------------------------------------------

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
        """Insert the entries whose id is new, atomically; return the stored records in input order
        (:attr:`~prism_memory.stores.base.StoredEntries.inserted`: the ids this call inserted).

        A new row is ``pending``, revision 1, ``created_at = written_at = now`` (``indexed`` with its
        vector when ``vectors`` are given); a new row without a sequence gets ``max(sequence in
        thread) + 1`` (0 in an empty thread), counting the rows this call wrote before it. An
        existing id is left as stored (see :meth:`VectorStore.put_entries`).
        """
        check_entry_vectors(entries, vectors)
        checked: list[Vector | None] = [None] * len(entries)
        width = self._width
        if vectors is not None:
            valid, width = self._check_vectors(
                (vector, f"vectors[{at}]") for at, vector in enumerate(vectors)
            )
            checked = list(valid)
        key = _key(scope)
        thread = self._thread(key)
        existing: dict[str, _Row] = {} if thread is None else thread.rows
        named = [i for i in lineage_source_ids(entries) if i in existing]
        check_lineage_sources(entries, set(named))
        staged: dict[str, _Row] = {}
        top = -1 if thread is None else thread.max_sequence()
        for entry, vector in zip(entries, checked, strict=True):
            current = staged.get(entry.id) or existing.get(entry.id)
            if current is None:
                sequence = top + 1 if entry.sequence is None else entry.sequence
                row = _Row(
                    entry.stored(
                        scope,
                        sequence=sequence,
                        now=now,
                        metadata=copy.deepcopy(dict(entry.metadata)),
                        model=model,
                        indexed=vector is not None,
                    ),
                    vector,
                )
                if vector is None and lease is not None and lease.covers(entry.id):
                    row.claimed_by, row.claimed_until = lease.worker_id, lease.until
            else:
                row = current  # an existing id is never rewritten (governance holds)
            top = max(top, row.record.sequence)
            staged[entry.id] = row
        changed = [row for row in staged.values() if row is not existing.get(row.record.id)]
        if changed:
            thread = self._thread_for_write(key)
            marks = thread.tombstones
            sources = {i: list(marks.get(i, {}).values()) for i in named}
            inherited = inherited_tombstones([row.record for row in changed], sources)
            for row in changed:
                if thread.tombstones.pop(row.record.id, None) is not None:
                    thread.touch()  # an earlier, forgotten entry's: lineage rows may change too
                self._set_row(key, thread, row)
            for tombstone in inherited:  # before any await: the rows never show without them
                marks.setdefault(tombstone.entry_id, {})[(tombstone.cause_id, tombstone.reason)] = (
                    tombstone
                )
            if inherited:
                thread.tombstoned(tombstone.entry_id for tombstone in inherited)
            if any(row.vector is not None for row in changed):
                self._width = width
        return StoredEntries(
            (_export(staged[entry.id].record) for entry in entries),
            inserted=(row.record.id for row in changed),
        )

    async def import_rows(self, rows: Sequence[ImportRow], *, now: datetime) -> tuple[int, int]:
        """A bulk import batch, all or nothing (see :meth:`VectorStore.import_rows`).

        One uninterrupted step (nothing in it awaits), as :meth:`apply_governance` is, so no
        governance call on the batch's threads runs between its checks and its writes: every
        vector is checked against the store's width and every lineage source against the thread
        (or the batch) first, then the new rows are stored in input order -- sequences per thread
        as :meth:`put_entries` assigns them, ``indexed`` with their vector and model or
        ``pending`` -- each taking over the excluding tombstones of its sources
        (:func:`~prism_memory.stores.rules.inherited_tombstones`).
        """
        valid, width = self._check_vectors(
            (row.vector, f"import row {at}'s vector")
            for at, row in enumerate(rows)
            if row.vector is not None
        )
        vectors = iter(valid)
        by_scope: dict[_ScopeKey, tuple[MemoryIdentity, list[tuple[ImportRow, Vector | None]]]] = {}
        for row in rows:
            vector = None if row.vector is None else next(vectors)
            by_scope.setdefault(_key(row.scope), (row.scope, []))[1].append((row, vector))
        planned: list[tuple[_ScopeKey, list[_Row], list[str]]] = []
        for key, (scope, group) in by_scope.items():  # check everything before writing anything
            thread = self._thread(key)
            existing: dict[str, _Row] = {} if thread is None else thread.rows
            entries = [row.entry for row, _ in group]
            named = [i for i in lineage_source_ids(entries) if i in existing]
            check_lineage_sources(entries, set(named))
            top = -1 if thread is None else thread.max_sequence()
            new: dict[str, _Row] = {}
            for row, vector in group:
                entry = row.entry
                if entry.id in existing or entry.id in new:
                    continue  # an existing id is left as stored
                sequence = top + 1 if entry.sequence is None else entry.sequence
                top = max(top, sequence)
                record = entry.stored(
                    scope,
                    sequence=sequence,
                    now=now,
                    metadata=copy.deepcopy(dict(entry.metadata)),
                    model=row.model,
                    indexed=vector is not None,
                )
                new[entry.id] = _Row(record, vector)
            if new:
                planned.append((key, list(new.values()), named))
        inserted = pending = 0
        for key, new_rows, named in planned:
            thread = self._thread_for_write(key)
            marks = thread.tombstones
            sources = {i: list(marks.get(i, {}).values()) for i in named}
            inherited = inherited_tombstones([made.record for made in new_rows], sources)
            for made in new_rows:
                if marks.pop(made.record.id, None) is not None:
                    thread.touch()  # an earlier, forgotten entry's: lineage rows may change too
                self._set_row(key, thread, made)
                pending += made.vector is None
            for tombstone in inherited:
                marks.setdefault(tombstone.entry_id, {})[(tombstone.cause_id, tombstone.reason)] = (
                    tombstone
                )
            if inherited:
                thread.tombstoned(tombstone.entry_id for tombstone in inherited)
            inserted += len(new_rows)
        if inserted > pending:  # vectors were stored: the width is the store's now
            self._width = width
        return inserted, pending

    async def get_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``ids`` that exist in scope, in the order of ``ids`` (each id once)."""
        check_id_collection(ids, "ids")
        thread = self._thread(_key(scope))
        if thread is None:
            return []
        rows = (thread.rows.get(entry_id) for entry_id in dict.fromkeys(ids))
        return [_export(row.record) for row in rows if row is not None]

    async def known_ids(self, scope: MemoryIdentity, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist in scope as entries (a forgotten id is not known)."""
        check_id_collection(ids, "ids")
        thread = self._thread(_key(scope))
        if thread is None:
            return set()
        return {i for i in ids if i in thread.rows}

    async def set_consent(
        self, scope: MemoryIdentity, entry_id: str, consent: MemoryConsent, *, now: datetime
    ) -> MemoryRecord:
        """Replace an entry's consent (no re-embed); :class:`NotFoundError` if absent."""
        key, thread, row = self._row(scope, entry_id)
        updated = replace(row, record=replace(row.record, consent=consent))
        self._set_row(key, thread, updated)
        return _export(updated.record)

    async def replace_text(
        self,
        scope: MemoryIdentity,
        entry_id: str,
        text: str,
        vector: Vector,
        *,
        now: datetime,
        model: str | None = None,
    ) -> MemoryRecord:
        """Set new text and its vector at once: revision + 1, ``indexed``, ``written_at = now``.

        Consent, lineage, sequence and metadata are kept. :class:`NotFoundError` if absent.
        """
        key, thread, row = self._row(scope, entry_id)
        (checked,), width = self._check_vectors([(vector, "the new text's vector")])
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
        self._width = width
        self._set_row(key, thread, _Row(record, checked))
        return _export(record)

    async def set_legal_hold(self, scope: MemoryIdentity, ids: Sequence[str], hold: bool) -> int:
        """Set or clear legal hold on the ``ids`` that exist; return how many exist."""
        check_id_collection(ids, "ids")
        key = _key(scope)
        thread = self._thread(key)
        if thread is None:
            return 0
        found = [thread.rows[i] for i in dict.fromkeys(ids) if i in thread.rows]
        for row in found:
            if row.record.legal_hold != hold:
                self._set_row(
                    key, thread, replace(row, record=replace(row.record, legal_hold=hold))
                )
        return len(found)

    async def merge_metadata(
        self, scope: MemoryIdentity, patches: Mapping[str, MetadataPatch]
    ) -> int:
        """Set each patch's keys on its entry while it is the version the patch names and not
        under legal hold (see :meth:`VectorStore.merge_metadata`); one uninterrupted step."""
        check_id_collection(list(patches), "patches")
        key = _key(scope)
        thread = self._thread(key)
        if thread is None:
            return 0
        changed = 0
        for entry_id, patch in patches.items():
            row = thread.rows.get(entry_id)
            if row is None or row.record.legal_hold:
                continue
            record = row.record
            if (record.revision, record.written_at) != (patch.revision, patch.written_at):
                continue
            metadata = {**record.metadata, **copy.deepcopy(dict(patch.values))}
            self._set_row(key, thread, replace(row, record=replace(record, metadata=metadata)))
            changed += 1
        return changed

    async def delete_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> int:
        """Really delete the ``ids`` that exist in scope; return how many rows went."""
        check_id_collection(ids, "ids")
        key = _key(scope)
        thread = self._thread(key)
        if thread is None:
            return 0
        gone = 0
        for entry_id in dict.fromkeys(ids):
            if thread.rows.pop(entry_id, None) is not None:
                self._pending.discard((key, entry_id))
                thread.pending.discard(entry_id)
                thread.changed(entry_id, None)
                thread.top = None
                gone += 1
        return gone

    async def dependents(
        self, scope: MemoryIdentity, source_ids: Sequence[str], *, limit: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Up to ``limit`` entries whose lineage names any of ``source_ids``, ordered by id."""
        check_id_collection(source_ids, "source_ids")
        check_limit(limit)
        thread = self._thread(_key(scope))
        if thread is None or limit == 0:
            return []
        wanted = set(source_ids)
        found = (
            (row.record.id, row.record.lineage.source_ids)
            for row in thread.rows.values()
            if row.record.lineage is not None and wanted.intersection(row.record.lineage.source_ids)
        )
        return heapq.nsmallest(limit, found)

    # ---- tombstones and grants -------------------------------------------------------------

    async def add_tombstones(self, scope: MemoryIdentity, tombstones: Sequence[Tombstone]) -> None:
        """Insert tombstones; an existing ``(entry_id, cause_id, reason)`` takes the new time."""
        if not tombstones:
            return
        thread = self._thread_for_write(_key(scope))
        for tombstone in tombstones:
            key = (tombstone.cause_id, tombstone.reason)
            thread.tombstones.setdefault(tombstone.entry_id, {})[key] = tombstone
        thread.tombstoned(tombstone.entry_id for tombstone in tombstones)

    async def remove_tombstones(
        self, scope: MemoryIdentity, cause_id: str, reason: TombstoneReason
    ) -> int:
        """Delete the tombstones ``cause_id`` caused with ``reason``; return how many."""
        thread = self._thread(_key(scope))
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
                self._row(scope, target[0])  # NotFoundError before anything changed
        if change.text is not None:
            self._check_vectors([(change.text[2], "the new text's vector")])
        # the lineage walk reads the rows as they are now, within this same uninterrupted call
        change, dependents = await expand_walk(
            change,
            lambda ids, limit: self.dependents(scope, ids, limit=limit),
            lambda ids: self.get_entries(scope, ids),
            now,
        )
        result = await super().apply_governance(scope, change, now=now)
        return replace(result, dependents=dependents or (), walked=dependents is not None)

    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant of ``(tenant, resource, parent, child)``."""
        stored = replace(grant, source_ids=tuple(grant.source_ids))
        key = (grant.tenant_id, grant.resource_id, grant.parent_thread_id, grant.child_thread_id)
        self._grants[key] = stored
        return stored

    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        """The grant, expired or not, or ``None``."""
        return self._grants.get((tenant_id, resource_id, parent_thread_id, child_thread_id))

    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        """Delete the grant; return 1 if there was one, else 0."""
        key = (tenant_id, resource_id, parent_thread_id, child_thread_id)
        return 0 if self._grants.pop(key, None) is None else 1


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
