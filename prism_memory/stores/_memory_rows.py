"""The in-memory store's rows, per-thread state and incremental search index, and the state every
part of :class:`~prism_memory.stores.memory.InMemoryVectorStore` shares."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from .._offload import OFFLOAD_CHARS
from .._windowed import checked_own
from ..errors import ConfigurationError, NotFoundError
from ..lexical import TextTerms, text_terms
from ..models import MemoryIdentity, MemoryRecord, ShareGrant, TombstoneReason, Vector
from ._memory_index import _EPOCH, _SearchIndex
from .base import Generation, RecallFilter, Tombstone
from .rules import is_recallable

_ScopeKey = tuple[str, str, str]
_GrantKey = tuple[str, str, str, str]

_STATIC_FILTER = RecallFilter(now=_EPOCH)
"""The request-independent part of the rules: no consent requirement, no retention window."""


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
