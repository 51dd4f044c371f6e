"""The in-memory store's rows, per-thread state and incremental search index, and the state every
part of :class:`~prism_memory.stores.memory.InMemoryVectorStore` shares."""

from __future__ import annotations

import copy
import math
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from .._offload import OFFLOAD_CHARS
from .._windowed import WINDOW_MARGIN, checked_own
from ..errors import ConfigurationError, NotFoundError
from ..lexical import TextTerms, text_terms
from ..models import MemoryIdentity, MemoryRecord, ShareGrant, TombstoneReason, Vector
from .base import Generation, RecallFilter, Tombstone
from .rules import is_recallable, travels

_ScopeKey = tuple[str, str, str]
_GrantKey = tuple[str, str, str, str]
_Positions = npt.NDArray[np.intp]
_SHARDS = 64
"""The one-slot postings' dicts per index (see :attr:`_SearchIndex.single`)."""
_SORT_ALL = 512
"""Up to this many keys a top-N cut sorts them all (cheaper than partitioning first)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_STATIC_FILTER = RecallFilter(now=_EPOCH)
"""The request-independent part of the rules: no consent requirement, no retention window."""


def _micros(moment: datetime) -> int:
    """Exact microseconds since the epoch of an aware datetime (so comparisons match datetime's)."""
    return (moment - _EPOCH) // _MICROSECOND


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


_Own = tuple[Vector, Vector | None]
"""An own vector as a row keeps it: the main vector and its later windows (``None``: none)."""


@dataclass(slots=True)
class _Row:
    """One stored entry plus the ledger fields the record does not expose."""

    record: MemoryRecord
    vector: Vector | None = None
    claimed_by: str | None = None
    claimed_until: datetime | None = None
    next_attempt_at: datetime | None = None
    windows: Vector | None = None
    """The later windows' vectors of the own vector (:mod:`prism_memory.windows`), read-only."""

    @classmethod
    def of(cls, record: MemoryRecord, own: _Own | None) -> _Row:
        """A row of ``record`` and its checked own vector and windows (``None``: no vector)."""
        if own is None:
            return cls(record)
        return cls(record, own[0], windows=own[1])


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
        "multi",
        "occurred_us",
        "positions",
        "records",
        "repeats",
        "sequence",
        "single",
        "size",
        "travels",
        "unit",
        "vectors",
        "width",
        "window_owner",
        "window_unit",
        "windows",
        "windows_held",
    )

    def __init__(self, width: int | None = None) -> None:
        self.width = width
        """The width of every vector it holds (``None``: the first one added sets it); a vector
        of another width is left out (a store holds own vectors of two widths only while a
        promotion to a model of another width runs, and ranks those by model)."""
        self.records: list[MemoryRecord] = []
        self.vectors: list[Vector] = []
        self.repeats: list[Mapping[str, int]] = []
        """Each slot's :attr:`TextTerms.repeats <prism_memory.lexical.TextTerms.repeats>` (with
        the postings (:meth:`slots`) and :attr:`lengths`, the term counts the re-rank reads)."""
        self.windows: list[Vector | None] = []
        """Each slot's later windows (``None``: none), as stored."""
        self.window_unit: npt.NDArray[np.float32] = np.zeros((0, 0), dtype=np.float32)
        """The L2-normalised later windows of every slot that has some, one row per window."""
        self.window_owner: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        """The slot of each row of ``window_unit``."""
        self.windows_held = 0
        """How many rows of ``window_unit`` are in use."""
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
        self.single: tuple[dict[str, int], ...] = tuple({} for _ in range(_SHARDS))
        """The postings of the terms one slot holds: term -> that slot, in :data:`_SHARDS`
        dicts by the term's hash, so growing one never copies a thread's whole vocabulary at
        once (10-20 ms at 200,000 terms). Plain ints in dicts of strings: the garbage collector
        never walks them (an array per term made it walk hundreds of thousands: 0.1 s pauses
        while a thread of long texts was indexed)."""
        self.multi: dict[str, array[int]] = {}
        """The postings of the terms more slots hold: term -> its ascending slots (dead slots
        included, masked by the eligibility mask of a search), as compact int64 arrays."""
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

    def add(
        self,
        record: MemoryRecord,
        vector: Vector,
        terms: TextTerms,
        windows: Vector | None = None,
        *,
        post: bool = True,
    ) -> int | None:
        """Append ``record`` (which passes the static rules), its vector and its later windows'
        (left out when it is not of the index's width) and its text's ``terms``; return its
        slot. ``post=False`` leaves its postings to the caller (:meth:`post`, in slot order)."""
        if self.width is None:
            self.width = vector.shape[0]
        elif vector.shape[0] != self.width:
            return None
        if self.size == self.alive.shape[0] or self.unit.shape[1] != vector.shape[0]:
            self._grow(vector.shape[0])
        at = self.size
        row = vector.astype(np.float64)
        norm = math.sqrt(float(row.dot(row)))  # what np.linalg.norm computes for 1-D
        self.unit[at] = row / norm if norm > 0.0 else row
        self.occurred_us[at] = _micros(record.occurred_at)
        self.sequence[at] = record.sequence
        self.lengths[at] = terms.length
        self.explicit_consent[at] = record.consent is not None
        self.alive[at] = True
        self.travels[at] = travels(record)
        self.records.append(record)
        self.vectors.append(vector)
        self.repeats.append(terms.repeats)
        self.windows.append(windows)
        if windows is not None:
            self._add_windows(at, windows)
        self.positions[record.id] = at
        if post:
            self.post(at, terms.distinct)
        self.size += 1
        self.live_length += terms.length
        self.live = None
        return at

    def slots(self, term: str) -> int | array[int] | None:
        """The slots holding ``term`` (an int for one), ``None`` when none does."""
        found = self.multi.get(term)
        if found is not None:
            return found
        return self.single[hash(term) % _SHARDS].get(term)

    def post(self, at: int, terms: Iterable[str]) -> None:
        """Add slot ``at`` to the postings of ``terms`` (slots are posted in ascending order)."""
        single, multi = self.single, self.multi
        for term in terms:
            slots = multi.get(term)
            if slots is not None:
                slots.append(at)
                continue
            shard = single[hash(term) % _SHARDS]
            first = shard.pop(term, None)
            if first is None:
                shard[term] = at
            else:
                multi[term] = array("q", (first, at))

    def _add_windows(self, at: int, windows: Vector) -> None:
        count, width = windows.shape
        held = self.windows_held
        if held + count > self.window_unit.shape[0] or self.window_unit.shape[1] != width:
            capacity = max(16, 2 * (held + count))
            unit = np.zeros((capacity, width), dtype=np.float32)
            owner = np.zeros(capacity, dtype=np.intp)
            if held:
                unit[:held], owner[:held] = self.window_unit[:held], self.window_owner[:held]
            self.window_unit, self.window_owner = unit, owner
        rows = windows.astype(np.float64)
        norms = np.sqrt(np.add.reduce(rows * rows, axis=1))
        safe = np.where(norms > 0.0, norms, 1.0)[:, None]
        self.window_unit[held : held + count] = rows / safe
        self.window_owner[held : held + count] = at
        self.windows_held = held + count

    def similarities(self, unit_query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Every slot's dense similarity to the L2-normalised query: its vector's cosine, or a
        later window's less :data:`~prism_memory.windows.WINDOW_MARGIN` when that is higher
        (float32, for selection; the re-rank recomputes it in float64)."""
        scores = self.unit[: self.size] @ unit_query
        held = self.windows_held
        if held:
            later = self.window_unit[:held] @ unit_query - np.float32(WINDOW_MARGIN)
            np.maximum.at(scores, self.window_owner[:held], later)
        return scores

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
    shadow: dict[str, dict[str, tuple[int, Vector]]] = field(default_factory=dict)
    """Vectors kept beside the entries' own, of every model but the own vector's:
    ``model -> entry id -> (revision embedded, vector)``."""
    shadow_leases: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    """Backfill leases of the generation being filled: ``entry id -> (worker, lease end)``."""
    shadow_indexes: dict[str, _SearchIndex] = field(default_factory=dict)
    """Search indexes over each model's vectors by the rule of :meth:`vector_of`, per model
    (cached; any write drops them)."""
    writes: int = 0
    """Counts the writes that touch the search index (a build that awaited checks it)."""
    terms: dict[str, tuple[str, TextTerms]] = field(default_factory=dict)
    """``entry id -> (text, its terms)``: each text tokenized once, when written (the write path
    hands them over, made off the event loop for a large batch) or when first indexed."""

    def terms_of(self, record: MemoryRecord) -> TextTerms:
        """The :class:`~prism_memory.lexical.TextTerms` of ``record``'s text (kept while the
        entry keeps that text; a corrected text is tokenized anew)."""
        kept = self.terms.get(record.id)
        if kept is not None and (kept[0] is record.text or kept[0] == record.text):
            return kept[1]
        made = text_terms(record.text)
        self.terms[record.id] = (record.text, made)
        return made

    def keep_terms(self, entry_id: str, text: str, terms: TextTerms | None) -> None:
        """Remember ``terms`` as those of ``entry_id``'s ``text`` (``None``: forget any kept)."""
        if terms is None:
            self.terms.pop(entry_id, None)
        else:
            self.terms[entry_id] = (text, terms)

    def max_sequence(self) -> int:
        """The largest sequence of any row, ``-1`` when the thread is empty."""
        if self.top is None:
            self.top = max((row.record.sequence for row in self.rows.values()), default=-1)
        return self.top

    def touch(self) -> None:
        """Drop the derived caches (a tombstone changed: many rows may change eligibility)."""
        self.writes += 1
        self.index = None
        self.order = None
        self.shadow_indexes.clear()

    def tombstoned(self, entry_ids: Iterable[str]) -> None:
        """Bring the index up to date after tombstones on ``entry_ids`` came or went.

        Only those rows and the rows whose lineage names one of them can change eligibility
        (:func:`is_recallable` reads a record's own tombstones and its direct sources'), so they
        are re-checked one by one instead of rebuilding the thread's index.
        """
        self.shadow_indexes.clear()
        self.writes += 1
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
        """Bring the caches up to date after ``entry_id`` was written (``row``) or deleted (its
        shadow vectors and lease go with it)."""
        self.writes += 1
        self.order = None
        if self.shadow_indexes:
            self.shadow_indexes.clear()
        if row is None:
            for vectors in self.shadow.values():
                vectors.pop(entry_id, None)
            self.shadow_leases.pop(entry_id, None)
            self.terms.pop(entry_id, None)
        index = self.index
        if index is None:
            return
        index.remove(entry_id)
        if (
            row is not None
            and row.vector is not None
            and self.recallable(row.record, _STATIC_FILTER)
        ):
            index.add(row.record, row.vector, self.terms_of(row.record), row.windows)
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

    def search_index(
        self, model: str | None = None, *, primary: str | None = None, width: int | None = None
    ) -> _SearchIndex:
        """The search index, rebuilt if a write invalidated it (or it holds vectors of another
        width than ``width``); with ``model``, the index over the entries' current vectors of
        that model by the rule of :meth:`vector_of` (records tagged with ``model``)."""
        if model is not None:
            index = self.shadow_indexes.get(model)
            if index is None:
                index = self.shadow_indexes[model] = self._build_model_index(model, primary, width)
            return index
        if self.index is None or (
            width is not None and self.index.width is not None and self.index.width != width
        ):
            self.index = self._build_index(width)
        return self.index

    def vector_of(self, model: str, row: _Row, primary: str | None) -> Vector | None:
        """``row``'s current vector of ``model``: its own when its record's model is ``model``
        (an own vector of no recorded model is ``primary``'s), else the one kept beside it if it
        was made from the entry's current revision; ``None`` for an entry not indexed."""
        record = row.record
        if record.status != "indexed":
            return None
        if row.vector is not None:
            own = primary if record.embedding_model is None else record.embedding_model
            if own == model:
                return row.vector
        found = self.shadow.get(model, {}).get(record.id)
        if found is None or found[0] != record.revision:
            return None
        return found[1]

    def own_is(self, model: str, row: _Row, primary: str | None) -> bool:
        """Whether ``row``'s own vector is of ``model`` (no recorded model: ``primary``'s)."""
        if row.vector is None:
            return False
        own = primary if row.record.embedding_model is None else row.record.embedding_model
        return own == model

    def _build_model_index(
        self, model: str, primary: str | None, width: int | None
    ) -> _SearchIndex:
        index = _SearchIndex(width)
        rows = [
            (row, vector)
            for row in self.rows.values()
            if (vector := self.vector_of(model, row, primary)) is not None
            and self.recallable(row.record, _STATIC_FILTER)
        ]
        rows.sort(key=lambda item: (item[0].record.sequence, item[0].record.id))
        for row, vector in rows:  # the windows go with the own vector only
            windows = row.windows if vector is row.vector else None
            index.add(
                replace(row.record, embedding_model=model),
                vector,
                self.terms_of(row.record),
                windows,
            )
        return index

    def missing(self, model: str, primary: str | None) -> int:
        """How many of the thread's indexed rows hold no current vector of ``model``."""
        return sum(
            1
            for row in self.rows.values()
            if row.record.status == "indexed" and self.vector_of(model, row, primary) is None
        )

    def drop_index(self, texts: Iterable[str]) -> None:
        """Before writing ``texts``: when they are large, drop the search index rather than
        adding them to it in the write's one step -- the next search builds it again a slice at
        a time (:meth:`build_index`), so a large write never holds the event loop that long."""
        if self.index is not None and sum(map(len, texts)) > OFFLOAD_CHARS:
            self.index = None

    def has_terms(self, record: MemoryRecord) -> bool:
        """Whether ``record``'s text has its terms kept."""
        kept = self.terms.get(record.id)
        return kept is not None and (kept[0] is record.text or kept[0] == record.text)

    def indexed_rows(self) -> list[_Row]:
        """The rows the search index holds, in ``(sequence, id)`` order."""
        rows = [
            row
            for row in self.rows.values()
            if row.vector is not None and self.recallable(row.record, _STATIC_FILTER)
        ]
        rows.sort(key=lambda row: (row.record.sequence, row.record.id))
        return rows

    def _build_index(self, width: int | None = None) -> _SearchIndex:
        index = _SearchIndex(width)
        for row in self.indexed_rows():
            assert row.vector is not None
            index.add(row.record, row.vector, self.terms_of(row.record), row.windows)
        return index


