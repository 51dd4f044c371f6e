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

import bisect
import copy
import heapq
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from ..embedding import assert_finite_vector
from ..errors import ConfigurationError, ConflictError, NotFoundError
from ..lexical import CorpusStats, leg_scores, term_weights, tokenize
from ..models import (
    Candidate,
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
from .base import (
    ClaimedEntry,
    EntryLease,
    GovernanceChange,
    GovernanceResult,
    ImportRow,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SearchResult,
    Tombstone,
    VectorStore,
    WorkingStore,
    check_entry_vectors,
    check_lease,
    check_limit,
    check_lineage_sources,
    expand_walk,
    lineage_source_ids,
)
from .rules import inherited_tombstones, is_recallable, travels

__all__ = ["InMemoryVectorStore", "InMemoryWorkingStore"]

_ScopeKey = tuple[str, str, str]
_GrantKey = tuple[str, str, str, str]
_WorkingKey = tuple[str, str, str | None]
_Positions = npt.NDArray[np.intp]
_SORT_ALL = 512
"""Up to this many keys a top-N cut sorts them all (cheaper than partitioning first)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_STATIC_FILTER = RecallFilter(now=_EPOCH)
"""The request-independent part of the rules: no consent requirement, no retention window."""


def _micros(moment: datetime) -> int:
    """Exact microseconds since the epoch of an aware datetime (so comparisons match datetime's)."""
    return (moment - _EPOCH) // _MICROSECOND


def _due(row: _Row, now: datetime) -> bool:
    """A pending row is due once its retry time (if any) has come and its lease (if any) ran out."""
    return (row.next_attempt_at is None or row.next_attempt_at <= now) and (
        row.claimed_until is None or row.claimed_until <= now
    )


def _lease_rows(
    rows: Sequence[tuple[_ScopeKey, _Row]], worker_id: str, now: datetime, lease_seconds: float
) -> list[ClaimedEntry]:
    """Lease ``rows`` to ``worker_id`` and describe them as claimed entries."""
    until = now + timedelta(seconds=lease_seconds)
    claimed: list[ClaimedEntry] = []
    for key, row in rows:
        row.claimed_by, row.claimed_until = worker_id, until
        record = row.record
        claimed.append(
            ClaimedEntry(
                scope=MemoryIdentity(tenant_id=key[0], resource_id=key[1], thread_id=key[2]),
                id=record.id,
                revision=record.revision,
                text=record.text,
                attempts=record.attempts,
                lease_until=until,
            )
        )
    return claimed


def _key(scope: MemoryIdentity) -> _ScopeKey:
    return (scope.tenant_id, scope.resource_id, scope.thread_id)


def _export(record: MemoryRecord) -> MemoryRecord:
    """A record a caller may keep: its metadata is a private copy of the stored one."""
    if not record.metadata:
        return record
    return replace(record, metadata=copy.deepcopy(dict(record.metadata)))


def _frozen_vector(vector: Vector) -> Vector:
    stored = np.array(vector, dtype=np.float32, copy=True)
    stored.setflags(write=False)
    return stored


@dataclass(slots=True)
class _Row:
    """One stored entry plus the ledger fields the record does not expose."""

    record: MemoryRecord
    vector: Vector | None = None
    claimed_by: str | None = None
    claimed_until: datetime | None = None
    next_attempt_at: datetime | None = None


class _SearchIndex:
    """Rows of one thread that pass the static rules, as growable arrays.

    Kept up to date write by write (:meth:`add` appends, :meth:`remove` marks a slot dead), so a
    write never rebuilds the thread's matrix; the thread drops it for a rebuild only when most
    slots are dead or a tombstone changes which rows pass. Slots are in write order, not
    ``(sequence, id)`` order: searches break ties explicitly.
    """

    __slots__ = (
        "alive",
        "dead",
        "explicit_consent",
        "lengths",
        "live",
        "live_length",
        "occurred_us",
        "positions",
        "postings",
        "records",
        "sequence",
        "size",
        "travels",
        "unit",
        "vectors",
    )

    def __init__(self) -> None:
        self.records: list[MemoryRecord] = []
        self.vectors: list[Vector] = []
        self.positions: dict[str, int] = {}
        """Entry id -> its live slot."""
        self.unit: npt.NDArray[np.float32] = np.zeros((0, 0), dtype=np.float32)
        """L2-normalised vectors (zero rows stay zero), one row per slot (capacity rows); float32
        like the stored vectors, which halves the matrix product (the re-rank is in float64)."""
        self.occurred_us: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.sequence: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.lengths: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        """How many terms each slot's text has (its BM25 length)."""
        self.explicit_consent: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        self.alive: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        self.travels: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        """Consent scope ``user``/``profile``: reachable by a resource-wide recall."""
        self.postings: dict[str, array[int]] = {}
        """Term -> ascending slots whose text contains it (dead slots included, masked by the
        eligibility mask of a search), as compact int64 arrays."""
        self.size = 0
        self.dead = 0
        self.live: tuple[_Positions, npt.NDArray[np.bool_]] | None = None
        """Cached live slots and their mask (``None``: recompute; any write drops it)."""
        self.live_length = 0
        """Total term count of the live slots."""

    def _grow(self, width: int) -> None:
        capacity = max(16, 2 * self.size)
        unit = np.zeros((capacity, width), dtype=np.float32)
        if self.unit.shape[1] == width:
            unit[: self.size] = self.unit[: self.size]
        self.unit = unit
        for name in (
            "occurred_us",
            "sequence",
            "lengths",
            "explicit_consent",
            "alive",
            "travels",
        ):
            old = getattr(self, name)
            grown = np.zeros(capacity, dtype=old.dtype)
            grown[: self.size] = old[: self.size]
            setattr(self, name, grown)

    def add(self, record: MemoryRecord, vector: Vector) -> None:
        """Append ``record`` (which passes the static rules) and its vector."""
        if self.size == self.alive.shape[0] or self.unit.shape[1] != vector.shape[0]:
            self._grow(vector.shape[0])
        at = self.size
        row = vector.astype(np.float64)
        norm = math.sqrt(float(row.dot(row)))  # what np.linalg.norm computes for 1-D
        self.unit[at] = row / norm if norm > 0.0 else row
        self.occurred_us[at] = _micros(record.occurred_at)
        self.sequence[at] = record.sequence
        terms = tokenize(record.text)
        self.lengths[at] = len(terms)
        self.explicit_consent[at] = record.consent is not None
        self.alive[at] = True
        self.travels[at] = travels(record)
        self.records.append(record)
        self.vectors.append(vector)
        self.positions[record.id] = at
        for term in dict.fromkeys(terms):
            slots = self.postings.get(term)
            if slots is None:
                slots = self.postings[term] = array("q")
            slots.append(at)
        self.size += 1
        self.live_length += len(terms)
        self.live = None

    def remove(self, entry_id: str) -> None:
        """Mark ``entry_id``'s slot dead, if it has one."""
        at = self.positions.pop(entry_id, None)
        if at is not None:
            self.alive[at] = False
            self.dead += 1
            self.live_length -= int(self.lengths[at])
            self.live = None

    def live_slots(self) -> tuple[_Positions, npt.NDArray[np.bool_]]:
        """The live slots and their mask (read-only to callers; cached until the next write)."""
        if self.live is None:
            mask = self.alive[: self.size].copy()
            self.live = (np.flatnonzero(mask), mask)
        return self.live

    def eligible(self, recall_filter: RecallFilter) -> npt.NDArray[np.bool_]:
        """The request-dependent part of the rules (and liveness), as a mask over the slots."""
        mask = self.alive[: self.size].copy()
        if recall_filter.require_consent:
            mask &= self.explicit_consent[: self.size]
        if recall_filter.occurred_after is not None:
            mask &= self.occurred_us[: self.size] >= _micros(recall_filter.occurred_after)
        return mask

    def top(self, primary: npt.NDArray[Any], at: _Positions, limit: int) -> _Positions:
        """Of slots ``at`` (keys ``primary``), indices of the ``limit`` smallest keys; ties broken
        by ``(sequence, id)``, as every backend breaks them."""
        if primary.shape[0] > max(limit, _SORT_ALL):
            kth = np.partition(primary, limit - 1)[limit - 1]
            keep = np.flatnonzero(primary < kth)
            tied = np.flatnonzero(primary == kth)
            need = limit - keep.shape[0]
            if tied.shape[0] > need:  # many keys equal the cut: only the smallest sequences stay
                tied_sequence = self.sequence[at[tied]]
                cut = np.partition(tied_sequence, need - 1)[need - 1]
                tied = tied[tied_sequence <= cut]
            keep = np.concatenate((keep, tied))
            sequences = self.sequence[at[keep]]
            keep = keep[np.lexsort((sequences, primary[keep]))]
        else:
            sequences = self.sequence[at]
            keep = np.lexsort((sequences, primary))
        # the first ``limit`` and the next one decide who is in and in which order
        head = keep[: limit + 1]
        keys, sequences = primary[head], self.sequence[at[head]]
        if not ((keys[1:] == keys[:-1]) & (sequences[1:] == sequences[:-1])).any():
            return keep[:limit]  # no (key, sequence) ties among them: the order is final
        records = self.records
        ordered = sorted(
            keep.tolist(),
            key=lambda i: (primary[i], records[at[i]].sequence, records[at[i]].id),
        )
        return np.asarray(ordered[:limit], dtype=np.intp)


@dataclass(slots=True)
class _Thread:
    """Everything one ``(tenant, resource, thread)`` scope holds."""

    rows: dict[str, _Row] = field(default_factory=dict)
    tombstones: dict[str, dict[tuple[str, TombstoneReason], Tombstone]] = field(
        default_factory=dict
    )
    """``entry_id -> (cause_id, reason) -> tombstone``."""
    index: _SearchIndex | None = None
    order: list[tuple[int, str]] | None = None
    pending: set[str] = field(default_factory=set)
    """Ids of the thread's ``pending`` rows (this thread's share of the store's ledger)."""
    top: int | None = None
    """The largest sequence in the thread (cached; ``None``: recompute)."""

    def max_sequence(self) -> int:
        """The largest sequence of any row, ``-1`` when the thread is empty."""
        if self.top is None:
            self.top = max((row.record.sequence for row in self.rows.values()), default=-1)
        return self.top

    def touch(self) -> None:
        """Drop the derived caches (a tombstone changed: many rows may change eligibility)."""
        self.index = None
        self.order = None

    def tombstoned(self, entry_ids: Iterable[str]) -> None:
        """Bring the index up to date after tombstones on ``entry_ids`` came or went.

        Only those rows and the rows whose lineage names one of them can change eligibility
        (:func:`is_recallable` reads a record's own tombstones and its direct sources'), so they
        are re-checked one by one instead of rebuilding the thread's index.
        """
        index = self.index
        if index is None:
            return
        named = set(entry_ids)
        affected = [entry_id for entry_id in named if entry_id in self.rows]
        affected += [
            row.record.id
            for row in self.rows.values()
            if row.record.lineage is not None
            and row.record.id not in named
            and not named.isdisjoint(row.record.lineage.source_ids)
        ]
        if 2 * len(affected) > index.size:
            self.touch()  # most of the thread: a rebuild is cheaper
            return
        for entry_id in affected:
            self.changed(entry_id, self.rows[entry_id])

    def changed(self, entry_id: str, row: _Row | None) -> None:
        """Bring the caches up to date after ``entry_id`` was written (``row``) or deleted."""
        self.order = None
        index = self.index
        if index is None:
            return
        index.remove(entry_id)
        if (
            row is not None
            and row.vector is not None
            and self.recallable(row.record, _STATIC_FILTER)
        ):
            index.add(row.record, row.vector)
        if index.dead > max(64, index.size // 2):
            self.index = None  # mostly dead slots: rebuild compactly on the next search

    def source_tombstones(self, record: MemoryRecord) -> list[Tombstone]:
        """The tombstones on ``record``'s lineage sources in this thread."""
        if record.lineage is None:
            return []
        found: list[Tombstone] = []
        for source_id in record.lineage.source_ids:
            found.extend(self.tombstones.get(source_id, {}).values())
        return found

    def recallable(self, record: MemoryRecord, recall_filter: RecallFilter) -> bool:
        """:func:`is_recallable` with this thread's tombstones."""
        own = self.tombstones.get(record.id, {}).values()
        return is_recallable(record, recall_filter, self.source_tombstones(record), own)

    def sorted_keys(self) -> list[tuple[int, str]]:
        """``(sequence, id)`` of every row, ascending (cached until the next write)."""
        if self.order is None:
            self.order = sorted((row.record.sequence, row.record.id) for row in self.rows.values())
        return self.order

    def search_index(self) -> _SearchIndex:
        """The search index, rebuilt if a write invalidated it."""
        if self.index is None:
            self.index = self._build_index()
        return self.index

    def _build_index(self) -> _SearchIndex:
        index = _SearchIndex()
        rows = [
            row
            for row in self.rows.values()
            if row.vector is not None and self.recallable(row.record, _STATIC_FILTER)
        ]
        rows.sort(key=lambda row: (row.record.sequence, row.record.id))
        for row in rows:
            assert row.vector is not None
            index.add(row.record, row.vector)
        return index


_Picks = tuple[int, list[float], list[int]]
"""One pool's picks of one search leg: pool number, scores and slots, best first."""


def _merged(leg: list[_Picks], pools: list[_Pool], limit: int) -> list[tuple[int, int]]:
    """``(pool number, slot)`` of the best ``limit`` picks of a leg over all its pools: score
    descending, then sequence, id and pool number ascending."""
    if not leg:
        return []
    if len(leg) == 1:  # one pool's picks are already its best, in order
        number, _, taken = leg[0]
        return [(number, position) for position in taken]
    picks: list[tuple[float, int, str, int, int]] = []
    for number, scores, taken in leg:
        records = pools[number].index.records
        picks.extend(
            (-score, records[position].sequence, records[position].id, number, position)
            for score, position in zip(scores, taken, strict=True)
        )
    return [(number, position) for *_, number, position in heapq.nsmallest(limit, picks)]


@dataclass(slots=True)
class _Pool:
    """Eligible positions of one thread's index taking part in a search."""

    index: _SearchIndex
    positions: _Positions
    """Ascending slots (write order: searches break ties by ``(sequence, id)`` explicitly)."""
    mask: npt.NDArray[np.bool_]
    """``positions`` as a mask over the index's slots."""
    length: int
    """Total term count of ``positions`` (the pool's share of the BM25 corpus length)."""


class InMemoryVectorStore(VectorStore):
    """The reference :class:`VectorStore`: exact, per-instance and process-local.

    ``dimension`` pins the vector width; when it is ``None`` the first stored vector fixes the width
    and a later vector of another width raises :class:`~prism_memory.errors.DimensionMismatchError`.
    """

    def __init__(self, *, dimension: int | None = None) -> None:
        if dimension is not None and (
            isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1
        ):
            raise ConfigurationError("dimension must be a positive integer or None")
        self._dimension = dimension
        self._width: int | None = dimension
        self._threads: dict[_ScopeKey, _Thread] = {}
        self._grants: dict[_GrantKey, ShareGrant] = {}
        self._pending: set[tuple[_ScopeKey, str]] = set()

    def __repr__(self) -> str:
        return f"InMemoryVectorStore(dimension={self._dimension})"

    @property
    def dimension(self) -> int | None:
        """The pinned width given at construction (``None``: the first vector stored fixes it)."""
        return self._dimension

    # ---- internals -------------------------------------------------------------------------

    def _thread(self, key: _ScopeKey) -> _Thread | None:
        return self._threads.get(key)

    def _thread_for_write(self, key: _ScopeKey) -> _Thread:
        thread = self._threads.get(key)
        if thread is None:
            thread = self._threads[key] = _Thread()
        return thread

    def _set_row(self, key: _ScopeKey, thread: _Thread, row: _Row) -> None:
        old = thread.rows.get(row.record.id)
        if thread.top is not None:
            if old is not None and old.record.sequence == thread.top > row.record.sequence:
                thread.top = None  # the top row moved down: recompute when next needed
            else:
                thread.top = max(thread.top, row.record.sequence)
        thread.rows[row.record.id] = row
        if row.record.status == "pending":
            self._pending.add((key, row.record.id))
            thread.pending.add(row.record.id)
        else:
            self._pending.discard((key, row.record.id))
            thread.pending.discard(row.record.id)
        thread.changed(row.record.id, row)

    def _check_vectors(
        self, vectors: Iterable[tuple[object, str]]
    ) -> tuple[list[Vector], int | None]:
        """Validate every vector against the store width (or the first one's); store nothing."""
        width = self._width
        checked: list[Vector] = []
        for vector, label in vectors:
            ok = assert_finite_vector(vector, label, expected_length=width)
            width = ok.shape[0]
            checked.append(_frozen_vector(ok))
        return checked, width

    def _row(self, scope: MemoryIdentity, entry_id: str) -> tuple[_ScopeKey, _Thread, _Row]:
        key = _key(scope)
        thread = self._thread(key)
        row = None if thread is None else thread.rows.get(entry_id)
        if thread is None or row is None:
            raise NotFoundError("the entry does not exist in this scope")
        return key, thread, row

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
    ) -> list[MemoryRecord]:
        """Insert the entries whose id is new, atomically; return the stored records in input order.

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
        return [_export(staged[entry.id].record) for entry in entries]

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

    # ---- reads -----------------------------------------------------------------------------

    async def search(self, scope: MemoryIdentity, request: SearchRequest) -> SearchResult:
        """Candidate selection for recall; see :class:`~prism_memory.stores.base.SearchRequest`.

        Nearest ``limit`` by cosine (ties: sequence, then id) plus up to ``limit`` lexical matches
        by :func:`~prism_memory.lexical.leg_score` (ties: sequence, then id), deduplicated, with
        the statistics of every eligible record of the pools.
        """
        check_limit(request.limit)
        query = assert_finite_vector(request.vector, "query vector", expected_length=self._width)
        if request.limit == 0:
            return SearchResult([], CorpusStats())
        pools = self._pools(scope, request)
        if not pools:
            return SearchResult([], CorpusStats())
        wide = query.astype(np.float64)
        norm = math.sqrt(float(wide.dot(wide)))  # what np.linalg.norm computes for 1-D
        unit_query = (wide / (norm if norm > 0.0 else 1.0)).astype(np.float32)
        terms = sorted(request.terms)

        documents = total_length = 0
        frequency: dict[str, int] = {}
        present: list[list[tuple[str, _Positions]]] = []  # per pool: (term, positions holding it)
        nearest: list[_Picks] = []
        for number, pool in enumerate(pools):
            index, positions = pool.index, pool.positions
            documents += int(positions.shape[0])
            total_length += pool.length
            holding: list[tuple[str, _Positions]] = []
            for term in terms:
                slots = index.postings.get(term)
                if slots is None:
                    continue
                hits = np.array(slots, dtype=np.intp)
                found = hits[pool.mask[hits]]
                if found.shape[0]:
                    frequency[term] = frequency.get(term, 0) + int(found.shape[0])
                    holding.append((term, found))
            present.append(holding)
            if positions.shape[0] == index.size:
                scores = index.unit[: index.size] @ unit_query
            elif 2 * positions.shape[0] >= index.size:
                scores = (index.unit[: index.size] @ unit_query)[positions]
            else:
                scores = index.unit[positions] @ unit_query
            best = index.top(-scores, positions, request.limit)
            nearest.append((number, scores[best].tolist(), positions[best].tolist()))
        stats = CorpusStats(documents, total_length, frequency)

        lexical: list[_Picks] = []
        weights = dict(term_weights(terms, stats)) if frequency else {}
        for number, holding in enumerate(present):
            if not holding:
                continue
            index = pools[number].index
            if len(holding) == 1:
                ((term, matched),) = holding
                sums = np.full(matched.shape[0], weights[term])
            else:
                every = np.zeros(index.size, dtype=np.float64)
                for term, found in holding:  # sorted terms: every sum adds its idfs in that order
                    every[found] += weights[term]
                matched = np.flatnonzero(every)  # idf > 0: a slot's sum is positive iff it matched
                sums = every[matched]
            scores = leg_scores(sums, index.lengths[matched], stats)
            best = index.top(-scores, matched, request.limit)  # ties: (sequence, id)
            lexical.append((number, scores[best].tolist(), matched[best].tolist()))

        chosen: dict[tuple[int, int], None] = {}
        for leg in (nearest, lexical):
            chosen.update(dict.fromkeys(_merged(leg, pools, request.limit)))
        records = [pool.index.records for pool in pools]
        vectors = [pool.index.vectors for pool in pools]
        candidates = [
            Candidate(_export(records[number][position]), vectors[number][position].copy())
            for number, position in chosen
        ]
        return SearchResult(candidates, stats)

    def _pools(self, scope: MemoryIdentity, request: SearchRequest) -> list[_Pool]:
        key = _key(scope)
        pools: list[_Pool] = []
        own = self._thread(key)
        if own is not None:
            index = own.search_index()
            if request.filter.require_consent or request.filter.occurred_after is not None:
                eligible = index.eligible(request.filter)
                positions = np.flatnonzero(eligible)
                length = int(index.lengths[positions].sum())
            else:  # only liveness applies: the cached live slots
                positions, eligible = index.live_slots()
                length = index.live_length
            if positions.shape[0]:
                pools.append(_Pool(index, positions, eligible, length))
        shared = request.shared
        granted: _Positions | None = None
        parent_key: _ScopeKey | None = None
        if shared is not None and shared.thread_id != scope.thread_id:
            parent_key = (scope.tenant_id, scope.resource_id, shared.thread_id)
            parent = self._thread(parent_key)
            if parent is not None:
                index = parent.search_index()
                granted = np.array(
                    sorted({index.positions[i] for i in shared.ids if i in index.positions}),
                    dtype=np.intp,
                )
        if request.resource_wide:
            for other_key in self._resource_threads(scope):
                if other_key == key:
                    continue
                index = self._threads[other_key].search_index()
                mask = index.travels[: index.size].copy()
                if other_key == parent_key and granted is not None:
                    mask[granted] = True  # granted entries of the parent count once
                    granted = None
                mask &= index.eligible(request.filter)
                positions = np.flatnonzero(mask)
                if positions.shape[0]:
                    length = int(index.lengths[positions].sum())
                    pools.append(_Pool(index, positions, mask, length))
        if granted is not None and granted.shape[0] and parent_key is not None:
            index = self._threads[parent_key].search_index()
            named = granted[index.eligible(request.filter)[granted]]
            if named.shape[0]:
                mask = np.zeros(index.size, dtype=np.bool_)
                mask[named] = True
                pools.append(_Pool(index, named, mask, int(index.lengths[named].sum())))
        return pools

    def _resource_threads(self, scope: MemoryIdentity) -> list[_ScopeKey]:
        """The keys of every thread of the scope's tenant and resource (sorted)."""
        return sorted(
            key
            for key in self._threads
            if key[0] == scope.tenant_id and key[1] == scope.resource_id
        )

    async def neighbors(
        self,
        scope: MemoryIdentity,
        ranges: Sequence[tuple[int, int]],
        recall_filter: RecallFilter,
    ) -> list[MemoryRecord]:
        """Recallable records of the thread whose sequence lies in any inclusive ``(low, high)``."""
        thread = self._thread(_key(scope))
        if thread is None or not ranges:
            return []
        found: list[MemoryRecord] = []
        for sequence, entry_id in thread.sorted_keys():
            if any(low <= sequence <= high for low, high in ranges):
                record = thread.rows[entry_id].record
                if thread.recallable(record, recall_filter):
                    found.append(_export(record))
        return found

    async def list_by_thread(
        self,
        scope: MemoryIdentity,
        *,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records of the thread after ``(sequence, id)``, ordered by both."""
        check_limit(limit)
        thread = self._thread(_key(scope))
        if thread is None:
            return []
        keys = thread.sorted_keys()
        start = 0 if after is None else bisect.bisect_right(keys, (after[0], after[1]))
        return [_export(thread.rows[i].record) for _, i in keys[start : start + limit]]

    async def count_by_thread(self, scope: MemoryIdentity) -> int:
        """How many entries the thread holds."""
        thread = self._thread(_key(scope))
        return 0 if thread is None else len(thread.rows)

    async def count_pending(self, scope: MemoryIdentity) -> int:
        """How many of the thread's entries still wait for their vector."""
        thread = self._thread(_key(scope))
        return 0 if thread is None else len(thread.pending)

    async def embedding_models(self, scope: MemoryIdentity) -> set[str]:
        """The models whose vectors the thread's rows hold (rows without one left out)."""
        thread = self._thread(_key(scope))
        if thread is None:
            return set()
        found = (row.record.embedding_model for row in thread.rows.values())
        return {model for model in found if model is not None}

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
        check_limit(limit)
        thread = self._thread(_key(scope))
        if thread is None or limit == 0:
            return []
        records = (
            row.record
            for row in thread.rows.values()
            if (occurred_before is None or row.record.occurred_at < occurred_before)
            and (include_held or not row.record.legal_hold)
        )
        oldest = heapq.nsmallest(limit, records, key=lambda r: (r.occurred_at, r.sequence, r.id))
        return [_export(record) for record in oldest]

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

    # ---- indexing ledger -------------------------------------------------------------------

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

        A row is due when its retry time (if any) has come and its lease (if any) has run out.
        """
        check_limit(limit)
        check_lease(lease_seconds)
        wanted = None if scope is None else _key(scope)
        due: list[tuple[int, str, _ScopeKey, _Row]] = []
        for key, entry_id in self._pending:
            if wanted is not None and key != wanted:
                continue
            row = self._threads[key].rows[entry_id]
            if _due(row, now):
                due.append((row.record.sequence, entry_id, key, row))
        chosen = heapq.nsmallest(limit, due, key=lambda item: item[:3])
        return _lease_rows([(key, row) for _, _, key, row in chosen], worker_id, now, lease_seconds)

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
        """Lease up to ``limit`` due entries of ``scopes`` (at most ``per_scope`` each), in one pass
        over the pending rows; the scopes are served in the order given."""
        check_limit(limit)
        check_limit(per_scope, "per_scope")
        check_lease(lease_seconds)
        order = {_key(scope): i for i, scope in enumerate(dict.fromkeys(scopes))}
        due: dict[_ScopeKey, list[tuple[int, str, _Row]]] = {}
        for key, entry_id in self._pending:
            if key in order:
                row = self._threads[key].rows[entry_id]
                if _due(row, now):
                    due.setdefault(key, []).append((row.record.sequence, entry_id, row))
        chosen: list[tuple[_ScopeKey, _Row]] = []
        for key in sorted(due, key=order.__getitem__):
            room = min(per_scope, limit - len(chosen))
            if room <= 0:
                break
            rows = heapq.nsmallest(room, due[key], key=lambda item: item[:2])
            chosen.extend((key, row) for _, _, row in rows)
        return _lease_rows(chosen, worker_id, now, lease_seconds)

    def _leased(self, item: ClaimedEntry, worker_id: str, now: datetime) -> _Row | None:
        """The row ``item`` names, if ``worker_id`` still holds its lease at its revision."""
        thread = self._thread(_key(item.scope))
        row = None if thread is None else thread.rows.get(item.id)
        if (
            row is None
            or row.record.status != "pending"
            or row.record.revision != item.revision
            or row.claimed_by != worker_id
            or row.claimed_until is None
            or row.claimed_until <= now
            or (item.lease_until is not None and row.claimed_until != item.lease_until)
        ):
            return None  # not this claim's lease any more: its late result is refused
        return row

    async def complete_indexing(
        self,
        items: Sequence[tuple[ClaimedEntry, Vector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Store vectors and mark ``indexed`` where the lease and revision still match; count them.

        A lease matches while ``worker_id`` holds it and it has not run out at ``now``. Every vector
        is checked first: one bad vector rejects the whole call.
        """
        checked, width = self._check_vectors(
            (vector, f"vectors[{at}]") for at, (_, vector) in enumerate(items)
        )
        done = 0
        for (item, _), vector in zip(items, checked, strict=True):
            row = self._leased(item, worker_id, now)
            if row is None:
                continue
            key = _key(item.scope)
            record = replace(row.record, status="indexed", last_error=None, embedding_model=model)
            self._set_row(key, self._threads[key], _Row(record, vector))
            done += 1
        if done:
            self._width = width
        return done

    async def fail_indexing(
        self,
        item: ClaimedEntry,
        *,
        worker_id: str,
        error: str,
        retry_at: datetime | None,
        now: datetime,
    ) -> None:
        """Record a failure: attempts + 1 and the error; due at ``retry_at``, or ``failed`` if None.

        Applies only while the lease and revision match; a lease ``worker_id`` holds on the row is
        released either way.
        """
        key = _key(item.scope)
        row = self._leased(item, worker_id, now)
        if row is not None:
            record = replace(
                row.record,
                attempts=row.record.attempts + 1,
                last_error=error,
                status="pending" if retry_at is not None else "failed",
            )
            self._set_row(key, self._threads[key], _Row(record, next_attempt_at=retry_at))
            return
        thread = self._thread(key)
        other = None if thread is None else thread.rows.get(item.id)
        if other is not None and other.claimed_by == worker_id:
            other.claimed_by = other.claimed_until = None

    async def release_claims(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds (expired ones included); count them."""
        released = 0
        for key, entry_id in self._pending:  # only pending rows are ever leased
            row = self._threads[key].rows[entry_id]
            if row.claimed_by == worker_id:
                row.claimed_by = row.claimed_until = None
                released += 1
        return released

    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None = None) -> int:
        """Make ``failed`` entries (all of the thread's, or ``ids``) pending again with attempts 0.

        The last error is cleared with them.
        """
        if ids is not None:
            check_id_collection(ids, "ids")
        key = _key(scope)
        thread = self._thread(key)
        if thread is None:
            return 0
        names = thread.rows.keys() if ids is None else dict.fromkeys(ids)
        failed = [
            thread.rows[i]
            for i in names
            if i in thread.rows and thread.rows[i].record.status == "failed"
        ]
        for row in failed:
            record = replace(row.record, status="pending", attempts=0, last_error=None)
            self._set_row(key, thread, _Row(record))
        return len(failed)

    async def index_status(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> dict[str, tuple[IndexStatus, str | None]]:
        """``id -> (status, last_error)`` for the ids that exist, at their current revision."""
        check_id_collection(ids, "ids")
        thread = self._thread(_key(scope))
        if thread is None:
            return {}
        rows = (thread.rows[i] for i in dict.fromkeys(ids) if i in thread.rows)
        return {row.record.id: (row.record.status, row.record.last_error) for row in rows}

    async def store_vectors(
        self,
        scope: MemoryIdentity,
        items: Sequence[tuple[str, int, Vector]],
        *,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Re-index: set ``(id, revision, vector)`` and mark indexed where the revision matches.

        Every vector is checked first: one bad vector rejects the whole call. A lease on a row
        that is stored is dropped (its worker's late result no longer applies).
        """
        checked, width = self._check_vectors(
            (vector, f"vectors[{at}]") for at, (_, _, vector) in enumerate(items)
        )
        key = _key(scope)
        thread = self._thread(key)
        if thread is None:
            return 0
        stored = 0
        for (entry_id, revision, _), vector in zip(items, checked, strict=True):
            row = thread.rows.get(entry_id)
            if row is None or row.record.revision != revision:
                continue
            record = replace(row.record, status="indexed", last_error=None, embedding_model=model)
            self._set_row(key, thread, _Row(record, vector))
            stored += 1
        if stored:
            self._width = width
        return stored


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
