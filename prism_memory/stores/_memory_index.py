"""The incremental search index of one thread of the in-memory store (:class:`_SearchIndex`):
the rows' vectors as one matrix, their windows, the lexical postings and the static exclusion
columns, kept up to date row by row."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from .._windowed import WINDOW_MARGIN
from ..lexical import TextTerms
from ..models import MemoryRecord, Vector
from .base import RecallFilter
from .rules import travels

_Positions = npt.NDArray[np.intp]
_SHARDS = 64
"""The one-slot postings' dicts per index (see :attr:`_SearchIndex.single`)."""
_SORT_ALL = 512
"""Up to this many keys a top-N cut sorts them all (cheaper than partitioning first)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _micros(moment: datetime) -> int:
    """Exact microseconds since the epoch of an aware datetime (so comparisons match datetime's)."""
    return (moment - _EPOCH) // _MICROSECOND


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