class _InMemoryState:
    """The data of one in-memory store (on the instance, never the class) and the internals its
    parts share: the store's entries and governance, its reads (:class:`_EntryReads`), writes
    and indexing ledger are objects over one state, never subclasses of it."""

    def __init__(self, *, dimension: int | None = None) -> None:
        if dimension is not None and (
            isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1
        ):
            raise ConfigurationError("dimension must be a positive integer or None")
        self.dimension = dimension
        self.width: int | None = dimension
        self.threads: dict[_ScopeKey, _Thread] = {}
        self.grants: dict[_GrantKey, ShareGrant] = {}
        self.pending: set[tuple[_ScopeKey, str]] = set()
        self.generations: dict[str, Generation] = {}
        """The registered vector generations by model, the primary first."""

    def active_model(self) -> str | None:
        """The active generation's model (``None``: no generation registered)."""
        return next((g.model for g in self.generations.values() if g.active), None)

    def primary_model(self) -> str | None:
        """The primary generation's model (``None``: no generation registered)."""
        return next(iter(self.generations), None)

    def ranked_model(self, model: str | None) -> Generation | None:
        """The generation whose vectors a search with ``model`` ranks by the rule of
        :meth:`_Thread.vector_of`: the registered ``model`` (``None``: the primary) while the
        store has two generations; ``None`` otherwise (search the entries' own vectors)."""
        name = self.primary_model() if model is None else model
        if len(self.generations) < 2 or name is None:
            return None
        return self.generations.get(name)

    def own_width(self) -> int | None:
        """The width new own vectors are written at: the primary generation's once one is
        registered, else the store's."""
        primary = next(iter(self.generations.values()), None)
        return self.width if primary is None else primary.width

    def thread(self, key: _ScopeKey) -> _Thread | None:
        return self.threads.get(key)

    def thread_for_write(self, key: _ScopeKey) -> _Thread:
        thread = self.threads.get(key)
        if thread is None:
            thread = self.threads[key] = _Thread()
        return thread

    def set_row(self, key: _ScopeKey, thread: _Thread, row: _Row) -> None:
        old = thread.rows.get(row.record.id)
        if thread.top is not None:
            if old is not None and old.record.sequence == thread.top > row.record.sequence:
                thread.top = None  # the top row moved down: recompute when next needed
            else:
                thread.top = max(thread.top, row.record.sequence)
        thread.rows[row.record.id] = row
        if row.record.status == "pending":
            self.pending.add((key, row.record.id))
            thread.pending.add(row.record.id)
        else:
            self.pending.discard((key, row.record.id))
            thread.pending.discard(row.record.id)
        thread.changed(row.record.id, row)

    def check_vectors(
        self, vectors: Iterable[tuple[object, str]], model: str | None = None
    ) -> tuple[list[_Own], int | None]:
        """Validate every own vector (all of ``model``) against its width; store nothing (see
        :meth:`check_model_vectors`)."""
        return self.check_model_vectors((vector, label, model) for vector, label in vectors)

    def check_model_vectors(
        self, vectors: Iterable[tuple[object, str, str | None]]
    ) -> tuple[list[_Own], int | None]:
        """Validate every own vector (and its later windows, :class:`~prism_memory.windows.
        WindowedVector`) against its model's width and return them, frozen, with the store's
        width after the write; store nothing.

        A registered generation's model is held to its registered width (the store's width is
        left as it is); another model, or none, to the store's width (or the first such
        vector's, which becomes the store's)."""
        width = self.width
        checked: list[_Own] = []
        for vector, label, model in vectors:
            generation = None if model is None else self.generations.get(model)
            expected = generation.width if generation is not None else width
            main, windows = checked_own(vector, label, expected)
            if generation is None:
                width = main.shape[0]
            checked.append(
                (_frozen_vector(main), None if windows is None else _frozen_vector(windows))
            )
        return checked, width

    def row(self, scope: MemoryIdentity, entry_id: str) -> tuple[_ScopeKey, _Thread, _Row]:
        key = _key(scope)
        thread = self.thread(key)
        row = None if thread is None else thread.rows.get(entry_id)
        if thread is None or row is None:
            raise NotFoundError("the entry does not exist in this scope")
        return key, thread, row
