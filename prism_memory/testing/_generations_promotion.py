"""Conformance checks of the promotion of a vector generation
(:meth:`~prism_memory.stores.base.VectorGenerations.promote_generation`): retiring the old model
after a switch, in batches, without recall answering differently at any step.

Both models have the kit's width (a store may pin one), their vectors differ: the new model's
are the kit embedder's mixed with a rotation of themselves. Like the checks of
:mod:`._generations`, they are asked only of a :class:`~prism_memory.stores.base.VectorGenerations`
and leave the store as they found it: the kit's model the primary, active, and no shadow
generation (a promoted store is promoted back).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from ..embedding import Embedder, embedder_model
from ..errors import ConflictError, NotFoundError, ValidationError
from ..lexical import tokenize
from ..models import MemoryIdentity
from ..stores.base import (
    ClaimedEntry,
    EntryKey,
    NewEntry,
    Promotion,
    RecallFilter,
    SearchRequest,
    SearchResult,
    VectorGenerations,
)
from ._generations import GENERATION_PRIMARY_FALLBACK
from ._support import ConformanceKit, _Case, _check, _raises

__all__ = ["GENERATION_PROMOTION_CHECKS"]

_Vector = npt.NDArray[np.float32]
_Answer = list[tuple[str, str | None, bytes]]

_TEXTS = {
    ("user-ada", "thread-1"): (
        "Ada plays the cello on Sundays",
        "Ada keeps bees behind the barn",
        "Ada rows across the lake at dawn",
    ),
    ("user-ada", "thread-2"): ("Ada reads old maps of the coast", "Ada bakes rye bread"),
    ("user-bob", "thread-1"): ("Bob repairs clocks in the attic", "Bob grows tomatoes"),
}
_QUERIES = ("bees barn", "maps coast", "clocks attic", "bread rye cello")
_PROMOTED = "conformance-promoted"


class _Mixed:
    """Another model of the kit's width: ``inner``'s vectors mixed with a rotation of
    themselves, so they differ from ``inner``'s (and rank differently)."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.model = _PROMOTED
        self.dimensions = inner.dimensions

    async def embed(self, texts: Sequence[str]) -> list[_Vector]:
        mixed: list[_Vector] = []
        for vector in await self._inner.embed(texts):
            wide = np.asarray(vector, dtype=np.float64)
            wide = wide + 0.7 * np.roll(wide, 3) - 0.4 * np.roll(wide[::-1], 1)
            norm = float(np.linalg.norm(wide))
            mixed.append((wide / (norm if norm > 0.0 else 1.0)).astype(np.float32))
        return mixed


def _key(claimed: ClaimedEntry) -> EntryKey:
    scope = claimed.scope
    return EntryKey(scope.tenant_id, scope.resource_id, scope.thread_id, claimed.id)


def _answer(result: SearchResult) -> _Answer:
    """The candidates as ids, models and vector bytes (so equal answers have equal scores)."""
    return sorted(
        (c.record.id, c.record.embedding_model, np.asarray(c.vector, dtype=np.float32).tobytes())
        for c in result.candidates
    )


