"""Reads of the in-memory store: exact search over the per-thread index, neighbours and lists."""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt

from ..embedding import assert_finite_vector
from ..lexical import CorpusStats, leg_scores, term_weights
from ..models import Candidate, MemoryIdentity, MemoryRecord, check_id_collection
from ._memory_build import build_index
from ._memory_index import _Positions, _SearchIndex
from ._memory_rows import _export, _InMemoryState, _key, _ScopeKey
from .base import RecallFilter, SearchRequest, SearchResult, check_limit

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


class _EntryReads:
    """:meth:`search`, :meth:`neighbors` and the thread lists of the in-memory store, over its
    state (the store delegates to it)."""

    _state: _InMemoryState

    async def search(self, scope: MemoryIdentity, request: SearchRequest) -> SearchResult:
        """Candidate selection for recall; see :class:`~prism_memory.stores.base.SearchRequest`.

        Nearest ``limit`` by cosine -- an entry with later windows by its best window with the
        margin (:meth:`~._memory_index._SearchIndex.similarities`) -- (ties: sequence, then id) plus up to ``limit`` lexical matches
        by :func:`~prism_memory.lexical.leg_score` (ties: sequence, then id), deduplicated, with
        the statistics of every eligible record of the pools. While the store has two
        generations, a registered :attr:`~SearchRequest.model` (``None``: the primary's) searches
        the index of each entry's current vector of that model -- its own or the one kept beside
        it (:meth:`~._memory_rows._Thread.vector_of`); an entry without one is out of the corpus
        and counts as pending. The result names the active generation's model.
        """
        check_limit(request.limit)
        state = self._state
        active = state.active_model()
        ranked = state.ranked_model(request.model)
        width = state.width if ranked is None else ranked.width
        query = assert_finite_vector(request.vector, "query vector", expected_length=width)
        model = None if ranked is None else ranked.model
        primary = state.primary_model()
        pending = None
        if model is not None:  # entries without a current vector of the model wait for it
            own = state.thread(_key(scope))
            pending = 0 if own is None else len(own.pending) + own.missing(model, primary)
        if request.limit == 0:
            return SearchResult([], CorpusStats(), pending, active)
        own_thread = state.thread(_key(scope))
        if own_thread is not None and model is None:  # a large thread's index: built in slices
            await build_index(own_thread, width)
        pools = self._pools(scope, request, model, primary, width)
        if not pools:
            return SearchResult([], CorpusStats(), pending, active)
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
                slots = index.slots(term)
                if slots is None:
                    continue
                hits = np.array((slots,) if isinstance(slots, int) else slots, dtype=np.intp)
                found = hits[pool.mask[hits]]
                if found.shape[0]:
                    frequency[term] = frequency.get(term, 0) + int(found.shape[0])
                    holding.append((term, found))
            present.append(holding)
            if index.windows_held:  # entries with later windows: their best window counts
                scores = index.similarities(unit_query)[positions]
            elif positions.shape[0] == index.size:
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
            found_scores = leg_scores(sums, index.lengths[matched], stats)
            best = index.top(-found_scores, matched, request.limit)  # ties: (sequence, id)
            lexical.append((number, found_scores[best].tolist(), matched[best].tolist()))

        chosen: dict[tuple[int, int], None] = {}
        for leg in (nearest, lexical):
            chosen.update(dict.fromkeys(_merged(leg, pools, request.limit)))
        records = [pool.index.records for pool in pools]
        vectors = [pool.index.vectors for pool in pools]
        profiles = _profiles(list(chosen), pools, present)
        windows = [pool.index.windows for pool in pools]
        candidates = [
            Candidate(
                _export(records[number][position]),
                vectors[number][position].copy(),
                profile,
                None if (held := windows[number][position]) is None else held.copy(),
            )
            for (number, position), profile in zip(chosen, profiles, strict=True)
        ]
        return SearchResult(candidates, stats, pending, active)

    def _pools(
        self,
        scope: MemoryIdentity,
        request: SearchRequest,
        model: str | None,
        primary: str | None,
        width: int | None,
    ) -> list[_Pool]:
        key = _key(scope)
        pools: list[_Pool] = []
        own = self._state.thread(key)
        if own is not None:
            index = own.search_index(model, primary=primary, width=width)
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
            parent = self._state.thread(parent_key)
            if parent is not None:
                index = parent.search_index(model, primary=primary, width=width)
                granted = np.array(
                    sorted({index.positions[i] for i in shared.ids if i in index.positions}),
                    dtype=np.intp,
                )
        if request.resource_wide:
            for other_key in self._resource_threads(scope):
                if other_key == key:
                    continue
                index = self._state.threads[other_key].search_index(
                    model, primary=primary, width=width
                )
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
            index = self._state.threads[parent_key].search_index(
                model, primary=primary, width=width
            )
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
            for key in self._state.threads
            if key[0] == scope.tenant_id and key[1] == scope.resource_id
        )

    async def neighbors(
        self,
        scope: MemoryIdentity,
        ranges: Sequence[tuple[int, int]],
        recall_filter: RecallFilter,
    ) -> list[MemoryRecord]:
        """Recallable records of the thread whose sequence lies in any inclusive ``(low, high)``."""
        thread = self._state.thread(_key(scope))
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
        thread = self._state.thread(_key(scope))
        if thread is None:
            return []
        keys = thread.sorted_keys()
        start = 0 if after is None else bisect.bisect_right(keys, (after[0], after[1]))
        return [_export(thread.rows[i].record) for _, i in keys[start : start + limit]]

    async def count_by_thread(self, scope: MemoryIdentity) -> int:
        """How many entries the thread holds."""
        thread = self._state.thread(_key(scope))
        return 0 if thread is None else len(thread.rows)

    async def count_pending(self, scope: MemoryIdentity) -> int:
        """How many of the thread's entries still wait for their vector."""
        thread = self._state.thread(_key(scope))
        return 0 if thread is None else len(thread.pending)

    async def embedding_models(self, scope: MemoryIdentity) -> set[str]:
        """The models whose vectors the thread's rows hold (rows without one left out)."""
        thread = self._state.thread(_key(scope))
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
        thread = self._state.thread(_key(scope))
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

    async def dependents(
        self, scope: MemoryIdentity, source_ids: Sequence[str], *, limit: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Up to ``limit`` entries whose lineage names any of ``source_ids``, ordered by id."""
        check_id_collection(source_ids, "source_ids")
        check_limit(limit)
        thread = self._state.thread(_key(scope))
        if thread is None or limit == 0:
            return []
        wanted = set(source_ids)
        found = (
            (row.record.id, row.record.lineage.source_ids)
            for row in thread.rows.values()
            if row.record.lineage is not None and wanted.intersection(row.record.lineage.source_ids)
        )
        return heapq.nsmallest(limit, found)


def _profiles(
    chosen: list[tuple[int, int]],
    pools: list[_Pool],
    present: list[list[tuple[str, _Positions]]],
) -> list[tuple[dict[str, int], int]]:
    """The :attr:`Candidate.profile <prism_memory.models.Candidate.profile>` of each chosen
    ``(pool, slot)``: its counts of the request's terms, read from the postings the search
    already found (``present``: per pool, each term with the ascending eligible slots holding
    it) and the slot's repeats, and its length -- no text is tokenized again."""
    counts: list[dict[str, int]] = [{} for _ in chosen]
    for number, holding in enumerate(present):
        mine = [at for at, (pool, _) in enumerate(chosen) if pool == number]
        if not mine or not holding:
            continue
        slots = np.array([chosen[at][1] for at in mine], dtype=np.intp)
        repeats = pools[number].index.repeats
        for term, found in holding:  # found is ascending: a binary search per chosen slot
            where = np.minimum(np.searchsorted(found, slots), found.shape[0] - 1)
            for at in np.flatnonzero(found[where] == slots).tolist():
                counts[mine[at]][term] = repeats[chosen[mine[at]][1]].get(term, 1)
    return [
        (held, int(pools[number].index.lengths[slot]))
        for held, (number, slot) in zip(counts, chosen, strict=True)
    ]
