"""Conformance checks of the optional vector-generations role
(:class:`~prism_memory.stores.base.VectorGenerations`): a shadow generation's registration, its
backfill claims and leases, progress, the switch and its rollback, search under a shadow model,
staleness after a new text and deletion with the entry.

The runner asks them only of a store that implements the role (``isinstance(store,
VectorGenerations)``); an adapter without it is not asked. A generation is store-wide, so every
check backfills whatever the store already holds, counts from that baseline, and leaves the
store as it found it: the primary active and no shadow generation (a shared store serves the
other checks unchanged).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import datetime, timedelta

import numpy as np

from ..embedding import Embedder, HashEmbedder, embedder_model
from ..errors import (
    ConflictError,
    DimensionMismatchError,
    GenerationNotReadyError,
    NotFoundError,
)
from ..lexical import tokenize
from ..models import MemoryIdentity
from ..stores.base import (
    ClaimedEntry,
    EntryKey,
    RecallFilter,
    SearchRequest,
    SearchResult,
    VectorGenerations,
)
from ._support import ConformanceKit, _Case, _check, _raises

__all__ = ["GENERATION_CHECKS", "GENERATION_PRIMARY_FALLBACK", "shadow_embedder"]

GENERATION_PRIMARY_FALLBACK = "conformance-primary"
"""The primary generation's model when the kit's embedder names none."""

_TEXTS = (
    "Ada plays the cello on Sundays",
    "Ada keeps bees behind the barn",
    "Ada rows across the lake at dawn",
    "Ada reads old maps of the coast",
    "Ada bakes rye bread for the market",
)


def shadow_embedder(kit: ConformanceKit) -> HashEmbedder:
    """The embedder of the checks' shadow generation: a hash model of another width."""
    return HashEmbedder(dimensions=32 if kit.embedder.dimensions != 32 else 48)


def _key(claimed: ClaimedEntry) -> EntryKey:
    scope = claimed.scope
    return EntryKey(scope.tenant_id, scope.resource_id, scope.thread_id, claimed.id)


class _Migration:
    """One check's shadow generation on the kit's store, and its scope's entries."""

    def __init__(self, kit: ConformanceKit) -> None:
        store = kit.vector_store
        _check(isinstance(store, VectorGenerations), "the store is not a VectorGenerations")
        assert isinstance(store, VectorGenerations)
        self.kit = kit
        self.case = _Case(kit)
        self.store = store
        self.primary = embedder_model(kit.embedder) or GENERATION_PRIMARY_FALLBACK
        self.embedder: Embedder = shadow_embedder(kit)
        self.model = embedder_model(self.embedder) or "conformance-shadow"
        self.width = self.embedder.dimensions
        self.scope = MemoryIdentity(
            tenant_id=self.case.tenant, resource_id="user-ada", thread_id="thread-1"
        )

    def now(self) -> datetime:
        return self.case.clock()

    async def start(self) -> None:
        """Register the shadow generation and backfill what the store held before the check."""
        await self.store.start_generation(
            primary=self.primary,
            primary_width=self.kit.embedder.dimensions,
            model=self.model,
            width=self.width,
            now=self.now(),
        )
        await self.backfill()

    async def remember(self, texts: Sequence[str] = _TEXTS) -> list[str]:
        memory = self.case.memory()
        try:
            result = await memory.remember([{"text": t, "role": "user"} for t in texts], wait=True)
        finally:
            await memory.aclose()
        return list(result.accepted)

    async def vectors(self, claimed: Sequence[ClaimedEntry]) -> list[np.typing.NDArray[np.float32]]:
        embedded = await self.embedder.embed([c.text for c in claimed])
        return [np.asarray(v, dtype=np.float32) for v in embedded]

    async def backfill(self) -> int:
        """Claim and store every missing vector of the store."""
        stored = 0
        after: EntryKey | None = None
        while True:
            claimed = await self.store.claim_generation(
                self.model,
                limit=50,
                worker_id="backfill",
                lease_seconds=60,
                now=self.now(),
                after=after,
            )
            if not claimed:
                return stored
            after = _key(claimed[-1])
            vectors = await self.vectors(claimed)
            stored += await self.store.store_generation_vectors(
                self.model, list(zip(claimed, vectors, strict=True)), now=self.now()
            )

    async def search(self, query: str, *, model: str | None) -> SearchResult:
        embedder = self.embedder if model == self.model else self.kit.embedder
        (vector,) = await embedder.embed([query])
        request = SearchRequest(
            vector=np.asarray(vector, dtype=np.float32),
            terms=frozenset(tokenize(query)),
            limit=10,
            filter=RecallFilter(now=self.now()),
            model=model,
        )
        return await self.store.search(self.scope, request)

    async def switch_ready(self) -> None:
        """Backfill what is missing, then switch to the shadow generation (not forced)."""
        await self.backfill()
        await self.store.switch_generation(self.model, force=False, now=self.now())

    async def finish(self) -> None:
        """Leave the store as the check found it: the primary active, no shadow generation."""
        with contextlib.suppress(NotFoundError):
            await self.store.switch_generation(self.primary, force=True, now=self.now())
        with contextlib.suppress(NotFoundError):
            await self.store.drop_generation(self.model)