class _Promotion:
    """One check's store, its two models (the kit's, ``old``, and :class:`_Mixed`, ``new``) and
    its entries (id -> scope and text)."""

    def __init__(self, kit: ConformanceKit) -> None:
        store = kit.vector_store
        _check(isinstance(store, VectorGenerations), "the store is not a VectorGenerations")
        assert isinstance(store, VectorGenerations)
        self.kit = kit
        self.case = _Case(kit)
        self.store = store
        self.old = embedder_model(kit.embedder) or GENERATION_PRIMARY_FALLBACK
        self.width = kit.embedder.dimensions
        self.mixed = _Mixed(kit.embedder)
        self.new = _PROMOTED
        self.entries: dict[str, tuple[MemoryIdentity, str]] = {}
        self.moved = 0

    def now(self) -> datetime:
        return self.case.clock()

    def scope(self, resource: str = "user-ada", thread: str = "thread-1") -> MemoryIdentity:
        return MemoryIdentity(tenant_id=self.case.tenant, resource_id=resource, thread_id=thread)

    def embedder(self, model: str) -> Embedder:
        return self.mixed if model == self.new else self.kit.embedder

    async def vector(self, model: str, text: str) -> _Vector:
        (vector,) = await self.embedder(model).embed([text])
        return np.asarray(vector, dtype=np.float32)

    async def remember(
        self, texts: Mapping[tuple[str, str], Sequence[str]] | None = None, **options: Any
    ) -> None:
        """Write ``texts`` per (resource, thread) through memories of the kit's embedder."""
        for (resource, thread), group in (texts or _TEXTS).items():
            memory = self.case.memory(thread=thread, resource_id=resource, **options)
            try:
                result = await memory.remember([{"text": t} for t in group], wait=True)
            finally:
                await memory.aclose()
            for entry_id, text in zip(result.accepted, group, strict=True):
                self.entries[entry_id] = (self.scope(resource, thread), text)

    async def start(self) -> None:
        """Register the new model beside the kit's and backfill the whole store."""
        await self.store.start_generation(
            primary=self.old,
            primary_width=self.width,
            model=self.new,
            width=self.width,
            now=self.now(),
        )
        await self.backfill(self.new)

    async def backfill(self, model: str) -> int:
        """Claim and store every missing vector of ``model`` in the store."""
        stored = 0
        after: EntryKey | None = None
        while True:
            claimed = await self.store.claim_generation(
                model,
                limit=50,
                worker_id="promotion",
                lease_seconds=60,
                now=self.now(),
                after=after,
            )
            if not claimed:
                return stored
            after = _key(claimed[-1])
            vectors = await self.embedder(model).embed([c.text for c in claimed])
            items = [
                (c, np.asarray(v, dtype=np.float32)) for c, v in zip(claimed, vectors, strict=True)
            ]
            stored += await self.store.store_generation_vectors(model, items, now=self.now())

    async def promote(self, limit: int) -> Promotion:
        step = await self.store.promote_generation(self.new, limit=limit, now=self.now())
        _check(step.model == self.new, f"the promotion names its model: {step}")
        _check(0 <= step.moved <= limit, f"a promotion moves at most limit entries: {step}")
        _check(
            (step.left is None) == (step.moved == limit),
            f"left is counted exactly when the call moved fewer than limit: {step}",
        )
        self.moved += step.moved
        return step

    async def search(self, scope: MemoryIdentity, model: str, query: str | _Vector) -> SearchResult:
        if isinstance(query, str):
            vector, terms = await self.vector(model, query), frozenset(tokenize(query))
        else:
            vector, terms = query, frozenset()
        request = SearchRequest(
            vector=vector, terms=terms, limit=10, filter=RecallFilter(now=self.now()), model=model
        )
        return await self.store.search(scope, request)

    async def answers(self, model: str) -> dict[tuple[MemoryIdentity, str], _Answer]:
        """Every query's candidates in every scope of the check, searched with ``model``."""
        scopes = sorted({scope for scope, _ in self.entries.values()}, key=str)
        return {
            (scope, query): _answer(await self.search(scope, model, query))
            for scope in scopes
            for query in _QUERIES
        }

    async def found_exactly(self, entry_id: str, model: str | None = None) -> bool:
        """Whether a query of the entry's own vector of ``model`` (the new one) finds it, with
        that very vector (cosine 1)."""
        model = model or self.new
        scope, text = self.entries[entry_id]
        vector = await self.vector(model, text)
        result = await self.search(scope, model, vector)
        return any(
            c.record.id == entry_id and np.asarray(c.vector, dtype=np.float32).tobytes()
            == vector.tobytes()
            for c in result.candidates
        )  # fmt: skip

    async def check_every_entry_found(self, what: str) -> None:
        for entry_id in self.entries:
            _check(await self.found_exactly(entry_id), f"{what}: an entry's exact vector misses")

    async def roles(self) -> list[tuple[str, str, bool]]:
        return [(g.model, g.role, g.active) for g in await self.store.generations()]

    async def promote_all(self, limit: int = 100) -> Promotion:
        for _ in range(1000):
            step = await self.promote(limit)
            if step.left is not None:
                return step
        raise AssertionError("the promotion never reached the end of its walk")

    async def finish(self) -> None:
        """Leave the store as the check found it: the kit's model the primary, active, and no
        other generation (a store promoted to the new model is promoted back)."""
        registered = {g.model: g for g in await self.store.generations()}
        if self.new not in registered:
            return
        if self.old not in registered:
            await self.store.start_generation(
                primary=self.new,
                primary_width=self.width,
                model=self.old,
                width=self.width,
                now=self.now(),
            )
        await self.backfill(self.old)
        await self.store.switch_generation(self.old, force=True, now=self.now())
        for _ in range(1000):
            step = await self.store.promote_generation(self.old, limit=100, now=self.now())
            if step.left is not None and (step.left == 0 or step.moved == 0):
                break
        await self.store.drop_generation(self.new)

    async def run(self, body: Callable[[], Awaitable[None]]) -> None:
        """Run ``body``, then :meth:`finish` (whose own failure never hides the body's)."""
        try:
            await body()
        except BaseException:
            with contextlib.suppress(Exception):
                await self.finish()
            raise
        await self.finish()


