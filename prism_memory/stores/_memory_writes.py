"""Writes of the in-memory store: new entries, one call's or a bulk import batch's.

:class:`_EntryWrites` is an object over the store's state (:class:`_InMemoryState`), which
:class:`~prism_memory.stores.memory.InMemoryVectorStore` delegates to.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from .._windowed import OwnVector
from ..lexical import terms_of_tokens
from ..models import MemoryIdentity, Vector, check_id_collection
from ._memory_rows import _export, _InMemoryState, _key, _Own, _Row, _ScopeKey
from .base import (
    EntryLease,
    ImportRow,
    MetadataPatch,
    NewEntry,
    StoredEntries,
    check_entry_vectors,
    check_lineage_sources,
    lineage_source_ids,
)
from .rules import inherited_tombstones


class _EntryWrites:
    """:meth:`put_entries`, :meth:`import_rows`, legal hold, metadata merges and deletions of
    the in-memory store."""

    _state: _InMemoryState

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
        """Insert the entries whose id is new, atomically; return the stored records in input order
        (:attr:`~prism_memory.stores.base.StoredEntries.inserted`: the ids this call inserted).

        A new row is ``pending``, revision 1, ``created_at = written_at = now`` (``indexed`` with its
        vector when ``vectors`` are given); a new row without a sequence gets ``max(sequence in
        thread) + 1`` (0 in an empty thread), counting the rows this call wrote before it. An
        existing id is left as stored (see :meth:`EntryStore.put_entries`).
        """
        check_entry_vectors(entries, vectors)
        checked: list[_Own | None] = [None] * len(entries)
        width = self._state.width
        if vectors is not None:
            valid, width = self._state.check_vectors(
                ((vector, f"vectors[{at}]") for at, vector in enumerate(vectors)), model
            )
            checked = list(valid)
        key = _key(scope)
        thread = self._state.thread(key)
        existing: dict[str, _Row] = {} if thread is None else thread.rows
        named = [i for i in lineage_source_ids(entries) if i in existing]
        check_lineage_sources(entries, set(named))
        staged: dict[str, _Row] = {}
        top = -1 if thread is None else thread.max_sequence()
        for entry, vector in zip(entries, checked, strict=True):
            current = staged.get(entry.id) or existing.get(entry.id)
            if current is None:
                sequence = top + 1 if entry.sequence is None else entry.sequence
                row = _Row.of(
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
            thread = self._state.thread_for_write(key)
            marks = thread.tombstones
            sources = {i: list(marks.get(i, {}).values()) for i in named}
            inherited = inherited_tombstones([row.record for row in changed], sources)
            given = {entry.id: entry.terms for entry in entries if entry.terms is not None}
            thread.drop_index(row.record.text for row in changed)
            for row in changed:
                if thread.tombstones.pop(row.record.id, None) is not None:
                    thread.touch()  # an earlier, forgotten entry's: lineage rows may change too
                if row.record.id in given:  # the text's terms, made once by the write path
                    thread.keep_terms(row.record.id, row.record.text, given[row.record.id])
                self._state.set_row(key, thread, row)
            for tombstone in inherited:  # before any await: the rows never show without them
                marks.setdefault(tombstone.entry_id, {})[(tombstone.cause_id, tombstone.reason)] = (
                    tombstone
                )
            if inherited:
                thread.tombstoned(tombstone.entry_id for tombstone in inherited)
            if any(row.vector is not None for row in changed):
                self._state.width = width
        return StoredEntries(
            (_export(staged[entry.id].record) for entry in entries),
            inserted=(row.record.id for row in changed),
        )

    async def import_rows(self, rows: Sequence[ImportRow], *, now: datetime) -> tuple[int, int]:
        """A bulk import batch, all or nothing (see :meth:`EntryStore.import_rows`).

        One uninterrupted step (nothing in it awaits), as the store's ``apply_governance`` is, so no
        governance call on the batch's threads runs between its checks and its writes: every
        vector is checked against the store's width and every lineage source against the thread
        (or the batch) first, then the new rows are stored in input order -- sequences per thread
        as :meth:`put_entries` assigns them, ``indexed`` with their vector and model or
        ``pending`` -- each taking over the excluding tombstones of its sources
        (:func:`~prism_memory.stores.rules.inherited_tombstones`).
        """
        valid, width = self._state.check_model_vectors(
            (row.vector, f"import row {at}'s vector", row.model)
            for at, row in enumerate(rows)
            if row.vector is not None
        )
        vectors = iter(valid)
        by_scope: dict[_ScopeKey, tuple[MemoryIdentity, list[tuple[ImportRow, _Own | None]]]] = {}
        for row in rows:
            vector = None if row.vector is None else next(vectors)
            by_scope.setdefault(_key(row.scope), (row.scope, []))[1].append((row, vector))
        planned: list[tuple[_ScopeKey, list[_Row], list[str]]] = []
        tokens: dict[tuple[_ScopeKey, str], tuple[str, ...]] = {}  # the stored rows' own
        for key, (scope, group) in by_scope.items():  # check everything before writing anything
            thread = self._state.thread(key)
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
                new[entry.id] = _Row.of(record, vector)
                if row.terms is not None:
                    tokens[(key, entry.id)] = row.terms
            if new:
                planned.append((key, list(new.values()), named))
        inserted = pending = 0
        for key, new_rows, named in planned:
            thread = self._state.thread_for_write(key)
            marks = thread.tombstones
            sources = {i: list(marks.get(i, {}).values()) for i in named}
            inherited = inherited_tombstones([made.record for made in new_rows], sources)
            thread.drop_index(made.record.text for made in new_rows)
            for made in new_rows:
                if marks.pop(made.record.id, None) is not None:
                    thread.touch()  # an earlier, forgotten entry's: lineage rows may change too
                made_tokens = tokens.get((key, made.record.id))
                if made_tokens is not None:  # tokenized by the import: counted, not tokenized
                    thread.keep_terms(
                        made.record.id, made.record.text, terms_of_tokens(made_tokens)
                    )
                self._state.set_row(key, thread, made)
                pending += made.vector is None
            for tombstone in inherited:
                marks.setdefault(tombstone.entry_id, {})[(tombstone.cause_id, tombstone.reason)] = (
                    tombstone
                )
            if inherited:
                thread.tombstoned(tombstone.entry_id for tombstone in inherited)
            inserted += len(new_rows)
        if inserted > pending:  # vectors were stored: the width is the store's now
            self._state.width = width
        return inserted, pending

    async def set_legal_hold(self, scope: MemoryIdentity, ids: Sequence[str], hold: bool) -> int:
        """Set or clear legal hold on the ``ids`` that exist; return how many exist."""
        check_id_collection(ids, "ids")
        key = _key(scope)
        thread = self._state.thread(key)
        if thread is None:
            return 0
        found = [thread.rows[i] for i in dict.fromkeys(ids) if i in thread.rows]
        for row in found:
            if row.record.legal_hold != hold:
                self._state.set_row(
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
        thread = self._state.thread(key)
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
            self._state.set_row(
                key, thread, replace(row, record=replace(record, metadata=metadata))
            )
            changed += 1
        return changed

    async def delete_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> int:
        """Really delete the ``ids`` that exist in scope; return how many rows went."""
        check_id_collection(ids, "ids")
        key = _key(scope)
        thread = self._state.thread(key)
        if thread is None:
            return 0
        gone = 0
        for entry_id in dict.fromkeys(ids):
            if thread.rows.pop(entry_id, None) is not None:
                self._state.pending.discard((key, entry_id))
                thread.pending.discard(entry_id)
                thread.changed(entry_id, None)
                thread.top = None
                gone += 1
        return gone