def _ids(result: SearchResult) -> set[str]:
    return {candidate.record.id for candidate in result.candidates}


def _exact(result: SearchResult) -> list[tuple[str, str | None, bytes]]:
    """The candidates of ``result`` as ids, models and vector bytes, in id order."""
    return sorted(
        (c.record.id, c.record.embedding_model, np.asarray(c.vector, dtype=np.float32).tobytes())
        for c in result.candidates
    )


async def generations_start_is_idempotent_and_refuses_conflicts(kit: ConformanceKit) -> None:
    """start_generation registers the primary (active) and the shadow, idempotently; another
    width, the primary's own model, a second shadow or another primary conflict and change
    nothing; unknown models are not found."""
    run = _Migration(kit)
    try:
        first = await run.store.start_generation(
            primary=run.primary,
            primary_width=kit.embedder.dimensions,
            model=run.model,
            width=run.width,
            now=run.now(),
        )
        _check(first.model == run.model and first.width == run.width, "the shadow registered")
        _check(first.role == "shadow" and not first.active, "a new generation is a passive shadow")
        again = await run.store.start_generation(
            primary=run.primary,
            primary_width=kit.embedder.dimensions,
            model=run.model,
            width=run.width,
            now=run.now() + timedelta(seconds=5),
        )
        _check(again == first, "start_generation is idempotent for the same model and width")
        registered = await run.store.generations()
        _check(
            [(g.model, g.role, g.active) for g in registered]
            == [(run.primary, "primary", True), (run.model, "shadow", False)],
            f"generations() lists the primary (active) first, then the shadow: {registered}",
        )
        conflicts = {
            "another width": (run.primary, run.model, run.width + 1),
            "the primary's model": (run.primary, run.primary, kit.embedder.dimensions),
            "a second shadow": (run.primary, "conformance-other-model", 16),
            "another primary": ("conformance-other-primary", "conformance-other-model", 16),
        }
        for what, (primary, model, width) in conflicts.items():
            await _raises(
                ConflictError,
                run.store.start_generation(
                    primary=primary,
                    primary_width=kit.embedder.dimensions,
                    model=model,
                    width=width,
                    now=run.now(),
                ),
                f"start_generation with {what}",
            )
        _check(await run.store.generations() == registered, "a refused start changed nothing")
        unknown = "conformance-unknown-model"
        now = run.now()
        await _raises(NotFoundError, run.store.generation_progress(unknown, now=now), "progress")
        await _raises(
            NotFoundError,
            run.store.claim_generation(unknown, limit=1, worker_id="w", lease_seconds=5, now=now),
            "claim of an unknown generation",
        )
        _check(
            await run.store.claim_generation(
                run.primary, limit=1, worker_id="w", lease_seconds=5, now=now
            )
            == [],
            "a claim of the primary finds nothing: every own vector is the primary's",
        )
        await _raises(
            NotFoundError,
            run.store.store_generation_vectors(unknown, [], now=now),
            "store of an unknown generation",
        )
        await _raises(
            NotFoundError,
            run.store.switch_generation(unknown, force=True, now=now),
            "switch to an unknown generation",
        )
        await _raises(NotFoundError, run.store.drop_generation(unknown), "drop of an unknown")
    finally:
        await run.finish()