async def promotion_in_batches_answers_the_same_throughout(kit: ConformanceKit) -> None:
    """promote_generation(limit=2) over entries of two threads and two resources: after every
    call the new model's searches answer exactly as before the first (same ids, vectors and so
    scores) and an entry's exact vector finds it; a rollback mid-way answers exactly as the old
    model did, and a promotion is refused until the switch forward again; at the end the new
    model is the primary (active) and the old a shadow, whose drop returns the kept vectors and
    leaves one generation answering the same."""
    run = _Promotion(kit)

    async def body() -> None:
        await run.remember()
        await run.start()
        old_before = await run.answers(run.old)
        await run.store.switch_generation(run.new, force=False, now=run.now())
        new_before = await run.answers(run.new)
        entries = (await run.store.generation_progress(run.new, now=run.now())).entries
        rolled_back = False
        for _ in range(entries + 2):
            step = await run.promote(2)
            _check(
                await run.answers(run.new) == new_before, f"the new model answers the same {step}"
            )
            await run.check_every_entry_found(f"after {step}")
            if not rolled_back:
                rolled_back = True
                await run.store.switch_generation(run.old, force=False, now=run.now())
                _check(
                    await run.answers(run.old) == old_before,
                    "a rollback mid-promotion answers exactly as the old model did",
                )
                roles = await run.roles()
                await _raises(
                    ConflictError,
                    run.store.promote_generation(run.new, limit=2, now=run.now()),
                    "a promotion while the old model is active",
                )
                _check(await run.roles() == roles, "the refused promotion changed nothing")
                _check(await run.answers(run.old) == old_before, "and moved nothing")
                await run.store.switch_generation(run.new, force=False, now=run.now())
            if step.promoted:
                break
        _check(step.promoted and step.left == 0, f"the promotion ended promoted: {step}")
        _check(run.moved == entries, f"every indexed entry moved once: {run.moved} of {entries}")
        _check(
            await run.roles() == [(run.new, "primary", True), (run.old, "shadow", False)],
            f"the new model is the primary, the old a shadow: {await run.roles()}",
        )
        _check(await run.answers(run.old) == old_before, "the old model still answers the same")
        dropped = await run.store.drop_generation(run.old)
        _check(dropped == entries, f"the drop deletes every kept old vector: {dropped}")
        _check(await run.roles() == [(run.new, "primary", True)], "one generation is left")
        _check(await run.answers(run.new) == new_before, "after the drop: the same answers")
        await run.check_every_entry_found("after the drop")

    await run.run(body)


async def promotion_refusals_change_nothing(kit: ConformanceKit) -> None:
    """promote_generation of an unregistered model is NotFoundError, of a shadow that is not
    active ConflictError, with a negative limit ValidationError, all changing nothing; the
    primary's model is promoted already (nothing moved)."""
    run = _Promotion(kit)

    async def body() -> None:
        await run.remember()
        await _raises(
            NotFoundError,
            run.store.promote_generation(run.new, limit=2, now=run.now()),
            "a promotion of an unregistered model",
        )
        await run.start()
        roles = await run.roles()
        old_before, new_before = await run.answers(run.old), await run.answers(run.new)
        await _raises(
            ConflictError,
            run.store.promote_generation(run.new, limit=2, now=run.now()),
            "a promotion of a shadow generation that is not active",
        )
        await run.store.switch_generation(run.new, force=False, now=run.now())
        await _raises(
            ValidationError,
            run.store.promote_generation(run.new, limit=-1, now=run.now()),
            "a promotion with a negative limit",
        )
        await run.store.switch_generation(run.old, force=False, now=run.now())
        _check(await run.roles() == roles, "the refused promotions changed no registration")
        same = (await run.answers(run.old), await run.answers(run.new)) == (old_before, new_before)
        _check(same, "the refused promotions moved no vector")
        step = await run.store.promote_generation(run.old, limit=2, now=run.now())
        _check(
            (step.model, step.moved, step.left, step.promoted) == (run.old, 0, 0, True),
            f"the primary's model is promoted already: {step}",
        )
        _check(await run.roles() == roles, "and nothing changed")

    await run.run(body)


async def promotion_waits_for_entries_without_the_new_vector(kit: ConformanceKit) -> None:
    """After a forced switch, a promotion moves every entry holding the new vector and ends
    with ``left`` the entries still without one, not promoted; once the backfill stored them,
    the next promotion moves them and promotes."""
    run = _Promotion(kit)

    async def body() -> None:
        first = {key: texts for key, texts in _TEXTS.items() if key[0] == "user-ada"}
        await run.remember(first)
        await run.start()
        await run.remember({("user-bob", "thread-1"): _TEXTS[("user-bob", "thread-1")]})
        await run.store.switch_generation(run.new, force=True, now=run.now())
        progress = await run.store.generation_progress(run.new, now=run.now())
        missing = len(_TEXTS[("user-bob", "thread-1")])
        _check(progress.missing == missing, f"the late entries have no new vector: {progress}")
        step = await run.promote(1000)
        _check(
            (step.moved, step.left, step.promoted) == (progress.current, missing, False),
            f"the promotion ends with the entries still missing left: {step}",
        )
        roles = await run.roles()
        _check(roles[0] == (run.old, "primary", False), f"the old model is the primary: {roles}")
        _check(await run.backfill(run.new) == missing, "the backfill stores the missing vectors")
        step = await run.promote(1000)
        _check(
            (step.moved, step.left, step.promoted) == (missing, 0, True),
            f"then the promotion moves them and promotes: {step}",
        )
        await run.check_every_entry_found("after the promotion")

    await run.run(body)


async def an_old_model_write_after_the_promotion_is_promoted_again(kit: ConformanceKit) -> None:
    """After the roles swapped, an entry a writer of the old model indexes is not ranked by the
    new model (it counts as pending) and keeps the old generation from being dropped; the new
    model's backfill claims it, its vector makes it recallable, and a promotion of the (primary)
    new model moves it, so the drop succeeds."""
    run = _Promotion(kit)

    async def body() -> None:
        await run.remember({("user-ada", "thread-1"): _TEXTS[("user-ada", "thread-1")]})
        await run.start()
        await run.store.switch_generation(run.new, force=False, now=run.now())
        step = await run.promote_all()
        _check(step.promoted, f"promoted: {step}")
        scope, text = run.scope(), "Ada tunes the old piano"
        before = await run.search(scope, run.new, await run.vector(run.new, text))
        now = run.now()
        entry = NewEntry(
            id="late-old-write", text=text, role="user", metadata={}, consent=None,
            sequence=None, occurred_at=now, importance=1.0, lineage=None,
        )  # fmt: skip
        await run.store.put_entries(scope, [entry], now=now)
        (claimed,) = await run.store.claim_pending(
            scope, limit=1, worker_id="old-writer", lease_seconds=60, now=now
        )
        done = await run.store.complete_indexing(
            [(claimed, await run.vector(run.old, text))], worker_id="old-writer", now=now,
            model=run.old,
        )  # fmt: skip
        _check(done == 1, "the old model's writer indexed its entry")
        run.entries[entry.id] = (scope, text)
        after = await run.search(scope, run.new, await run.vector(run.new, text))
        _check(entry.id not in {c.record.id for c in after.candidates}, "not ranked by new")
        _check(
            before.pending is None or after.pending == before.pending + 1,
            f"it counts as pending under the new model: {before.pending} -> {after.pending}",
        )
        roles = await run.roles()
        await _raises(
            ConflictError, run.store.drop_generation(run.old), "a drop while an own vector is old"
        )
        _check(await run.roles() == roles, "the refused drop changed nothing")
        claimed_new = await run.store.claim_generation(
            run.new, limit=10, worker_id="backfill", lease_seconds=60, now=run.now()
        )
        _check([c.id for c in claimed_new] == [entry.id], "the new model's backfill claims it")
        stored = await run.store.store_generation_vectors(
            run.new, [(claimed_new[0], await run.vector(run.new, text))], now=run.now()
        )
        _check(stored == 1, "its new vector is stored")
        _check(await run.found_exactly(entry.id), "then the new model recalls it")
        await _raises(ConflictError, run.store.drop_generation(run.old), "a drop before promote")
        step = await run.promote(10)
        _check((step.moved, step.left, step.promoted) == (1, 0, True), f"promoted again: {step}")
        again = await run.store.store_generation_vectors(
            run.new, [(claimed_new[0], await run.vector(run.new, text))], now=run.now()
        )
        _check(again == 0, "an entry whose own vector is of the model needs none beside it")
        entries = (await run.store.generation_progress(run.new, now=run.now())).entries
        dropped = await run.store.drop_generation(run.old)
        _check(dropped == entries, f"then the drop deletes every kept old vector: {dropped}")
        await run.check_every_entry_found("after the drop")

    await run.run(body)