async def generation_claims_lease_each_entry_to_one_worker(kit: ConformanceKit) -> None:
    """claim_generation leases indexed entries without a current vector, in EntryKey order after
    the cursor; two workers never get the same entry until its lease runs out; progress counts
    entries, current and leased vectors."""
    run = _Migration(kit)
    try:
        await run.start()
        base = await run.store.generation_progress(run.model, now=run.now())
        _check(base.complete and base.leased == 0, f"a finished backfill is complete: {base}")
        ids = await run.remember()
        ours = set(ids)
        now = run.now()
        progress = await run.store.generation_progress(run.model, now=now)
        _check(
            (progress.entries, progress.current, progress.leased, progress.missing)
            == (base.entries + len(ids), base.current, 0, len(ids)),
            f"progress counts the new entries as missing: {progress} (baseline {base})",
        )
        primary = await run.store.generation_progress(run.primary, now=now)
        _check(primary.complete, "every indexed entry counts as covered by the primary")

        first, second = await asyncio.gather(
            run.store.claim_generation(
                run.model, limit=3, worker_id="worker-a", lease_seconds=30, now=now
            ),
            run.store.claim_generation(
                run.model, limit=10, worker_id="worker-b", lease_seconds=30, now=now
            ),
        )
        a = {c.id for c in first}
        b = {c.id for c in second}
        _check(not a & b, "two workers never hold the same entry")
        _check(a | b == ours, "the two claims together cover every missing entry")
        for claimed in (first, second):
            keys = [_key(c) for c in claimed]
            _check(keys == sorted(keys), "claims come in EntryKey order")
        _check(all(c.revision >= 1 and c.text in _TEXTS for c in first), "claims carry the text")
        leased = await run.store.generation_progress(run.model, now=now)
        _check(leased.leased == len(ids), f"every missing entry is leased: {leased}")
        again = await run.store.claim_generation(
            run.model, limit=10, worker_id="worker-c", lease_seconds=30, now=now
        )
        _check(not again, "a leased entry is not claimed by a third worker")
        later = now + timedelta(seconds=31)
        expired = await run.store.claim_generation(
            run.model, limit=10, worker_id="worker-c", lease_seconds=30, now=later
        )
        _check({c.id for c in expired} == ours, "an expired lease is claimed again")
        progress = await run.store.generation_progress(run.model, now=later + timedelta(seconds=31))
        _check(progress.leased == 0, "a lease that ran out is not counted as leased")
        ordered = sorted(ours)
        cursor = EntryKey(
            run.scope.tenant_id, run.scope.resource_id, run.scope.thread_id, ordered[1]
        )
        after = await run.store.claim_generation(
            run.model,
            limit=10,
            worker_id="worker-d",
            lease_seconds=30,
            now=later + timedelta(seconds=62),
            after=cursor,
        )
        _check(
            [c.id for c in after if c.scope == run.scope] == ordered[2:],
            "a claim after a cursor returns only the entries after it, in order",
        )
        _check(all(_key(c) > cursor for c in after), "nothing at or before the cursor")
    finally:
        await run.finish()