async def promotion_interleaved_with_writes_and_reads(kit: ConformanceKit) -> None:
    """A promotion one entry per call, a writer indexing new entries the way the dual write does
    (the new vector stored before the old model's indexing completes) and a reader, interleaved:
    the reader's searches with the new model never fail and never miss an entry that was
    recallable; at the end the promotion completes and every entry is found."""
    run = _Promotion(kit)

    async def body() -> None:
        await run.remember({key: texts for key, texts in _TEXTS.items() if key[0] == "user-ada"})
        await run.start()
        await run.store.switch_generation(run.new, force=False, now=run.now())
        recallable = list(run.entries)
        writing = True

        async def promoter() -> None:
            for _ in range(500):
                step = await run.promote(1)
                await asyncio.sleep(0)
                if not writing and step.promoted and step.left == 0:
                    return

        async def writer() -> None:
            nonlocal writing
            try:
                for n in range(6):
                    scope = run.scope(thread=f"thread-{1 + n % 2}")
                    text, now = f"Ada writes letter number {n} to Bob", run.now()
                    entry = NewEntry(
                        id=f"interleaved-{n}", text=text, role="user", metadata={},
                        consent=None, sequence=None, occurred_at=now, importance=1.0,
                        lineage=None,
                    )  # fmt: skip
                    await run.store.put_entries(scope, [entry], now=now)
                    await asyncio.sleep(0)
                    (claimed,) = await run.store.claim_pending(
                        scope, limit=1, worker_id="dual-writer", lease_seconds=60, now=now
                    )
                    await asyncio.sleep(0)
                    item = [(claimed, await run.vector(run.new, text))]
                    _check(
                        await run.store.store_generation_vectors(run.new, item, now=now) == 1,
                        "the dual write stores the new vector first",
                    )
                    await asyncio.sleep(0)
                    done = await run.store.complete_indexing(
                        [(claimed, await run.vector(run.old, text))], worker_id="dual-writer",
                        now=now, model=run.old,
                    )  # fmt: skip
                    _check(done == 1, "the old model's indexing completes")
                    run.entries[entry.id] = (scope, text)
                    recallable.append(entry.id)
                    await asyncio.sleep(0)
            finally:
                writing = False

        async def reader() -> None:
            while writing:
                for entry_id in list(recallable):
                    _check(
                        await run.found_exactly(entry_id),
                        "a recallable entry's exact vector never misses",
                    )
                    await asyncio.sleep(0)
                await run.search(run.scope(), run.new, "letter Bob")
                await asyncio.sleep(0)

        await asyncio.gather(promoter(), writer(), reader())
        step = await run.promote_all()
        _check(step.promoted and step.left == 0, f"the promotion completes: {step}")
        await run.check_every_entry_found("after the interleaving")
        entries = (await run.store.generation_progress(run.new, now=run.now())).entries
        dropped = await run.store.drop_generation(run.old)
        _check(dropped == entries, f"the drop deletes every kept old vector: {dropped}")

    await run.run(body)


GENERATION_PROMOTION_CHECKS = {
    "promotion_in_batches_answers_the_same_throughout": (
        promotion_in_batches_answers_the_same_throughout
    ),
    "promotion_refusals_change_nothing": promotion_refusals_change_nothing,
    "promotion_waits_for_entries_without_the_new_vector": (
        promotion_waits_for_entries_without_the_new_vector
    ),
    "an_old_model_write_after_the_promotion_is_promoted_again": (
        an_old_model_write_after_the_promotion_is_promoted_again
    ),
    "promotion_interleaved_with_writes_and_reads": promotion_interleaved_with_writes_and_reads,
}
"""The promotion checks of the ``generations`` role, by name."""