async def generation_vectors_check_revision_and_width(kit: ConformanceKit) -> None:
    """store_generation_vectors refuses a vector of the wrong width and then stores nothing (all
    or nothing), skips an entry whose text changed since the claim, stores the rest and releases
    every lease (the skipped entry's too: it is claimed again at once, at its new revision); a
    new text makes an entry's shadow vector stale, so it is claimed again."""
    run = _Migration(kit)
    try:
        await run.start()
        ids = await run.remember(_TEXTS[:3])
        now = run.now()
        claimed = [
            c
            for c in await run.store.claim_generation(
                run.model, limit=50, worker_id="w", lease_seconds=30, now=now
            )
            if c.scope == run.scope
        ]
        _check({c.id for c in claimed} == set(ids), "the new entries are claimed")
        vectors = await run.vectors(claimed)
        wrong = np.ones(run.width + 3, dtype=np.float32)
        await _raises(
            DimensionMismatchError,
            run.store.store_generation_vectors(
                run.model,
                [*zip(claimed[:2], vectors[:2], strict=True), (claimed[2], wrong)],
                now=now,
            ),
            "a vector of another width",
        )
        progress = await run.store.generation_progress(run.model, now=now)
        _check(progress.missing == len(ids), "a refused store stored nothing")
        memory = run.case.memory()
        try:
            await memory.correct(claimed[0].id, "Ada switched from cello to double bass")
        finally:
            await memory.aclose()
        stored = await run.store.store_generation_vectors(
            run.model, list(zip(claimed, vectors, strict=True)), now=run.now()
        )
        _check(stored == len(ids) - 1, f"the corrected entry is skipped: {stored} stored")
        progress = await run.store.generation_progress(run.model, now=run.now())
        _check(
            progress.missing == 1 and progress.leased == 0,
            f"every lease was released, the stale entry is missing: {progress}",
        )
        later = run.now()  # its lease (taken for its old text) is gone: claimed again at once
        again = [
            c
            for c in await run.store.claim_generation(
                run.model, limit=50, worker_id="w2", lease_seconds=30, now=later
            )
            if c.scope == run.scope
        ]
        _check(
            [(c.id, c.revision) for c in again] == [(claimed[0].id, claimed[0].revision + 1)],
            "the corrected entry is claimed again at its new revision",
        )
        _check(again[0].text == "Ada switched from cello to double bass", "with its new text")
        await run.store.store_generation_vectors(
            run.model, list(zip(again, await run.vectors(again), strict=True)), now=later
        )
        # a later correction makes the stored vector stale: never ranked, claimed again
        memory = run.case.memory()
        try:
            await memory.correct(claimed[1].id, "Ada sold the bees to a neighbour")
        finally:
            await memory.aclose()
        result = await run.search("Ada bees neighbour", model=run.model)
        _check(claimed[1].id not in _ids(result), "a stale shadow vector is never ranked")
        progress = await run.store.generation_progress(run.model, now=run.now())
        _check(progress.missing == 1, f"the stale vector counts as missing: {progress}")
    finally:
        await run.finish()


async def generation_switch_waits_for_the_backfill_and_rolls_back(kit: ConformanceKit) -> None:
    """A switch is refused while entries miss a current vector (GenerationNotReadyError with
    their number), unless forced; search under the shadow model ranks only entries holding a
    current vector of it and reports the active model; the rollback to the primary restores the
    same search results exactly."""
    run = _Migration(kit)
    try:
        backfilled = set(await run.remember())
        await run.start()
        await run.remember(["Ada paints the barn door red", "Ada counts the bees at noon"])
        late = set(await run.remember(["Ada repairs the barn roof"]))
        before = await run.search("Ada bees barn", model=run.primary)
        progress = await run.store.generation_progress(run.model, now=run.now())
        error = await _raises(
            GenerationNotReadyError,
            run.store.switch_generation(run.model, force=False, now=run.now()),
            "a switch before the backfill finished",
        )
        _check(
            getattr(error, "missing", None) == progress.missing == 3,
            f"the refusal names how many entries are missing: {progress}",
        )
        registered = {g.model: g.active for g in await run.store.generations()}
        _check(
            registered == {run.primary: True, run.model: False}, "a refused switch changed nothing"
        )
        primary = await run.search("Ada bees barn", model=run.primary)
        _check(primary.active_model == run.primary, "search reports the active model")
        shadow = await run.search("Ada bees barn", model=run.model)
        _check(shadow.active_model == run.primary, "the shadow is not active yet")
        _check(_ids(shadow) <= backfilled, "entries without a shadow vector are not in the corpus")
        _check(bool(_ids(shadow)), "entries with a shadow vector are")
        _check(
            shadow.stats.documents == len(backfilled),
            f"the statistics count only entries with a shadow vector: {shadow.stats}",
        )
        _check(shadow.pending == 3, f"entries without one count as pending: {shadow.pending}")
        for candidate in shadow.candidates:
            _check(
                candidate.record.embedding_model == run.model
                and len(candidate.vector) == run.width,
                "a shadow candidate carries its vector of the shadow model",
            )
        switched = await run.store.switch_generation(run.model, force=True, now=run.now())
        _check(switched.active and switched.model == run.model, "a forced switch is made")
        forced = await run.search("Ada bees barn", model=run.model)
        _check(forced.active_model == run.model, "search reports the new active model")
        _check(not (_ids(forced) & late), "a forced switch leaves the missing entries out")
        stale_reader = await run.search("Ada bees barn", model=run.primary)
        _check(stale_reader.active_model == run.model, "a primary-model search sees the switch")
        await run.backfill()
        full = await run.search("Ada barn roof", model=run.model)
        _check(late <= _ids(full), "the backfill brings the missing entries in")
        back = await run.store.switch_generation(run.primary, force=False, now=run.now())
        _check(back.active and back.role == "primary", "the rollback needs no backfill")
        registered = {g.model: g.active for g in await run.store.generations()}
        _check(registered == {run.primary: True, run.model: False}, "exactly one is active")
        after = await run.search("Ada bees barn", model=run.primary)
        _check(after.active_model == run.primary, "the rollback is reported")
        _check(
            _exact(after) == _exact(before) and after.stats == before.stats,
            "the rollback restores the same search results",
        )
    finally:
        await run.finish()


async def generation_vectors_go_with_their_entry(kit: ConformanceKit) -> None:
    """Deleting an entry (forget) deletes its shadow vectors; the drop is refused for the
    primary and the active generation, and deletes the shadow's vectors and registration."""
    run = _Migration(kit)
    try:
        await run.start()
        base = await run.store.generation_progress(run.model, now=run.now())
        ids = await run.remember()
        await run.backfill()
        memory = run.case.memory()
        try:
            await memory.forget(ids=ids[:2])
        finally:
            await memory.aclose()
        progress = await run.store.generation_progress(run.model, now=run.now())
        _check(
            (progress.entries, progress.current) == (base.entries + 3, base.current + 3),
            f"forgotten entries leave the generation: {progress}",
        )
        await run.store.switch_generation(run.model, force=False, now=run.now())
        await _raises(ConflictError, run.store.drop_generation(run.model), "drop while active")
        await _raises(ConflictError, run.store.drop_generation(run.primary), "drop the primary")
        await run.store.switch_generation(run.primary, force=False, now=run.now())
        dropped = await run.store.drop_generation(run.model)
        _check(
            dropped == base.current + 3,
            f"the drop deletes the remaining vectors only ({dropped}; the forgotten are gone)",
        )
        registered = [g.model for g in await run.store.generations()]
        _check(registered == [run.primary], "the drop removes the registration")
        await _raises(
            NotFoundError,
            run.store.generation_progress(run.model, now=run.now()),
            "progress of a dropped generation",
        )
    finally:
        await run.finish()


GENERATION_CHECKS = {
    "generations_start_is_idempotent_and_refuses_conflicts": (
        generations_start_is_idempotent_and_refuses_conflicts
    ),
    "generation_claims_lease_each_entry_to_one_worker": (
        generation_claims_lease_each_entry_to_one_worker
    ),
    "generation_vectors_check_revision_and_width": generation_vectors_check_revision_and_width,
    "generation_switch_waits_for_the_backfill_and_rolls_back": (
        generation_switch_waits_for_the_backfill_and_rolls_back
    ),
    "generation_vectors_go_with_their_entry": generation_vectors_go_with_their_entry,
}
"""The checks of the ``generations`` role, by name."""
